// StartThread: starts a std::thread, returning RESOURCE_EXHAUSTED naming what could not start
// instead of throwing std::system_error when the system refuses one (EAGAIN: no memory for its
// stack under RLIMIT_DATA or --memory_limit's pressure, RLIMIT_NPROC, the kernel's thread
// limit). An uncaught std::system_error would terminate the process; a thread started on behalf
// of one task, stream or pipeline must fail that one thing, and the server goes on.
//
//   absl::StatusOr<std::thread> t = StartThread("the bulk sender of task 7", [this] { Loop(); });
//   if (!t.ok()) return t.status();  // RESOURCE_EXHAUSTED: cannot start a thread for the ...
//
// Every thread Sluice starts goes through here (threads started once at process start-up
// report the same error from their server's Create, which ends the start). Thread-safe.
#ifndef SLUICE_CORE_UTIL_START_THREAD_H_
#define SLUICE_CORE_UTIL_START_THREAD_H_

#include <functional>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sluice {

// A thread running `fn`; RESOURCE_EXHAUSTED "cannot start a thread for <what>: <reason>" when
// the system refuses it (`fn` is then dropped without running).
absl::StatusOr<std::thread> StartThread(absl::string_view what, std::function<void()> fn);

// Fault tests: the next `n` StartThread calls of the process whose `what` contains
// `what_contains` (any: empty) fail as if the system refused (EAGAIN). 0 clears what is left.
void TEST_FailThreadStarts(int n, absl::string_view what_contains = "");
// How many of those are left (a test's check that the path it drives tried to start one).
int TEST_ThreadStartsLeftToFail();

}  // namespace sluice

#endif  // SLUICE_CORE_UTIL_START_THREAD_H_
