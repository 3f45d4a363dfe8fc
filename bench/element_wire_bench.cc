// CPU cost of turning one element into a snapshot record: SerializeElementProto (straight from
// the tensors) against ElementToProto + SerializeToString (what save_chunks did before). The
// element is one batch of snapshot_bench's pipeline: 256 images of 3 KiB and 256 int64 labels.
//
//   build/bench/element_wire_bench
#include <cstdint>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "core/tensor/element_wire.h"
#include "core/tensor/proto_convert.h"

namespace sluice {
namespace {

Element Batch() {
  std::vector<std::string> images(256, std::string(3072, 'x'));
  std::vector<int64_t> labels(256, 7);
  return Element::Dict({{"image", Element(Tensor::FromStrings(images, Shape({256})))},
                        {"label", Element(Tensor::FromVector(labels))}});
}

void BM_SerializeElementProto(benchmark::State& state) {
  const Element e = Batch();
  std::string record;
  for (auto _ : state) {
    SerializeElementProto(e, &record);
    benchmark::DoNotOptimize(record.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(record.size()));
}
BENCHMARK(BM_SerializeElementProto);

void BM_ElementToProtoThenSerialize(benchmark::State& state) {
  const Element e = Batch();
  std::string record;
  for (auto _ : state) {
    record.clear();
    ElementToProto(e).SerializeToString(&record);
    benchmark::DoNotOptimize(record.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(record.size()));
}
BENCHMARK(BM_ElementToProtoThenSerialize);

}  // namespace
}  // namespace sluice

BENCHMARK_MAIN();
