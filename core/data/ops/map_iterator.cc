#include "core/data/ops/map_iterator.h"

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

// The fn's error with the op's label in front; stays an element error.
absl::Status Labeled(const std::string& label, const absl::Status& s) {
  return MarkElementError(absl::Status(s.code(), absl::StrCat(label, ": ", s.message())));
}

class SequentialMapIterator : public OpIterator {
 public:
  SequentialMapIterator(std::string label, std::unique_ptr<Iterator> input, ElementFn fn)
      : OpIterator(std::move(label)), input_(std::move(input)), fn_(std::move(fn)) {}

 protected:
  absl::Status GetNextInternal(Element* out, bool* end_of_sequence) override {
    Element e;
    absl::Status s = input_->GetNext(&e, end_of_sequence);
    if (!s.ok() || *end_of_sequence) return s;
    absl::StatusOr<Element> r = fn_(std::move(e));
    if (!r.ok()) return Labeled(label(), r.status());
    *out = *std::move(r);
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<Iterator> input_;
  const ElementFn fn_;
};

class ParallelMapIterator : public OpIterator {
 public:
  ParallelMapIterator(std::string label, std::unique_ptr<Iterator> input, ElementFn fn,
                      int64_t threads, bool deterministic)
      : OpIterator(std::move(label)),
        input_(std::move(input)),
        fn_(std::move(fn)),
        threads_(threads),
        capacity_(2 * threads),
        deterministic_(deterministic) {}

  ~ParallelMapIterator() override {
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      space_.SignalAll();
    }
    for (std::thread& t : workers_) t.join();
  }
  ParallelMapIterator(const ParallelMapIterator&) = delete;
  ParallelMapIterator& operator=(const ParallelMapIterator&) = delete;

 protected:
  absl::Status GetNextInternal(Element* out, bool* end_of_sequence) override {
    absl::MutexLock lock(&mu_);
    if (workers_.empty()) {
      for (int64_t i = 0; i < threads_; ++i) workers_.emplace_back([this] { Work(); });
    }
    std::shared_ptr<Result> r;
    while (!TakeReady(&r)) ready_.Wait(&mu_);
    space_.SignalAll();
    if (r->end) {
      *end_of_sequence = true;
      return absl::OkStatus();
    }
    if (!r->value.ok()) return r->value.status();
    *out = *std::move(r->value);
    return absl::OkStatus();
  }

 private:
  struct Result {
    bool ready = false;
    bool end = false;      // the input's end
    bool terminal = false;  // the end or a non-element input error: nothing follows it
    absl::StatusOr<Element> value;
  };

  // Moves a result the consumer may take now into *out; false when none is ready yet.
  bool TakeReady(std::shared_ptr<Result>* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (queue_.empty()) return false;
    if (deterministic_ || queue_.front()->terminal) {
      if (!queue_.front()->ready) return false;
      *out = queue_.front();
      // A terminal result stays queued: the OpIterator base repeats it, and workers stop.
      if (!(*out)->terminal) Pop(queue_.begin());
      return true;
    }
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      if ((*it)->terminal) return false;  // everything before it is still running
      if ((*it)->ready) {
        *out = *it;
        Pop(it);
        return true;
      }
    }
    return false;
  }

  void Pop(std::deque<std::shared_ptr<Result>>::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    queue_.erase(it);
    --outstanding_;
  }

  void Work() {
    while (true) {
      std::shared_ptr<Result> r;
      Element e;
      {
        absl::MutexLock input_lock(&input_mu_);
        {
          absl::MutexLock lock(&mu_);
          while (!cancelled_ && !input_done_ && outstanding_ >= capacity_) space_.Wait(&mu_);
          if (cancelled_ || input_done_) return;
          ++outstanding_;
        }
        bool end = false;
        absl::Status s = input_->GetNext(&e, &end);
        r = std::make_shared<Result>();
        absl::MutexLock lock(&mu_);
        queue_.push_back(r);
        if (end || (!s.ok() && !IsElementError(s))) {
          input_done_ = true;
          r->terminal = true;
          r->end = s.ok();
          space_.SignalAll();  // idle workers see input_done_ and exit
        }
        if (!s.ok() || end) {
          r->value = s.ok() ? absl::StatusOr<Element>(Element()) : absl::StatusOr<Element>(s);
          r->ready = true;
          ready_.Signal();
          continue;
        }
      }
      absl::StatusOr<Element> mapped = fn_(std::move(e));
      if (!mapped.ok()) mapped = Labeled(label(), mapped.status());
      absl::MutexLock lock(&mu_);
      r->value = std::move(mapped);
      r->ready = true;
      ready_.Signal();
    }
  }

  absl::Mutex input_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::unique_ptr<Iterator> input_ ABSL_GUARDED_BY(input_mu_);
  const ElementFn fn_;
  const int64_t threads_;
  const int64_t capacity_;
  const bool deterministic_;

  absl::Mutex mu_;
  // Results in input order; a terminal one is last.
  std::deque<std::shared_ptr<Result>> queue_ ABSL_GUARDED_BY(mu_);
  int64_t outstanding_ ABSL_GUARDED_BY(mu_) = 0;  // taken from the input, not yet consumed
  bool input_done_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  absl::CondVar ready_;  // a result became ready (the consumer waits)
  absl::CondVar space_;  // outstanding_ fell, the input ended, or cancelled (workers wait)
  std::vector<std::thread> workers_;  // touched only by the consumer and the destructor
};

}  // namespace

int64_t AutotuneParallelism() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int64_t>(n);
}

std::unique_ptr<Iterator> NewMapIterator(std::string label, std::unique_ptr<Iterator> input,
                                         ElementFn fn, int64_t num_parallel_calls,
                                         bool deterministic) {
  if (num_parallel_calls <= 1) {
    return std::make_unique<SequentialMapIterator>(std::move(label), std::move(input),
                                                   std::move(fn));
  }
  return std::make_unique<ParallelMapIterator>(std::move(label), std::move(input), std::move(fn),
                                               num_parallel_calls, deterministic);
}

}  // namespace sluice
