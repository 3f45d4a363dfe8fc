// rebatch(batch_sizes, drop_remainder) and legacy_rebatch(num_replicas): the registration of the
// op (core/data/op_registry.h); the iterators are in rebatch_iterator.h.
//
// Specs: rebatch(sizes, drop) (TF's _RebatchDataset._compute_static_batch_dim): when all sizes
// equal b, dimension 0 becomes b if drop_remainder, or if every known input batch dimension
// equals d with d % b == 0; otherwise None. legacy rebatch(N): dimension 0 becomes d / N when d
// is known and divisible by N, else None. TF reports unknown cardinality for both kernels.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data/op_expression.h"
#include "core/data/op_parse.h"
#include "core/data/op_registry.h"
#include "core/data/ops/rebatch_iterator.h"
#include "core/data/spec_inference.h"
#include "core/tensor/row_pieces.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

absl::Status Invalid(absl::string_view message) {
  return absl::InvalidArgumentError(std::string(message));
}

// TF's ts._unbatch()._batch(dim) on every component: a SparseTensorSpec's or RaggedTensorSpec's
// static shape changes as a dense component's (row_pieces.h).
ElementSpec WithBatchDim(const ElementSpec& spec, int64_t dim) {
  return MapBatchDim(spec, [dim](int64_t) { return dim; });
}

// The first scalar component, a SparseTensor of rank 0 counting as one; -1 if none.
int FirstScalarRowNode(const ElementSpec& spec) {
  std::vector<const ElementSpec*> nodes = RowNodes(spec);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (RowNodeRank(*nodes[i]) == 0) return static_cast<int>(i);
  }
  return -1;
}

absl::StatusOr<ElementSpec> RebatchSpec(const proto::RebatchOp& r, const ElementSpec& input) {
  if (r.legacy_num_replicas() != 0) {
    if (r.batch_sizes_size() > 0) {
      return Invalid("batch_sizes and legacy_num_replicas cannot both be set");
    }
    int64_t n = r.legacy_num_replicas();
    if (n <= 0) return Invalid(absl::StrCat("num_replicas must be positive, got ", n));
    int scalar = FirstScalarRowNode(input);
    if (scalar >= 0) {
      return Invalid(absl::StrCat("component ", scalar,
                                  " is a scalar; rebatch needs a batched input (rank >= 1)"));
    }
    return MapBatchDim(input, [n](int64_t d) {
      return (d != kUnknownDim && d % n == 0) ? d / n : kUnknownDim;
    });
  }
  if (r.batch_sizes_size() == 0) return Invalid("batch_sizes must not be empty");
  bool all_zero = true;
  for (int i = 0; i < r.batch_sizes_size(); ++i) {
    if (r.batch_sizes(i) < 0) {
      return Invalid(
          absl::StrCat("batch_sizes must be >= 0, got ", r.batch_sizes(i), " at position ", i));
    }
    if (r.batch_sizes(i) != 0) all_zero = false;
  }
  if (all_zero) return Invalid("batch_sizes must not all be 0");
  int scalar = FirstScalarRowNode(input);
  if (scalar >= 0) {
    return Invalid(absl::StrCat("component ", scalar,
                                " is a scalar; rebatch needs a batched input (rank >= 1)"));
  }
  // TF's _compute_static_batch_dim.
  int64_t b = r.batch_sizes(0);
  for (int64_t s : r.batch_sizes()) {
    if (s != b) return WithBatchDim(input, kUnknownDim);
  }
  if (r.drop_remainder()) return WithBatchDim(input, b);
  std::vector<const ElementSpec*> nodes = RowNodes(input);
  int64_t known = kUnknownDim;
  int known_at = -1;
  for (size_t i = 0; i < nodes.size(); ++i) {
    int64_t d = RowCount(*nodes[i]);
    if (d == kUnknownDim) continue;
    if (known == kUnknownDim) {
      known = d;
      known_at = static_cast<int>(i);
    } else if (d != known) {
      return Invalid(absl::StrCat("components have different batch dimensions: component ",
                                  known_at, " has ", known, ", component ", i, " has ", d));
    }
  }
  if (known == kUnknownDim || known % b != 0) return WithBatchDim(input, kUnknownDim);
  return WithBatchDim(input, b);
}

}  // namespace

SLUICE_REGISTER_OPS(rebatch_op) {
  OpRegistration r;
  r.name = "rebatch";
  r.takes_composites = true;  // SparseTensor / RaggedTensor rows cut as TF (row_pieces.h)
  r.name_of = [](const proto::OpDef& op) -> std::string {
    return op.rebatch().legacy_num_replicas() != 0 ? "legacy_rebatch" : "rebatch";
  };
  r.infer_spec = [](const proto::OpDef& op, const ElementSpec& input) {
    return RebatchSpec(op.rebatch(), input);
  };
  // Cardinality: unknown, as both of TF's rebatch kernels report.
  r.expression = [](const proto::OpDef& op) {
    const proto::RebatchOp& b = op.rebatch();
    if (b.legacy_num_replicas() != 0) {
      return absl::StrCat("legacy_rebatch(", b.legacy_num_replicas(), ")");
    }
    return absl::StrCat("rebatch([", absl::StrJoin(b.batch_sizes(), ", "),
                        "], drop_remainder=", PyBool(b.drop_remainder()), ")");
  };
  r.build = [](OpBuildArgs args) {
    const std::string label = args.label;
    const proto::RebatchOp b = args.op.rebatch();
    if (b.legacy_num_replicas() != 0) {
      return CheckedFactory(std::move(args.input), [label, b](std::unique_ptr<Iterator> in) {
        return NewLegacyRebatchIterator(label, std::move(in), b.legacy_num_replicas());
      });
    }
    std::vector<int64_t> sizes(b.batch_sizes().begin(), b.batch_sizes().end());
    // TF builds the empty pieces of size-0 entries from the static spec.
    const ElementSpec output_spec = args.output_spec;
    return CheckedFactory(
        std::move(args.input), [label, sizes, b, output_spec](std::unique_ptr<Iterator> in) {
          return NewRebatchIterator(label, std::move(in), sizes, b.drop_remainder(), output_spec);
        });
  };
  r.global_order_conflict = [](const proto::OpDef&) -> std::string {
    return "changes how many elements there are, so positions of records no longer cut "
           "global steps";
  };
  {
    OpParseRule p;
    p.name = "rebatch";
    p.list_order = 8;
    p.params = {{"batch_size", true}, {"drop_remainder", false}};
    p.parse = [](const ParseCall& c, proto::OpDef* op) -> absl::Status {
      proto::RebatchOp* r = op->mutable_rebatch();
      const PyValue& sizes = *c.arg(0);
      if (sizes.kind == PyValue::Kind::kList || sizes.kind == PyValue::Kind::kTuple) {
        for (const PyValue& s : sizes.items) {
          ASSIGN_OR_RETURN(int64_t n, c.Int("batch_size", s));
          r->add_batch_sizes(n);
        }
      } else {
        ASSIGN_OR_RETURN(int64_t n, c.Int("batch_size", sizes));
        r->add_batch_sizes(n);
      }
      if (c.arg(1).has_value()) {
        ASSIGN_OR_RETURN(bool drop, c.Bool("drop_remainder", *c.arg(1)));
        r->set_drop_remainder(drop);
      }
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  {
    OpParseRule p;
    p.name = "legacy_rebatch";
    p.list_order = 9;
    p.params = {{"num_replicas", true}};
    p.parse = [](const ParseCall& c, proto::OpDef* op) -> absl::Status {
      ASSIGN_OR_RETURN(int64_t n, c.Int("num_replicas", *c.arg(0)));
      // In the proto 0 means "not legacy", so refuse it here, where the op is still named.
      if (n == 0) {
        return c.Error(c.arg(0)->begin, "legacy_rebatch: num_replicas must be positive, got 0");
      }
      op->mutable_rebatch()->set_legacy_num_replicas(n);
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  registry.AddOp(proto::OpDef::kRebatch, std::move(r));
}

}  // namespace sluice
