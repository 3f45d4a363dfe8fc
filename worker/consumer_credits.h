// ConsumerCredits: the consumer's side of one StreamSteps call (grpc_worker_service.h) as the
// sending loop sees it: the byte credit its CreditGrants have given (proto/worker.proto:
// a step costs StepCreditBytes), whether it has half-closed (or gone away), and the error of a
// malformed message. ReadFrom() runs on the call's reader thread; the other methods on the
// sending thread. Thread-safe.
//
//   ConsumerCredits credits(request.initial_credit_bytes(), request.window_bytes());
//   std::thread reader([&] { credits.ReadFrom(stream); });
//   ASSIGN_OR_RETURN(int64_t n, credits.Wait(context, poll, 1));   // n >= 1 byte
//   ... send steps whose costs fit n (or one step when n >= window()) ...; credits.Spend(cost);
//   credits.WaitForClose(context, grace, poll); reader.join();
#ifndef SLUICE_WORKER_CONSUMER_CREDITS_H_
#define SLUICE_WORKER_CONSUMER_CREDITS_H_

#include <cstdint>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/sync_stream.h"

namespace sluice {

class ConsumerCredits {
 public:
  using Stream = grpc::ServerReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>;

  // Negative initial credit counts as 0; a window below 1 byte as 1.
  ConsumerCredits(int64_t initial_credit_bytes, int64_t window_bytes);

  // Reads the consumer's CreditGrants until it half-closes, the call ends or a message is not a
  // CreditGrant (then Wait() returns INVALID_ARGUMENT "StreamSteps: ..."). Negative grants count
  // as 0. Returns when the consumer's side is closed.
  // `on_received` (may be empty) gets every grant's received_steps when positive (independent
  // reads' acknowledgements), on the reading thread.
  void ReadFrom(Stream* stream, const std::function<void(int64_t)>& on_received = nullptr);

  // Blocks until the credit is at least `need` bytes (clamped to [1, CreditForAnyStep(window)]:
  // a step of any cost may be sent from there), checking the
  // call every `poll_interval`. The credit available; the malformed-message error; CANCELLED
  // "StreamSteps: the consumer went away" when it half-closed or the call was cancelled.
  absl::StatusOr<int64_t> Wait(grpc::ServerContext* context, absl::Duration poll_interval,
                               int64_t need);

  // Takes `bytes` of credit for a frame being sent; returns the credit left (negative after a
  // step larger than the credit, sent because the credit was CreditForAnyStep(window)).
  int64_t Spend(int64_t bytes);

  int64_t window() const { return window_; }

  // After the last frame: waits up to `grace` for the consumer to half-close, checking the call
  // every `poll_interval`. Returns whether its side is closed.
  bool WaitForClose(grpc::ServerContext* context, absl::Duration grace,
                    absl::Duration poll_interval);

  // Whether the consumer's side is closed (half-closed, gone, or a malformed message).
  bool closed();
  // Whether it half-closed on its own: closed, no malformed message, the call not cancelled.
  bool ClosedCleanly(grpc::ServerContext* context);

 private:
  const int64_t window_;
  absl::Mutex mu_;
  absl::CondVar cv_;
  int64_t credits_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;  // the consumer half-closed or went away
  absl::Status error_ ABSL_GUARDED_BY(mu_);   // a malformed consumer message
};

}  // namespace sluice

#endif  // SLUICE_WORKER_CONSUMER_CREDITS_H_
