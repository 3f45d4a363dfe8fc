#include "worker/consumer_credits.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/rpc/step_frame.h"

namespace sluice {

ConsumerCredits::ConsumerCredits(int64_t initial_credit_bytes, int64_t window_bytes)
    : window_(std::max<int64_t>(window_bytes, 1)),
      credits_(std::max<int64_t>(initial_credit_bytes, 0)) {}

void ConsumerCredits::ReadFrom(Stream* stream,
                               const std::function<void(int64_t)>& on_received) {
  grpc::ByteBuffer bb;
  while (stream->Read(&bb)) {
    proto::ConsumerMessage m;
    absl::Status s = DecodeConsumerMessage(bb, &m);
    if (!s.ok()) s = absl::InvalidArgumentError(absl::StrCat("StreamSteps: ", s.message()));
    if (s.ok() && !m.has_credit()) {
      s = absl::InvalidArgumentError("StreamSteps: only CreditGrants may follow the StreamRequest");
    }
    if (s.ok() && on_received && m.credit().received_steps() > 0) {
      on_received(m.credit().received_steps());
    }
    absl::MutexLock lock(&mu_);
    if (!s.ok()) {
      error_ = s;
      closed_ = true;
      cv_.SignalAll();
      break;
    }
    credits_ += std::max<int64_t>(m.credit().bytes(), 0);
    cv_.SignalAll();
  }
  absl::MutexLock lock(&mu_);
  closed_ = true;
  cv_.SignalAll();
}

absl::StatusOr<int64_t> ConsumerCredits::Wait(grpc::ServerContext* context,
                                              absl::Duration poll_interval, int64_t need) {
  need = std::clamp<int64_t>(need, 1, CreditForAnyStep(window_));
  absl::MutexLock lock(&mu_);
  while (credits_ < need && !closed_ && !context->IsCancelled()) {
    cv_.WaitWithTimeout(&mu_, poll_interval);
  }
  if (!error_.ok()) return error_;
  if (closed_ || context->IsCancelled()) {
    return absl::CancelledError("StreamSteps: the consumer went away");
  }
  return credits_;
}

int64_t ConsumerCredits::Spend(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  credits_ -= bytes;
  return credits_;
}

bool ConsumerCredits::WaitForClose(grpc::ServerContext* context, absl::Duration grace,
                                   absl::Duration poll_interval) {
  absl::MutexLock lock(&mu_);
  const absl::Time deadline = absl::Now() + grace;
  while (!closed_ && !context->IsCancelled() && absl::Now() < deadline) {
    cv_.WaitWithDeadline(&mu_, std::min(deadline, absl::Now() + poll_interval));
  }
  return closed_;
}

bool ConsumerCredits::closed() {
  absl::MutexLock lock(&mu_);
  return closed_;
}

bool ConsumerCredits::ClosedCleanly(grpc::ServerContext* context) {
  absl::MutexLock lock(&mu_);
  return closed_ && error_.ok() && !context->IsCancelled();
}

}  // namespace sluice
