// ThreadSanitizer support for the system's (uninstrumented) Abseil, linked into every executable
// of a -DSLUICE_SANITIZE=thread build and nothing else.
//
// Why: absl::Mutex, CondVar, Notification and BlockingCounter are compiled into Debian's
// libabsl_synchronization.so without -fsanitize=thread, so TSan cannot see the happens-before
// edges they create (they synchronise through plain atomics and futexes). Every
// ABSL_GUARDED_BY field read under its mutex would then be reported as a data race, and no
// lock-order inversion could be found. Abseil built with TSan annotates itself
// (ABSL_TSAN_MUTEX_* in mutex.cc); this file adds the same annotations from outside.
//
// How: it defines the out-of-line absl synchronization functions in the executable. The dynamic
// linker binds every call to them (ours, gRPC's and libabsl's own, which go through its PLT) to
// these definitions, which tell TSan what happens (__tsan_mutex_pre_lock / post_lock /
// pre_unlock / post_unlock, __tsan_release / __tsan_acquire) and call the library's real
// function, found with dlsym(RTLD_NEXT). Between a pre_ and its post_ annotation TSan ignores
// memory accesses, as it does inside an instrumented absl::Mutex: waiters' Conditions are
// evaluated there, possibly by the unlocking thread.
//
// Contract: only for the Abseil ABI of the headers it is compiled against (an inline namespace
// is required); a missing symbol aborts at the first call with its name.
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "absl/base/options.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

static_assert(ABSL_OPTION_USE_INLINE_NAMESPACE == 1,
              "tsan_absl_sync.cc spells Abseil's mangled names with its inline namespace");

namespace {

#define SLUICE_TSAN_STR2(x) #x
#define SLUICE_TSAN_STR(x) SLUICE_TSAN_STR2(x)

// The real function `suffix` of libabsl: its mangled name is "_ZN4absl<len><ns>" + suffix
// ("_ZNK..." for const members).
template <typename Fn>
Fn Real(const char* suffix, bool is_const = false) {
  const std::string ns = SLUICE_TSAN_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  const std::string name = std::string(is_const ? "_ZNK4absl" : "_ZN4absl") +
                           std::to_string(ns.size()) + ns + suffix;
  void* fn = dlsym(RTLD_NEXT, name.c_str());
  if (fn == nullptr) {
    std::fprintf(stderr, "tsan_absl_sync: no %s in the loaded Abseil\n", name.c_str());
    std::abort();
  }
  return reinterpret_cast<Fn>(fn);
}

// The writer bit of absl::Mutex::mu_ (mutex.cc's kMuWriter).
constexpr intptr_t kMuWriter = 0x0008L;

constexpr unsigned kWrite = 0;
constexpr unsigned kRead = __tsan_mutex_read_lock;

// Await and CondVar::Wait work for a shared hold as well as an exclusive one: Mutex::mu_'s writer bit
// tells which (CondVar is a friend of Mutex).
unsigned HowHeld(const std::atomic<intptr_t>& mu) {
  return (mu.load(std::memory_order_relaxed) & kMuWriter) ? kWrite : kRead;
}

// Calls between the functions below (LockWhenWithTimeout calls LockWhenWithDeadline, through
// the PLT, so through this file) must be annotated once, by the outermost one.
thread_local int t_depth = 0;

template <typename Call>
auto Unannotated(Call call) {
  ++t_depth;
  if constexpr (std::is_void_v<decltype(call())>) {
    call();
    --t_depth;
  } else {
    auto result = call();
    --t_depth;
    return result;
  }
}

// `call` takes mu (how: 0 or __tsan_mutex_read_lock) and holds it on return.
template <typename Call>
auto AsLock(void* mu, unsigned how, Call call) {
  if (t_depth > 0) return call();
  __tsan_mutex_pre_lock(mu, how);
  if constexpr (std::is_void_v<decltype(call())>) {
    Unannotated(call);
    __tsan_mutex_post_lock(mu, how, 0);
  } else {
    auto result = Unannotated(call);
    __tsan_mutex_post_lock(mu, how, 0);
    return result;
  }
}

// `call` releases the held mu.
template <typename Call>
void AsUnlock(void* mu, unsigned how, Call call) {
  if (t_depth > 0) return call();
  __tsan_mutex_pre_unlock(mu, how);
  Unannotated(call);
  __tsan_mutex_post_unlock(mu, how);
}

// `call` releases the held mu while it waits and holds it again on return (Await, CondVar::Wait):
// annotated as an unlock, then a lock around the call (whose Condition evaluations TSan then
// ignores).
template <typename Call>
auto AsWait(void* mu, unsigned how, Call call) {
  if (t_depth > 0) return call();
  __tsan_mutex_pre_unlock(mu, how);
  __tsan_mutex_post_unlock(mu, how);
  return AsLock(mu, how, call);
}

// `call` tries to take mu and says whether it did.
template <typename Call>
bool AsTryLock(void* mu, unsigned how, Call call) {
  if (t_depth > 0) return call();
  __tsan_mutex_pre_lock(mu, how | __tsan_mutex_try_lock);
  const bool locked = Unannotated(call);
  __tsan_mutex_post_lock(mu, how | (locked ? __tsan_mutex_try_lock : __tsan_mutex_try_lock_failed),
                         0);
  return locked;
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

using MutexFn = void (*)(Mutex*);
using MutexTryFn = bool (*)(Mutex*);
using MutexCondFn = void (*)(Mutex*, const Condition&);
using MutexCondTimeoutFn = bool (*)(Mutex*, const Condition&, Duration);
using MutexCondDeadlineFn = bool (*)(Mutex*, const Condition&, Time);

Mutex::~Mutex() {
  static const auto real = Real<MutexFn>("5MutexD1Ev");
  if (t_depth == 0) __tsan_mutex_destroy(this, __tsan_mutex_not_static);
  real(this);
}

void Mutex::Lock() {
  static const auto real = Real<MutexFn>("5Mutex4LockEv");
  AsLock(this, kWrite, [&] { real(this); });
}

void Mutex::ReaderLock() {
  static const auto real = Real<MutexFn>("5Mutex10ReaderLockEv");
  AsLock(this, kRead, [&] { real(this); });
}

bool Mutex::TryLock() {
  static const auto real = Real<MutexTryFn>("5Mutex7TryLockEv");
  return AsTryLock(this, kWrite, [&] { return real(this); });
}

bool Mutex::ReaderTryLock() {
  static const auto real = Real<MutexTryFn>("5Mutex13ReaderTryLockEv");
  return AsTryLock(this, kRead, [&] { return real(this); });
}

void Mutex::Unlock() {
  static const auto real = Real<MutexFn>("5Mutex6UnlockEv");
  AsUnlock(this, kWrite, [&] { real(this); });
}

void Mutex::ReaderUnlock() {
  static const auto real = Real<MutexFn>("5Mutex12ReaderUnlockEv");
  AsUnlock(this, kRead, [&] { real(this); });
}

void Mutex::LockWhen(const Condition& cond) {
  static const auto real = Real<MutexCondFn>("5Mutex8LockWhenERKNS0_9ConditionE");
  AsLock(this, kWrite, [&] { real(this, cond); });
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  static const auto real = Real<MutexCondFn>("5Mutex14ReaderLockWhenERKNS0_9ConditionE");
  AsLock(this, kRead, [&] { real(this, cond); });
}

// The *WithTimeout / *WithDeadline forms return whether the condition held; the mutex is held on
// return either way.
bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  static const auto real = Real<MutexCondTimeoutFn>(
      "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  return AsLock(this, kWrite, [&] { return real(this, cond, timeout); });
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  static const auto real = Real<MutexCondDeadlineFn>(
      "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  return AsLock(this, kWrite, [&] { return real(this, cond, deadline); });
}

bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond, Duration timeout) {
  static const auto real = Real<MutexCondTimeoutFn>(
      "5Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  return AsLock(this, kRead, [&] { return real(this, cond, timeout); });
}

bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, Time deadline) {
  static const auto real = Real<MutexCondDeadlineFn>(
      "5Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  return AsLock(this, kRead, [&] { return real(this, cond, deadline); });
}

void Mutex::Await(const Condition& cond) {
  static const auto real = Real<MutexCondFn>("5Mutex5AwaitERKNS0_9ConditionE");
  AsWait(this, HowHeld(mu_), [&] { real(this, cond); });
}

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  static const auto real = Real<MutexCondTimeoutFn>(
      "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  return AsWait(this, HowHeld(mu_), [&] { return real(this, cond, timeout); });
}

bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  static const auto real = Real<MutexCondDeadlineFn>(
      "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  return AsWait(this, HowHeld(mu_), [&] { return real(this, cond, deadline); });
}

using CondVarWaitFn = void (*)(CondVar*, Mutex*);
using CondVarTimeoutFn = bool (*)(CondVar*, Mutex*, Duration);
using CondVarDeadlineFn = bool (*)(CondVar*, Mutex*, Time);

void CondVar::Wait(Mutex* mu) {
  static const auto real = Real<CondVarWaitFn>("7CondVar4WaitEPNS0_5MutexE");
  AsWait(mu, HowHeld(mu->mu_), [&] { real(this, mu); });
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  static const auto real =
      Real<CondVarTimeoutFn>("7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  return AsWait(mu, HowHeld(mu->mu_), [&] { return real(this, mu, timeout); });
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  static const auto real =
      Real<CondVarDeadlineFn>("7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  return AsWait(mu, HowHeld(mu->mu_), [&] { return real(this, mu, deadline); });
}

// Notification: WaitForNotification returns without locking once the (uninstrumented) flag is
// set, so Notify releases and every returning wait acquires on the Notification itself.
using NotifyFn = void (*)(Notification*);
using WaitFn = void (*)(const Notification*);
using WaitTimeoutFn = bool (*)(const Notification*, Duration);
using WaitDeadlineFn = bool (*)(const Notification*, Time);

void Notification::Notify() {
  static const auto real = Real<NotifyFn>("12Notification6NotifyEv");
  __tsan_release(this);
  real(this);
}

void Notification::WaitForNotification() const {
  static const auto real = Real<WaitFn>("12Notification19WaitForNotificationEv", true);
  real(this);
  __tsan_acquire(const_cast<Notification*>(this));
}

bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  static const auto real = Real<WaitTimeoutFn>(
      "12Notification30WaitForNotificationWithTimeoutENS0_8DurationE", true);
  const bool notified = real(this, timeout);
  if (notified) __tsan_acquire(const_cast<Notification*>(this));
  return notified;
}

bool Notification::WaitForNotificationWithDeadline(Time deadline) const {
  static const auto real = Real<WaitDeadlineFn>(
      "12Notification31WaitForNotificationWithDeadlineENS0_4TimeE", true);
  const bool notified = real(this, deadline);
  if (notified) __tsan_acquire(const_cast<Notification*>(this));
  return notified;
}

// BlockingCounter: only the last DecrementCount takes the lock, so each decrement releases and
// Wait acquires on the counter itself.
using DecrementFn = bool (*)(BlockingCounter*);
using CounterWaitFn = void (*)(BlockingCounter*);

bool BlockingCounter::DecrementCount() {
  static const auto real = Real<DecrementFn>("15BlockingCounter14DecrementCountEv");
  __tsan_release(this);
  return real(this);
}

void BlockingCounter::Wait() {
  static const auto real = Real<CounterWaitFn>("15BlockingCounter4WaitEv");
  real(this);
  __tsan_acquire(this);
}

ABSL_NAMESPACE_END
}  // namespace absl
