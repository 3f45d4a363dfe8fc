#include "core/data/ops/interleave_iterator.h"

#include <algorithm>
#include <deque>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/data/op_iterator.h"

namespace sluice {
namespace {

// What a slot's next pull gave.
struct Pulled {
  enum class Kind { kElement, kElementError, kEnd, kError } kind;
  Element element;
  absl::Status status;
};

Pulled Pull(Iterator* it) {
  Pulled p{Pulled::Kind::kElement, {}, {}};
  bool end = false;
  absl::Status s = it->GetNext(&p.element, &end);
  if (!s.ok()) {
    p.kind = IsElementError(s) ? Pulled::Kind::kElementError : Pulled::Kind::kError;
    p.status = std::move(s);
  } else if (end) {
    p.kind = Pulled::Kind::kEnd;
  }
  return p;
}

class InterleaveIterator : public OpIterator {
 public:
  InterleaveIterator(std::string label, std::unique_ptr<Iterator> input,
                     InterleaveInputFn make_input, int64_t cycle_length, int64_t block_length,
                     bool parallel, bool deterministic)
      : OpIterator(std::move(label)),
        input_(std::move(input)),
        make_input_(std::move(make_input)),
        cycle_length_(cycle_length),
        block_length_(block_length),
        read_ahead_(std::max<int64_t>(block_length, 2)),
        parallel_(parallel),
        deterministic_(deterministic),
        slots_(static_cast<size_t>(cycle_length)) {}

  ~InterleaveIterator() override {
    for (auto& slot : slots_) Close(slot);
  }
  InterleaveIterator(const InterleaveIterator&) = delete;
  InterleaveIterator& operator=(const InterleaveIterator&) = delete;

 protected:
  absl::Status GetNextInternal(Element* out, bool* end_of_sequence) override {
    while (!input_done_ || num_open_ > 0) {
      std::unique_ptr<Slot>& slot = slots_[cycle_index_];
      if (slot != nullptr) {
        Pulled p;
        if (!Take(slot.get(), &p)) {
          // Nondeterministic and the current slot has nothing ready: take from a ready one.
          if (TakeAnyReady(&p)) return Emit(std::move(p), out);
          WaitForChange();
          continue;
        }
        if (p.kind == Pulled::Kind::kEnd) {
          Close(slot);
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
        absl::StatusOr<std::unique_ptr<Iterator>> it = make_input_(name);
        if (!it.ok()) {
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
  struct Slot {
    std::unique_ptr<Iterator> input;  // the read-ahead thread's once started
    std::deque<Pulled> ready;         // parallel only: read ahead, in order
    bool finished = false;            // the read-ahead thread has pulled the end or an error
    bool cancelled = false;
    std::thread thread;
  };

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

  void Advance() {
    cycle_index_ = (cycle_index_ + 1) % cycle_length_;
    block_index_ = 0;
  }

  std::unique_ptr<Slot> Open(std::unique_ptr<Iterator> input) {
    auto slot = std::make_unique<Slot>();
    slot->input = std::move(input);
    if (parallel_) {
      Slot* s = slot.get();
      s->thread = std::thread([this, s] { ReadAhead(s); });
    }
    return slot;
  }

  void Close(std::unique_ptr<Slot>& slot) {
    if (slot == nullptr) return;
    if (slot->thread.joinable()) {
      {
        absl::MutexLock lock(&mu_);
        slot->cancelled = true;
        changed_.SignalAll();
      }
      slot->thread.join();
    }
    slot.reset();
  }

  void ReadAhead(Slot* slot) {
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        while (!slot->cancelled && static_cast<int64_t>(slot->ready.size()) >= read_ahead_) {
          changed_.Wait(&mu_);
        }
        if (slot->cancelled) return;
      }
      Pulled p = Pull(slot->input.get());
      const bool last = p.kind == Pulled::Kind::kEnd || p.kind == Pulled::Kind::kError;
      absl::MutexLock lock(&mu_);
      slot->ready.push_back(std::move(p));
      if (last) slot->finished = true;
      changed_.SignalAll();
      if (last) return;
    }
  }

  // The slot's next result. Sequential: pulls it. Parallel: waits for it, except that with
  // deterministic=false it returns false instead of waiting.
  bool Take(Slot* slot, Pulled* p) {
    if (!parallel_) {
      *p = Pull(slot->input.get());
      return true;
    }
    absl::MutexLock lock(&mu_);
    if (deterministic_) {
      while (slot->ready.empty()) changed_.Wait(&mu_);
    } else if (slot->ready.empty()) {
      return false;
    }
    *p = std::move(slot->ready.front());
    slot->ready.pop_front();
    changed_.SignalAll();
    return true;
  }

  // Nondeterministic: an element (or element error) that any slot has ready.
  bool TakeAnyReady(Pulled* p) {
    absl::MutexLock lock(&mu_);
    for (auto& slot : slots_) {
      if (slot == nullptr || slot->ready.empty()) continue;
      const Pulled::Kind k = slot->ready.front().kind;
      if (k == Pulled::Kind::kEnd || k == Pulled::Kind::kError) continue;  // handled in turn
      *p = std::move(slot->ready.front());
      slot->ready.pop_front();
      changed_.SignalAll();
      return true;
    }
    return false;
  }

  void WaitForChange() {
    absl::MutexLock lock(&mu_);
    bool any_ready = false;
    for (auto& slot : slots_) {
      if (slot != nullptr && !slot->ready.empty()) any_ready = true;
    }
    if (!any_ready) changed_.Wait(&mu_);
  }

  std::unique_ptr<Iterator> input_;
  const InterleaveInputFn make_input_;
  const int64_t cycle_length_;
  const int64_t block_length_;
  const int64_t read_ahead_;
  const bool parallel_;
  const bool deterministic_;

  std::vector<std::unique_ptr<Slot>> slots_;
  int64_t cycle_index_ = 0;
  int64_t block_index_ = 0;
  int64_t num_open_ = 0;
  bool input_done_ = false;

  absl::Mutex mu_;         // guards every Slot's ready/finished/cancelled
  absl::CondVar changed_;  // any of those changed
};

}  // namespace

std::unique_ptr<Iterator> NewInterleaveIterator(std::string label,
                                                std::unique_ptr<Iterator> input,
                                                InterleaveInputFn make_input,
                                                int64_t cycle_length, int64_t block_length,
                                                int64_t num_parallel_calls, bool deterministic) {
  return std::make_unique<InterleaveIterator>(std::move(label), std::move(input),
                                              std::move(make_input), cycle_length, block_length,
                                              num_parallel_calls > 0, deterministic);
}

}  // namespace sluice
