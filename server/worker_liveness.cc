#include "server/worker_liveness.h"

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

std::vector<int64_t> WorkerLiveness::SilentSince(absl::Time cutoff) const {
  std::vector<int64_t> out;
  for (auto it = by_time_.begin(); it != by_time_.end() && it->first <= cutoff; ++it) {
    out.push_back(it->second);
  }
  return out;
}

}  // namespace sluice
