#include "core/data/ops/map_iterator.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/data/deferred_check_blocks.h"
#include "core/data/op_iterator.h"
#include "core/data/op_registry.h"
#include "core/data/ops/batch_destinations.h"
#include "core/data/ops/output_slot.h"
#include "core/util/status_context.h"
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
  return MarkElementError(WithContext(label, s));
}

// Row `i` of a block of elements (core/data/iterator.h), sharing storage.
absl::StatusOr<Element> RowOf(const Element& block, const std::vector<Tensor>& leaves, int64_t i) {
  std::vector<Tensor> row;
  row.reserve(leaves.size());
  for (const Tensor& t : leaves) row.push_back(t.Index(i));
  return Element::Pack(block, std::move(row));
}

// One element as a block of one: each leaf gains a dimension of 1 (no copy).
absl::StatusOr<Element> BlockOfOne(const Element& element) {
  std::vector<Tensor> leaves = element.Flatten();
  for (Tensor& t : leaves) {
    absl::StatusOr<Tensor> r = t.Reshape(t.shape().Prepend(1));
    if (!r.ok()) return r.status();
    t = *std::move(r);
  }
  return Element::Pack(element, std::move(leaves));
}

// The bytes an element's leaves hold (numeric data, string lengths).
int64_t PayloadBytes(const Element& e) {
  if (e.is_leaf()) return static_cast<int64_t>(e.leaf().payload_bytes());
  int64_t n = 0;
  for (const Element& c : e.children()) n += PayloadBytes(c);
  return n;
}

// Rows [begin, end) of a block, sharing storage.
absl::StatusOr<Element> SliceOf(const Element& block, int64_t begin, int64_t end) {
  std::vector<Tensor> leaves = block.Flatten();
  for (Tensor& t : leaves) t = t.Slice(begin, end);
  return Element::Pack(block, std::move(leaves));
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
    absl::StatusOr<Element> element = RowOf(pending_, pending_leaves_, next_row_);
    if (++next_row_ == pending_rows_) pending_rows_ = 0;
    if (!element.ok()) return element.status();
    absl::StatusOr<Element> mapped = fn_(*std::move(element));
    if (!mapped.ok()) return Labeled(label, mapped.status());
    absl::StatusOr<Element> block = BlockOfOne(*mapped);
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
    // A batch right above offers where this element goes (output_slot.h): taken before the
    // input is pulled, so that only this map's fn sees it.
    std::optional<OutputSlot> slot = TakeSlotOffer(this);
    Element e;
    absl::Status s = input_->GetNext(&e, end_of_sequence);
    if (!s.ok() || *end_of_sequence) return s;
    ScopedFnSlot fn_slot(std::move(slot));
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
//
// The bulk path (a block_fn and an input with blocks, pulled by GetNextBlock): a unit is one
// input block of ceil(max_elements / parallelism) rows, mapped by one block_fn call on the
// pool, so that a batch(B) over the map has its B rows mapped by `parallelism` threads at once,
// each in one call (parse_example parses its slice of records as one tf.io.parse_example),
// with no per-element object, hand-off or allocation. A block whose block_fn call fails is
// mapped row by row with fn instead, and handed out in blocks of one, as BlockMapper does.
//
// Pulled on the pool (bulk path over an input whose BlocksPullableOnPool(), a record file
// source): the reads leave the consumer's thread too. The consumer schedules up to
// `parallelism` pull jobs; each job, on a pool thread (or on the consumer's, which runs a job
// still queued instead of waiting), takes the input's lock, queues a new unit and reads its
// block, releases the lock and maps the block. Units are queued in the order their blocks are
// read, so the order, the errors and their positions are those of the consumer-pulled path,
// while one job reads the next block as others map theirs.
class ParallelMapIterator : public OpIterator {
 public:
  static constexpr int64_t kMaxUnit = 32;
  // A per-element unit stops taking input elements once they hold this many bytes (at least
  // one element): 32 batches of 256 records, or 32 decoded images, would keep tens of MB in
  // flight per unit and map them cache-cold, with too few units to share between threads.
  static constexpr int64_t kMaxUnitBytes = 256 << 10;

  ParallelMapIterator(std::string label, std::unique_ptr<Iterator> input, ElementFn fn,
                      int64_t parallelism, bool deterministic, ElementFn block_fn,
                      SerializedRowsFn rows_fn, ThreadPool* pool, bool autotune)
      : OpIterator(std::move(label)),
        input_(std::move(input)),
        fn_(fn),
        block_fn_(block_fn),
        rows_fn_(std::move(rows_fn)),
        max_parallelism_(parallelism),
        deterministic_(deterministic),
        autotune_(autotune),
        pool_(pool),
        blocks_(std::move(fn), std::move(block_fn)),
        pull_on_pool_(blocks_.Supports(input_.get()) && input_->BlocksPullableOnPool()),
        // Deferred checks only in input order: out of order, a later unit could be handed out
        // before an earlier one's check fails, and rows after a bad record must never be.
        deferring_(pull_on_pool_ && deterministic
                       ? dynamic_cast<DeferredCheckBlockSource*>(input_.get())
                       : nullptr),
        parallelism_(autotune ? AutotuneInitialParallelism(parallelism) : parallelism) {
    if (autotune_) AutotuneTrack(this->label(), 1, parallelism_);
  }

  // Waits for this map's closures running on the pool, not for those still queued (they then
  // do nothing): a map destroyed on a pool thread must not wait for work queued behind it.
  ~ParallelMapIterator() override {
    cancel_wake_.reset();  // before mu_ is taken: a running wake-up takes it
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
    }
    gate_->Close();
    absl::MutexLock lock(&mu_);
    if (autotune_) AutotuneTrack(label(), -1, -parallelism_);
  }
  ParallelMapIterator(const ParallelMapIterator&) = delete;
  ParallelMapIterator& operator=(const ParallelMapIterator&) = delete;

  bool SupportsBlocks() const override { return blocks_.Supports(input_.get()); }

 protected:
  absl::Status GetNextInternal(Element* out, bool* end_of_sequence) override {
    WatchCancellation();
    TakeRowsOfBatch();
    int64_t n = 0;
    absl::Status s = Next(0, out, &n, end_of_sequence);
    if (s.ok() ? !*end_of_sequence : IsElementError(s)) ++outputs_;
    // The batch's last row is out: hold no reference to a batch its consumer now holds.
    if (outputs_ >= rows_end_) rows_of_ = Tensor();
    return s;
  }

  absl::Status GetNextBlockInternal(int64_t max_elements, Element* out, int64_t* n,
                                    bool* end_of_sequence) override {
    WatchCancellation();
    TakeBatchDestinations();
    if (pull_on_pool_) return NextPulledOnPool(max_elements, out, n, end_of_sequence);
    return Next(max_elements, out, n, end_of_sequence);
  }

 private:
  struct Unit {
    // Per-element units: input elements, replaced by their mapped ones when the unit is done;
    // an input element error stays in its place. slots[i]: item i's row of the batch above
    // (output_slot.h), or none; moved into the fn's slot when item i is mapped. Block units:
    // empty, or the rows mapped one by one when the block_fn call failed (or the one input
    // element error the unit stands for).
    std::vector<absl::StatusOr<Element>> items;
    std::vector<std::optional<OutputSlot>> slots;
    size_t next = 0;       // the next item the consumer takes
    bool started = false;  // a thread (the pool's or the consumer's) maps it
    bool done = false;     // the fn ran on every item
    // Block units only.
    bool is_block = false;
    Element block;           // the input block; the mapped block once done and block_ok
    int64_t rows = 0;        // rows of `block`
    bool block_ok = false;   // block_fn mapped the whole block
    int64_t next_row = 0;    // the next row of the mapped block the consumer takes
    // The batch's rows this block's mapped rows go to (batch_destinations.h), or none; moved
    // into the fn block slot when the block is mapped.
    std::optional<std::vector<Tensor>> dest;
    int64_t position = -1;  // the output position of the block's first row, when it has rows
  };

  // From the first call on, a cancelled token (core/data/cancellation.h) wakes the consumer
  // waiting for a unit, which then returns CANCELLED without waiting for it (the pool's jobs
  // finish the element they map, and their next pull from the input is CANCELLED).
  void WatchCancellation() ABSL_LOCKS_EXCLUDED(mu_) {
    if (cancel_wake_ != nullptr || cancellation() == nullptr) return;
    cancel_wake_ = std::make_unique<ScopedCancelWake>(cancellation(), [this] {
      absl::MutexLock lock(&mu_);
      done_.SignalAll();
    });
  }
  bool CancelledNow() const {
    return cancellation() != nullptr && cancellation()->cancelled();
  }

  // The next output: an element (max_elements == 0) or a block of at most max_elements rows.
  absl::Status Next(int64_t max_elements, Element* out, int64_t* n, bool* end_of_sequence) {
    const bool bulk = max_elements > 0;
    while (true) {
      if (bulk) {
        int64_t unit_rows;
        {
          absl::MutexLock lock(&mu_);
          unit_rows = (max_elements + parallelism_ - 1) / parallelism_;
        }
        FillBlocks(unit_rows);
      } else {
        Fill();
      }
      std::shared_ptr<Unit> help;
      {
        absl::MutexLock lock(&mu_);
        if (CancelledNow()) return cancellation()->Check(label());
        if (units_.empty()) {
          // Every earlier output is taken: now the input's end or its error.
          if (terminal_.ok()) *end_of_sequence = true;
          return terminal_;
        }
        if (FindReady()) {
          absl::Status s = bulk ? TakeBlock(max_elements, out, n) : TakeElement(out, n);
          if (autotune_) CountOutputs(*n);
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
        // Out of order, a consumer that itself runs on the pool (under a prefetch or a parallel
        // interleave) never waits for units that are all still queued, possibly behind it: with
        // none being mapped on the pool, it maps the first queued one itself. Elsewhere it waits,
        // so that a slow element does not hold up the others.
        if (!deterministic_ && ThreadPool::OnPoolThread()) help = FirstQueuedIfNoneMapping();
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

  // The bulk path when the pool pulls the input (pull_on_pool_): the next block of at most
  // max_elements rows.
  absl::Status NextPulledOnPool(int64_t max_elements, Element* out, int64_t* n,
                                bool* end_of_sequence) ABSL_LOCKS_EXCLUDED(mu_, in_mu_) {
    while (true) {
      bool help = false;
      bool taken = false;
      absl::Status taken_status;
      int64_t schedule = 0;
      {
        absl::MutexLock lock(&mu_);
        if (CancelledNow()) return cancellation()->Check(label());
        // The largest slice asked for so far: a batch asks for its remaining rows after each
        // block, and blocks that shrink with them would cost more hand-offs per batch.
        unit_rows_ = std::max(unit_rows_, (max_elements + parallelism_ - 1) / parallelism_);
        taken = FindReady();
        if (taken) {
          taken_status = TakeBlock(max_elements, out, n);
          if (autotune_) CountOutputs(*n);
        } else if (units_.empty() && input_done_) {
          // No unit can be queued once the input is done (Pull checks under mu_).
          if (terminal_.ok()) *end_of_sequence = true;
          return terminal_;
        }
        // Keep `parallelism_` jobs queued or pulling, and at most 2 * parallelism_ units held
        // or coming. After a take too: the jobs' read-ahead may have stopped at that bound
        // while the consumer was away, and nothing else would read again until the consumer
        // next finds no block ready.
        schedule = QueuePulls(parallelism_);
        // Every unit not done is being read or mapped by a running job: the consumer waits only
        // for those, and runs a job still queued (possibly behind itself) rather than wait.
        if (!taken && queued_pulls_ > 0) {
          --queued_pulls_;
          ++pulling_;
          help = true;
        } else if (!taken) {
          const auto start = std::chrono::steady_clock::now();
          done_.Wait(&mu_);
          stall_ += std::chrono::steady_clock::now() - start;
        }
      }
      for (int64_t i = 0; i < schedule; ++i) SchedulePull();
      if (taken) return taken_status;
      if (help) {
        const auto start = std::chrono::steady_clock::now();
        Pull();
        absl::MutexLock lock(&mu_);
        stall_ += std::chrono::steady_clock::now() - start;
        --pulling_;
        done_.SignalAll();
      }
    }
  }

  // Queues a pull job (one counted in queued_pulls_) on the pool.
  void SchedulePull() {
    pool_->Schedule([this, gate = gate_] {
      if (!gate->Enter()) return;  // the map is gone
      PullJob();
      gate->Leave();
    });
  }

  // On a pool thread: one pull, unless the consumer ran every queued one already. Then, while
  // fewer than 2 * parallelism_ units are held or coming, it queues the next pull itself, so the
  // pool reads ahead while the consumer's thread is away (mapping downstream, or descheduled on
  // a loaded machine) instead of idling until the consumer comes back to schedule more. The
  // next pull goes to the back of the pool's queue: other pipelines sharing the pool keep their
  // turn.
  void PullJob() ABSL_LOCKS_EXCLUDED(mu_, in_mu_) {
    {
      absl::MutexLock lock(&mu_);
      if (queued_pulls_ == 0 || cancelled_) return;
      --queued_pulls_;
      ++pulling_;
    }
    Pull();
    bool more = false;
    {
      absl::MutexLock lock(&mu_);
      --pulling_;
      done_.SignalAll();
      more = QueuePulls(1) == 1;
    }
    if (more) SchedulePull();
  }

  // Counts up to `most` pull jobs more in queued_pulls_ while fewer than parallelism_ are
  // queued or pulling and fewer than 2 * parallelism_ units are held or coming; returns how
  // many, for the caller to schedule (SchedulePull) once it has released mu_.
  int64_t QueuePulls(int64_t most) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    int64_t queued = 0;
    while (queued < most && !cancelled_ && !input_done_ &&
           queued_pulls_ + pulling_ < parallelism_ &&
           static_cast<int64_t>(units_.size()) + queued_pulls_ < 2 * parallelism_) {
      ++queued_pulls_;
      ++queued;
    }
    return queued;
  }

  // Queues a unit and reads its input block under in_mu_ (so units are queued in read order),
  // then maps it. Any thread, one of them reading at a time.
  void Pull() ABSL_LOCKS_EXCLUDED(mu_, in_mu_) {
    in_mu_.Lock();
    auto unit = std::make_shared<Unit>();
    unit->is_block = true;
    unit->started = true;
    int64_t rows;
    {
      absl::MutexLock lock(&mu_);
      if (input_done_ || cancelled_) {
        in_mu_.Unlock();
        return;
      }
      units_.push_back(unit);
      rows = unit_rows_;
    }
    rows = ClampToBatch(rows);
    bool end = false;
    DeferredCheckBlockSource::BlockCheck check;
    absl::Status s =
        deferring_ != nullptr
            ? deferring_->GetNextBlockDeferringChecks(rows, &unit->block, &unit->rows, &end,
                                                      &check)
            : input_->GetNextBlock(rows, &unit->block, &unit->rows, &end);
    if (IsElementError(s)) {
      // The error stands where the element would be: a unit of that error alone.
      in_mu_.Unlock();
      unit->items.push_back(s);
      unit->block = Element();
      absl::MutexLock lock(&mu_);
      unit->done = true;
      return;
    }
    if (!s.ok() || end) {
      absl::MutexLock lock(&mu_);
      // The unit is the last one queued (only Pull queues them, under in_mu_, and the consumer
      // takes only done units), unless an earlier unit's deferred check failed meanwhile
      // (CheckBlock): that dropped this unit and its error ends the input instead.
      if (!units_.empty() && units_.back() == unit) {
        units_.pop_back();
        input_done_ = true;
        terminal_ = s;
      }
      in_mu_.Unlock();
      return;
    }
    PlaceRows(unit.get());
    in_mu_.Unlock();
    bool mapped = false;
    if (check != nullptr) {
      // rows_fn_ writes the block's rows where the batch above stacks them, if it can.
      ScopedFnBlockSlot dest(std::move(unit->dest));
      unit->dest.reset();
      const bool rows_left = CheckBlock(check, unit, &mapped);
      unit->dest = dest.Release();  // for MapBlockUnit, when the check did not map the rows
      if (!rows_left) return;
    }
    if (mapped) {
      unit->block_ok = true;  // the check parsed the rows from the read buffers (rows_fn_)
    } else {
      MapBlockUnit(unit.get());
    }
    absl::MutexLock lock(&mu_);
    unit->done = true;
  }

  // Runs a block's deferred checks, which build the block (DeferredCheckBlockSource), outside
  // in_mu_; with rows_fn_ the check may map the rows too (*mapped: the block is mapped). On a
  // failure the
  // unit keeps the rows before the bad one, the units read after it are dropped, and the error
  // ends the input, as if the read had returned it after those rows; returns whether rows are
  // left to map. When an earlier unit failed first, this unit is gone already and nothing changes.
  bool CheckBlock(const DeferredCheckBlockSource::BlockCheck& check,
                  const std::shared_ptr<Unit>& unit, bool* mapped)
      ABSL_LOCKS_EXCLUDED(mu_, in_mu_) {
    int64_t good = unit->rows;
    absl::Status s = check(&unit->block, &good, rows_fn_, mapped);
    // A mapped block holds its good rows only (the same rows the unmapped one would).
    if (*mapped) unit->rows = good;
    if (s.ok()) return true;
    absl::MutexLock lock(&mu_);
    auto it = std::find(units_.begin(), units_.end(), unit);
    if (it == units_.end()) return false;  // dropped by an earlier unit's failure
    units_.erase(good > 0 ? std::next(it) : it, units_.end());
    input_done_ = true;
    terminal_ = s;
    if (good == 0) return false;
    absl::StatusOr<Element> kept = SliceOf(unit->block, 0, good);
    if (!kept.ok()) {
      units_.erase(it, units_.end());
      terminal_ = kept.status();
      return false;
    }
    unit->block = *std::move(kept);
    unit->rows = good;
    return true;
  }

  // Counts `n` outputs handed out (at least one) and ends AUTOTUNE's period after
  // kAutotunePeriod outputs or, checked every kAutotuneClockEvery outputs taken,
  // kAutotunePeriodTime, whichever comes first: a map of slow elements (an image decode of
  // milliseconds) adapts within tens of milliseconds, not after hundreds of elements.
  void CountOutputs(int64_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    period_outputs_ += std::max<int64_t>(n, 1);
    if (period_outputs_ >= kAutotunePeriod) return Autotune();
    if (++period_takes_ % kAutotuneClockEvery != 0) return;
    if (std::chrono::steady_clock::now() - period_start_ >= kAutotunePeriodTime) Autotune();
  }

  // AUTOTUNE's hill-climb, as tf.data's: at the end of each period (CountOutputs), if the consumer spent
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
    period_takes_ = 0;
    stall_ = std::chrono::steady_clock::duration::zero();
  }

  // The first unit no thread has started, marked started, if no unit is being mapped on the
  // pool; null otherwise.
  std::shared_ptr<Unit> FirstQueuedIfNoneMapping() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::shared_ptr<Unit> first;
    for (const auto& u : units_) {
      if (u->started && !u->done) return nullptr;  // a pool thread maps it: wait for it
      if (!u->started && first == nullptr) first = u;
    }
    if (first != nullptr) first->started = true;
    return first;
  }

  bool CanFill() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !input_done_ && running_ < parallelism_ &&
           static_cast<int64_t>(units_.size()) < 2 * parallelism_;
  }

  // Queues a pulled unit and, unless it is already done, schedules it on the pool.
  void Schedule(std::shared_ptr<Unit> unit) ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock lock(&mu_);
      units_.push_back(unit);
      if (unit->done) return;
      ++running_;
    }
    pool_->Schedule([this, gate = gate_, unit = std::move(unit)] {
      if (!gate->Enter()) return;  // the map is gone
      Run(unit.get());
      gate->Leave();
    });
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
      int64_t unit_bytes = 0;
      while (static_cast<int64_t>(unit->items.size()) < unit_size_ &&
             unit_bytes < kMaxUnitBytes) {
        Element e;
        bool end = false;
        absl::Status s = input_->GetNext(&e, &end);
        if (IsElementError(s)) {
          unit->items.push_back(s);
          unit->slots.push_back(std::nullopt);
          ++pulled_;
          continue;
        }
        if (!s.ok() || end) {
          absl::MutexLock lock(&mu_);
          input_done_ = true;
          terminal_ = s;
          break;
        }
        unit_bytes += PayloadBytes(e);
        unit->items.push_back(std::move(e));
        unit->slots.push_back(RowFor(pulled_++));
      }
      if (unit->items.empty()) return;
      unit_size_ = std::min(2 * unit_size_, kMaxUnit);
      Schedule(std::move(unit));
    }
  }

  // The bulk path's Fill: one input block of up to `unit_rows` rows per unit.
  void FillBlocks(int64_t unit_rows) ABSL_LOCKS_EXCLUDED(mu_) {
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        if (!CanFill()) return;
      }
      auto unit = std::make_shared<Unit>();
      unit->is_block = true;
      bool end = false;
      absl::Status s;
      {
        absl::MutexLock lock(&in_mu_);
        s = input_->GetNextBlock(ClampToBatch(unit_rows), &unit->block, &unit->rows, &end);
        if (s.ok() && !end) PlaceRows(unit.get());
      }
      if (IsElementError(s)) {
        // The error stands where the element would be: a unit of that error alone.
        unit->items.push_back(s);
        unit->block = Element();
        unit->started = unit->done = true;
      } else if (!s.ok() || end) {
        absl::MutexLock lock(&mu_);
        input_done_ = true;
        terminal_ = s;
        return;
      }
      Schedule(std::move(unit));
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
    done_.SignalAll();
  }

  // Runs the fn on the unit's elements; by the one thread that set unit->started.
  void MapUnit(Unit* unit) const {
    if (unit->is_block) return MapBlockUnit(unit);
    for (size_t i = 0; i < unit->items.size(); ++i) {
      absl::StatusOr<Element>& item = unit->items[i];
      if (!item.ok()) continue;
      std::optional<OutputSlot> slot;
      if (i < unit->slots.size()) slot = std::move(unit->slots[i]);
      ScopedFnSlot fn_slot(std::move(slot));
      // On a pool thread, where a std::bad_alloc would end the process.
      absl::StatusOr<Element> mapped =
          CatchingBadAlloc(label(), [&] { return fn_(*std::move(item)); });
      if (!mapped.ok()) mapped = Labeled(label(), mapped.status());
      item = std::move(mapped);
    }
  }

  // A block unit: one block_fn call, or, when it fails, fn on each row (BlockMapper's way).
  // The block_fn call writes the block's rows into unit->dest when it can.
  void MapBlockUnit(Unit* unit) const {
    absl::StatusOr<Element> mapped;
    {
      ScopedFnBlockSlot dest(std::move(unit->dest));
      unit->dest.reset();
      mapped = block_fn_(unit->block);
    }
    if (mapped.ok()) {
      unit->block = *std::move(mapped);
      unit->block_ok = true;
      return;
    }
    const std::vector<Tensor> leaves = unit->block.Flatten();
    unit->items.reserve(static_cast<size_t>(unit->rows));
    for (int64_t i = 0; i < unit->rows; ++i) {
      absl::StatusOr<Element> row = RowOf(unit->block, leaves, i);
      if (row.ok()) {
        row = fn_(*std::move(row));
        if (!row.ok()) row = Labeled(label(), row.status());
      }
      unit->items.push_back(std::move(row));
    }
    unit->block = Element();
  }

  // In input order, a batch right above offers the row its next output goes to (output_slot.h):
  // that output and the ones after it, up to the batch's last row, are rows of the same
  // stacked tensor. Remembered for Fill, which gives each element it pulls for one of those
  // rows its row. Out of order, or with no offer, elements pulled from here get no row.
  void TakeRowsOfBatch() {
    std::optional<OutputSlot> offer = TakeSlotOffer(this);
    if (!deterministic_ || !offer.has_value() || !offer->stacked.valid() ||
        offer->stacked.shape().rank() == 0) {
      rows_of_ = Tensor();
      return;
    }
    rows_base_ = outputs_ - offer->index;
    rows_end_ = rows_base_ + offer->stacked.shape().dim(0);
    rows_of_ = std::move(offer->stacked);
  }

  // The row of the batch above that the output at input position `position` goes to, if any.
  std::optional<OutputSlot> RowFor(int64_t position) const {
    if (!rows_of_.valid() || position < rows_base_ || position >= rows_end_) return std::nullopt;
    return OutputSlot{rows_of_.Index(position - rows_base_), Tensor(), 0, nullptr};
  }

  // Map-and-batch fusion (batch_destinations.h): in input order, a batch right above offers
  // where the rows of this map's output go; kept for the map's life (the batch is the same).
  void TakeBatchDestinations() {
    std::optional<OutputSlot> offer = TakeSlotOffer(this);
    if (!deterministic_ || !offer.has_value() || offer->destinations == nullptr) return;
    if (handed_to_ == nullptr) handed_to_ = offer->destinations;
    absl::MutexLock lock(&in_mu_);
    if (destinations_ == nullptr) destinations_ = std::move(offer->destinations);
  }

  // Tells the batch above the position of the rows handed out now (the consumer's thread).
  void Handing(const Unit& u, int64_t row) const {
    if (handed_to_ != nullptr && u.position >= 0) handed_to_->Handed(u.position + row);
  }

  // The rows of the next block to read: `rows`, or fewer so that the block ends where a batch
  // above ends (no block spans two batches, so each can be written in place).
  int64_t ClampToBatch(int64_t rows) ABSL_EXCLUSIVE_LOCKS_REQUIRED(in_mu_) {
    return destinations_ == nullptr ? rows : destinations_->ClampToBatch(rows_read_, rows);
  }

  // A block just read: the rows of the batch above its rows go to, and the next block's
  // output position.
  void PlaceRows(Unit* unit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(in_mu_) {
    if (destinations_ != nullptr) unit->dest = destinations_->RowsFor(rows_read_, unit->rows);
    unit->position = rows_read_;
    rows_read_ += unit->rows;
  }

  // Points taken_ at the unit the consumer may take from now; false when none is ready.
  bool FindReady() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (auto it = units_.begin(); it != units_.end(); ++it) {
      if ((*it)->done) {
        taken_ = it;
        return true;
      }
      if (deterministic_) return false;
    }
    return false;
  }

  // The next element of the ready unit (per-element path).
  absl::Status TakeElement(Element* out, int64_t* n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Unit& u = **taken_;
    absl::StatusOr<Element>& item = u.items[u.next];
    absl::Status s = item.status();
    if (s.ok()) *out = *std::move(item);
    *n = 1;
    if (++u.next == u.items.size()) units_.erase(taken_);
    return s;
  }

  // The next rows of the ready block unit, at most max_elements (bulk path).
  absl::Status TakeBlock(int64_t max_elements, Element* out, int64_t* n)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Unit& u = **taken_;
    absl::Status s;
    if (u.block_ok) {
      Handing(u, u.next_row);
      const int64_t k = std::min(max_elements, u.rows - u.next_row);
      if (u.next_row == 0 && k == u.rows) {
        *out = std::move(u.block);
      } else {
        absl::StatusOr<Element> slice = SliceOf(u.block, u.next_row, u.next_row + k);
        if (slice.ok()) *out = *std::move(slice);
        s = slice.status();
      }
      *n = k;
      u.next_row += k;
      if (u.next_row == u.rows) units_.erase(taken_);
      return s;
    }
    absl::StatusOr<Element>& item = u.items[u.next];
    if (item.ok()) {
      Handing(u, static_cast<int64_t>(u.next));  // a block mapped row by row: item i is row i
      absl::StatusOr<Element> one = BlockOfOne(*item);
      if (one.ok()) *out = *std::move(one);
      s = one.status();
    } else {
      s = item.status();
    }
    *n = 1;
    if (++u.next == u.items.size()) units_.erase(taken_);
    return s;
  }

  static constexpr int64_t kAutotunePeriod = 256;
  static constexpr int64_t kAutotuneClockEvery = 4;
  static constexpr std::chrono::milliseconds kAutotunePeriodTime{10};

  // The consumer's thread only; under in_mu_ when pull_on_pool_.
  std::unique_ptr<Iterator> input_;
  const ElementFn fn_;
  const ElementFn block_fn_;
  // block_fn_ on serialized rows in the read buffers, handed to deferred checks; may be null.
  const SerializedRowsFn rows_fn_;
  const int64_t max_parallelism_;
  const bool deterministic_;
  const bool autotune_;
  ThreadPool* const pool_;
  const std::shared_ptr<PoolJobGate> gate_ = std::make_shared<PoolJobGate>();
  BlockMapper blocks_;     // answers SupportsBlocks
  const bool pull_on_pool_;  // the bulk path pulls the input on the pool (NextPulledOnPool)
  // The input, when pulled on the pool and it leaves its block checks to the map; else null.
  DeferredCheckBlockSource* const deferring_;
  int64_t unit_size_ = 1;  // the consumer's thread only
  // The consumer's thread only: per-element outputs handed out (elements and element errors)
  // and input positions pulled, which are equal for the same element in input order; the
  // stacked tensor of the batch above whose row 0 is output position rows_base_, and the
  // position after its last row (TakeRowsOfBatch).
  int64_t outputs_ = 0;
  int64_t pulled_ = 0;
  Tensor rows_of_;
  int64_t rows_base_ = 0;
  int64_t rows_end_ = 0;

  // Held while the input is pulled on the pool (Pull), before mu_.
  absl::Mutex in_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  // The batch above's destinations for this map's rows (map-and-batch fusion), or null; the
  // rows of blocks read so far (the output position of the next block's first row).
  std::shared_ptr<BatchDestinations> destinations_ ABSL_GUARDED_BY(in_mu_);
  std::shared_ptr<BatchDestinations> handed_to_;  // the same, for the consumer's thread
  int64_t rows_read_ ABSL_GUARDED_BY(in_mu_) = 0;
  absl::Mutex mu_;
  std::deque<std::shared_ptr<Unit>> units_ ABSL_GUARDED_BY(mu_);  // in input order
  // Pulled on the pool: jobs scheduled and not yet claimed, jobs claimed and running, and the
  // rows of the next block to read.
  int64_t queued_pulls_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t pulling_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t unit_rows_ ABSL_GUARDED_BY(mu_) = 1;
  std::deque<std::shared_ptr<Unit>>::iterator taken_ ABSL_GUARDED_BY(mu_);
  int64_t running_ ABSL_GUARDED_BY(mu_) = 0;    // units scheduled, not done
  bool input_done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status terminal_ ABSL_GUARDED_BY(mu_);  // the input's error once input_done_
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  absl::CondVar done_;  // a unit finished, or the token was cancelled
  std::unique_ptr<ScopedCancelWake> cancel_wake_;  // set by the consumer's first call
  // Units that may run at once: max_parallelism_, or AUTOTUNE's current choice.
  int64_t parallelism_ ABSL_GUARDED_BY(mu_);
  // AUTOTUNE's measurements over the current period (outputs counted in elements).
  int64_t period_outputs_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t period_takes_ ABSL_GUARDED_BY(mu_) = 0;  // outputs taken (calls), not elements
  std::chrono::steady_clock::time_point period_start_ ABSL_GUARDED_BY(mu_);
  std::chrono::steady_clock::duration stall_ ABSL_GUARDED_BY(mu_){};
};

}  // namespace

int64_t AutotuneParallelism() { return ProcessThreadPoolSize(); }

int64_t AutotuneInitialParallelism(int64_t max_parallelism) {
  return std::max<int64_t>(
      1, std::min({max_parallelism, AutotuneParallelism(), kAutotuneMaxInitialParallelism}));
}

int64_t MaxParallelCalls() { return std::max<int64_t>(64, 4 * int64_t{ProcessThreadPoolSize()}); }

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
                                         bool autotune, SerializedRowsFn rows_fn) {
  // Bounds the units in flight (2 * parallelism held) and keeps their counts from overflowing.
  num_parallel_calls = std::min(num_parallel_calls, MaxParallelCalls());
  if (num_parallel_calls <= 1) {
    return std::make_unique<SequentialMapIterator>(std::move(label), std::move(input),
                                                   std::move(fn), std::move(block_fn));
  }
  absl::StatusOr<ThreadPool*> pool = ProcessThreadPool();
  if (!pool.ok()) return OrErrorIterator(WithContext(label, pool.status()));
  return std::make_unique<ParallelMapIterator>(std::move(label), std::move(input), std::move(fn),
                                               num_parallel_calls, deterministic,
                                               std::move(block_fn), std::move(rows_fn), *pool,
                                               autotune);
}

}  // namespace sluice
