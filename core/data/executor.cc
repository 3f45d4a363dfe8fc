// The executor turns the graph into a chain of IteratorFactory closures, one per op, each
// holding its input's factory; MakeIterator() calls the last one. Factories, not iterators, are
// the unit because repeat() makes a fresh input iterator per epoch, and because per-op state
// that outlives one iterator (shuffle's iteration count) lives in the closure.
#include "core/data/executor.h"

#include <atomic>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/data/map_fns.h"
#include "core/data/op_iterator.h"
#include "core/data/op_profile.h"
#include "core/data/ops/batch_iterator.h"
#include "core/data/ops/cache_iterator.h"
#include "core/data/ops/csv_reader.h"
#include "core/data/ops/filter_iterator.h"
#include "core/data/ops/ignore_errors_iterator.h"
#include "core/data/ops/interleave_iterator.h"
#include "core/data/ops/list_files.h"
#include "core/data/ops/map_iterator.h"
#include "core/data/ops/npy_reader.h"
#include "core/data/ops/padded_batch_iterator.h"
#include "core/data/ops/permuted_source_iterator.h"
#include "core/data/ops/prefetch_iterator.h"
#include "core/data/ops/rebatch_iterator.h"
#include "core/data/ops/record_iterators.h"
#include "core/data/ops/shuffle_iterator.h"
#include "core/data/ops/simple_op_iterators.h"
#include "core/data/ops/source_iterators.h"
#include "core/data/ops/webdataset_reader.h"
#include "core/data/spec_inference.h"
#include "core/data/transform_graph.h"
#include "core/tensor/proto_convert.h"
#include "core/util/status_macros.h"
#include "proto/dataset.pb.h"

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
    case proto::SourceDef::kCsv: {
      const proto::CsvSource csv = source.csv();
      return IteratorFactory([label, csv] { return NewCsvIterator(label, csv); });
    }
    case proto::SourceDef::kNpy: {
      const proto::NpySource npy = source.npy();
      return IteratorFactory([label, npy] { return NewNpyIterator(label, npy); });
    }
    case proto::SourceDef::kListFiles: {
      const proto::ListFilesSource l = source.list_files();
      // Each new iterator (epoch) reshuffles, as shuffle(reshuffle_each_iteration=True) does.
      auto iterations = std::make_shared<std::atomic<int64_t>>(0);
      return IteratorFactory([label, l, iterations] {
        return OrError(NewListFilesIterator(label, l, iterations->fetch_add(1)));
      });
    }
    case proto::SourceDef::kTfRecord: {  // core/data/ops/record_iterators.h
      const proto::TFRecordSource r = source.tf_record();
      return IteratorFactory([label, r] { return NewTFRecordIterator(label, r); });
    }
    case proto::SourceDef::kFixedLengthRecord: {
      const proto::FixedLengthRecordSource r = source.fixed_length_record();
      return IteratorFactory([label, r] { return NewFixedLengthRecordIterator(label, r); });
    }
    case proto::SourceDef::kWebdataset: {  // core/data/ops/webdataset_reader.h
      const proto::WebDatasetSource w = source.webdataset();
      return IteratorFactory([label, w] { return NewWebDatasetIterator(label, w); });
    }
    case proto::SourceDef::kPermuted: {  // core/data/ops/permuted_source_iterator.h
      const proto::PermutedSource p = source.permuted();
      return IteratorFactory([label, p] { return NewPermutedSourceIterator(label, p); });
    }
    case proto::SourceDef::KIND_NOT_SET: break;
  }
  return absl::InvalidArgumentError(absl::StrCat(label, ": the graph has no source"));
}

// map, filter, padded_batch, cache, ignore_errors and interleave. `input_spec` is the op's
// input spec, `upstream` the graph up to the op (cache's file records its fingerprint).
absl::StatusOr<IteratorFactory> BuildTransformOp(const std::string& label,
                                                 const proto::OpDef& op, IteratorFactory input,
                                                 const ElementSpec& input_spec,
                                                 const proto::DatasetDef& upstream,
                                                 const ExecutorOptions& options) {
  auto parallelism = [&options](int64_t n) {
    if (n != -1) return n;
    return options.autotune_parallel_calls > 0 ? int64_t{options.autotune_parallel_calls}
                                               : AutotuneParallelism();
  };
  switch (op.kind_case()) {
    case proto::OpDef::kMap: {
      const proto::MapOp& m = op.map();
      absl::StatusOr<std::shared_ptr<const MapFunction>> fn = MakeMapFunction(m, input_spec);
      if (!fn.ok()) {
        return absl::Status(fn.status().code(), absl::StrCat(label, ": ", fn.status().message()));
      }
      // An element-wise fn also maps whole blocks (the bulk path, core/data/iterator.h).
      const ElementFn block_apply = (*fn)->ElementWise() ? ElementFn([fn = *fn](Element e) {
        return fn->Apply(std::move(e));
      }) : ElementFn();
      ElementFn apply = [fn = *std::move(fn)](Element e) { return fn->Apply(std::move(e)); };
      const int64_t threads = parallelism(m.num_parallel_calls());
      const bool deterministic = !m.has_deterministic() || m.deterministic();
      const bool autotune = m.num_parallel_calls() == -1;
      return IteratorFactory([label, input, apply, threads, deterministic, block_apply,
                              autotune] {
        return NewMapIterator(label, input(), apply, threads, deterministic, block_apply,
                              autotune);
      });
    }
    case proto::OpDef::kFilter: {
      const proto::FilterOp f = op.filter();
      return IteratorFactory([label, input, f] { return NewFilterIterator(label, input(), f); });
    }
    case proto::OpDef::kPaddedBatch: {
      const proto::PaddedBatchOp p = op.padded_batch();
      return IteratorFactory(
          [label, input, p] { return NewPaddedBatchIterator(label, input(), p); });
    }
    case proto::OpDef::kCache: {
      if (op.cache().filename().empty()) {
        auto store = std::make_shared<CacheStore>();
        return IteratorFactory(
            [label, input, store] { return NewMemoryCacheIterator(label, store, input); });
      }
      absl::StatusOr<Dataset> up = Dataset::FromDef(upstream);
      const std::string fingerprint = up.ok() ? up->Fingerprint() : "";
      const std::string filename = op.cache().filename();
      return IteratorFactory([label, input, filename, fingerprint] {
        return NewFileCacheIterator(label, filename, fingerprint, input);
      });
    }
    case proto::OpDef::kIgnoreErrors: {
      const bool log = op.ignore_errors().log_warning();
      std::shared_ptr<std::atomic<int64_t>> counter;
      if (options.stats != nullptr) {
        counter = std::shared_ptr<std::atomic<int64_t>>(options.stats,
                                                        &options.stats->ignored_errors);
      }
      return IteratorFactory([label, input, log, counter] {
        return NewIgnoreErrorsIterator(label, input(), log, counter);
      });
    }
    case proto::OpDef::kInterleave: {
      const proto::InterleaveOp i = op.interleave();
      const int64_t cycle = i.cycle_length() > 0 ? i.cycle_length() : AutotuneParallelism();
      const int64_t block = i.block_length() > 0 ? i.block_length() : 1;
      const int64_t threads = parallelism(i.num_parallel_calls());
      const bool deterministic = !i.has_deterministic() || i.deterministic();
      InterleaveInputFn make = [label, fn = i.fn(), options](const Element& e)
          -> absl::StatusOr<std::unique_ptr<Iterator>> {
        if (!e.is_leaf() || e.leaf().dtype() != DType::kString || e.leaf().shape().rank() != 0) {
          return absl::InvalidArgumentError("the input element is not a file name");
        }
        ASSIGN_OR_RETURN(proto::DatasetDef def, InterleaveInputGraph(fn, e.leaf().string_at(0)));
        ASSIGN_OR_RETURN(Dataset ds, Dataset::FromDef(std::move(def)));
        return MakeIterator(ds, options);
      };
      return IteratorFactory([label, input, make, cycle, block, threads, deterministic] {
        return NewInterleaveIterator(label, input(), make, cycle, block, threads, deterministic);
      });
    }
    default:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat(label, ": not a transform op"));
}

// `output_spec` is the op's static output spec (InferElementSpecs()), `input_spec` its input's.
absl::StatusOr<IteratorFactory> BuildOp(const std::string& label, const proto::OpDef& op,
                                        IteratorFactory input, const ElementSpec& output_spec,
                                        const ElementSpec& input_spec,
                                        const proto::DatasetDef& upstream,
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
      return IteratorFactory([label, input, n]() -> std::unique_ptr<Iterator> {
        return std::make_unique<PrefetchIterator>(input(), n, label);
      });
    }
    case proto::OpDef::kUnbatch:
      return IteratorFactory([label, input] { return NewUnbatchIterator(label, input()); });
    case proto::OpDef::kMap:
    case proto::OpDef::kFilter:
    case proto::OpDef::kPaddedBatch:
    case proto::OpDef::kCache:
    case proto::OpDef::kIgnoreErrors:
    case proto::OpDef::kInterleave:
      return BuildTransformOp(label, op, std::move(input), input_spec, upstream, options);
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

// Per-op profiling (core/data/op_profile.h): each iterator `factory` makes is wrapped to count
// its calls in `profile`; without a profile the factory is returned as is.
IteratorFactory Profiled(IteratorFactory factory, int position, const std::string& label,
                         const std::shared_ptr<OpProfile>& profile) {
  if (profile == nullptr) return factory;
  return [factory = std::move(factory), position, label, profile] {
    return NewProfilingIterator(factory(), position, label, profile.get());
  };
}

}  // namespace

absl::StatusOr<std::unique_ptr<Iterator>> MakeIterator(const Dataset& dataset,
                                                       const ExecutorOptions& options) {
  const proto::DatasetDef& def = dataset.def();
  if (options.check_graph) RETURN_IF_ERROR(options.check_graph(def));
  // Validates the graph (what Dataset::Validate() does) and gives each op's output spec.
  ASSIGN_OR_RETURN(std::vector<ElementSpec> specs, InferElementSpecs(def));
  ASSIGN_OR_RETURN(IteratorFactory factory,
                   BuildSource(DescribePosition(def, 0), def.source()));
  const std::shared_ptr<OpProfile> profile =
      options.profile != nullptr ? options.profile : ProcessOpProfile();
  factory = Profiled(std::move(factory), 0, DescribePosition(def, 0), profile);
  proto::DatasetDef upstream = def;  // the graph up to op i
  upstream.clear_ops();
  for (int i = 0; i < def.ops_size(); ++i) {
    ASSIGN_OR_RETURN(factory, BuildOp(DescribePosition(def, i + 1), def.ops(i),
                                      std::move(factory), specs[i + 1], specs[i], upstream,
                                      options));
    factory = Profiled(std::move(factory), i + 1, DescribePosition(def, i + 1), profile);
    *upstream.add_ops() = def.ops(i);
  }
  return factory();
}

}  // namespace sluice
