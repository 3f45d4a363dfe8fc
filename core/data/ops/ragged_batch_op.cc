// ragged_batch(batch_size, drop_remainder=False, row_splits_dtype=tf.int64): tf.data's
// Dataset.ragged_batch. Each dense component whose static shape is not fully defined becomes a
// RaggedTensor of ragged rank 0 (TF's _DenseToRaggedDataset), then the elements are batched,
// so rows of different lengths batch into one RaggedTensor of ragged rank 1
// (core/tensor/composite_rows.h); components of fully defined shape and existing SparseTensor /
// RaggedTensor components batch as batch() batches them.
//
// TF gives a component whose unknown dimensions include one after dimension 0 a higher ragged
// rank (RaggedTensor.from_tensor); Sluice refuses that with INVALID_ARGUMENT naming the
// component, rather than giving a different structure.
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/op_expression.h"
#include "core/data/op_parse.h"
#include "core/data/op_registry.h"
#include "core/data/ops/batch_iterator.h"
#include "core/data/ops/map_iterator.h"
#include "core/data/spec_inference.h"
#include "core/tensor/composite_rows.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

// The input spec with each leaf of not fully defined shape as RaggedTensorSpec(shape, dtype, 0).
absl::StatusOr<ElementSpec> RaggedInputSpec(const ElementSpec& spec) {
  if (spec.is_composite()) return spec;
  if (spec.is_leaf()) {
    const TensorSpec& s = spec.leaf();
    if (s.shape.IsFullyDefined()) return spec;
    if (s.shape.rank() == 0) return spec;
    for (int d = 1; d < s.shape.rank(); ++d) {
      if (s.shape.dim(d) == kUnknownDim) {
        return absl::InvalidArgumentError(absl::StrCat(
            "a component of shape ", s.shape.ToString(), " has an unknown dimension after the "
            "first; ragged_batch supports components whose only unknown dimension is the first"));
      }
    }
    return RaggedTensorSpecOf(s.dtype, s.shape.dims(), 0);
  }
  std::vector<ElementSpec> children;
  for (const ElementSpec& c : spec.children()) {
    ASSIGN_OR_RETURN(ElementSpec r, RaggedInputSpec(c));
    children.push_back(std::move(r));
  }
  return ElementSpec::FromParts(spec.kind(), std::move(children), spec.keys());
}

// `e` with the leaves that `ragged` (RaggedInputSpec of its spec) makes ragged wrapped as
// RaggedTensors of ragged rank 0.
absl::StatusOr<Element> ToRagged(Element e, const ElementSpec& ragged) {
  if (ragged.is_composite() && e.is_leaf()) return MakeRaggedTensor(e.leaf(), {}, "ragged_batch");
  if (e.is_leaf() || e.is_composite()) return e;
  std::vector<Element>& children = e.mutable_children();
  for (size_t i = 0; i < children.size(); ++i) {
    ASSIGN_OR_RETURN(children[i], ToRagged(std::move(children[i]), ragged.children()[i]));
  }
  return e;
}

}  // namespace

SLUICE_REGISTER_OPS(ragged_batch_op) {
  OpRegistration r;
  r.name = "ragged_batch";
  r.takes_composites = true;  // composites batch as in batch()
  r.infer_spec = [](const proto::OpDef& op,
                    const ElementSpec& input) -> absl::StatusOr<ElementSpec> {
    const int64_t n = op.ragged_batch().batch_size();
    if (n <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("batch_size must be positive, got ", n));
    }
    ASSIGN_OR_RETURN(ElementSpec ragged, RaggedInputSpec(input));
    return BatchedSpec(ragged, op.ragged_batch().drop_remainder() ? n : kUnknownDim);
  };
  r.cardinality = [](const proto::OpDef& op, const ElementSpec&, int64_t n) -> int64_t {
    if (n < 0) return n;
    const int64_t b = op.ragged_batch().batch_size();
    return n / b + (n % b == 0 || op.ragged_batch().drop_remainder() ? 0 : 1);
  };
  r.expression = [](const proto::OpDef& op) {
    return absl::StrCat("ragged_batch(", op.ragged_batch().batch_size(), ", drop_remainder=",
                        PyBool(op.ragged_batch().drop_remainder()), ")");
  };
  r.build = [](OpBuildArgs args) -> absl::StatusOr<IteratorFactory> {
    const std::string label = args.label;
    const proto::BatchOp b = args.op.ragged_batch();
    ASSIGN_OR_RETURN(ElementSpec ragged, RaggedInputSpec(args.input_spec));
    ElementFn to_ragged = [ragged](Element e) { return ToRagged(std::move(e), ragged); };
    // When no component becomes ragged (the input's are composites or fully defined), batch
    // reads the input directly, so that its bulk path (blocks of rows) is kept.
    const bool wraps = !ragged.SameStructure(args.input_spec);
    return CheckedFactory(std::move(args.input),
                          [label, b, to_ragged, wraps](std::unique_ptr<Iterator> in) {
      std::unique_ptr<Iterator> ragged =
          in == nullptr || !wraps
              ? std::move(in)
              : NewMapIterator(label, std::move(in), to_ragged,
                               /*num_parallel_calls=*/1, /*deterministic=*/true);
      return NewBatchIterator(label, std::move(ragged), b.batch_size(), b.drop_remainder());
    });
  };
  r.batch_params = [](const proto::OpDef& op) {
    return BatchParams{op.ragged_batch().batch_size(), op.ragged_batch().drop_remainder()};
  };
  r.global_order_conflict = [](const proto::OpDef&) -> std::string {
    return "is a second batch: exactly one batch op may cut the global steps";
  };
  {
    OpParseRule p;
    p.name = "ragged_batch";
    p.list_order = 18;
    p.params = {{"batch_size", true}, {"drop_remainder", false}, {"row_splits_dtype", false}};
    p.parse = [](const ParseCall& c, proto::OpDef* op) -> absl::Status {
      ASSIGN_OR_RETURN(int64_t n, c.Int("batch_size", *c.arg(0)));
      op->mutable_ragged_batch()->set_batch_size(n);
      if (c.arg(1).has_value()) {
        ASSIGN_OR_RETURN(bool drop, c.Bool("drop_remainder", *c.arg(1)));
        op->mutable_ragged_batch()->set_drop_remainder(drop);
      }
      if (c.arg(2).has_value()) {
        ASSIGN_OR_RETURN(DType d, c.DTypeArg("row_splits_dtype", *c.arg(2)));
        if (d != DType::kInt64) {
          return c.Error(c.at(), "ragged_batch: row_splits_dtype must be tf.int64 (Sluice's "
                                 "row_splits are int64)");
        }
      }
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  registry.AddOp(proto::OpDef::kRaggedBatch, std::move(r));
}

}  // namespace sluice
