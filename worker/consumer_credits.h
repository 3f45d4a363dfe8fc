// ConsumerCredits: the consumer's side of one StreamSteps call (grpc_worker_service.h) as the
// sending loop sees it: the credits its CreditGrants have given, whether it has half-closed (or
// gone away), and the error of a malformed message. ReadFrom() runs on the call's reader
// thread; the other methods on the sending thread. Thread-safe.
//
//   ConsumerCredits credits(request.initial_credits());
//   std::thread reader([&] { credits.ReadFrom(stream); });
//   ASSIGN_OR_RETURN(int64_t n, credits.Wait(context, poll));   // n > 0
//   ... send up to n steps ...; credits.Spend(sent);
//   credits.WaitForClose(context, grace, poll); reader.join();
#ifndef SLUICE_WORKER_CONSUMER_CREDITS_H_
#define SLUICE_WORKER_CONSUMER_CREDITS_H_

#include <cstdint>

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

  // Negative initial credits count as 0.
  explicit ConsumerCredits(int64_t initial_credits);

  // Reads the consumer's CreditGrants until it half-closes, the call ends or a message is not a
  // CreditGrant (then Wait() returns INVALID_ARGUMENT "StreamSteps: ..."). Negative grants count
  // as 0. Returns when the consumer's side is closed.
  void ReadFrom(Stream* stream);

  // Blocks until there are credits, checking the call every `poll_interval`. The credits
  // available (> 0); the malformed-message error; CANCELLED "StreamSteps: the consumer went
  // away" when it half-closed or the call was cancelled.
  absl::StatusOr<int64_t> Wait(grpc::ServerContext* context, absl::Duration poll_interval);

  // Takes `steps` credits for a frame being sent; returns the credits left.
  int64_t Spend(int64_t steps);

  // After the last frame: waits up to `grace` for the consumer to half-close, checking the call
  // every `poll_interval`. Returns whether its side is closed.
  bool WaitForClose(grpc::ServerContext* context, absl::Duration grace,
                    absl::Duration poll_interval);

  // Whether the consumer's side is closed (half-closed, gone, or a malformed message).
  bool closed();
  // Whether it half-closed on its own: closed, no malformed message, the call not cancelled.
  bool ClosedCleanly(grpc::ServerContext* context);

 private:
  absl::Mutex mu_;
  absl::CondVar cv_;
  int64_t credits_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;  // the consumer half-closed or went away
  absl::Status error_ ABSL_GUARDED_BY(mu_);   // a malformed consumer message
};

}  // namespace sluice

#endif  // SLUICE_WORKER_CONSUMER_CREDITS_H_
