// Bounds on the dataset graphs a server accepts from the network, so that one request cannot
// make the coordinator or a worker spend unbounded memory or stack on a graph. Checked by the
// coordinator on RegisterDataset (before parsing a pipeline expression or storing a graph) and
// by workers on every graph they build (ExecutorOptions::check_graph).
//
//   RETURN_IF_ERROR(CheckDatasetLimits(def, DatasetLimits{}));
//
// Thread safety: pure functions.
#ifndef SLUICE_CORE_DATASET_LIMITS_H_
#define SLUICE_CORE_DATASET_LIMITS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "proto/dataset.pb.h"

namespace sluice {

struct DatasetLimits {
  // Ops in the graph, counting those inside interleave functions.
  int64_t max_ops = 10000;
  // Graphs nested in graphs (interleave functions in interleave functions...); 1 is flat.
  int64_t max_nesting = 16;
  // Serialized size of the graph, or length of a pipeline expression.
  int64_t max_bytes = int64_t{16} << 20;
};

// OK, or INVALID_ARGUMENT naming the limit, its value and the graph's.
absl::Status CheckDatasetLimits(const proto::DatasetDef& def, const DatasetLimits& limits = {});

// As above for a pipeline expression before it is parsed: only its length.
absl::Status CheckPipelineLimits(absl::string_view pipeline, const DatasetLimits& limits = {});

}  // namespace sluice

#endif  // SLUICE_CORE_DATASET_LIMITS_H_
