// The executor turns the graph into a chain of IteratorFactory closures, one per op, each
// holding its input's factory; MakeIterator() calls the last one. Factories, not iterators, are
// the unit because repeat() makes a fresh input iterator per epoch, and because per-op state
// that outlives one iterator (shuffle's iteration count) lives in the closure.
#include "core/executor.h"

#include <atomic>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/batch_iterator.h"
#include "core/op_iterator.h"
#include "core/prefetch_iterator.h"
#include "core/proto_convert.h"
#include "core/rebatch_iterator.h"
#include "core/record_iterators.h"
#include "core/shuffle_iterator.h"
#include "core/simple_op_iterators.h"
#include "core/source_iterators.h"
#include "core/spec_inference.h"
#include "core/status_macros.h"

namespace sluice {
namespace {

// An iterator that fails with `status` on every call: what a factory yields when building its
// iterator fails after MakeIterator() already checked the arguments (it cannot, in practice).
class ErrorIterator : public Iterator {
 public:
  explicit ErrorIterator(absl::Status status) : status_(std::move(status)) {}
  absl::Status GetNext(Element*, bool*) override { return status_; }

 private:
  const absl::Status status_;
};

std::unique_ptr<Iterator> OrError(absl::StatusOr<std::unique_ptr<Iterator>> it) {
  if (!it.ok()) return std::make_unique<ErrorIterator>(it.status());
  return *std::move(it);
}

// `make(input_iterator)` builds one op's iterator. Checked() calls it once with no input, so
// that argument errors surface at MakeIterator() time without building the chain below (the
// iterators here only store their input when constructed), then returns a factory that builds
// one iterator, with a fresh input, per call. `input` is null for a source.
template <typename Make>
absl::StatusOr<IteratorFactory> Checked(IteratorFactory input, Make make) {
  absl::StatusOr<std::unique_ptr<Iterator>> probe = make(nullptr);
  if (!probe.ok()) return probe.status();
  return IteratorFactory([input = std::move(input), make]() {
    return OrError(make(input ? input() : nullptr));
  });
}

using Input = std::unique_ptr<Iterator>;

// `label` names the op in errors (DescribePosition()).
absl::StatusOr<IteratorFactory> BuildSource(const std::string& label,
                                            const proto::SourceDef& source) {
  switch (source.kind_case()) {
    case proto::SourceDef::kRange: {
      const proto::RangeSource r = source.range();
      return Checked(nullptr, [label, r](Input) {
        return NewRangeIterator(label, r.start(), r.stop(), r.step());
      });
    }
    case proto::SourceDef::kFromTensors: {
      auto element = ElementFromProto(source.from_tensors().element());
      if (!element.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(label, ": bad element: ", element.status().message()));
      }
      Element e = *std::move(element);
      return IteratorFactory([label, e] { return NewFromTensorsIterator(label, e); });
    }
    case proto::SourceDef::kFromTensorSlices: {
      auto element = ElementFromProto(source.from_tensor_slices().element());
      if (!element.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(label, ": bad element: ", element.status().message()));
      }
      Element e = *std::move(element);
      return Checked(nullptr,
                     [label, e](Input) { return NewFromTensorSlicesIterator(label, e); });
    }
    case proto::SourceDef::kTextLine: {
      std::vector<std::string> files(source.text_line().filenames().begin(),
                                     source.text_line().filenames().end());
      return IteratorFactory([label, files] { return NewTextLineIterator(label, files); });
    }
    case proto::SourceDef::kTfRecord: {  // core/record_iterators.h
      const proto::TFRecordSource r = source.tf_record();
      return IteratorFactory([label, r] { return NewTFRecordIterator(label, r); });
    }
    case proto::SourceDef::kFixedLengthRecord: {
      const proto::FixedLengthRecordSource r = source.fixed_length_record();
      return IteratorFactory([label, r] { return NewFixedLengthRecordIterator(label, r); });
    }
    case proto::SourceDef::KIND_NOT_SET: break;
  }
  return absl::InvalidArgumentError(absl::StrCat(label, ": the graph has no source"));
}

// `output_spec` is the op's static output spec (InferElementSpecs()).
absl::StatusOr<IteratorFactory> BuildOp(const std::string& label, const proto::OpDef& op,
                                        IteratorFactory input, const ElementSpec& output_spec,
                                        const ExecutorOptions& options) {
  switch (op.kind_case()) {
    case proto::OpDef::kBatch: {
      const proto::BatchOp b = op.batch();
      return Checked(input, [label, b](Input in) {
        return NewBatchIterator(label, std::move(in), b.batch_size(), b.drop_remainder());
      });
    }
    case proto::OpDef::kRepeat: {
      const int64_t count = op.repeat().count();
      return IteratorFactory(
          [label, input, count] { return NewRepeatIterator(label, input, count); });
    }
    case proto::OpDef::kTake: {
      const int64_t count = op.take().count();
      return IteratorFactory(
          [label, input, count] { return NewTakeIterator(label, input(), count); });
    }
    case proto::OpDef::kSkip: {
      const int64_t count = op.skip().count();
      return IteratorFactory(
          [label, input, count] { return NewSkipIterator(label, input(), count); });
    }
    case proto::OpDef::kShard: {
      const proto::ShardOp s = op.shard();
      if (s.num_shards_is_hint() || s.index_is_hint()) {
        return absl::InvalidArgumentError(absl::StrCat(
            label, ": shard(SHARD_HINT, SHARD_HINT) can only run after the HINT auto-shard "
                   "policy has replaced it with a worker's shard"));
      }
      return Checked(input, [label, s](Input in) {
        return NewShardIterator(label, std::move(in), s.num_shards(), s.index());
      });
    }
    case proto::OpDef::kShuffle: {
      const proto::ShuffleOp s = op.shuffle();
      if (s.buffer_size() <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(label, ": buffer_size must be positive, got ", s.buffer_size()));
      }
      // Without a seed, as in TF, a nondeterministic one chosen once per executor graph.
      const uint64_t seed =
          s.has_seed() ? static_cast<uint64_t>(s.seed())
                       : (static_cast<uint64_t>(std::random_device{}()) << 32) ^
                             std::random_device{}();
      auto iterations = std::make_shared<std::atomic<int64_t>>(0);
      const bool reshuffle = s.reshuffle_each_iteration();
      return IteratorFactory([label, input, s, seed, iterations, reshuffle] {
        const int64_t iteration = reshuffle ? iterations->fetch_add(1) : 0;
        return OrError(NewShuffleIterator(label, input(), s.buffer_size(),
                                          ShuffleIterationSeed(seed, iteration)));
      });
    }
    case proto::OpDef::kPrefetch: {
      int64_t n = op.prefetch().buffer_size();
      if (n == -1) n = options.autotune_prefetch_elements;
      if (n < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            label, ": buffer_size must be non-negative or -1 (AUTOTUNE), got ", n));
      }
      if (n == 0) return input;  // prefetch(0) is a no-op, as in TF
      return IteratorFactory([input, n]() -> std::unique_ptr<Iterator> {
        return std::make_unique<PrefetchIterator>(input(), n);
      });
    }
    case proto::OpDef::kUnbatch:
      return IteratorFactory([label, input] { return NewUnbatchIterator(label, input()); });
    case proto::OpDef::kRebatch: {
      const proto::RebatchOp r = op.rebatch();
      if (r.legacy_num_replicas() != 0) {
        return Checked(input, [label, r](Input in) {
          return NewLegacyRebatchIterator(label, std::move(in), r.legacy_num_replicas());
        });
      }
      std::vector<int64_t> sizes(r.batch_sizes().begin(), r.batch_sizes().end());
      // TF builds the empty pieces of size-0 entries from the static spec.
      return Checked(input, [label, sizes, r, output_spec](Input in) {
        return NewRebatchIterator(label, std::move(in), sizes, r.drop_remainder(), output_spec);
      });
    }
    case proto::OpDef::KIND_NOT_SET: break;
  }
  return absl::InvalidArgumentError(absl::StrCat(label, ": the op has no kind set"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Iterator>> MakeIterator(const Dataset& dataset,
                                                       const ExecutorOptions& options) {
  const proto::DatasetDef& def = dataset.def();
  // Validates the graph (what Dataset::Validate() does) and gives each op's output spec.
  ASSIGN_OR_RETURN(std::vector<ElementSpec> specs, InferElementSpecs(def));
  ASSIGN_OR_RETURN(IteratorFactory factory,
                   BuildSource(DescribePosition(def, 0), def.source()));
  for (int i = 0; i < def.ops_size(); ++i) {
    ASSIGN_OR_RETURN(factory, BuildOp(DescribePosition(def, i + 1), def.ops(i),
                                      std::move(factory), specs[i + 1], options));
  }
  return factory();
}

}  // namespace sluice
