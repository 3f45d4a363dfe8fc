// Distributed snapshots through an in-process cluster (include/sluice/snapshot_save.h): the
// workers write every element exactly once, also when a worker stops mid-save; the manifest is
// finished and the lock released; a loaded snapshot is read through the service split across
// workers; a second save to one directory is refused; an interrupted save resumes.
#include <atomic>
#include <cstdio>
#include <iostream>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/data/ops/snapshot_manifest.h"
#include "gtest/gtest.h"
#include "sluice/snapshot.h"
#include "sluice/snapshot_save.h"
#include "tests/core/iterator_test_util.h"
#include "tests/core/record_test_util.h"
#include "tests/worker/in_process_cluster.h"
#include "worker/worker_server.h"

namespace sluice {
namespace {

using record_test::TempDir;

SnapshotSaveOptions SaveOptions(const Cluster& cluster, int64_t split_size) {
  SnapshotSaveOptions o;
  o.service.coordinator_address = cluster.address();
  o.split_size = split_size;
  return o;
}

size_t CountChunkFiles(const std::string& dir, bool temporary) {
  size_t n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(SnapshotChunksDirectory(dir), ec)) {
    const std::string name = e.path().filename().string();
    if (temporary ? absl::StartsWith(name, ".tmp-") : IsSnapshotChunkName(name)) ++n;
  }
  return n;
}

// Reads load(dir).batch(10) through the service, DYNAMIC over the cluster's workers (one chunk
// per split), and expects range(n) exactly once.
void ExpectServiceLoadExactlyOnce(const Cluster& cluster, const std::string& dir, int64_t n) {
  absl::StatusOr<Dataset> ds = LoadSnapshot(dir);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ServiceOptions options;
  options.job_name = "load:" + dir;
  options.sharding_policy = ServiceShardingPolicy::kDynamic;
  options.read_mode = ServiceReadMode::kIndependent;
  std::vector<Consumed> results = {Consume(cluster.address(), ds->Batch(10), options, 1)};
  ASSERT_TRUE(results[0].status.ok()) << results[0].status;
  ExpectExactlyOnce(results, n);
}

TEST(ServiceSnapshotTest, WorkersWriteEveryElementOnceAndLoadReadsItBack) {
  Cluster cluster(3);
  TempDir tmp;
  absl::StatusOr<SnapshotSaveResult> r =
      SaveSnapshot(Dataset::Range(1000), tmp.path(), SaveOptions(cluster, 100));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->num_elements, 1000);
  EXPECT_EQ(r->num_chunks, 10);
  absl::StatusOr<proto::SnapshotManifest> m = ReadSnapshotManifest(tmp.path());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(m->done());
  EXPECT_EQ(m->num_elements(), 1000);
  // Each chunk is listed with its size, which a load checks before it maps the chunk.
  for (const proto::SnapshotChunk& c : m->chunks()) {
    ASSERT_TRUE(c.has_num_bytes()) << c.name();
    EXPECT_EQ(static_cast<uintmax_t>(c.num_bytes()),
              std::filesystem::file_size(SnapshotChunksDirectory(tmp.path()) + "/" + c.name()));
  }
  EXPECT_EQ(CountChunkFiles(tmp.path(), false), 10u);
  EXPECT_EQ(CountChunkFiles(tmp.path(), true), 0u);
  EXPECT_FALSE(std::filesystem::exists(SnapshotLockPath(tmp.path())));
  ExpectServiceLoadExactlyOnce(cluster, tmp.path(), 1000);

  // A finished snapshot is not overwritten.
  absl::StatusOr<SnapshotSaveResult> again =
      SaveSnapshot(Dataset::Range(1000), tmp.path(), SaveOptions(cluster, 100));
  EXPECT_TRUE(absl::IsFailedPrecondition(again.status())) << again.status();
}

TEST(ServiceSnapshotTest, SecondSaveToOneDirectoryIsRefused) {
  Cluster cluster(1);
  TempDir tmp;
  // Another save holds the directory (its lock).
  ASSERT_TRUE(MakeLocalDirectories(tmp.path()).ok());
  ASSERT_TRUE(AcquireSnapshotLock(tmp.path(), Dataset::Range(10).Fingerprint()).ok());
  absl::StatusOr<SnapshotSaveResult> r =
      SaveSnapshot(Dataset::Range(50), tmp.path(), SaveOptions(cluster, 10));
  EXPECT_TRUE(absl::IsAlreadyExists(r.status())) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "save.lock")) << r.status();
  // resume=true continues only the same pipeline's save.
  SnapshotSaveOptions resume = SaveOptions(cluster, 10);
  resume.resume = true;
  r = SaveSnapshot(Dataset::Range(50), tmp.path(), resume);
  EXPECT_TRUE(absl::IsFailedPrecondition(r.status())) << r.status();
  // http(s) cannot be written (object stores can: tests/storage/).
  r = SaveSnapshot(Dataset::Range(50), "https://example.com/snap", SaveOptions(cluster, 10));
  EXPECT_TRUE(absl::IsUnimplemented(r.status())) << r.status();
}

TEST(ServiceSnapshotTest, InterruptedSaveResumesWithoutDuplicates) {
  Cluster cluster(2);
  TempDir tmp;
  const Dataset ds = Dataset::Range(300);
  ASSERT_TRUE(SaveSnapshot(ds, tmp.path(), SaveOptions(cluster, 50)).ok());
  // As if the saving process died before its last step: the manifest not done, the lock held,
  // a dead writer's temporary file beside the committed chunks.
  absl::StatusOr<proto::SnapshotManifest> m = ReadSnapshotManifest(tmp.path());
  ASSERT_TRUE(m.ok());
  m->clear_chunks();
  m->set_done(false);
  m->set_num_elements(0);
  ASSERT_TRUE(WriteSnapshotManifest(tmp.path(), *m).ok());
  ASSERT_TRUE(AcquireSnapshotLock(tmp.path(), ds.Fingerprint()).ok());
  std::FILE* f = std::fopen((SnapshotChunksDirectory(tmp.path()) + "/.tmp-dead").c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("half a chunk", f);
  std::fclose(f);

  SnapshotSaveOptions resume = SaveOptions(cluster, 50);
  absl::StatusOr<SnapshotSaveResult> without = SaveSnapshot(ds, tmp.path(), SaveOptions(cluster, 50));
  EXPECT_TRUE(absl::IsAlreadyExists(without.status())) << without.status();
  resume.resume = true;
  absl::StatusOr<SnapshotSaveResult> r = SaveSnapshot(ds, tmp.path(), resume);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->num_elements, 300);
  EXPECT_EQ(r->num_chunks, 6);
  EXPECT_EQ(CountChunkFiles(tmp.path(), true), 0u);
  ExpectServiceLoadExactlyOnce(cluster, tmp.path(), 300);
}

TEST(ServiceSnapshotTest, WorkerStoppedMidSaveLosesAndDuplicatesNothing) {
  Cluster cluster(3, /*worker_timeout=*/absl::Seconds(2));
  TempDir tmp;
  constexpr int64_t kN = 6000;
  std::atomic<bool> done{false};
  absl::StatusOr<SnapshotSaveResult> r;
  std::thread saver([&] {
    r = SaveSnapshot(Dataset::Range(kN), tmp.path(), SaveOptions(cluster, 20));
    done = true;
  });
  // Stop a worker once the first chunks are committed (bounded: 60 s of 1 ms polls).
  for (int i = 0; i < 60000 && !done && CountChunkFiles(tmp.path(), false) < 3; ++i) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  const bool stopped_mid_save = !done;
  cluster.worker(0)->Stop();
  saver.join();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->num_elements, kN);
  EXPECT_EQ(r->num_chunks, kN / 20);
  std::cout << "worker stopped " << (stopped_mid_save ? "mid-save" : "after the save") << "\n";
  ExpectServiceLoadExactlyOnce(cluster, tmp.path(), kN);
}


// A save whose job fails records the error in the manifest: a load with wait=True stops at once
// quoting it (instead of waiting out its timeout), and the resumed save clears it.
TEST(ServiceSnapshotTest, AFailedSaveIsReportedByWaitingLoadsAtOnce) {
  Cluster cluster(1);
  TempDir tmp;
  const std::string bad = tmp.File("bad.tfrecord");
  record_test::WriteWholeFile(bad, "not a TFRecord file: not even its first header");
  const std::string dir = tmp.path() + "/snap";
  absl::StatusOr<Dataset> ds = Dataset::Parse("tf_record_dataset('" + bad + "')");
  ASSERT_TRUE(ds.ok()) << ds.status();
  absl::StatusOr<SnapshotSaveResult> r = SaveSnapshot(*ds, dir, SaveOptions(cluster, 100));
  ASSERT_FALSE(r.ok());
  absl::StatusOr<proto::SnapshotManifest> m = ReadSnapshotManifest(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_FALSE(m->done());
  ASSERT_FALSE(m->save_error().empty());  // else the load below would wait its 600 s

  absl::StatusOr<Dataset> waiting = LoadSnapshot(dir, /*wait=*/true);  // default timeout: 600 s
  ASSERT_TRUE(waiting.ok()) << waiting.status();
  absl::StatusOr<std::vector<Element>> got = testing_util::RunDataset(*waiting);
  EXPECT_TRUE(absl::IsFailedPrecondition(got.status())) << got.status();
  EXPECT_TRUE(absl::StrContains(got.status().message(), "save failed")) << got.status();
  EXPECT_TRUE(absl::StrContains(got.status().message(), m->save_error())) << got.status();

  // The file is fixed; the same save resumed clears the error and finishes.
  record_test::WriteWholeFile(bad, "");
  SnapshotSaveOptions resume = SaveOptions(cluster, 100);
  resume.resume = true;
  r = SaveSnapshot(*ds, dir, resume);
  ASSERT_TRUE(r.ok()) << r.status();
  m = ReadSnapshotManifest(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(m->done());
  EXPECT_TRUE(m->save_error().empty());
}

}  // namespace
}  // namespace sluice
