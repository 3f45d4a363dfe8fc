#include "server/heartbeat_versions.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"

namespace sluice {

void HeartbeatVersions::TaskChanged(int64_t job_id, int64_t task_id) {
  JobLog& log = jobs_[job_id];
  log.changes.emplace_back(++version_, task_id);
  if (log.changes.size() > kMaxJobLog) {
    const size_t drop = log.changes.size() / 2;
    log.floor = log.changes[drop - 1].first;
    log.changes.erase(log.changes.begin(), log.changes.begin() + static_cast<ptrdiff_t>(drop));
  }
}

void HeartbeatVersions::WorkerChanged(int64_t worker_id) {
  if (worker_id == 0) return;
  workers_[worker_id] = ++version_;
}

std::optional<std::vector<int64_t>> HeartbeatVersions::JobChangesSince(int64_t job_id,
                                                                       uint64_t since) const {
  if (since < start_version_ || since > version_) return std::nullopt;
  std::vector<int64_t> out;
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return out;  // nothing changed in this incarnation
  const JobLog& log = it->second;
  if (since < log.floor) return std::nullopt;
  auto first = std::upper_bound(
      log.changes.begin(), log.changes.end(), since,
      [](uint64_t v, const std::pair<uint64_t, int64_t>& c) { return v < c.first; });
  absl::flat_hash_set<int64_t> seen;
  for (auto c = first; c != log.changes.end(); ++c) {
    if (c->second != 0 && seen.insert(c->second).second) out.push_back(c->second);
  }
  return out;
}

bool HeartbeatVersions::WorkerChangedSince(int64_t worker_id, uint64_t since) const {
  if (since < start_version_ || since > version_) return true;
  auto it = workers_.find(worker_id);
  return it != workers_.end() && it->second > since;
}

void HeartbeatVersions::Reset(uint64_t incarnation) {
  incarnation_ = incarnation;
  start_version_ = ++version_;
  jobs_.clear();
  workers_.clear();
}

}  // namespace sluice
