#include "core/data/ops/interleave_iterator.h"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/data/memory_budget.h"
#include "core/data/op_iterator.h"
#include "core/data/op_registry.h"
#include "core/util/status_context.h"
#include "core/util/status_macros.h"
#include "core/util/thread_pool.h"

namespace sluice {
namespace {

// Inputs open in every interleave of the process together. Each holds a file, so a descriptor:
// a cycle_length that keeps opening inputs would otherwise spend the process's open-file limit,
// and then the server could not accept a connection or open a journal. The cap is a quarter of
// the soft RLIMIT_NOFILE (at least 64); reaching it fails the interleave that asks, naming it.
std::atomic<int64_t> g_open_inputs{0};

int64_t OpenInputLimit() {
  static const int64_t limit = [] {
    struct rlimit r {};
    if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return int64_t{1} << 20;
    return std::max<int64_t>(64, static_cast<int64_t>(r.rlim_cur) / 4);
  }();
  return limit;
}

// What a slot's next pull gave.
struct Pulled {
  enum class Kind { kElement, kElementError, kEnd, kError } kind;
  Element element;
  absl::Status status;
};

Pulled Pull(Iterator* it) {
  Pulled p{Pulled::Kind::kElement, {}, {}};
  bool end = false;
  // Perhaps on a pool thread, where a std::bad_alloc would end the process.
  absl::Status s = CatchingBadAlloc("interleave", [&] { return it->GetNext(&p.element, &end); });
  if (!s.ok()) {
    p.kind = IsElementError(s) ? Pulled::Kind::kElementError : Pulled::Kind::kError;
    p.status = std::move(s);
  } else if (end) {
    p.kind = Pulled::Kind::kEnd;
  }
  return p;
}

// Who pulls a parallel slot's input: nobody, a job queued on the pool (which pulls when it
// starts, unless the consumer took its turn: ticket), a pool thread, or the consumer.
enum class Puller { kNone, kQueued, kPool, kCaller };

// What the consumer and the pool's read-ahead jobs share; jobs hold it (and their slot) by
// shared_ptr, so a job still queued when the iterator is gone finds its slot cancelled.
struct SharedState {
  ThreadPool* pool = nullptr;
  int64_t read_ahead = 0;
  absl::Mutex mu;          // guards every Slot's ready/finished/cancelled/puller/ticket
  absl::CondVar changed;   // any of those changed
};

struct Slot {
  std::unique_ptr<Iterator> input;  // used by the one puller
  std::deque<Pulled> ready;         // parallel only: read ahead, in order
  bool finished = false;            // an end or error was pulled
  bool cancelled = false;
  Puller puller = Puller::kNone;
  int64_t ticket = 0;
};

class InterleaveIterator : public OpIterator {
 public:
  static constexpr int64_t kMaxReadAhead = 64;
  // What one open input costs besides what its pipeline allocates (the slot, its queue, the
  // iterator objects), charged to the process's budget while it is open: a cycle_length far
  // above the inputs is free (TF accepts 1e9), but one that really opens that many inputs
  // fails naming this op instead of growing without bound.
  static constexpr int64_t kOpenInputBytes = 1024;

  InterleaveIterator(std::string label, std::unique_ptr<Iterator> input,
                     InterleaveInputFn make_input, int64_t cycle_length, int64_t block_length,
                     bool parallel, bool deterministic, ThreadPool* pool)
      : OpIterator(std::move(label)),
        input_(std::move(input)),
        make_input_(std::move(make_input)),
        cycle_length_(cycle_length),
        block_length_(block_length),
        parallel_(parallel),
        deterministic_(deterministic),
        shared_(std::make_shared<SharedState>()),
        open_inputs_held_(this->label()) {
    shared_->pool = pool;
    // A block ahead, but not block_length elements of every open input when that is huge (a
    // hint TF accepts): read-ahead only overlaps reads, it does not change the output.
    shared_->read_ahead = std::clamp<int64_t>(block_length, 2, kMaxReadAhead);
  }

  ~InterleaveIterator() override {
    for (auto& slot : slots_) Close(slot);
    g_open_inputs.fetch_sub(num_open_, std::memory_order_relaxed);
  }
  InterleaveIterator(const InterleaveIterator&) = delete;
  InterleaveIterator& operator=(const InterleaveIterator&) = delete;

 protected:
  absl::Status GetNextInternal(Element* out, bool* end_of_sequence) override {
    while (!input_done_ || num_open_ > 0) {
      std::shared_ptr<Slot>& slot = SlotAt(cycle_index_);
      if (slot != nullptr) {
        Pulled p;
        if (!Take(slot, &p)) {
          // Nondeterministic and the current slot has nothing ready: take from a ready one.
          if (TakeAnyReady(&p)) return Emit(std::move(p), out);
          WaitOrPull(slot);
          continue;
        }
        if (p.kind == Pulled::Kind::kEnd) {
          Close(slot);
          ReleaseInput();
          --num_open_;
          Advance();
          continue;
        }
        if (p.kind != Pulled::Kind::kError && ++block_index_ == block_length_) Advance();
        return Emit(std::move(p), out);
      }
      if (!input_done_) {
        Element name;
        bool end = false;
        absl::Status s = input_->GetNext(&name, &end);
        if (!s.ok()) {
          if (!IsElementError(s)) input_done_ = true;
          return s;
        }
        if (end) {
          input_done_ = true;
          continue;
        }
        RETURN_IF_ERROR(AcquireInput());
        absl::StatusOr<std::unique_ptr<Iterator>> it = make_input_(name);
        if (!it.ok()) {
          ReleaseInput();
          return MarkElementError(OpError(it.status().code(), it.status().message()));
        }
        slot = Open(*std::move(it));
        ++num_open_;
        continue;  // read the new input at once, as TF does
      }
      Advance();
    }
    *end_of_sequence = true;
    return absl::OkStatus();
  }

 private:
  absl::Status Emit(Pulled p, Element* out) {
    switch (p.kind) {
      case Pulled::Kind::kElement:
        *out = std::move(p.element);
        return absl::OkStatus();
      case Pulled::Kind::kElementError:
      case Pulled::Kind::kError:
        return p.status;
      case Pulled::Kind::kEnd:
        break;
    }
    return absl::InternalError("interleave: unexpected end");
  }

  // The next slot of the cycle. Once the input is done, empty slots stay empty: skips to the
  // next open one (wrapping), so a cycle_length far above the inputs (TF accepts 1e9) costs
  // only the slots actually opened.
  void Advance() {
    block_index_ = 0;
    if (!input_done_) {
      cycle_index_ = cycle_index_ + 1 == cycle_length_ ? 0 : cycle_index_ + 1;
      return;
    }
    const int64_t n = static_cast<int64_t>(slots_.size());
    for (int64_t k = 1; k <= n; ++k) {
      const int64_t i = (cycle_index_ + k) % std::max<int64_t>(n, 1);
      if (slots_[i] != nullptr) {
        cycle_index_ = i;
        return;
      }
    }
    cycle_index_ = 0;
  }

  // Slot `i` of the cycle; slots are created as the cycle first reaches them (at most one per
  // input element read), not cycle_length of them up front.
  // One more open input: its memory from the process's budget and its place under the
  // process's open-input cap, or RESOURCE_EXHAUSTED naming this op (nothing taken then).
  absl::Status AcquireInput() {
    RETURN_IF_ERROR(open_inputs_held_.Grow(kOpenInputBytes));
    const int64_t open = g_open_inputs.fetch_add(1, std::memory_order_relaxed) + 1;
    if (open > OpenInputLimit()) {
      g_open_inputs.fetch_sub(1, std::memory_order_relaxed);
      open_inputs_held_.Shrink(kOpenInputBytes);
      return OpError(absl::StatusCode::kResourceExhausted,
                     absl::StrCat("cycle_length=", cycle_length_, ": ", open - 1,
                                  " inputs are open in this process, the most it keeps open (a "
                                  "quarter of its open-file limit, RLIMIT_NOFILE)"));
    }
    return absl::OkStatus();
  }
  void ReleaseInput() {
    g_open_inputs.fetch_sub(1, std::memory_order_relaxed);
    open_inputs_held_.Shrink(kOpenInputBytes);
  }

  std::shared_ptr<Slot>& SlotAt(int64_t i) {
    if (i >= static_cast<int64_t>(slots_.size())) slots_.resize(static_cast<size_t>(i) + 1);
    return slots_[i];
  }

  std::shared_ptr<Slot> Open(std::unique_ptr<Iterator> input) {
    auto slot = std::make_shared<Slot>();
    slot->input = std::move(input);
    if (parallel_) {
      absl::MutexLock lock(&shared_->mu);
      ScheduleLocked(slot);
    }
    return slot;
  }

  // Stops the slot's read-ahead: a job still queued does nothing; one pulling now is waited
  // for (its pull only). The input is destroyed here, on the consumer's thread.
  void Close(std::shared_ptr<Slot>& slot) {
    if (slot == nullptr) return;
    std::unique_ptr<Iterator> input;
    {
      absl::MutexLock lock(&shared_->mu);
      slot->cancelled = true;
      while (slot->puller == Puller::kPool) shared_->changed.Wait(&shared_->mu);
      input = std::move(slot->input);
      slot->ready.clear();
    }
    slot.reset();
  }

  // Schedules the slot's read-ahead job if nobody pulls it and it has room.
  void ScheduleLocked(const std::shared_ptr<Slot>& slot)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shared_->mu) {
    if (slot->puller != Puller::kNone || slot->cancelled || slot->finished ||
        static_cast<int64_t>(slot->ready.size()) >= shared_->read_ahead) {
      return;
    }
    slot->puller = Puller::kQueued;
    shared_->pool->Schedule([shared = shared_, slot, t = slot->ticket] {
      ReadAhead(*shared, slot.get(), t);
    });
  }

  // Pulls one result of the slot (shared.mu released meanwhile) into its ready queue.
  static void PullOneLocked(SharedState& shared, Slot* slot)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shared.mu) {
    shared.mu.Unlock();
    Pulled p = Pull(slot->input.get());
    shared.mu.Lock();
    if (p.kind == Pulled::Kind::kEnd || p.kind == Pulled::Kind::kError) slot->finished = true;
    slot->ready.push_back(std::move(p));
    shared.changed.SignalAll();
  }

  // The pool's job: reads the slot ahead until it has read_ahead results or its end, unless
  // the consumer took its turn or closed it.
  static void ReadAhead(SharedState& shared, Slot* slot, int64_t ticket) {
    absl::MutexLock lock(&shared.mu);
    if (slot->puller != Puller::kQueued || ticket != slot->ticket) return;
    slot->puller = Puller::kPool;
    while (!slot->cancelled && !slot->finished &&
           static_cast<int64_t>(slot->ready.size()) < shared.read_ahead) {
      PullOneLocked(shared, slot);
    }
    slot->puller = Puller::kNone;
    shared.changed.SignalAll();
  }

  // Pulls the slot's next result on the consumer's thread, taking over a queued job's turn.
  void PullHereLocked(Slot* slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shared_->mu) {
    if (slot->puller == Puller::kQueued) ++slot->ticket;
    slot->puller = Puller::kCaller;
    PullOneLocked(*shared_, slot);
    slot->puller = Puller::kNone;
  }

  // The slot's next result. Sequential: pulls it. Parallel: waits for the pool's read-ahead
  // when a pool thread is pulling the slot now, else pulls it here (never waiting for a job
  // queued behind other work); except that with deterministic=false it returns false instead
  // of waiting or pulling.
  bool Take(const std::shared_ptr<Slot>& slot, Pulled* p) {
    if (!parallel_) {
      *p = Pull(slot->input.get());
      return true;
    }
    absl::MutexLock lock(&shared_->mu);
    if (!deterministic_ && slot->ready.empty()) return false;
    while (slot->ready.empty()) {
      if (slot->puller == Puller::kPool) {
        shared_->changed.Wait(&shared_->mu);
      } else {
        PullHereLocked(slot.get());
      }
    }
    *p = std::move(slot->ready.front());
    slot->ready.pop_front();
    ScheduleLocked(slot);  // room again: read on
    return true;
  }

  // Nondeterministic: an element (or element error) that any slot has ready.
  bool TakeAnyReady(Pulled* p) {
    absl::MutexLock lock(&shared_->mu);
    for (auto& slot : slots_) {
      if (slot == nullptr || slot->ready.empty()) continue;
      const Pulled::Kind k = slot->ready.front().kind;
      if (k == Pulled::Kind::kEnd || k == Pulled::Kind::kError) continue;  // handled in turn
      *p = std::move(slot->ready.front());
      slot->ready.pop_front();
      ScheduleLocked(slot);
      return true;
    }
    return false;
  }

  // Nondeterministic, nothing ready to take: waits for a change while a pool thread pulls
  // some slot; with none pulling (their jobs queued behind other work) pulls `current` here.
  void WaitOrPull(const std::shared_ptr<Slot>& current) {
    absl::MutexLock lock(&shared_->mu);
    bool pulling = false;
    for (auto& slot : slots_) {
      if (slot == nullptr) continue;
      if (!slot->ready.empty()) return;  // something arrived meanwhile
      if (slot->puller == Puller::kPool) pulling = true;
    }
    if (pulling) {
      shared_->changed.Wait(&shared_->mu);
    } else {
      PullHereLocked(current.get());
    }
  }

  std::unique_ptr<Iterator> input_;
  const InterleaveInputFn make_input_;
  const int64_t cycle_length_;
  const int64_t block_length_;
  const bool parallel_;
  const bool deterministic_;
  const std::shared_ptr<SharedState> shared_;
  MemoryReservation open_inputs_held_;  // kOpenInputBytes for each open input

  std::vector<std::shared_ptr<Slot>> slots_;
  int64_t cycle_index_ = 0;
  int64_t block_index_ = 0;
  int64_t num_open_ = 0;
  bool input_done_ = false;
};

}  // namespace

std::unique_ptr<Iterator> NewInterleaveIterator(std::string label,
                                                std::unique_ptr<Iterator> input,
                                                InterleaveInputFn make_input,
                                                int64_t cycle_length, int64_t block_length,
                                                int64_t num_parallel_calls, bool deterministic) {
  absl::StatusOr<ThreadPool*> pool = ProcessThreadPool();
  if (!pool.ok()) return OrErrorIterator(WithContext(label, pool.status()));
  return std::make_unique<InterleaveIterator>(std::move(label), std::move(input),
                                              std::move(make_input), cycle_length, block_length,
                                              num_parallel_calls > 0, deterministic, *pool);
}

}  // namespace sluice
