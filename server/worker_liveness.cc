#include "server/worker_liveness.h"

#include <algorithm>
#include <utility>

namespace sluice {

void WorkerLiveness::Heartbeat(int64_t worker_id, absl::Time at) {
  auto [last, made] = last_.try_emplace(worker_id, at);
  if (!made && at > last->second) last->second = at;
  const absl::Time t = last->second;
  auto watched = watched_.find(worker_id);
  if (watched != watched_.end()) {
    if (watched->second == t) return;
    by_time_.erase({watched->second, worker_id});
    watched->second = t;
  } else {
    watched_.emplace(worker_id, t);
  }
  by_time_.insert({t, worker_id});
}

void WorkerLiveness::Unwatch(int64_t worker_id) {
  auto watched = watched_.find(worker_id);
  if (watched == watched_.end()) return;
  by_time_.erase({watched->second, worker_id});
  watched_.erase(watched);
}

void WorkerLiveness::Forget(int64_t worker_id) {
  Unwatch(worker_id);
  last_.erase(worker_id);
}

std::optional<absl::Time> WorkerLiveness::LastHeartbeat(int64_t worker_id) const {
  auto it = last_.find(worker_id);
  if (it == last_.end()) return std::nullopt;
  return it->second;
}

void WorkerLiveness::Excuse(absl::Duration stall, absl::Time now) {
  if (stall <= absl::ZeroDuration()) return;
  std::set<std::pair<absl::Time, int64_t>> shifted;
  for (auto& [id, t] : watched_) {
    t = std::min(t + stall, now);
    last_[id] = t;
    shifted.insert({t, id});
  }
  by_time_ = std::move(shifted);
}

std::vector<int64_t> WorkerLiveness::SilentSince(absl::Time cutoff) const {
  std::vector<int64_t> out;
  for (auto it = by_time_.begin(); it != by_time_.end() && it->first <= cutoff; ++it) {
    out.push_back(it->second);
  }
  return out;
}

}  // namespace sluice
