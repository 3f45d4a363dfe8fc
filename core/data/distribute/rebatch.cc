#include "core/data/distribute/rebatch.h"

#include "absl/strings/str_cat.h"

namespace sluice {
namespace {

absl::Status CheckCounts(int64_t global_batch_size, int64_t num_workers,
                         int64_t replicas_per_worker) {
  if (global_batch_size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("global batch size must be non-negative, got ", global_batch_size));
  }
  if (num_workers <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("number of workers must be positive, got ", num_workers));
  }
  if (replicas_per_worker <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("replicas per worker must be positive, got ", replicas_per_worker));
  }
  if (num_workers > (int64_t{1} << 31) / replicas_per_worker) {
    return absl::InvalidArgumentError(absl::StrCat("too many replicas: ", num_workers, " x ",
                                                   replicas_per_worker));
  }
  return absl::OkStatus();
}

// worker 0's sizes: floor + 1 for the first num_ceil replicas, floor for the rest.
std::vector<int64_t> WorkerZeroSizes(int64_t global_batch_size, int64_t num_replicas) {
  const int64_t floor = global_batch_size / num_replicas;
  const int64_t num_ceil = global_batch_size - num_replicas * floor;
  std::vector<int64_t> sizes(static_cast<size_t>(num_replicas), floor);
  for (int64_t i = 0; i < num_ceil; ++i) ++sizes[static_cast<size_t>(i)];
  return sizes;
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> BatchSizesForWorker(int64_t global_batch_size,
                                                         int64_t num_workers,
                                                         int64_t replicas_per_worker,
                                                         int64_t worker_index) {
  absl::Status s = CheckCounts(global_batch_size, num_workers, replicas_per_worker);
  if (!s.ok()) return s;
  if (worker_index < 0 || worker_index >= num_workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker index must be in [0, ", num_workers, "), got ", worker_index));
  }
  const int64_t n = num_workers * replicas_per_worker;
  std::vector<int64_t> worker0 = WorkerZeroSizes(global_batch_size, n);
  const int64_t offset = worker_index * replicas_per_worker;
  std::vector<int64_t> sizes;
  sizes.reserve(worker0.size());
  for (int64_t i = 0; i < n; ++i) sizes.push_back(worker0[static_cast<size_t>((i + offset) % n)]);
  return sizes;
}

absl::StatusOr<std::vector<int64_t>> CoordinatedPieceSizes(int64_t global_batch_size,
                                                           int64_t num_consumers,
                                                           int64_t replicas_per_consumer) {
  absl::Status s = CheckCounts(global_batch_size, num_consumers, replicas_per_consumer);
  if (!s.ok()) return s;
  const int64_t n = num_consumers * replicas_per_consumer;
  std::vector<int64_t> worker0 = WorkerZeroSizes(global_batch_size, n);
  // Step s rotates worker 0's sizes by s * R; after C steps the rotation is back to 0. When all
  // sizes are equal every rotation is the same and one step is a full period.
  const bool uniform = global_batch_size % n == 0;
  const int64_t period_steps = uniform ? 1 : num_consumers;
  std::vector<int64_t> sizes;
  sizes.reserve(static_cast<size_t>(period_steps * n));
  for (int64_t step = 0; step < period_steps; ++step) {
    for (int64_t k = 0; k < n; ++k) {
      sizes.push_back(worker0[static_cast<size_t>((k + step * replicas_per_consumer) % n)]);
    }
  }
  return sizes;
}

}  // namespace sluice
