// JobShmReader: the consumer's side of a job segment (core/rpc/job_shm_segment.h,
// docs/SERVICE.md "One copy per step"). One per process and segment: every stream of this
// process to the task shares it (JobShmReaders(): found by worker address, socket name and
// segment id, so a reconnect skips the hand-over). Resolve wraps a frame's region as the
// frame's buffer: the decoded numeric tensors are views of the segment and its strings are
// copied out of it (the Tensor type keeps strings in std::string); when the last tensor of a
// region is dropped its offset joins the released list, which the next CreditGrant of any of
// the process's streams to that worker carries (TakeReleased), so that the worker may reuse the
// region once no other consumer and no step holds it. The reader (and the mapping) lives while
// a stream or a tensor uses it.
//
// Hostile workers: a region of another segment, unaligned, empty or outside the segment is
// DATA_LOSS naming the values. (A worker can still change bytes it handed over: the consumer
// trusts its data, never its offsets.)
//
// Thread-safe.
#ifndef SLUICE_CORE_RPC_JOB_SHM_READER_H_
#define SLUICE_CORE_RPC_JOB_SHM_READER_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/rpc/shm_segment.h"
#include "core/rpc/step_frame.h"

namespace sluice {

class JobShmReader : public JobPayloadSource,
                     public std::enable_shared_from_this<JobShmReader> {
 public:
  JobShmReader(std::shared_ptr<ShmSegment> segment, uint64_t segment_id)
      : segment_(std::move(segment)), segment_id_(segment_id) {}

  uint64_t segment_id() const { return segment_id_; }
  const std::shared_ptr<ShmSegment>& segment() const { return segment_; }

  absl::StatusOr<std::shared_ptr<TensorBuffer>> Resolve(
      const proto::JobShmPayload& payload) override ABSL_LOCKS_EXCLUDED(mu_);
  // Moves up to `max` released offsets (one per frame resolved whose tensors are all gone)
  // into *out.
  void TakeReleased(size_t max, std::vector<uint64_t>* out) ABSL_LOCKS_EXCLUDED(mu_);
  // Regions resolved and not released yet (tests).
  size_t held() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  class Region;
  void Released(uint64_t offset) ABSL_LOCKS_EXCLUDED(mu_);

  const std::shared_ptr<ShmSegment> segment_;
  const uint64_t segment_id_;
  mutable absl::Mutex mu_;
  std::vector<uint64_t> released_ ABSL_GUARDED_BY(mu_);
  size_t held_ ABSL_GUARDED_BY(mu_) = 0;
};

// This process's job segment readers, by (worker address, socket name, segment id): weak, so
// that a reader goes with its last stream and tensor. Thread-safe.
class JobShmReaders {
 public:
  // The live reader of that segment of `bytes` bytes, or null.
  std::shared_ptr<JobShmReader> Find(const std::string& address, const std::string& socket_name,
                                     uint64_t id, size_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  void Put(const std::string& address, const std::string& socket_name,
           const std::shared_ptr<JobShmReader>& reader) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using Key = std::tuple<std::string, std::string, uint64_t>;
  absl::Mutex mu_;
  std::map<Key, std::weak_ptr<JobShmReader>> readers_ ABSL_GUARDED_BY(mu_);
};
JobShmReaders& ProcessJobShmReaders();

}  // namespace sluice

#endif  // SLUICE_CORE_RPC_JOB_SHM_READER_H_
