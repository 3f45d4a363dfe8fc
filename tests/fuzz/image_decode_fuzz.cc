// Fuzz target: decode_image (core/data/ops/image_ops.h: libturbojpeg and libpng behind Sluice's
// header checks) on arbitrary bytes, with every channels argument, as a pipeline's map applies
// it. The element limit is set to 16 MiB first, so that a mutated header claiming a large
// image meets the limit (RESOURCE_EXHAUSTED) instead of making the run slow. Every outcome must
// be an image of the promised shape within kMaxImagePixels, INVALID_ARGUMENT or
// RESOURCE_EXHAUSTED: nothing crashes, nothing allocates what the header merely claims.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "core/data/map_fns.h"
#include "core/data/memory_budget.h"
#include "core/data/ops/image_ops.h"
#include "proto/dataset.pb.h"

namespace {

// decode_image(channels=c) for c in {0, 1, 3, 4}, made once (with the limits set) and kept.
const sluice::ComponentFn& Decoder(int channels) {
  static std::unique_ptr<sluice::ComponentFn>* const fns = [] {
    sluice::ProcessMemoryBudget().SetLimits(
        {.process_bytes = int64_t{256} << 20, .element_bytes = int64_t{16} << 20});
    auto* made = new std::unique_ptr<sluice::ComponentFn>[5];
    for (int c : {0, 1, 3, 4}) {
      sluice::proto::MapOp map;
      map.mutable_image()->mutable_decode()->set_channels(c);
      auto fn = sluice::MakeComponentFn(map);
      if (!fn.ok()) std::abort();
      made[c] = *std::move(fn);
    }
    return made;
  }();
  return *fns[channels];
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const sluice::Tensor input =
      sluice::Tensor::StringScalar(std::string(reinterpret_cast<const char*>(data), size));
  for (int channels : {0, 1, 3, 4}) {
    if (channels != 0 && size % 4 != static_cast<size_t>(channels) % 4) continue;
    absl::StatusOr<sluice::Element> out = Decoder(channels).Apply(input);
    if (!out.ok()) {
      if (!absl::IsInvalidArgument(out.status()) && !absl::IsResourceExhausted(out.status())) {
        std::abort();
      }
      continue;
    }
    const sluice::Tensor& t = out->leaf();
    if (t.dtype() != sluice::DType::kUInt8 || t.shape().rank() != 3) std::abort();
    if (t.shape().dim(0) * t.shape().dim(1) > sluice::kMaxImagePixels) std::abort();
    if (channels != 0 && t.shape().dim(2) != channels) std::abort();
  }
  return 0;
}
