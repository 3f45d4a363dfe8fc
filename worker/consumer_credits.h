// ConsumerCredits: the consumer's side of one StreamSteps call (grpc_worker_service.h) as the
// sending side sees it: the byte credit its CreditGrants have given (proto/worker.proto: a step
// costs StepCreditBytes), whether it has half-closed (or gone away), and the error of a
// malformed message. Non-blocking: the stream feeds it each message it reads (OnMessage) and the
// end of its reads (OnClosed), and asks it whether the credit suffices (HasCredit).
//
//   ConsumerCredits credits(request.initial_credit_bytes(), request.window_bytes());
//   // on each message read:     credits.OnMessage(bb, &received_steps);
//   // when reads end:           credits.OnClosed();
//   if (credits.closed()) ... end the stream (credits.error() or CANCELLED) ...
//   if (credits.HasCredit(need)) ... send steps whose costs fit credit() (or one step when
//   credit() >= CreditForAnyStep(window())) ...; credits.Spend(cost);
//
// Not thread-safe: the stream serializes its calls (under its own lock).
#ifndef SLUICE_WORKER_CONSUMER_CREDITS_H_
#define SLUICE_WORKER_CONSUMER_CREDITS_H_

#include <cstdint>
#include <vector>
#include <utility>

#include "absl/status/status.h"
#include "grpcpp/support/byte_buffer.h"

namespace sluice {

class ConsumerCredits {
 public:
  // Negative initial credit counts as 0; a window below 1 byte as 1.
  ConsumerCredits(int64_t initial_credit_bytes, int64_t window_bytes);

  // One message the consumer sent after its StreamRequest. A CreditGrant adds its bytes (the
  // credit saturates at INT64_MAX: no grant, however large, wraps it) and sets *received_steps
  // to its received_steps (acknowledgements; 0 when absent). A grant with negative bytes or
  // received_steps, and anything but a CreditGrant, is INVALID_ARGUMENT "StreamSteps: ..." and
  // closes the consumer's side (error() keeps it).
  absl::Status OnMessage(const grpc::ByteBuffer& message, int64_t* received_steps);
  // Refuses what the consumer sent (`error`: INVALID_ARGUMENT "StreamSteps: ..."): closes its
  // side as a malformed message does.
  void Refuse(absl::Status error) {
    error_ = std::move(error);
    closed_ = true;
  }
  // Shared memory (core/rpc/shm_ring.h): whether a grant said the consumer mapped the segment,
  // or that it could not (each stays set once a grant said so), and the last grant's
  // shm_released.
  bool shm_ready() const { return shm_ready_; }
  bool shm_declined() const { return shm_declined_; }
  uint64_t shm_released() const { return shm_released_; }
  // The job segment (core/rpc/job_shm_segment.h): whether a grant said the consumer mapped it,
  // and the offsets the last grant released.
  // A grant releasing more than kMaxJobShmReleasesPerGrant is INVALID_ARGUMENT.
  static constexpr int kMaxJobShmReleasesPerGrant = 4096;
  bool job_shm_mapped() const { return job_shm_mapped_; }
  const std::vector<uint64_t>& job_shm_released() const { return job_shm_released_; }
  // The bulk data channel (core/rpc/bulk_channel.h): whether a grant said the socket is up.
  bool bulk_ready() const { return bulk_ready_; }
  // Whether a grant answered the bulk offer (ready or declined).
  bool bulk_answered() const { return bulk_ready_ || bulk_declined_; }
  // The consumer's side closed: it half-closed, or the call ended.
  void OnClosed() { closed_ = true; }

  // Whether the credit is at least `need` bytes, clamped to [1, CreditForAnyStep(window)] (a
  // step of any cost may be sent from there).
  bool HasCredit(int64_t need) const;
  int64_t credit() const { return credits_; }
  // Takes `bytes` of credit for a frame being sent; returns the credit left (negative after a
  // step larger than the credit, sent because the credit was CreditForAnyStep(window)).
  int64_t Spend(int64_t bytes);

  int64_t window() const { return window_; }
  // a + b, clamped to [INT64_MIN, INT64_MAX].
  static int64_t SaturatingAdd(int64_t a, int64_t b);
  // Whether the consumer's side is closed (half-closed, gone, or a malformed message).
  bool closed() const { return closed_; }
  // The malformed message's error; OK otherwise.
  const absl::Status& error() const { return error_; }

 private:
  const int64_t window_;
  int64_t credits_ = 0;
  bool closed_ = false;
  absl::Status error_;
  bool shm_ready_ = false;
  bool shm_declined_ = false;
  uint64_t shm_released_ = 0;
  bool job_shm_mapped_ = false;
  std::vector<uint64_t> job_shm_released_;
  bool bulk_ready_ = false;
  bool bulk_declined_ = false;
};

}  // namespace sluice

#endif  // SLUICE_WORKER_CONSUMER_CREDITS_H_
