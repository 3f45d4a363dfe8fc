// `sluicectl save` against the real binaries while a worker is SIGKILLed and the coordinator
// is SIGKILLed and restarted on its journal (docs/SNAPSHOTS.md, "exactly once, under
// failures"): the save finishes, and the snapshot holds every element exactly once.
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "core/data/executor.h"
#include "core/data/ops/snapshot_manifest.h"
#include "gtest/gtest.h"
#include "sluice/snapshot.h"
#include "tests/integration/process_cluster.h"

namespace sluice {
namespace {

size_t CommittedChunks(const std::string& dir) {
  size_t n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(SnapshotChunksDirectory(dir), ec)) {
    if (IsSnapshotChunkName(e.path().filename().string())) ++n;
  }
  return n;
}

TEST(SnapshotFaultTest, SaveSurvivesAWorkerKillAndACoordinatorRestart) {
  if (!BinaryHasFlag("bin/sluice-coordinator", "work_dir")) GTEST_SKIP() << "no --work_dir";
  auto cluster = ProcessCluster::Start(
      {.num_workers = 3, .worker_timeout = absl::Seconds(2), .work_dir = true});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string dir = ::testing::TempDir() + "sluice_snapshot_fault";
  std::filesystem::remove_all(dir);
  constexpr int64_t kN = 20000;
  auto save = StartSluicectl({"save", "--coordinator=" + (*cluster)->coordinator(),
                              "--pipeline=range(20000)", "--path=" + dir, "--split_size=50",
                              "--retry_deadline=120s"});
  ASSERT_TRUE(save.ok()) << save.status();
  // Faults once the first chunks are committed (bounded: 60 s of 5 ms polls).
  for (int i = 0; i < 12000 && CommittedChunks(dir) < 5; ++i) absl::SleepFor(absl::Milliseconds(5));
  const size_t before = CommittedChunks(dir);
  ASSERT_TRUE((*cluster)->KillWorker(0).ok());
  ASSERT_TRUE((*cluster)->KillCoordinator().ok());
  ASSERT_TRUE((*cluster)->RestartCoordinator().ok());
  absl::StatusOr<SubprocessResult> r = (*save)->Wait(absl::Seconds(240));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->exit_code, 0) << r->stderr_text << (*cluster)->Logs();
  EXPECT_TRUE(absl::StrContains(r->stdout_text, "saved 20000 elements in 400 chunks"))
      << r->stdout_text;
  std::cout << "chunks committed before the faults: " << before << " of 400\n";

  absl::StatusOr<Dataset> ds = LoadSnapshot(dir);
  ASSERT_TRUE(ds.ok()) << ds.status();
  auto it = MakeIterator(*ds, {});
  ASSERT_TRUE(it.ok()) << it.status();
  std::vector<int64_t> values;
  for (int64_t i = 0; i <= kN; ++i) {
    Element e;
    bool end = false;
    ASSERT_TRUE((*it)->GetNext(&e, &end).ok());
    if (end) break;
    values.push_back(e.leaf().data<int64_t>()[0]);
  }
  std::sort(values.begin(), values.end());
  ASSERT_EQ(values.size(), static_cast<size_t>(kN));
  for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(values[static_cast<size_t>(i)], i);
  EXPECT_TRUE((*cluster)->StopAll().ok());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sluice
