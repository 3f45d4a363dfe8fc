#include "worker/consumer_credits.h"

#include <algorithm>
#include <limits>

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
  if (m.credit().bytes() < 0 || m.credit().received_steps() < 0) {
    // A consumer never sends these: refused, rather than read as 0 and ignored.
    error_ = absl::InvalidArgumentError(absl::StrCat(
        "StreamSteps: a CreditGrant of ", m.credit().bytes(), " bytes with received_steps ",
        m.credit().received_steps(), ": neither may be negative"));
    closed_ = true;
    return error_;
  }
  if (m.credit().job_shm_released_size() > kMaxJobShmReleasesPerGrant) {
    error_ = absl::InvalidArgumentError(absl::StrCat(
        "StreamSteps: a CreditGrant releasing ", m.credit().job_shm_released_size(),
        " job segment regions (at most ", kMaxJobShmReleasesPerGrant, ")"));
    closed_ = true;
    return error_;
  }
  *received_steps = m.credit().received_steps();
  shm_ready_ = shm_ready_ || m.credit().shm_ready();
  shm_declined_ = shm_declined_ || m.credit().shm_declined();
  shm_released_ = m.credit().shm_released();
  job_shm_mapped_ = job_shm_mapped_ || m.credit().job_shm_mapped();
  job_shm_released_.assign(m.credit().job_shm_released().begin(),
                           m.credit().job_shm_released().end());
  bulk_ready_ = bulk_ready_ || m.credit().bulk_ready();
  bulk_declined_ = bulk_declined_ || m.credit().bulk_declined();
  credits_ = SaturatingAdd(credits_, m.credit().bytes());
  return absl::OkStatus();
}

bool ConsumerCredits::HasCredit(int64_t need) const {
  return credits_ >= std::clamp<int64_t>(need, 1, CreditForAnyStep(window_));
}

int64_t ConsumerCredits::Spend(int64_t bytes) {
  credits_ = SaturatingAdd(credits_, -std::max<int64_t>(bytes, 0));
  return credits_;
}

int64_t ConsumerCredits::SaturatingAdd(int64_t a, int64_t b) {
  int64_t sum = 0;
  if (!__builtin_add_overflow(a, b, &sum)) return sum;
  return b > 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
}

}  // namespace sluice
