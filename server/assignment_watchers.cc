#include "server/assignment_watchers.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace sluice {

AssignmentWatchers::AssignmentWatchers(size_t max_watches)
    : max_watches_(std::max<size_t>(max_watches, 1)) {}

AssignmentWatchers::~AssignmentWatchers() { Close(); }

template <typename Predicate>
void AssignmentWatchers::TakeLocked(int64_t worker_id, Predicate take, std::vector<Done>* out) {
  auto it = by_worker_.find(worker_id);
  if (it == by_worker_.end()) return;
  std::vector<Watch>& watches = it->second;
  auto kept = std::stable_partition(watches.begin(), watches.end(),
                                    [&](const Watch& w) { return !take(w); });
  for (auto w = kept; w != watches.end(); ++w) {
    workers_of_.erase(w->id);
    out->push_back(std::move(w->done));
    --size_;
  }
  watches.erase(kept, watches.end());
  if (watches.empty()) by_worker_.erase(it);
}

void AssignmentWatchers::TakeAllLocked(std::vector<Done>* out) {
  for (auto& [worker, watches] : by_worker_) {
    for (Watch& w : watches) out->push_back(std::move(w.done));
  }
  by_worker_.clear();
  workers_of_.clear();
  size_ = 0;
}

absl::StatusOr<uint64_t> AssignmentWatchers::Add(int64_t worker_id, absl::Time deadline,
                                                 Done done) {
  std::vector<Done> superseded;
  uint64_t id = 0;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return absl::UnavailableError("the coordinator is shutting down");
    std::vector<Watch>& mine = by_worker_[worker_id];
    if (mine.size() >= kMaxPerWorker) {
      workers_of_.erase(mine.front().id);
      superseded.push_back(std::move(mine.front().done));
      mine.erase(mine.begin());
      --size_;
    } else if (size_ >= max_watches_) {
      if (mine.empty()) by_worker_.erase(worker_id);
      return absl::ResourceExhaustedError(absl::StrCat(
          "too many assignment watches (max_assignment_watches ", max_watches_,
          "); the worker falls back to its heartbeats"));
    }
    id = next_id_++;
    mine.push_back(Watch{id, deadline, std::move(done)});
    workers_of_[id] = worker_id;
    ++size_;
  }
  for (Done& d : superseded) d(false);
  return id;
}

void AssignmentWatchers::Notify(int64_t worker_id) {
  std::vector<Done> done;
  {
    absl::MutexLock lock(&mu_);
    TakeLocked(worker_id, [](const Watch&) { return true; }, &done);
  }
  for (Done& d : done) d(true);
}

void AssignmentWatchers::NotifyAll() {
  std::vector<Done> done;
  {
    absl::MutexLock lock(&mu_);
    TakeAllLocked(&done);
  }
  for (Done& d : done) d(true);
}

void AssignmentWatchers::Cancel(uint64_t id) {
  std::vector<Done> done;
  {
    absl::MutexLock lock(&mu_);
    auto it = workers_of_.find(id);
    if (it == workers_of_.end()) return;
    TakeLocked(it->second, [id](const Watch& w) { return w.id == id; }, &done);
  }
  for (Done& d : done) d(false);
}

void AssignmentWatchers::ExpireUntil(absl::Time now) {
  std::vector<Done> done;
  {
    absl::MutexLock lock(&mu_);
    std::vector<int64_t> workers;
    for (const auto& [worker, watches] : by_worker_) {
      for (const Watch& w : watches) {
        if (w.deadline <= now) {
          workers.push_back(worker);
          break;
        }
      }
    }
    for (int64_t worker : workers) {
      TakeLocked(worker, [now](const Watch& w) { return w.deadline <= now; }, &done);
    }
  }
  for (Done& d : done) d(false);
}

void AssignmentWatchers::Close() {
  std::vector<Done> done;
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    TakeAllLocked(&done);
  }
  for (Done& d : done) d(false);
}

size_t AssignmentWatchers::size() const {
  absl::MutexLock lock(&mu_);
  return size_;
}

}  // namespace sluice
