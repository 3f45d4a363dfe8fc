#include "worker/consumer_credits.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/rpc/step_frame.h"

namespace sluice {

ConsumerCredits::ConsumerCredits(int64_t initial_credit_bytes, int64_t window_bytes)
    : window_(std::max<int64_t>(window_bytes, 1)),
      credits_(std::max<int64_t>(initial_credit_bytes, 0)) {}

absl::Status ConsumerCredits::OnMessage(const grpc::ByteBuffer& message,
                                        int64_t* received_steps) {
  *received_steps = 0;
  proto::ConsumerMessage m;
  absl::Status s = DecodeConsumerMessage(message, &m);
  if (!s.ok()) s = absl::InvalidArgumentError(absl::StrCat("StreamSteps: ", s.message()));
  if (s.ok() && !m.has_credit()) {
    s = absl::InvalidArgumentError("StreamSteps: only CreditGrants may follow the StreamRequest");
  }
  if (!s.ok()) {
    error_ = s;
    closed_ = true;
    return s;
  }
  *received_steps = std::max<int64_t>(m.credit().received_steps(), 0);
  credits_ += std::max<int64_t>(m.credit().bytes(), 0);
  return absl::OkStatus();
}

bool ConsumerCredits::HasCredit(int64_t need) const {
  return credits_ >= std::clamp<int64_t>(need, 1, CreditForAnyStep(window_));
}

int64_t ConsumerCredits::Spend(int64_t bytes) {
  credits_ -= bytes;
  return credits_;
}

}  // namespace sluice
