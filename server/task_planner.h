// Task planning: what each task of a job runs, by sharding policy (docs/SERVICE.md, "Task
// pipelines by sharding policy"), and how DYNAMIC jobs cut their source into splits.
// Pure functions over dataset graphs; thread-safe.
#ifndef SLUICE_SERVER_TASK_PLANNER_H_
#define SLUICE_SERVER_TASK_PLANNER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "sluice/dataset.h"
#include "proto/coordinator.pb.h"
#include "proto/dataset.pb.h"

namespace sluice {

// One task's pipeline.
struct TaskPlan {
  proto::DatasetDef dataset;
  bool step_sharded = false;  // DATA: keep the job's global steps s with s % K == index
};

// The K = num_tasks pipelines of a job with a static policy (every policy but DYNAMIC):
// OFF: the whole dataset; DATA: the whole dataset, step_sharded; FILE: ShardByFile (files k,
// k+K, ...; INVALID_ARGUMENT with TF's message when there are fewer files than tasks); HINT:
// shard(SHARD_HINT, SHARD_HINT) -> shard(K, k); AUTO: FILE when the source reads files, else
// DATA. INVALID_ARGUMENT for num_tasks < 1 or policy DYNAMIC.
absl::StatusOr<std::vector<TaskPlan>> PlanStaticTasks(const Dataset& dataset,
                                                      proto::ShardingPolicy policy,
                                                      int64_t num_tasks);

// What a DYNAMIC job splits: the files of a source that reads a list of files (text lines,
// TFRecords, fixed-length records, CSV, .npy; one file per split), or the elements of range,
// from_tensors and from_tensor_slices (ranges of them).
struct SplitSource {
  bool files = false;
  int64_t size = 0;  // number of files, or of source elements
};

// INVALID_ARGUMENT naming the source when it cannot be split statically (list_files, a
// reader restricted to a record range).
absl::StatusOr<SplitSource> DescribeSplitSource(const Dataset& dataset);

// The dataset restricted to units [begin, end) of its source, every op after the source kept:
// a file source keeps files [begin, end); range becomes the matching sub-range; from_tensors
// and from_tensor_slices get skip(begin).take(end - begin) right after the source. Requires 0 <= begin < end <= the
// DescribeSplitSource size; INVALID_ARGUMENT otherwise.
absl::StatusOr<Dataset> SplitDataset(const Dataset& dataset, int64_t begin, int64_t end);

// SHARDING_RANGES (docs/SERVICE.md, "Global order"): how a job's global steps
// [start_step, num_epochs x steps_per_epoch) are cut into ranges. Within each epoch, consecutive
// pieces of range_steps steps starting at max(start_step, the epoch's first step); a range
// never crosses an epoch (an epoch's last range may be shorter). Ranges are numbered 0, 1, ...
// in step order. Computed in O(1) per range (a job may have many).
struct GlobalRange {
  int64_t index = 0;
  int64_t epoch = 0;
  int64_t first_step = 0;  // global step (epoch x steps_per_epoch + step within the epoch)
  int64_t num_steps = 0;
  int64_t epoch_first_step = 0;  // epoch x steps_per_epoch
};

class RangeCut {
 public:
  // INVALID_ARGUMENT for steps_per_epoch < 0, num_epochs < 1, range_steps < 1, or start_step
  // outside [0, num_epochs x steps_per_epoch] (the end itself is allowed: no ranges left).
  static absl::StatusOr<RangeCut> Make(int64_t steps_per_epoch, int64_t num_epochs,
                                       int64_t start_step, int64_t range_steps);
  int64_t num_ranges() const { return num_ranges_; }
  int64_t total_steps() const { return num_epochs_ * steps_per_epoch_ - start_step_; }
  // Range i, 0 <= i < num_ranges().
  GlobalRange Range(int64_t i) const;

 private:
  RangeCut() = default;
  int64_t steps_per_epoch_ = 0;
  int64_t num_epochs_ = 0;
  int64_t start_step_ = 0;
  int64_t range_steps_ = 1;
  int64_t first_epoch_ = 0;        // the epoch holding start_step (when any range is left)
  int64_t first_epoch_ranges_ = 0; // ranges of first_epoch_ (from start_step on)
  int64_t epoch_ranges_ = 0;       // ranges of every later epoch
  int64_t num_ranges_ = 0;
};

}  // namespace sluice

#endif  // SLUICE_SERVER_TASK_PLANNER_H_
