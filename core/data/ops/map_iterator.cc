#include "core/data/ops/map_iterator.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/data/op_iterator.h"
#include "core/util/thread_pool.h"

namespace sluice {
namespace {

// The parallelism autotuned maps chose, by label: live maps and the sum of their limits.
struct AutotuneEntry {
  int64_t maps = 0;
  int64_t parallelism = 0;
};
absl::Mutex autotune_mu(absl::kConstInit);
std::map<std::string, AutotuneEntry>& AutotuneEntries() ABSL_EXCLUSIVE_LOCKS_REQUIRED(autotune_mu) {
  static auto* entries = new std::map<std::string, AutotuneEntry>();
  return *entries;
}
void AutotuneTrack(const std::string& label, int64_t maps, int64_t parallelism) {
  absl::MutexLock lock(&autotune_mu);
  AutotuneEntry& e = AutotuneEntries()[label];
  e.maps += maps;
  e.parallelism += parallelism;
  if (e.maps == 0) AutotuneEntries().erase(label);
}

// The fn's error with the op's label in front; stays an element error.
absl::Status Labeled(const std::string& label, const absl::Status& s) {
  return MarkElementError(absl::Status(s.code(), absl::StrCat(label, ": ", s.message())));
}

// The bulk path of a map (NewMapIterator's block_fn). Not thread-safe; used by the consumer's
// thread only.
class BlockMapper {
 public:
  BlockMapper(ElementFn fn, ElementFn block_fn) : fn_(std::move(fn)), block_fn_(std::move(block_fn)) {}

  bool Supports(const Iterator* input) const {
    return block_fn_ != nullptr && input != nullptr && input->SupportsBlocks();
  }

  absl::Status Next(const std::string& label, Iterator* input, int64_t max_elements,
                    Element* out, int64_t* n, bool* end_of_sequence) {
    if (pending_rows_ == 0) {
      Element block;
      absl::Status s = input->GetNextBlock(max_elements, &block, n, end_of_sequence);
      if (!s.ok() || *end_of_sequence) return s;
      absl::StatusOr<Element> mapped = block_fn_(block);
      if (mapped.ok()) {
        *out = *std::move(mapped);
        return absl::OkStatus();
      }
      // Some row fails: go through the block row by row, as the per-element path would.
      pending_ = std::move(block);
      pending_leaves_ = pending_.Flatten();
      pending_rows_ = *n;
      next_row_ = 0;
    }
    std::vector<Tensor> row;
    row.reserve(pending_leaves_.size());
    for (const Tensor& t : pending_leaves_) row.push_back(t.Index(next_row_));
    if (++next_row_ == pending_rows_) pending_rows_ = 0;
    absl::StatusOr<Element> element = Element::Pack(pending_, std::move(row));
    if (!element.ok()) return element.status();
    absl::StatusOr<Element> mapped = fn_(*std::move(element));
    if (!mapped.ok()) return Labeled(label, mapped.status());
    // A block of one: each leaf gains a dimension of 1 (no copy).
    std::vector<Tensor> leaves = mapped->Flatten();
    for (Tensor& t : leaves) {
      absl::StatusOr<Tensor> r = t.Reshape(t.shape().Prepend(1));
      if (!r.ok()) return r.status();
      t = *std::move(r);
    }
    absl::StatusOr<Element> block = Element::Pack(*mapped, std::move(leaves));
    if (!block.ok()) return block.status();
    *out = *std::move(block);
    *n = 1;
    return absl::OkStatus();
  }

 private:
  const ElementFn fn_;
  const ElementFn block_fn_;
  Element pending_;  // a block block_fn_ failed on, handed out row by row
  std::vector<Tensor> pending_leaves_;
  int64_t pending_rows_ = 0;  // 0: none pending
  int64_t next_row_ = 0;
};

class SequentialMapIterator : public OpIterator {
 public:
  SequentialMapIterator(std::string label, std::unique_ptr<Iterator> input, ElementFn fn,
                        ElementFn block_fn)
      : OpIterator(std::move(label)),
        input_(std::move(input)),
        fn_(fn),
        blocks_(std::move(fn), std::move(block_fn)) {}

  bool SupportsBlocks() const override { return blocks_.Supports(input_.get()); }

 protected:
  absl::Status GetNextBlockInternal(int64_t max_elements, Element* out, int64_t* n,
                                    bool* end_of_sequence) override {
    return blocks_.Next(label(), input_.get(), max_elements, out, n, end_of_sequence);
  }

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
  BlockMapper blocks_;
};

// The parallel map on the process's shared pool (core/util/thread_pool.h). The consumer's
// thread pulls input elements (reads may block, and a pool thread must never wait for the
// pool) into units of consecutive elements and schedules each unit on the pool, where its fn
// calls run; at most `parallelism` units run at once and at most 2 * parallelism are held.
// Units start at one element and double up to kMaxUnit, so the first outputs come soon and
// the per-unit hand-off (a lock, a wake-up) is shared by many fn calls afterwards. Within a
// unit the outputs keep their order; deterministic=false takes any finished unit first.
class ParallelMapIterator : public OpIterator {
 public:
  static constexpr int64_t kMaxUnit = 32;

  ParallelMapIterator(std::string label, std::unique_ptr<Iterator> input, ElementFn fn,
                      int64_t parallelism, bool deterministic, ElementFn block_fn,
                      ThreadPool* pool, bool autotune)
      : OpIterator(std::move(label)),
        input_(std::move(input)),
        fn_(fn),
        max_parallelism_(parallelism),
        deterministic_(deterministic),
        autotune_(autotune),
        pool_(pool),
        blocks_(std::move(fn), std::move(block_fn)),
        parallelism_(autotune ? 1 : parallelism) {
    if (autotune_) AutotuneTrack(this->label(), 1, 1);
  }

  // Waits for this map's closures on the pool (those not yet started skip their fn calls).
  ~ParallelMapIterator() override {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    while (scheduled_ > 0) done_.Wait(&mu_);
    if (autotune_) AutotuneTrack(label(), -1, -parallelism_);
  }
  ParallelMapIterator(const ParallelMapIterator&) = delete;
  ParallelMapIterator& operator=(const ParallelMapIterator&) = delete;

  // The bulk path runs in the caller's thread; units are made only on GetNext.
  bool SupportsBlocks() const override { return blocks_.Supports(input_.get()); }

 protected:
  absl::Status GetNextInternal(Element* out, bool* end_of_sequence) override {
    while (true) {
      Fill();
      std::shared_ptr<Unit> help;
      {
        absl::MutexLock lock(&mu_);
        if (units_.empty()) {
          // Every earlier output is taken: now the input's end or its error.
          if (terminal_.ok()) *end_of_sequence = true;
          return terminal_;
        }
        absl::StatusOr<Element>* item = TakeReady();
        if (item != nullptr) {
          absl::Status s = item->status();
          if (s.ok()) *out = **std::move(item);
          PopTaken();
          if (autotune_ && ++period_outputs_ >= kAutotunePeriod) Autotune();
          return s;
        }
        // In input order the consumer must wait for the first unit anyway: when no pool thread
        // has started it, the consumer's thread maps it itself (useful work instead of a wait,
        // and a pool busy with other pipelines cannot stall this one). Out of order it waits,
        // so that one slow element never holds up the others.
        if (deterministic_ && !units_.front()->started) {
          help = units_.front();
          help->started = true;
        }
        if (help == nullptr && !CanFill()) {
          const auto start = std::chrono::steady_clock::now();
          done_.Wait(&mu_);
          stall_ += std::chrono::steady_clock::now() - start;
        }
      }
      if (help != nullptr) {
        const auto start = std::chrono::steady_clock::now();
        MapUnit(help.get());
        absl::MutexLock lock(&mu_);
        stall_ += std::chrono::steady_clock::now() - start;
        help->done = true;
        --running_;
      }
    }
  }

  absl::Status GetNextBlockInternal(int64_t max_elements, Element* out, int64_t* n,
                                    bool* end_of_sequence) override {
    return blocks_.Next(label(), input_.get(), max_elements, out, n, end_of_sequence);
  }

 private:
  struct Unit {
    // Input elements, replaced by their mapped ones when the unit is done; an input element
    // error stays in its place.
    std::vector<absl::StatusOr<Element>> items;
    size_t next = 0;       // the next item the consumer takes
    bool started = false;  // a thread (the pool's or the consumer's) maps it
    bool done = false;     // the fn ran on every item
  };

  // AUTOTUNE's hill-climb, as tf.data's: every kAutotunePeriod outputs, if the consumer spent
  // more than a tenth of the period waiting for outputs (or mapping them itself), the map is
  // the bottleneck and may run one more unit at a time, up to the pool's size (the CPU budget;
  // each unit in flight holds at most kMaxUnit elements, the memory budget).
  void Autotune() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const auto now = std::chrono::steady_clock::now();
    const auto period = now - period_start_;
    if (period_start_.time_since_epoch().count() != 0 && stall_ * 10 > period &&
        parallelism_ < max_parallelism_) {
      ++parallelism_;
      AutotuneTrack(label(), 0, 1);
    }
    period_start_ = now;
    period_outputs_ = 0;
    stall_ = std::chrono::steady_clock::duration::zero();
  }

  bool CanFill() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !input_done_ && running_ < parallelism_ &&
           static_cast<int64_t>(units_.size()) < 2 * parallelism_;
  }

  // Pulls units from the input and schedules them while there is room. Consumer thread only.
  void Fill() ABSL_LOCKS_EXCLUDED(mu_) {
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        if (!CanFill()) return;
      }
      auto unit = std::make_shared<Unit>();
      unit->items.reserve(static_cast<size_t>(unit_size_));
      while (static_cast<int64_t>(unit->items.size()) < unit_size_) {
        Element e;
        bool end = false;
        absl::Status s = input_->GetNext(&e, &end);
        if (IsElementError(s)) {
          unit->items.push_back(s);
          continue;
        }
        if (!s.ok() || end) {
          absl::MutexLock lock(&mu_);
          input_done_ = true;
          terminal_ = s;
          break;
        }
        unit->items.push_back(std::move(e));
      }
      if (unit->items.empty()) return;
      unit_size_ = std::min(2 * unit_size_, kMaxUnit);
      {
        absl::MutexLock lock(&mu_);
        units_.push_back(unit);
        ++running_;
        ++scheduled_;
      }
      pool_->Schedule([this, unit] { Run(unit.get()); });
    }
  }

  // On a pool thread: maps the unit unless the consumer started it first (or cancelled).
  void Run(Unit* unit) ABSL_LOCKS_EXCLUDED(mu_) {
    bool mine;
    {
      absl::MutexLock lock(&mu_);
      mine = !unit->started && !cancelled_;
      unit->started = true;
    }
    if (mine) MapUnit(unit);
    absl::MutexLock lock(&mu_);
    if (mine) {
      unit->done = true;
      --running_;
    }
    --scheduled_;
    done_.SignalAll();
  }

  // Runs the fn on the unit's elements; by the one thread that set unit->started.
  void MapUnit(Unit* unit) const {
    for (absl::StatusOr<Element>& item : unit->items) {
      if (!item.ok()) continue;
      absl::StatusOr<Element> mapped = fn_(*std::move(item));
      if (!mapped.ok()) mapped = Labeled(label(), mapped.status());
      item = std::move(mapped);
    }
  }

  // The item the consumer may take now, or null when none is ready.
  absl::StatusOr<Element>* TakeReady() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (auto it = units_.begin(); it != units_.end(); ++it) {
      if ((*it)->done) {
        taken_ = it;
        return &(*it)->items[(*it)->next];
      }
      if (deterministic_) return nullptr;
    }
    return nullptr;
  }

  // Advances past the item TakeReady returned.
  void PopTaken() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Unit& u = **taken_;
    if (++u.next == u.items.size()) units_.erase(taken_);
  }

  static constexpr int64_t kAutotunePeriod = 256;

  std::unique_ptr<Iterator> input_;  // the consumer's thread only
  const ElementFn fn_;
  const int64_t max_parallelism_;
  const bool deterministic_;
  const bool autotune_;
  ThreadPool* const pool_;
  BlockMapper blocks_;     // the bulk path, in the consumer's thread
  int64_t unit_size_ = 1;  // the consumer's thread only

  absl::Mutex mu_;
  std::deque<std::shared_ptr<Unit>> units_ ABSL_GUARDED_BY(mu_);  // in input order
  std::deque<std::shared_ptr<Unit>>::iterator taken_ ABSL_GUARDED_BY(mu_);
  int64_t running_ ABSL_GUARDED_BY(mu_) = 0;    // units scheduled, not done
  int64_t scheduled_ ABSL_GUARDED_BY(mu_) = 0;  // pool closures not yet returned
  bool input_done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status terminal_ ABSL_GUARDED_BY(mu_);  // the input's error once input_done_
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  absl::CondVar done_;  // a unit finished
  // Units that may run at once: max_parallelism_, or AUTOTUNE's current choice.
  int64_t parallelism_ ABSL_GUARDED_BY(mu_);
  // AUTOTUNE's measurements over the current period.
  int64_t period_outputs_ ABSL_GUARDED_BY(mu_) = 0;
  std::chrono::steady_clock::time_point period_start_ ABSL_GUARDED_BY(mu_);
  std::chrono::steady_clock::duration stall_ ABSL_GUARDED_BY(mu_){};
};

}  // namespace

int64_t AutotuneParallelism() { return ProcessThreadPoolSize(); }

std::vector<std::pair<std::string, double>> AutotunedMapParallelism() {
  absl::MutexLock lock(&autotune_mu);
  std::vector<std::pair<std::string, double>> out;
  for (const auto& [label, e] : AutotuneEntries()) {
    out.emplace_back(label, static_cast<double>(e.parallelism) / static_cast<double>(e.maps));
  }
  return out;
}

std::unique_ptr<Iterator> NewMapIterator(std::string label, std::unique_ptr<Iterator> input,
                                         ElementFn fn, int64_t num_parallel_calls,
                                         bool deterministic, ElementFn block_fn,
                                         bool autotune) {
  if (num_parallel_calls <= 1) {
    return std::make_unique<SequentialMapIterator>(std::move(label), std::move(input),
                                                   std::move(fn), std::move(block_fn));
  }
  return std::make_unique<ParallelMapIterator>(std::move(label), std::move(input), std::move(fn),
                                               num_parallel_calls, deterministic,
                                               std::move(block_fn), &ProcessThreadPool(),
                                               autotune);
}

}  // namespace sluice
