#include "core/rpc/shared_step_payload.h"

#include "core/rpc/job_shm_segment.h"
#include "core/rpc/step_frame.h"
#include "core/tensor/host_memory.h"

namespace sluice {

const std::vector<grpc::Slice>& SharedStepPayload::Slices(Form form,
                                                          const std::vector<Tensor>* pieces,
                                                          size_t num_pieces) const {
  const int f = static_cast<int>(form);
  absl::MutexLock lock(&mu_);
  if (!built_[f]) {
    // Built under the lock: a second stream asking meanwhile waits instead of copying too.
    const size_t copied = step_frame_internal::EncodePayloadSlices(
        pieces, num_pieces, form == Form::kStringsOnly, &slices_[f]);
    ProcessMemoryBudget().ForceCharge(static_cast<int64_t>(copied));
    copied_bytes_ += copied;
    built_[f] = true;
    ++builds_;
  }
  return slices_[f];
}

std::shared_ptr<const JobShmRegion> SharedStepPayload::JobRegion(
    JobShmSegment& segment, const std::vector<Tensor>* pieces, size_t num_pieces) const {
  // Under the lock: a second stream asking meanwhile waits instead of writing the step again.
  absl::MutexLock lock(&mu_);
  if (job_region_ != nullptr && job_region_->segment() == &segment) return job_region_;
  if (job_region_ != nullptr) return nullptr;  // in another segment (a task has one)
  job_region_ = segment.Write(pieces, num_pieces);
  return job_region_;
}

SharedStepPayload::~SharedStepPayload() {
  absl::MutexLock lock(&mu_);
  ProcessMemoryBudget().Release(static_cast<int64_t>(copied_bytes_));
}

size_t SharedStepPayload::copied_bytes() const {
  absl::MutexLock lock(&mu_);
  return copied_bytes_;
}

int SharedStepPayload::builds() const {
  absl::MutexLock lock(&mu_);
  return builds_;
}

}  // namespace sluice
