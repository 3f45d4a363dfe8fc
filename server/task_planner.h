// Task planning: what each task of a job runs, by sharding policy (docs/SERVICE.md, "Task
// pipelines by sharding policy"), and how DYNAMIC jobs cut their source into splits.
// Pure functions over dataset graphs; thread-safe.
#ifndef SLUICE_SERVER_TASK_PLANNER_H_
#define SLUICE_SERVER_TASK_PLANNER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/dataset.h"
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

}  // namespace sluice

#endif  // SLUICE_SERVER_TASK_PLANNER_H_
