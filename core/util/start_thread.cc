#include "core/util/start_thread.h"

#include <atomic>
#include <string>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace sluice {
namespace {

// Read without the lock first: a process that no test armed pays one atomic load per start.
std::atomic<int> starts_to_fail{0};
absl::Mutex fault_mu;
std::string* fail_what ABSL_GUARDED_BY(fault_mu) = new std::string;

bool TakeInjectedFailure(absl::string_view what) {
  if (starts_to_fail.load(std::memory_order_relaxed) == 0) return false;
  absl::MutexLock lock(&fault_mu);
  const int left = starts_to_fail.load();
  if (left == 0 || !absl::StrContains(what, *fail_what)) return false;
  starts_to_fail.store(left - 1);
  return true;
}

}  // namespace

absl::StatusOr<std::thread> StartThread(absl::string_view what, std::function<void()> fn) {
  std::error_code error = std::make_error_code(std::errc::resource_unavailable_try_again);
  if (!TakeInjectedFailure(what)) {
    try {
      return std::thread(std::move(fn));
    } catch (const std::system_error& e) {
      error = e.code();
    }
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("cannot start a thread for ", what, ": ", error.message(),
                   " (the process's memory or thread limits: RLIMIT_DATA, RLIMIT_NPROC)"));
}

void TEST_FailThreadStarts(int n, absl::string_view what_contains) {
  absl::MutexLock lock(&fault_mu);
  *fail_what = std::string(what_contains);
  starts_to_fail.store(n > 0 ? n : 0);
}

int TEST_ThreadStartsLeftToFail() { return starts_to_fail.load(); }

}  // namespace sluice
