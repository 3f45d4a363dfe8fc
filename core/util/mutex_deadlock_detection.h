// The lock-order checks of Abseil's mutexes, off in the processes Sluice ships.
//
// Debian's Abseil is built without NDEBUG, so every absl::Mutex (gRPC's included) keeps a
// global lock-order graph: a graph update on each lock and on each mutex's destruction, under
// one global lock. It is a debugging aid that production pays for on every step and every
// request: 11-13% of sluice-worker's CPU at 1 KiB steps (bench/RESULTS.md, kib1m), and 16.7 ->
// 14.4 us of the coordinator's CPU per heartbeat (bench/RESULTS.md, coordinator_bench). The
// servers' main()s, sluicectl, the Python module and the benchmarks that measure them call
// SkipMutexDeadlockDetection() once; the C++ tests, which run the servers in-process, keep the
// checks on, so a lock-order inversion still fails there.
//
// Thread safety: call early in main() (or at module import), before threads lock mutexes.
#ifndef SLUICE_CORE_UTIL_MUTEX_DEADLOCK_DETECTION_H_
#define SLUICE_CORE_UTIL_MUTEX_DEADLOCK_DETECTION_H_

namespace sluice {

// absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore), for the reason above.
void SkipMutexDeadlockDetection();

}  // namespace sluice

#endif  // SLUICE_CORE_UTIL_MUTEX_DEADLOCK_DETECTION_H_
