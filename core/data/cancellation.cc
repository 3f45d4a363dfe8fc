#include "core/data/cancellation.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace sluice {

namespace {
thread_local const std::shared_ptr<CancellationToken>* g_current = nullptr;
}  // namespace

const std::shared_ptr<CancellationToken>& CurrentCancellation() {
  static const std::shared_ptr<CancellationToken> kNone;
  return g_current != nullptr ? *g_current : kNone;
}

ScopedCancellationContext::ScopedCancellationContext(
    const std::shared_ptr<CancellationToken>& token)
    : previous_(g_current) {
  g_current = &token;
}

ScopedCancellationContext::~ScopedCancellationContext() { g_current = previous_; }

void CancellationToken::Cancel(absl::string_view reason) {
  absl::MutexLock lock(&mu_);
  if (cancelled_.load(std::memory_order_relaxed)) return;
  reason_ = std::string(reason);
  cancelled_.store(true, std::memory_order_release);
  for (auto& [id, wake] : wakes_) wake();
}

absl::Status CancellationToken::Check(absl::string_view what) const {
  if (!cancelled()) return absl::OkStatus();
  return absl::CancelledError(absl::StrCat(what, ": cancelled: ", reason_));
}

int64_t CancellationToken::OnCancel(std::function<void()> wake) {
  absl::MutexLock lock(&mu_);
  const int64_t id = next_id_++;
  if (cancelled_.load(std::memory_order_relaxed)) {
    wake();
  } else {
    wakes_.emplace(id, std::move(wake));
  }
  return id;
}

void CancellationToken::Unregister(int64_t id) {
  absl::MutexLock lock(&mu_);
  wakes_.erase(id);
}

}  // namespace sluice
