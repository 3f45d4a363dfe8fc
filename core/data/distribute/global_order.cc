#include "core/data/distribute/global_order.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/op_registry.h"
#include "core/data/ops/random_access_source.h"
#include "core/data/spec_inference.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

// "filter (op 2)": how the messages name an op, with its position as DescribePosition counts.
std::string OpName(const proto::DatasetDef& def, int i) {
  return absl::StrCat(OpKindName(def.ops(i)), " (op ", i + 1, ")");
}

absl::Status Prevents(const proto::DatasetDef& def, int i, absl::string_view why) {
  return absl::FailedPreconditionError(
      absl::StrCat("no global order: ", OpName(def, i), " ", why));
}

// Why op `i` cannot be part of a global order (its registration's global_order_conflict), or OK
// when it is element-wise (batches are handled by the caller).
absl::Status CheckElementWise(const proto::DatasetDef& def, int i) {
  const OpRegistration* r = OpRegistry::Global().FindOp(def.ops(i).kind_case());
  if (r == nullptr) return Prevents(def, i, "is not set");
  if (!r->global_order_conflict) {
    return Prevents(def, i, "does not say whether it keeps the positions of records");
  }
  const std::string conflict = r->global_order_conflict(def.ops(i));
  if (!conflict.empty()) return Prevents(def, i, conflict);
  return absl::OkStatus();
}

// The registration's batch parameters of `op`, or nullopt when it is not a batch op.
std::optional<BatchParams> BatchOf(const proto::OpDef& op) {
  const OpRegistration* r = OpRegistry::Global().FindOp(op.kind_case());
  if (r == nullptr || !r->batch_params) return std::nullopt;
  return r->batch_params(op);
}

// The position of the batch op, after checking the whole shape.
absl::StatusOr<int> CheckShape(const Dataset& dataset) {
  RETURN_IF_ERROR(dataset.Validate());
  const proto::DatasetDef& def = dataset.def();
  absl::Status access = CheckRandomAccess(def.source());
  if (!access.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("no global order: ", access.message()));
  }
  int batch = -1;
  for (int i = 0; i < def.ops_size(); ++i) {
    const proto::OpDef& op = def.ops(i);
    if (batch < 0 && BatchOf(op).has_value()) {
      batch = i;
      continue;
    }
    RETURN_IF_ERROR(CheckElementWise(def, i));
  }
  if (batch < 0) {
    return absl::FailedPreconditionError(
        "no global order: the pipeline has no batch or padded_batch, so there are no global "
        "steps to cut");
  }
  return batch;
}

}  // namespace

absl::Status CheckGlobalOrderShape(const Dataset& dataset) {
  return CheckShape(dataset).status();
}

absl::StatusOr<GlobalOrderPlan> PlanGlobalOrder(const Dataset& dataset) {
  ASSIGN_OR_RETURN(int batch, CheckShape(dataset));
  const BatchParams params = *BatchOf(dataset.def().ops(batch));
  GlobalOrderPlan plan;
  plan.batch_size = params.batch_size;
  plan.drop_remainder = params.drop_remainder;
  ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessSource> source,
                   RandomAccessSource::Open(dataset.def().source()));
  plan.num_records = source->size();
  const int64_t b = plan.batch_size;
  plan.steps_per_epoch = plan.num_records / b +
                         (plan.drop_remainder || plan.num_records % b == 0 ? 0 : 1);
  return plan;
}

absl::StatusOr<Dataset> GlobalOrderRange(const Dataset& dataset, const GlobalOrderPlan& plan,
                                         const GlobalOrderOptions& options, int64_t epoch,
                                         int64_t begin_step, int64_t end_step) {
  auto invalid = [](absl::string_view m) {
    return absl::InvalidArgumentError(absl::StrCat("global order range: ", m));
  };
  if (plan.batch_size < 1 || plan.num_records < 0) {
    return invalid(absl::StrCat("the plan has batch_size ", plan.batch_size, " and ",
                                plan.num_records, " records"));
  }
  if (begin_step < 0 || begin_step >= end_step || end_step > plan.steps_per_epoch) {
    return invalid(absl::StrCat("steps [", begin_step, ", ", end_step, ") are not a non-empty "
                                "range within the epoch's ", plan.steps_per_epoch, " steps"));
  }
  if (epoch < 0) return invalid(absl::StrCat("epoch must be >= 0, got ", epoch));
  if (!proto::ShuffleMode_IsValid(options.shuffle)) {
    return invalid(absl::StrCat("unknown shuffle mode ", static_cast<int>(options.shuffle)));
  }
  if (options.shuffle == proto::SHUFFLE_BLOCK && options.block_size < 1) {
    return invalid(absl::StrCat("block_size must be >= 1 with SHUFFLE_BLOCK, got ",
                                options.block_size));
  }
  const int64_t b = plan.batch_size;
  // end_step <= steps_per_epoch <= ceil(num_records / b), so the products stay in range.
  const int64_t begin = begin_step * b;
  const int64_t end = std::min(end_step * b, plan.num_records);
  if (begin >= end) {
    return invalid(absl::StrCat("steps [", begin_step, ", ", end_step, ") hold no records of ",
                                plan.num_records));
  }
  proto::DatasetDef def = dataset.def();
  proto::SourceDef original = def.source();
  proto::PermutedSource* p = def.mutable_source()->mutable_permuted();
  *p->mutable_source() = std::move(original);
  p->set_shuffle(options.shuffle);
  if (options.shuffle != proto::SHUFFLE_NONE) p->set_seed(options.seed);
  if (options.shuffle == proto::SHUFFLE_BLOCK) p->set_block_size(options.block_size);
  p->set_epoch(epoch);
  p->set_begin(begin);
  p->set_end(end);
  return Dataset::FromDef(std::move(def));
}

}  // namespace sluice
