// SharedStepPayload: one step's frame payload (core/rpc/step_frame.h: its tensors' bytes in
// header order) encoded once and sent, as the same reference-counted gRPC slices, in every
// frame that carries the step. What a job shared across trainers (worker/cross_trainer_window.h)
// attaches to its steps: N trainers read each step, and without it every trainer's stream
// would copy the step's string and small tensors into a frame of its own (issue 29: serving a
// ~790 KB step of strings to 4 trainers cost 4 copies; now 1, plus each socket's send).
//
// Two forms, each built on first use and kept while the step lives:
//  - kWhole: every tensor's bytes, as a frame without shared memory sends them (strings and
//    numeric tensors under kZeroCopyMinBytes copied once into one buffer between the
//    zero-copy slices of the larger numeric tensors, which reference the tensors' own buffers);
//  - kStringsOnly: the string tensors' bytes only, for a frame whose numeric bytes go to the
//    consumer's shared-memory ring (each stream has a ring of its own, so those are copied per
//    stream, as before).
// A compressed frame compresses its whole payload per stream and does not use this.
// A third form, for co-located trainers: the step written once into its task's job segment
// (core/rpc/job_shm_segment.h, JobRegion), the region held while this object lives.
//
// Memory: a form holds a copy of the step's string and small tensors (their payload bytes at
// most) for as long as the step is alive; gRPC keeps the slices of frames in flight alive
// after that. The copy is charged to the process's memory budget (core/tensor/host_memory.h)
// when a form is built and given back when this object goes (a frame still in flight then
// holds it a little longer, uncounted): a worker's shared jobs count it against --memory_limit
// as they count the step itself. It is counted, not refused: the step is already produced and
// must be served, so the producer's next allocation is what the limit stops. Thread-safe: any number of streams may ask for the slices at once; the first
// builds a form, the others wait for it, and the slices never change afterwards.
#ifndef SLUICE_CORE_RPC_SHARED_STEP_PAYLOAD_H_
#define SLUICE_CORE_RPC_SHARED_STEP_PAYLOAD_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/support/slice.h"
#include "sluice/tensor.h"

namespace sluice {

class JobShmSegment;  // core/rpc/job_shm_segment.h
class JobShmRegion;

class SharedStepPayload {
 public:
  enum class Form { kWhole = 0, kStringsOnly = 1 };

  SharedStepPayload() = default;
  ~SharedStepPayload();
  SharedStepPayload(const SharedStepPayload&) = delete;
  SharedStepPayload& operator=(const SharedStepPayload&) = delete;

  // The slices of `form` for the step's `num_pieces` pieces (every piece of the step, each the
  // leaves of one element; valid host tensors, as StepFrameEncoder checks first): the same
  // pieces on every call, since only the first call of a form reads them. The reference stays
  // valid while this object lives; copying a slice takes a reference (no byte is copied).
  const std::vector<grpc::Slice>& Slices(Form form, const std::vector<Tensor>* pieces,
                                         size_t num_pieces) const ABSL_LOCKS_EXCLUDED(mu_);
  // The step's region in `segment` (its pieces as for Slices), written on the first call that
  // finds room and kept while this object lives (the window, or a consumer's unacknowledged
  // steps, keep the step); nullptr when the segment has no room now (a later call tries
  // again). A step is written into one job segment at most once.
  std::shared_ptr<const JobShmRegion> JobRegion(JobShmSegment& segment,
                                                const std::vector<Tensor>* pieces,
                                                size_t num_pieces) const ABSL_LOCKS_EXCLUDED(mu_);
  // Bytes copied into this object's buffers so far (both forms): what it adds to the step's
  // memory.
  size_t copied_bytes() const ABSL_LOCKS_EXCLUDED(mu_);
  // Times a form was built (tests: one per form however many streams sent the step).
  int builds() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  mutable bool built_[2] ABSL_GUARDED_BY(mu_) = {false, false};
  mutable std::vector<grpc::Slice> slices_[2];  // written once under mu_, before built_ is set
  mutable size_t copied_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  mutable int builds_ ABSL_GUARDED_BY(mu_) = 0;
  mutable std::shared_ptr<const JobShmRegion> job_region_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice

#endif  // SLUICE_CORE_RPC_SHARED_STEP_PAYLOAD_H_
