#include "core/io/mapping_truncation_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <mutex>

namespace sluice {
namespace {

// A guarded range; the signal handler reads it, so everything is a lock-free atomic.
struct Slot {
  std::atomic<bool> taken{false};
  std::atomic<uintptr_t> begin{0};
  std::atomic<uintptr_t> end{0};  // begin == end: empty, matches nothing
  std::atomic<bool> truncated{false};
};
static_assert(std::atomic<uintptr_t>::is_always_lock_free);
static_assert(std::atomic<bool>::is_always_lock_free);

Slot g_slots[kMaxGuardedRanges];
struct sigaction g_previous;  // written once, before the handler is installed

void OnSigbus(int, siginfo_t* info, void*) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(info->si_addr);
  for (Slot& s : g_slots) {
    if (addr < s.begin.load(std::memory_order_acquire) ||
        addr >= s.end.load(std::memory_order_acquire)) {
      continue;
    }
    const uintptr_t page_size = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    void* page = reinterpret_cast<void*>(addr & ~(page_size - 1));
    // mmap is a plain system call here (not on POSIX's async-signal-safe list, but it takes no
    // user-space lock); MAP_FIXED replaces the lost file page with zeros in place.
    if (::mmap(page, page_size, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) ==
        MAP_FAILED) {
      break;  // cannot repair: die as without the guard
    }
    s.truncated.store(true, std::memory_order_release);
    return;  // the access is retried and reads zeros
  }
  // Not ours: what was there before handles it when the access faults again.
  ::sigaction(SIGBUS, &g_previous, nullptr);
}

bool InstallHandler() {
  static const bool installed = [] {
    struct sigaction action = {};
    action.sa_sigaction = OnSigbus;
    action.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    return ::sigaction(SIGBUS, &action, &g_previous) == 0;
  }();
  return installed;
}

}  // namespace

MappingTruncationGuard::MappingTruncationGuard(absl::string_view range) {
  if (range.empty() || !InstallHandler()) return;
  for (int i = 0; i < kMaxGuardedRanges; ++i) {
    bool expected = false;
    if (!g_slots[i].taken.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) {
      continue;
    }
    Slot& s = g_slots[i];
    s.truncated.store(false, std::memory_order_relaxed);
    const uintptr_t begin = reinterpret_cast<uintptr_t>(range.data());
    s.end.store(0, std::memory_order_relaxed);
    s.begin.store(begin, std::memory_order_release);
    s.end.store(begin + range.size(), std::memory_order_release);
    slot_ = i;
    return;
  }
}

MappingTruncationGuard::~MappingTruncationGuard() {
  if (slot_ < 0) return;
  Slot& s = g_slots[slot_];
  s.end.store(0, std::memory_order_release);
  s.begin.store(0, std::memory_order_release);
  s.taken.store(false, std::memory_order_release);
}

bool MappingTruncationGuard::truncated() const {
  return slot_ >= 0 && g_slots[slot_].truncated.load(std::memory_order_acquire);
}

}  // namespace sluice
