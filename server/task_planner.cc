#include "server/task_planner.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/auto_shard.h"
#include "core/status_macros.h"

namespace sluice {
namespace {

// Number of elements of range(start, stop, step); step != 0 (the graph validated).
int64_t RangeSize(const proto::RangeSource& r) {
  if (r.step() > 0) {
    if (r.stop() <= r.start()) return 0;
    return (r.stop() - r.start() + r.step() - 1) / r.step();
  }
  if (r.step() < 0) {
    if (r.stop() >= r.start()) return 0;
    return (r.start() - r.stop() + (-r.step()) - 1) / (-r.step());
  }
  return 0;
}

}  // namespace

absl::StatusOr<std::vector<TaskPlan>> PlanStaticTasks(const Dataset& dataset,
                                                      proto::ShardingPolicy policy,
                                                      int64_t num_tasks) {
  if (num_tasks < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("task plan: num_tasks must be positive, got ", num_tasks));
  }
  if (policy == proto::SHARDING_AUTO) {
    policy = ReadsFiles(dataset) ? proto::SHARDING_FILE : proto::SHARDING_DATA;
  }
  std::vector<TaskPlan> plans;
  plans.reserve(num_tasks);
  for (int64_t k = 0; k < num_tasks; ++k) {
    TaskPlan plan;
    switch (policy) {
      case proto::SHARDING_OFF:
        plan.dataset = dataset.def();
        break;
      case proto::SHARDING_DATA:
        plan.dataset = dataset.def();
        plan.step_sharded = true;
        break;
      case proto::SHARDING_FILE: {
        ASSIGN_OR_RETURN(Dataset sharded, ShardByFile(dataset, num_tasks, k));
        plan.dataset = sharded.def();
        break;
      }
      case proto::SHARDING_HINT:
        plan.dataset = ReplaceShardHints(dataset, num_tasks, k).def();
        break;
      default:
        return absl::InvalidArgumentError(absl::StrCat(
            "task plan: sharding policy ", proto::ShardingPolicy_Name(policy),
            " has no static task plan"));
    }
    plans.push_back(std::move(plan));
  }
  return plans;
}

absl::StatusOr<SplitSource> DescribeSplitSource(const Dataset& dataset) {
  const proto::SourceDef& source = dataset.def().source();
  switch (source.kind_case()) {
    case proto::SourceDef::kTextLine:
      return SplitSource{true, source.text_line().filenames_size()};
    case proto::SourceDef::kRange:
      return SplitSource{false, RangeSize(source.range())};
    case proto::SourceDef::kFromTensors:
      return SplitSource{false, 1};
    case proto::SourceDef::kFromTensorSlices: {
      const proto::ElementProto& e = source.from_tensor_slices().element();
      if (e.tensors_size() == 0 || e.tensors(0).shape_size() == 0) {
        return absl::InvalidArgumentError(
            "dynamic sharding: from_tensor_slices source has no dimension 0 to split");
      }
      return SplitSource{false, e.tensors(0).shape(0)};
    }
    case proto::SourceDef::KIND_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError("dynamic sharding: the dataset has no source");
}

absl::StatusOr<Dataset> SplitDataset(const Dataset& dataset, int64_t begin, int64_t end) {
  ASSIGN_OR_RETURN(SplitSource source, DescribeSplitSource(dataset));
  if (begin < 0 || begin >= end || end > source.size) {
    return absl::InvalidArgumentError(absl::StrCat("dynamic sharding: split [", begin, ", ", end,
                                                   ") outside the source's ", source.size,
                                                   source.files ? " files" : " elements"));
  }
  proto::DatasetDef def = dataset.def();
  proto::SourceDef* src = def.mutable_source();
  switch (src->kind_case()) {
    case proto::SourceDef::kTextLine: {
      proto::TextLineSource files;
      for (int64_t i = begin; i < end; ++i) files.add_filenames(src->text_line().filenames(i));
      *src->mutable_text_line() = std::move(files);
      break;
    }
    case proto::SourceDef::kRange: {
      proto::RangeSource* r = src->mutable_range();
      const int64_t start = r->start();
      const int64_t step = r->step();
      r->set_start(start + begin * step);
      if (end < source.size) r->set_stop(start + end * step);
      break;
    }
    default: {
      // skip(begin).take(end - begin) right after the source.
      proto::DatasetDef out;
      out.set_version(def.version());
      *out.mutable_source() = def.source();
      if (begin > 0) out.add_ops()->mutable_skip()->set_count(begin);
      if (end < source.size || begin > 0) out.add_ops()->mutable_take()->set_count(end - begin);
      for (const proto::OpDef& op : def.ops()) *out.add_ops() = op;
      def = std::move(out);
      break;
    }
  }
  return Dataset::FromDef(std::move(def));
}

}  // namespace sluice
