#include "core/data/ops/prefetch_iterator.h"

#include <algorithm>
#include <utility>

#include "core/data/op_iterator.h"
#include "core/util/status_context.h"
#include "core/util/thread_pool.h"

namespace sluice {

// Who pulls from the input: nobody, a job queued on the pool (which pulls when it starts,
// unless the caller took its turn: ticket), a pool thread, or the caller.
struct PrefetchIterator::State : std::enable_shared_from_this<State> {
  enum class Puller { kNone, kQueued, kPool, kCaller };

  State(std::unique_ptr<Iterator> in, int64_t size, std::string label, ThreadPool* p)
      : input(std::move(in)), buffer_size(size), pool(p), label(label), held(std::move(label)) {}

  std::unique_ptr<Iterator> input;  // used by the one puller
  const int64_t buffer_size;
  ThreadPool* const pool;
  const std::string label;  // the op's, for errors

  absl::Mutex mu;
  absl::CondVar changed;  // an element or the final status arrived, or a puller stopped
  std::deque<Element> queue ABSL_GUARDED_BY(mu);
  std::deque<int64_t> footprints ABSL_GUARDED_BY(mu);  // ElementOverhead of each queued one
  MemoryReservation held ABSL_GUARDED_BY(mu);          // their sum
  bool finished ABSL_GUARDED_BY(mu) = false;  // the input ended or failed
  absl::Status final_status ABSL_GUARDED_BY(mu);  // OK means end of sequence
  bool cancelled ABSL_GUARDED_BY(mu) = false;  // the iterator is being destroyed
  bool started ABSL_GUARDED_BY(mu) = false;
  Puller puller ABSL_GUARDED_BY(mu) = Puller::kNone;
  int64_t ticket ABSL_GUARDED_BY(mu) = 0;  // the queued job's; bumped when the caller takes over
  int64_t max_queued ABSL_GUARDED_BY(mu) = 0;

  bool WantsMore() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return !cancelled && !finished && static_cast<int64_t>(queue.size()) < buffer_size;
  }

  // Schedules the read-ahead job if nobody pulls and there is room.
  void ScheduleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (puller != Puller::kNone || !WantsMore()) return;
    puller = Puller::kQueued;
    pool->Schedule([self = shared_from_this(), t = ticket] { self->ReadAhead(t); });
  }

  // Pulls one element (mu released meanwhile) and queues it, or records the end or error.
  void PullOneLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    Element e;
    bool end = false;
    mu.Unlock();
    // On a pool thread: a std::bad_alloc would end the process.
    absl::Status s = CatchingBadAlloc(label, [&] { return input->GetNext(&e, &end); });
    const int64_t footprint = s.ok() && !end ? ElementOverhead(e) : 0;  // payload: allocator
    mu.Lock();
    if (s.ok() && !end) s = held.Grow(footprint);
    if (!s.ok() || end) {
      final_status = s;
      finished = true;
    } else {
      queue.push_back(std::move(e));
      footprints.push_back(footprint);
      max_queued = std::max<int64_t>(max_queued, static_cast<int64_t>(queue.size()));
    }
    changed.SignalAll();
  }

  // The pool's job: pulls until the queue is full, unless the caller took its turn.
  void ReadAhead(int64_t t) ABSL_LOCKS_EXCLUDED(mu) {
    absl::MutexLock lock(&mu);
    if (puller != Puller::kQueued || t != ticket) return;
    puller = Puller::kPool;
    while (WantsMore()) PullOneLocked();
    puller = Puller::kNone;
    changed.SignalAll();
  }
};

PrefetchIterator::PrefetchIterator(std::unique_ptr<Iterator> input, int64_t buffer_size,
                                   std::string label, ThreadPool* pool,
                                   std::shared_ptr<CancellationToken> cancellation)
    : cancellation_(std::move(cancellation)) {
  absl::StatusOr<ThreadPool*> resolved =
      pool != nullptr ? absl::StatusOr<ThreadPool*>(pool) : ProcessThreadPool();
  if (!resolved.ok()) pool_error_ = WithContext(label, resolved.status());
  state_ = std::make_shared<State>(std::move(input), std::max<int64_t>(buffer_size, 1),
                                   std::move(label), resolved.ok() ? *resolved : nullptr);
  if (cancellation_ != nullptr) {
    cancel_wake_ = std::make_unique<ScopedCancelWake>(cancellation_.get(), [s = state_.get()] {
      absl::MutexLock lock(&s->mu);
      s->changed.SignalAll();
    });
  }
}

PrefetchIterator::~PrefetchIterator() {
  cancel_wake_.reset();  // before s.mu is taken: a running wake-up takes it
  State& s = *state_;
  std::unique_ptr<Iterator> input;
  {
    absl::MutexLock lock(&s.mu);
    s.cancelled = true;
    // A queued job finds cancelled set and does nothing; a pulling one stops after its pull.
    while (s.puller == State::Puller::kPool) s.changed.Wait(&s.mu);
    input = std::move(s.input);  // nobody pulls any more
    s.held.Clear();
    s.footprints.clear();
    s.queue.clear();
  }
}

absl::Status PrefetchIterator::GetNext(Element* out, bool* end_of_sequence) {
  if (!pool_error_.ok()) return pool_error_;
  State& s = *state_;
  absl::MutexLock lock(&s.mu);
  if (!s.started) {
    s.started = true;
    s.ScheduleLocked();
  }
  while (true) {
    if (cancellation_ != nullptr && cancellation_->cancelled()) {
      // The pool's puller (if any) finds its input cancelled at its next pull; what it
      // queued is dropped with the iterator.
      return cancellation_->Check(s.label);
    }
    if (!s.queue.empty() || s.finished) break;
    if (s.puller == State::Puller::kPool) {
      s.changed.Wait(&s.mu);
      continue;
    }
    // The job is queued behind other work (or none is scheduled): pull it ourselves.
    if (s.puller == State::Puller::kQueued) ++s.ticket;
    s.puller = State::Puller::kCaller;
    s.PullOneLocked();
    s.puller = State::Puller::kNone;
  }
  if (!s.queue.empty()) {
    *out = std::move(s.queue.front());
    s.queue.pop_front();
    s.held.Shrink(s.footprints.front());
    s.footprints.pop_front();
    *end_of_sequence = false;
    // Room again: read on, as TF's prefetch keeps its buffer full. (While the caller is
    // faster than the input the job never ends; only a caller slower than the input costs a
    // pool hand-off per element, on the pool's side.)
    s.ScheduleLocked();
    return absl::OkStatus();
  }
  *end_of_sequence = s.final_status.ok();
  return s.final_status;
}

int64_t PrefetchIterator::max_queued() const {
  absl::MutexLock lock(&state_->mu);
  return state_->max_queued;
}

}  // namespace sluice
