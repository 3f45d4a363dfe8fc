// Shared-memory segments are reclaimed when a peer dies (core/rpc/shm_ring.h), with the real
// binaries on one host: a consumer killed with SIGKILL leaves no segment in its worker (the
// stream ends, the worker drops its ring); a worker killed with SIGKILL leaves none in its
// consumer once the consumer has dropped the steps that viewed it, and the consumer still
// reads every element exactly once (the task moves to the other worker). Segments are memfds:
// nothing is ever created in /dev/shm.
//
// Every wait is bounded; every process is stopped (ProcessCluster, Subprocess destructors).
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/rpc/shm_segment.h"
#include "gtest/gtest.h"
#include "sluice/distributed_dataset.h"
#include "sluice/service.h"
#include "sluice/strategy.h"
#include "tests/integration/process_cluster.h"

namespace sluice {
namespace {

const std::string kMemfdName = absl::StrCat("/memfd:", kShmSegmentName);

// The inodes of the segments process `pid` holds open (/proc/<pid>/fd).
std::set<uint64_t> SegmentFds(pid_t pid) {
  std::set<uint64_t> out;
  const std::string dir = absl::StrCat("/proc/", pid, "/fd");
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    const std::string path = absl::StrCat(dir, "/", e->d_name);
    char target[512];
    const ssize_t n = readlink(path.c_str(), target, sizeof(target) - 1);
    if (n <= 0) continue;
    if (std::string(target, static_cast<size_t>(n)).rfind(kMemfdName, 0) != 0) continue;
    struct stat st;
    if (stat(path.c_str(), &st) == 0) out.insert(st.st_ino);
  }
  closedir(d);
  return out;
}

// The inodes of the segments process `pid` has mapped (/proc/<pid>/maps, column 5).
std::set<uint64_t> SegmentMaps(pid_t pid) {
  std::set<uint64_t> out;
  std::ifstream maps(absl::StrCat("/proc/", pid, "/maps"));
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find(kMemfdName) == std::string::npos) continue;
    std::vector<std::string> cols = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (cols.size() >= 5) out.insert(std::stoull(cols[4]));
  }
  return out;
}

std::set<std::string> DevShm() {
  std::set<std::string> out;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) out.insert(e->d_name);
    closedir(d);
  }
  return out;
}

// Polls `done` every 20 ms for up to `timeout`.
bool WaitFor(const std::function<bool()>& done, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return true;
}

// The suite's TCP run (CTest prefix tcp., SLUICE_SHARED_MEMORY=0) has no segments to reclaim.
bool SharedMemoryOff() { return !SharedMemoryDefaultFromEnvironment(); }

TEST(ShmReclaimTest, AKilledConsumersSegmentIsGoneFromItsWorker) {
  if (SharedMemoryOff()) GTEST_SKIP() << "SLUICE_SHARED_MEMORY=0";
  const std::set<std::string> shm_before = DevShm();
  ProcessClusterOptions o;
  o.num_workers = 1;
  o.worker_buffer_bytes = 4096;  // the worker keeps streaming while the consumer lives
  // Kept segments would wait an hour: the dead consumer's goes because its stream did not end
  // cleanly (a killed consumer never names it again), not because the pool trimmed it.
  o.worker_flags = {"--shm_pool_idle=1h"};
  auto started = ProcessCluster::Start(o);
  ASSERT_TRUE(started.ok()) << started.status();
  ProcessCluster& c = **started;
  const pid_t worker = c.worker_pid(0);
  EXPECT_TRUE(SegmentFds(worker).empty());
  auto consumer = StartSluicectl({"run", "--coordinator=" + c.coordinator(), "--job=shm-kill",
                                  "--pipeline=range(100000000).batch(64)", "--devices=CPU:0",
                                  "--format=json", "--receive_budget_bytes=65536"});
  ASSERT_TRUE(consumer.ok()) << consumer.status();
  auto first = (*consumer)->WaitForOutput(SubprocessStream::kStdout, "\"step\": 0,",
                                          absl::Seconds(60));
  ASSERT_TRUE(first.ok()) << first.status() << c.Logs();
  // The stream took the shared-memory path: both ends hold the same segment.
  std::set<uint64_t> held;
  ASSERT_TRUE(WaitFor(
      [&] {
        held = SegmentFds(worker);
        const std::set<uint64_t> mapped = SegmentMaps((*consumer)->pid());
        return !held.empty() && std::includes(mapped.begin(), mapped.end(), held.begin(),
                                              held.end());
      },
      absl::Seconds(30)))
      << "no shared segment between worker and consumer" << c.Logs();
  ASSERT_TRUE((*consumer)->Signal(SIGKILL).ok());
  (void)(*consumer)->Wait(absl::Seconds(30));
  // The connection drops, the stream ends, the worker's ring and segment go.
  EXPECT_TRUE(WaitFor([&] { return SegmentFds(worker).empty() && SegmentMaps(worker).empty(); },
                      absl::Seconds(60)))
      << "the worker still holds a dead consumer's segment" << c.Logs();
  EXPECT_TRUE(c.CheckRunning().ok()) << c.Logs();
  EXPECT_EQ(DevShm(), shm_before);
  EXPECT_TRUE(c.StopAll().ok()) << c.Logs();
}

TEST(ShmReclaimTest, AKilledWorkersSegmentIsGoneOnceItsStepsAreDropped) {
  if (SharedMemoryOff()) GTEST_SKIP() << "SLUICE_SHARED_MEMORY=0";
  const std::set<std::string> shm_before = DevShm();
  ProcessClusterOptions o;
  o.num_workers = 2;
  o.worker_timeout = absl::Seconds(2);  // the dead worker's task moves quickly
  o.worker_buffer_bytes = 4096;
  auto started = ProcessCluster::Start(o);
  ASSERT_TRUE(started.ok()) << started.status();
  ProcessCluster& c = **started;
  const pid_t killed = c.worker_pid(0);

  auto strategy = MirroredStrategy::Create({"CPU:0"});
  ASSERT_TRUE(strategy.ok());
  ServiceOptions options;
  options.coordinator_address = c.coordinator();
  options.job_name = "shm-worker-kill";
  options.sharding_policy = ServiceShardingPolicy::kData;
  options.receive_budget_bytes = 4096;
  options.retry_deadline = absl::Seconds(90);
  constexpr int64_t kElements = 20000;
  auto dist = DistributeDatasetFromService(*strategy, Dataset::Range(kElements).Batch(8), options);
  ASSERT_TRUE(dist.ok()) << dist.status();
  auto it = dist->MakeIterator();
  ASSERT_TRUE(it.ok()) << it.status();
  std::vector<int64_t> seen;
  auto take = [&](const PerReplica<Element>& x) {
    const Tensor& t = x.values()[0].leaf();
    seen.insert(seen.end(), t.data<int64_t>(), t.data<int64_t>() + t.num_elements());
  };
  // Read until this process maps a segment of worker 0.
  std::set<uint64_t> from_killed;
  for (int s = 0; s < 2000 && from_killed.empty(); ++s) {
    absl::StatusOr<PerReplica<Element>> x = it->GetNext();
    ASSERT_TRUE(x.ok()) << x.status() << c.Logs();
    take(*x);
    const std::set<uint64_t> mine = SegmentMaps(getpid());
    for (uint64_t ino : SegmentFds(killed)) {
      if (mine.count(ino) > 0) from_killed.insert(ino);
    }
  }
  ASSERT_FALSE(from_killed.empty()) << "no segment of worker 0 mapped here" << c.Logs();
  ASSERT_TRUE(c.KillWorker(0).ok());
  // The rest, exactly once, while the task of the dead worker moves.
  for (int s = 0; s < 100000; ++s) {
    absl::StatusOr<PerReplica<Element>> x = it->GetNext();
    if (!x.ok()) {
      ASSERT_EQ(x.status().code(), absl::StatusCode::kOutOfRange) << x.status() << c.Logs();
      break;
    }
    take(*x);
  }
  std::sort(seen.begin(), seen.end());
  ASSERT_EQ(seen.size(), static_cast<size_t>(kElements));
  for (int64_t i = 0; i < kElements; ++i) ASSERT_EQ(seen[i], i);
  // Every step of the dead worker's stream is consumed and dropped: its segment is unmapped
  // and its descriptor closed in this process.
  auto gone = [&] {
    const std::set<uint64_t> maps = SegmentMaps(getpid());
    const std::set<uint64_t> fds = SegmentFds(getpid());
    for (uint64_t ino : from_killed) {
      if (maps.count(ino) > 0 || fds.count(ino) > 0) return false;
    }
    return true;
  };
  EXPECT_TRUE(WaitFor(gone, absl::Seconds(30))) << "a dead worker's segment is still mapped";
  EXPECT_EQ(DevShm(), shm_before);
  EXPECT_TRUE(c.StopAll().ok()) << c.Logs();
}

}  // namespace
}  // namespace sluice
