#include "core/rpc/shm_segment_pool.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <list>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/util/logging.h"
#include "core/util/start_thread.h"

namespace sluice {
namespace {

std::atomic<int64_t> g_created{0};
std::atomic<int64_t> g_reused{0};
std::atomic<int64_t> g_trimmed{0};

}  // namespace

ShmPoolCounts ProcessShmPoolCounts() {
  return ShmPoolCounts{g_created.load(), g_reused.load(), g_trimmed.load()};
}

struct ShmSegmentPool::State {
  explicit State(ShmSegmentPoolOptions o) : options(std::move(o)) {}

  struct Entry {
    std::string key;
    uint64_t id = 0;
    std::shared_ptr<ShmSegment> segment;
    absl::Time returned;
  };

  // Takes back a segment whose last lease copy was dropped (kept when `keep`). Frees what no
  // longer fits.
  void Return(Entry entry, bool keep) {
    std::vector<std::shared_ptr<ShmSegment>> freed;  // unmapped outside the lock
    {
      absl::MutexLock lock(&mu);
      leased.erase(entry.id);
      if (!keep || stopped || entry.key.empty() || entry.segment->size() > options.max_bytes) {
        freed.push_back(std::move(entry.segment));
      } else {
        entry.returned = options.now();
        pooled += entry.segment->size();
        entries.push_back(std::move(entry));
        while (pooled > options.max_bytes) {
          freed.push_back(PopOldestLocked());
          g_trimmed += 1;
        }
      }
    }
  }

  std::shared_ptr<ShmSegment> PopOldestLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::shared_ptr<ShmSegment> s = std::move(entries.front().segment);
    pooled -= s->size();
    entries.pop_front();
    return s;
  }

  const ShmSegmentPoolOptions options;
  mutable absl::Mutex mu;
  std::list<Entry> entries ABSL_GUARDED_BY(mu);  // oldest returned first
  size_t pooled ABSL_GUARDED_BY(mu) = 0;
  uint64_t next_id ABSL_GUARDED_BY(mu) = 1;
  // Segments in use, by id: a stream's offer may name one another stream of the same process
  // holds (not to be reported dropped: the consumer would forget a mapping it may reuse).
  absl::flat_hash_map<uint64_t, std::string> leased ABSL_GUARDED_BY(mu);
  bool stopped ABSL_GUARDED_BY(mu) = false;
};

// The deleter of a leased segment: gives it back to the pool (while the pool lives and
// DoNotKeep was not called), else frees it.
struct ShmSegmentPool::Returner {
  std::weak_ptr<State> pool;
  State::Entry entry;
  std::shared_ptr<std::atomic<bool>> keep;  // shared: the deleter must be movable

  void operator()(ShmSegment*) {
    std::shared_ptr<State> state = pool.lock();
    if (state != nullptr) state->Return(std::move(entry), keep->load());
    entry.segment.reset();
  }
};

ShmSegmentPool::ShmSegmentPool(ShmSegmentPoolOptions options)
    : state_(std::make_shared<State>(std::move(options))) {
  if (state_->options.trim_interval > absl::ZeroDuration()) {
    absl::StatusOr<std::thread> trimmer =
        StartThread("the shared-memory segment pool's trimmer", [this] { TrimLoop(); });
    if (trimmer.ok()) {
      trimmer_ = *std::move(trimmer);
    } else {  // max_bytes still bounds what is kept
      LogEvent(LogLevel::kWarning, "worker",
               absl::StrCat(trimmer.status().message(), "; idle segments are kept until reused"));
    }
  }
}

ShmSegmentPool::~ShmSegmentPool() {
  std::list<State::Entry> freed;
  {
    absl::MutexLock lock(&state_->mu);
    state_->stopped = true;
    freed.swap(state_->entries);
    state_->pooled = 0;
  }
  if (trimmer_.joinable()) trimmer_.join();
}

void ShmSegmentPool::TrimLoop() {
  State& s = *state_;
  while (true) {
    {
      absl::MutexLock lock(&s.mu);
      auto stopped = [&s]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) { return s.stopped; };
      s.mu.AwaitWithTimeout(absl::Condition(&stopped), s.options.trim_interval);
      if (s.stopped) return;
    }
    Trim();
  }
}

void ShmSegmentPool::Trim() {
  State& s = *state_;
  std::vector<std::shared_ptr<ShmSegment>> freed;
  {
    absl::MutexLock lock(&s.mu);
    const absl::Time now = s.options.now();
    while (!s.entries.empty() && now - s.entries.front().returned >= s.options.idle_ttl) {
      freed.push_back(s.PopOldestLocked());
    }
  }
  g_trimmed += static_cast<int64_t>(freed.size());
}

size_t ShmSegmentPool::pooled_bytes() const {
  absl::MutexLock lock(&state_->mu);
  return state_->pooled;
}

absl::StatusOr<ShmSegmentPool::Lease> ShmSegmentPool::Acquire(
    const std::string& offered_key, const std::vector<uint64_t>& idle_ids, size_t bytes) {
  Trim();
  const std::string consumer_key =
      offered_key.size() == kConsumerKeyBytes ? offered_key : std::string();
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  if (bytes > 0) bytes = (bytes + page - 1) / page * page;
  State& s = *state_;
  Lease lease;
  std::shared_ptr<ShmSegment> segment;
  std::vector<std::shared_ptr<ShmSegment>> freed;
  {
    absl::MutexLock lock(&s.mu);
    for (size_t i = 0; i < std::min<size_t>(idle_ids.size(), kMaxIdleIds); ++i) {
      const uint64_t id = idle_ids[i];
      auto it = std::find_if(s.entries.begin(), s.entries.end(), [&](const State::Entry& e) {
        return e.id == id && !consumer_key.empty() && e.key == consumer_key;
      });
      if (it == s.entries.end()) {
        auto held = s.leased.find(id);
        if (held == s.leased.end() || held->second != consumer_key) lease.dropped.push_back(id);
      } else if (segment == nullptr && it->segment->size() == bytes) {
        segment = std::move(it->segment);
        lease.id = id;
        s.pooled -= segment->size();
        s.entries.erase(it);
      }
    }
  }
  lease.warm = segment != nullptr;
  while (segment == nullptr) {
    absl::StatusOr<std::shared_ptr<ShmSegment>> fresh = ShmSegment::Create(bytes);
    if (fresh.ok()) {
      segment = *std::move(fresh);
      break;
    }
    // Pooled segments hold budget that a fresh one may need: free the oldest and retry.
    absl::MutexLock lock(&s.mu);
    if (!absl::IsResourceExhausted(fresh.status()) || s.entries.empty()) return fresh.status();
    freed.push_back(s.PopOldestLocked());
    g_trimmed += 1;
  }
  freed.clear();
  if (lease.warm) {
    g_reused += 1;
  } else {
    g_created += 1;
  }
  {
    absl::MutexLock lock(&s.mu);
    if (!lease.warm) lease.id = s.next_id++;
    s.leased[lease.id] = consumer_key;
  }
  ShmSegment* raw = segment.get();
  lease.segment = std::shared_ptr<ShmSegment>(
      raw, Returner{.pool = state_,
                    .entry = State::Entry{.key = consumer_key,
                                          .id = lease.id,
                                          .segment = std::move(segment),
                                          .returned = {}},
                    .keep = std::make_shared<std::atomic<bool>>(true)});
  return lease;
}

void ShmSegmentPool::DoNotKeep(const std::shared_ptr<ShmSegment>& segment) {
  if (Returner* r = std::get_deleter<Returner>(segment)) r->keep->store(false);
}

}  // namespace sluice
