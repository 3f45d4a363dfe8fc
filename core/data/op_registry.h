// The op registry: what the graph layer (spec inference, cardinality, expressions, the executor,
// map(), the distribute rules) knows about each source, op and map() function, registered by
// the op itself, as TF's kernels are. Keyed by the proto oneof case (proto::SourceDef::KindCase,
// proto::OpDef::KindCase, proto::MapOp::FnCase); the graph code looks an op up here and never
// names one.
//
// Adding an op: one file core/data/ops/<name>_op.cc (a map() function: <name>_fn.cc), with its
// iterator or beside it, holding
//
//   namespace sluice {
//   SLUICE_REGISTER_OPS(<name>_op) {
//     OpRegistration r;
//     r.name = "...";  r.infer_spec = ...;  r.expression = ...;  r.build = ...;
//     registry.AddOp(proto::OpDef::kFoo, std::move(r));
//   }
//   }  // namespace sluice
//
// plus its test. The build lists every core/data/ops/*_op.cc, core/data/ops/*_fn.cc and
// core/data/distribute/*_op.cc (core/CMakeLists.txt) and generates RegisterBuiltinOps(), which
// calls each file's SLUICE_REGISTER_OPS function: nothing else names the op, and since the graph
// references every registration through that one function, the linker keeps them all (a
// self-registering static object in a static library would be dropped). The macro's argument
// must be the file's name without ".cc"; a mismatch is a link error naming the missing
// RegisterOps_<name>. tests/core/op_registry_test.cc fails when a kind of the protos has no
// registration.
//
// Thread safety: OpRegistry::Global() is built once, on first use, and is read-only after.
#ifndef SLUICE_CORE_DATA_OP_REGISTRY_H_
#define SLUICE_CORE_DATA_OP_REGISTRY_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/data/executor.h"
#include "core/data/map_fns.h"
#include "core/data/op_iterator.h"
#include "core/data/op_parse.h"
#include "proto/dataset.pb.h"
#include "sluice/element.h"

namespace sluice {

// What a source's build hook gets. `label` names it in errors ("source (range)").
struct SourceBuildArgs {
  const std::string& label;
  const proto::SourceDef& source;
  const ExecutorOptions& options;
  // Source fusion (SourceRegistration::absorbed_op): the whole graph, and the index of the op
  // the source runs as part of itself (graph->ops(absorbed_op)), -1 when none.
  const proto::DatasetDef* graph = nullptr;
  int absorbed_op = -1;
};

struct SourceRegistration {
  // The name in errors and in DescribePosition(): "range", "tf_record_dataset". Required.
  std::string name;
  // Checks the arguments and gives the element spec (INVALID_ARGUMENT, without the position
  // prefix, for bad arguments). Required.
  std::function<absl::StatusOr<ElementSpec>(const proto::SourceDef&)> infer_spec;
  // The number of elements, as TF's CardinalityInternal; called only on a valid graph.
  // Unset: kUnknownCardinality.
  std::function<int64_t(const proto::SourceDef&)> cardinality;
  // The pipeline expression (core/data/pipeline_parser.h reads it back). Required.
  std::function<std::string(const proto::SourceDef&)> expression;
  // The factory of the source's iterators (core/data/executor.h); called only on a graph that
  // InferElementSpecs() accepted. Errors name `label`. Required.
  std::function<absl::StatusOr<IteratorFactory>(const SourceBuildArgs&)> build;
  // Source fusion: the index i of an op (graph.ops(i)) that the source runs as part of its
  // reads, or -1 (fixed_length_record_dataset reads its records straight into the tensors of
  // the map(decode_raw) after it). Every op before op i must pass the source's elements on
  // whole and unchanged (repeat, take, skip, shard), so that applying op i first changes no
  // element; its errors must be op i's. The executor then builds no iterator for op i (the
  // per-op profile has no line for it), only a place that keeps a Skip (Iterator::Skip) from
  // the ops after op i from reaching the source: the source may drop elements unmade (without
  // op i) only for the ops before op i. Called only on a graph InferElementSpecs() accepted,
  // and only with ExecutorOptions::fuse_maps. Unset: none.
  std::function<int(const proto::DatasetDef& graph)> absorbed_op;
  // The source's syntax in pipeline expressions (core/data/op_parse.h); empty for a source that
  // only the graph rewrites write (permuted).
  std::vector<SourceParseRule> parse;
  // Whether the source can be read in random order (core/data/ops/random_access_source.h): OK,
  // or FAILED_PRECONDITION with the reason. Unset: it cannot (the reason is
  // `no_random_access`).
  std::function<absl::Status(const proto::SourceDef&)> random_access;
  std::string no_random_access;
};

// What an op's build hook gets.
struct OpBuildArgs {
  const std::string& label;  // "op 2 (batch)"
  const proto::OpDef& op;
  IteratorFactory input;              // the op's input, one fresh iterator per call
  const ElementSpec& input_spec;      // InferElementSpecs() of the input
  const ElementSpec& output_spec;     // ... and of the op's output
  const proto::DatasetDef& upstream;  // the graph up to (without) the op
  const ExecutorOptions& options;
  // The ops right after `op` that this op runs as part of itself (OpRegistration::fusable_next;
  // output_spec is then the last one's); empty without fusion.
  std::vector<proto::OpDef> fused_next = {};
};

// The batch size an op cuts its input into, for the distribute rules.
struct BatchParams {
  int64_t batch_size = 0;
  bool drop_remainder = false;
};

struct OpRegistration {
  // The name in errors and in DescribePosition(): "batch". Required.
  std::string name;
  // A name that depends on the arguments (rebatch -> "legacy_rebatch"). Unset: `name`.
  std::function<std::string(const proto::OpDef&)> name_of;
  // Checks the arguments against the input spec and gives the output spec (INVALID_ARGUMENT,
  // without the position prefix). Required.
  std::function<absl::StatusOr<ElementSpec>(const proto::OpDef&, const ElementSpec& input)>
      infer_spec;
  // The output cardinality given the input's `n` (kUnknownCardinality, kInfiniteCardinality or
  // a count) and the input spec, as TF's CardinalityInternal. Unset: kUnknownCardinality.
  std::function<int64_t(const proto::OpDef&, const ElementSpec& input, int64_t n)> cardinality;
  // The pipeline expression, "batch(4, drop_remainder=False)". Required.
  std::function<std::string(const proto::OpDef&)> expression;
  // The factory of the op's iterators (see OpBuildArgs). Required.
  std::function<absl::StatusOr<IteratorFactory>(OpBuildArgs)> build;
  // Clears fields that carry no meaning before Dataset::Fingerprint() hashes the op (a seed
  // without has_seed). Unset: the op is hashed as it is.
  std::function<void(proto::OpDef*)> canonicalize;
  // True when the op handles SparseTensor / RaggedTensor components (sluice/composite_tensor.h)
  // as TF does: it passes elements through whole (repeat, take, cache, ...) or knows composites
  // (batch). Unset: InferOpSpec refuses an input spec holding a composite with INVALID_ARGUMENT
  // naming the op, so that no op treats a composite's components as separate tensors.
  bool takes_composites = false;
  // The op's syntax in pipeline expressions (core/data/op_parse.h), one rule per spelling that
  // writes this kind (rebatch and legacy_rebatch both write a RebatchOp).
  std::vector<OpParseRule> parse;

  // Distribution (core/data/distribute/). Set for an op that batches its input: the batch size
  // GlobalBatchSize() reports and a global order cuts steps with. Unset: not a batch op.
  std::function<BatchParams(const proto::OpDef&)> batch_params;
  // True when the op passes its input's batch size on (GlobalBatchSize() walks through it).
  bool keeps_batch_size = false;
  // Why a global order (core/data/distribute/global_order.h) cannot have this op after its
  // source, "drops elements depending on their values"; "" when the op is element-wise. A batch
  // op's answer applies to a second batch op. Unset: the op prevents a global order.
  std::function<std::string(const proto::OpDef&)> global_order_conflict;
  // Fusion: how many of the ops right after def.ops(i) the op can run as part of itself (0:
  // none), given op i's input spec; the build then gets them in OpBuildArgs::fused_next. Called
  // only on a graph InferElementSpecs() accepted. Unset: 0.
  std::function<int(const proto::DatasetDef& def, int i, const ElementSpec& input)> fusable_next;
};

// A function of map() (proto::MapOp's oneof `fn`), registered in core/data/ops/<name>_fn.cc.
struct MapFnRegistration {
  // The name in errors: "cast". Required.
  std::string name;
  // A name that depends on the arguments (image -> "resize"). Unset: `name`.
  std::function<std::string(const proto::MapOp&)> name_of;
  // The function, INVALID_ARGUMENT for bad arguments (the message starts with the fn's name,
  // "cast: dtype is not set"). Required.
  std::function<absl::StatusOr<std::unique_ptr<ComponentFn>>(const proto::MapOp&)> make;
  // The fn in pipeline syntax, "cast(tf.float32)" (map_op.cc adds key and parallelism).
  // Required.
  std::function<std::string(const proto::MapOp&)> expression;
  // The function's syntax inside map(...) (core/data/op_parse.h), one rule per call that writes
  // this kind (image: decode_image, resize, random_crop, ...).
  std::vector<MapFnParseRule> parse;
};

class OpRegistry {
 public:
  // Every registration of this build (RegisterBuiltinOps()).
  static const OpRegistry& Global();

  // Null when `kind` has no registration.
  const SourceRegistration* FindSource(proto::SourceDef::KindCase kind) const;
  const OpRegistration* FindOp(proto::OpDef::KindCase kind) const;
  const MapFnRegistration* FindMapFn(proto::MapOp::FnCase fn) const;

  // The parse rule named `name` (its name or an alias), null when none.
  const SourceParseRule* FindSourceParser(absl::string_view name) const;
  const OpParseRule* FindOpParser(absl::string_view name) const;
  const MapFnParseRule* FindMapFnParser(absl::string_view name) const;
  // "range, from_tensors, ...": the rules' names in list order, for errors.
  std::string SourceParserNames() const;
  std::string OpParserNames() const;
  std::string MapFnParserNames() const;
  // The listed aliases of the sources, "TextLineDataset".
  std::vector<std::string> ListedSourceAliases() const;

  // Registers `kind`. A second registration of a kind is kept out and listed in duplicates().
  void AddSource(proto::SourceDef::KindCase kind, SourceRegistration registration);
  void AddOp(proto::OpDef::KindCase kind, OpRegistration registration);
  void AddMapFn(proto::MapOp::FnCase fn, MapFnRegistration registration);

  // "op batch", "source range": kinds registered more than once (a build defect the registry
  // test reports).
  const std::vector<std::string>& duplicates() const { return duplicates_; }

 private:
  absl::flat_hash_map<int, SourceRegistration> sources_;
  absl::flat_hash_map<int, OpRegistration> ops_;
  absl::flat_hash_map<int, MapFnRegistration> map_fns_;
  std::vector<std::string> duplicates_;
};

// Calls every SLUICE_REGISTER_OPS function of this build; defined in the generated
// builtin_ops.cc (core/CMakeLists.txt).
void RegisterBuiltinOps(OpRegistry& registry);

// The registration of the graph's source / op, or INVALID_ARGUMENT naming the kind ("the source
// kind 'foo' (SourceDef field 12) has no registration in this build"; "no source set" / "no op
// set" when the oneof is empty).
absl::StatusOr<const SourceRegistration*> FindSourceRegistration(const proto::SourceDef& source);
absl::StatusOr<const OpRegistration*> FindOpRegistration(const proto::OpDef& op);
// "map: no function set (written by a newer build?)" when `fn` is empty.
absl::StatusOr<const MapFnRegistration*> FindMapFnRegistration(const proto::MapOp& map);

// --- Helpers for the registrations. ---

// A count that does not fit in int64 is reported as unknown: no consumer can act on it.
int64_t CountOrUnknown(__int128 n);

// A factory that builds the op's iterator with `make(input_iterator)`. It calls `make` once with
// no input first, so that argument errors surface when the graph is built rather than at the
// first element (make must only store its input); then each call builds one iterator with a
// fresh input. `input` is null for a source.
using MakeOpIterator =
    std::function<absl::StatusOr<std::unique_ptr<Iterator>>(std::unique_ptr<Iterator>)>;
absl::StatusOr<IteratorFactory> CheckedFactory(IteratorFactory input, MakeOpIterator make);

// An iterator that returns `status` on every call, for a factory whose build failed after the
// graph was checked.
std::unique_ptr<Iterator> OrErrorIterator(absl::StatusOr<std::unique_ptr<Iterator>> it);

}  // namespace sluice

// Defines the registration function of the file core/data/ops/<file_stem>.cc (or
// core/data/distribute/<file_stem>.cc; file_stem ends in _op or _fn); the body registers through
// `registry`. Inside namespace sluice.
#define SLUICE_REGISTER_OPS(file_stem) void RegisterOps_##file_stem(OpRegistry& registry)

#endif  // SLUICE_CORE_DATA_OP_REGISTRY_H_
