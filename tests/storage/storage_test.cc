// Storage tests (label `storage`) against a real S3-compatible server: moto in server mode,
// installed by scripts/test.sh into $SLUICE_BUILD_DIR/storage-venv (the tests skip, saying so,
// when it is not there, and fail instead under CI=true). Each test starts its own server on
// 127.0.0.1 (port 0, the port read from its log) with signature checking on: the fixture makes
// an IAM user in the first three unauthenticated calls, so every later request, Sluice's
// included, must carry a valid SigV4 signature. TFRecord shards are written locally and uploaded; then
//  - in process: list_files globs (ListObjectsV2), ranged and read-ahead reads of small and large
//    objects, and WebDataset shards give exactly the local values; a missing key is NOT_FOUND
//    and a wrong secret PERMISSION_DENIED, both naming the URL;
//  - a service job (real coordinator, 3 workers, 2 consumers x 2 replicas, DATA sharding) on the
//    s3:// shards, with a worker SIGKILLed mid-epoch, gives exactly the steps of the same job on
//    the local files;
//  - snapshots saved to s3:// (docs/SNAPSHOTS.md): `sluicectl save --path=s3://...` of the shards
//    and the 12 MB file (a chunk of 12 multipart parts of 1 MiB; moto takes parts that small with
//    S3_UPLOAD_PART_MIN_SIZE) loads back exactly the pipeline's elements; a save of 400 chunks
//    under a worker SIGKILL and a coordinator kill and restart loads back every element exactly
//    once; a save whose sluicectl is SIGKILLed is refused without --resume and finishes with
//    it, every element once; a second save to a locked path is refused (the lock is a conditional PUT, which moto
//    honours).
// The server listens on loopback, which remote reads refuse unless a data root names the
// endpoint: this process installs roots for its folder, the bucket and the endpoint, and the
// coordinator and workers get the same --data_root, as a user would run them.
// The server is stopped (SIGTERM, then reaped) at the end of each test.
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "sluice/dataset.h"
#include "sluice/snapshot_save.h"
#include "core/data/data_roots.h"
#include "core/data/ops/snapshot_manifest.h"
#include "core/io/file_system.h"
#include "core/io/object_store_file_system.h"
#include "core/format/tensor_format.h"
#include "core/io/tfrecord_writer.h"
#include "gtest/gtest.h"
#include "tests/ci_environment.h"
#include "tests/core/iterator_test_util.h"
#include "tests/core/record_test_util.h"
#include "tests/examples/subprocess.h"
#include "tests/integration/process_cluster.h"
#include "tests/integration/step_model.h"

namespace sluice {
namespace {

constexpr char kBucket[] = "sluice-test";
constexpr int kShards = 6;
constexpr int kPerShard = 100;
// The part size of this process's and the workers' uploads (SLUICE_UPLOAD_PART_BYTES).
constexpr size_t kSmallPartBytes = size_t{1} << 20;

std::string BuildDir() {
  const char* d = std::getenv("SLUICE_BUILD_DIR");
  return d != nullptr ? d : "build";
}

// One moto server with an IAM user, and the local copy of what was uploaded.
class S3StorageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string venv = BuildDir() + "/storage-venv/bin/";
    if (!std::filesystem::exists(venv + "moto_server")) {
      const std::string why = absl::StrCat(
          "no S3-compatible server: ", venv,
          "moto_server is missing (scripts/test.sh installs moto[server] there from PyPI; it "
          "could not, or this build was not made by it)");
      // Under CI=true a dependency scripts/test.sh installs must be there: a skip would pass.
      if (InCi()) FAIL() << why << "; CI=true requires it";
      GTEST_SKIP() << why;
    }
    // Multipart parts down to kSmallPartBytes (S3 wants 5 MiB), so that snapshot chunks of a
    // test's size are multipart uploads.
    auto server = Subprocess::Start(
        {venv + "moto_server", "-H", "127.0.0.1", "-p", "0"},
        {.env = {"INITIAL_NO_AUTH_ACTION_COUNT=3",
                 absl::StrCat("S3_UPLOAD_PART_MIN_SIZE=", kSmallPartBytes)}});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    auto line = server_->WaitForOutput(SubprocessStream::kStderr, "Running on http://127.0.0.1:",
                                       absl::Seconds(60));
    ASSERT_TRUE(line.ok()) << line.status();
    endpoint_ = std::string(line->substr(line->find("http://")));
    while (!endpoint_.empty() && !absl::ascii_isdigit(endpoint_.back())) endpoint_.pop_back();

    auto keys = RunSubprocess(
        {venv + "python", "tests/storage/s3_fixture.py", endpoint_, "make-user"},
        {.env = {"AWS_ACCESS_KEY_ID=bootstrap", "AWS_SECRET_ACCESS_KEY=bootstrap"},
         .timeout = absl::Seconds(60)});
    ASSERT_TRUE(keys.ok()) << keys.status();
    ASSERT_EQ(keys->exit_code, 0) << keys->stderr_text;
    std::vector<std::string> kv = absl::StrSplit(keys->stdout_text, absl::ByAnyChar(" \n"),
                                                 absl::SkipEmpty());
    ASSERT_EQ(kv.size(), 2u) << keys->stdout_text;
    key_ = kv[0];
    secret_ = kv[1];

    // train/part-i.tfrecord: records "i*100" .. "i*100+99" as decimal strings; big/ one file
    // of 40 records of 300 KB (several read-ahead chunks).
    std::filesystem::create_directories(dir_.File("up/train"));
    std::filesystem::create_directories(dir_.File("up/big"));
    for (int s = 0; s < kShards; ++s) {
      std::string bytes;
      for (int j = 0; j < kPerShard; ++j) AppendTFRecord(absl::StrCat(s * kPerShard + j), &bytes);
      record_test::WriteWholeFile(dir_.File(absl::StrCat("up/train/part-", s, ".tfrecord")),
                                  bytes);
    }
    std::string big;
    for (int r = 0; r < 40; ++r) {
      std::string record(300000, '\0');
      for (size_t i = 0; i < record.size(); ++i) {
        record[i] = static_cast<char>((r * 7919 + i * 31 + (i >> 9)) & 0xff);
      }
      AppendTFRecord(record, &big);
    }
    record_test::WriteWholeFile(dir_.File("up/big/big.tfrecord"), big);
    std::filesystem::create_directories(dir_.File("up/wds"));
    for (const std::string shard : {"shard-000.tar", "shard-001.tar"}) {
      std::filesystem::copy_file("tests/testdata/webdataset/" + shard,
                                 dir_.File("up/wds/" + shard));
    }
    auto upload = RunSubprocess(
        {venv + "python", "tests/storage/s3_fixture.py", endpoint_, "upload", kBucket,
         dir_.File("up")},
        {.env = {"AWS_ACCESS_KEY_ID=" + key_, "AWS_SECRET_ACCESS_KEY=" + secret_},
         .timeout = absl::Seconds(120)});
    ASSERT_TRUE(upload.ok()) << upload.status();
    ASSERT_EQ(upload->exit_code, 0) << upload->stderr_text;

    // What the built-in s3:// file system, the coordinator and the workers read.
    setenv("AWS_ENDPOINT_URL", endpoint_.c_str(), 1);
    setenv("AWS_ACCESS_KEY_ID", key_.c_str(), 1);
    setenv("AWS_SECRET_ACCESS_KEY", secret_.c_str(), 1);
    setenv("AWS_REGION", "us-east-1", 1);
    unsetenv("AWS_SESSION_TOKEN");
    unsetenv("AWS_PROFILE");
    unsetenv("AWS_ENDPOINT_URL_S3");
    // Small chunks, so that even these objects are read in several parallel ranged GETs.
    setenv("SLUICE_READ_AHEAD_CHUNK_BYTES", "65536", 1);
    setenv("SLUICE_UPLOAD_PART_BYTES", absl::StrCat(kSmallPartBytes).c_str(), 1);
    // Reads in this process: the local folder, the bucket, and the loopback endpoint.
    absl::StatusOr<DataRoots> roots = DataRoots::Create(RootList());
    ASSERT_TRUE(roots.ok()) << roots.status();
    ASSERT_TRUE(InstallProcessDataRoots(*roots).ok());
    // This process's s3:// file system reads the settings now (it keeps its first ones).
    absl::StatusOr<ObjectStoreOptions> options =
        ObjectStoreOptionsFromEnvironment("s3", ProcessEnvironment());
    ASSERT_TRUE(options.ok()) << options.status();
    RegisterFileSystem("s3", NewObjectStoreFileSystem(*std::move(options)));
  }

  void TearDown() override {
    ASSERT_TRUE(InstallProcessDataRoots(DataRoots()).ok());
    if (server_ == nullptr) return;
    ASSERT_TRUE(server_->Signal(SIGTERM).ok());
    auto r = server_->Wait(absl::Seconds(30));
    EXPECT_TRUE(r.ok()) << r.status();
  }

  std::vector<std::string> RootList() const {
    return {dir_.path(), absl::StrCat("s3://", kBucket), endpoint_};
  }
  std::string DataRootFlag() const { return "--data_root=" + absl::StrJoin(RootList(), ","); }

  std::string Local(const std::string& rel) { return dir_.File("up/" + rel); }
  static std::string Remote(const std::string& rel) {
    return absl::StrCat("s3://", kBucket, "/", rel);
  }
  std::vector<std::string> Shards(bool remote) {
    std::vector<std::string> out;
    for (int s = 0; s < kShards; ++s) {
      const std::string rel = absl::StrCat("train/part-", s, ".tfrecord");
      out.push_back(remote ? Remote(rel) : Local(rel));
    }
    return out;
  }

  record_test::TempDir dir_;
  std::unique_ptr<Subprocess> server_;
  std::string endpoint_, key_, secret_;
};

absl::StatusOr<std::vector<std::string>> Render(const std::string& expression) {
  absl::StatusOr<Dataset> ds = Dataset::Parse(expression);
  if (!ds.ok()) return ds.status();
  absl::StatusOr<std::vector<Element>> got = testing_util::RunDataset(*ds);
  if (!got.ok()) return got.status();
  std::vector<std::string> out;
  for (const Element& e : *got) out.push_back(FormatElementRepr(e));
  return out;
}

std::string PyList(const std::vector<std::string>& names) {
  return absl::StrCat("['", absl::StrJoin(names, "', '"), "']");
}

TEST_F(S3StorageTest, ListsAndReadsExactlyWhatLocalFilesGive) {
  absl::StatusOr<std::vector<std::string>> listed =
      GlobFiles(Remote("train/part-*.tfrecord"));
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(*listed, Shards(/*remote=*/true));

  for (const std::string& tail :
       {std::string(").interleave(lambda f: tf_record_dataset(f), cycle_length=3)"),
        std::string(").interleave(lambda f: tf_record_dataset(f), cycle_length=2).batch(7)")}) {
    absl::StatusOr<std::vector<std::string>> local =
        Render(absl::StrCat("list_files('", Local("train/part-*.tfrecord"), "'", tail));
    ASSERT_TRUE(local.ok()) << local.status();
    absl::StatusOr<std::vector<std::string>> remote =
        Render(absl::StrCat("list_files('", Remote("train/part-*.tfrecord"), "'", tail));
    ASSERT_TRUE(remote.ok()) << remote.status();
    EXPECT_FALSE(local->empty());
    EXPECT_EQ(*remote, *local);
  }
  absl::StatusOr<std::vector<std::string>> local =
      Render(absl::StrCat("tf_record_dataset('", Local("big/big.tfrecord"), "')"));
  ASSERT_TRUE(local.ok()) << local.status();
  absl::StatusOr<std::vector<std::string>> remote =
      Render(absl::StrCat("tf_record_dataset('", Remote("big/big.tfrecord"), "')"));
  ASSERT_TRUE(remote.ok()) << remote.status();
  EXPECT_EQ(remote->size(), 40u);
  EXPECT_TRUE(*remote == *local) << "the 12 MB object read back differently";
}

// Through list_files + interleave (keys given: a lambda must name them) and read directly with
// each way of naming the keys (read from the first sample, or given): the s3:// shards give
// exactly the values of the local ones.
TEST_F(S3StorageTest, WebDatasetShardsFromS3AreTheLocalOnes) {
  const std::string tail =
      "').interleave(lambda f: webdataset_dataset(f, keys=['cls', 'jpg']), cycle_length=2)";
  absl::StatusOr<std::vector<std::string>> local =
      Render(absl::StrCat("list_files('", Local("wds/shard-*.tar"), tail));
  ASSERT_TRUE(local.ok()) << local.status();
  absl::StatusOr<std::vector<std::string>> remote =
      Render(absl::StrCat("list_files('", Remote("wds/shard-*.tar"), tail));
  ASSERT_TRUE(remote.ok()) << remote.status();
  EXPECT_EQ(local->size(), 6u);
  EXPECT_EQ(*remote, *local);
  for (const std::string& keys : {std::string(""), std::string(", keys=['cls', 'jpg']")}) {
    SCOPED_TRACE(keys.empty() ? "keys from the first sample" : "keys given");
    // Read directly, one shard after the other: the values of the same read of the local
    // shards, element by element.
    const auto direct_read = [&](bool remote_shards) {
      const auto name = [&](const std::string& rel) {
        return remote_shards ? Remote(rel) : Local(rel);
      };
      return Render(absl::StrCat("webdataset_dataset(['", name("wds/shard-000.tar"), "', '",
                                 name("wds/shard-001.tar"), "']", keys, ")"));
    };
    absl::StatusOr<std::vector<std::string>> direct = direct_read(/*remote_shards=*/true);
    ASSERT_TRUE(direct.ok()) << direct.status();
    absl::StatusOr<std::vector<std::string>> local_direct = direct_read(/*remote_shards=*/false);
    ASSERT_TRUE(local_direct.ok()) << local_direct.status();
    EXPECT_EQ(local_direct->size(), 6u);
    EXPECT_EQ(*direct, *local_direct);
    if (keys.empty()) {
      // The first sample's keys: more than the interleave's ('json' too), in every element.
      for (const std::string& e : *direct) EXPECT_TRUE(absl::StrContains(e, "'json': "));
      continue;
    }
    // The keys the interleave gives: the same samples as through it, in another order.
    std::vector<std::string> a = *direct, b = *local;
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    EXPECT_TRUE(a == b) << "the direct read and the interleave read other samples";
  }
}

TEST_F(S3StorageTest, MissingKeysAndWrongSecretsSayWhatAndWhere) {
  absl::StatusOr<std::vector<std::string>> missing =
      Render(absl::StrCat("tf_record_dataset('", Remote("train/nope.tfrecord"), "')"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound) << missing.status();
  EXPECT_TRUE(absl::StrContains(missing.status().message(), Remote("train/nope.tfrecord")))
      << missing.status();

  ObjectStoreOptions wrong;
  wrong.endpoint = endpoint_;
  wrong.credentials = {key_, "not-the-secret", ""};
  absl::StatusOr<FileStat> st =
      NewObjectStoreFileSystem(wrong)->Stat(Remote("train/part-0.tfrecord"));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), absl::StatusCode::kPermissionDenied) << st.status();
  EXPECT_TRUE(absl::StrContains(st.status().message(), Remote("train/part-0.tfrecord")))
      << st.status();

  // Without a root naming the loopback endpoint, the right secret gets nowhere either: the
  // endpoint is refused before a connection is made.
  ObjectStoreOptions unlisted;
  unlisted.endpoint = endpoint_;
  unlisted.credentials = {key_, secret_, ""};
  unlisted.access = *RemoteAccessPolicy::Create({});
  st = NewObjectStoreFileSystem(unlisted)->Stat(Remote("train/part-0.tfrecord"));
  EXPECT_EQ(st.status().code(), absl::StatusCode::kPermissionDenied) << st.status();
  EXPECT_TRUE(absl::StrContains(st.status().message(), "--data_root=" + endpoint_))
      << st.status();
}

// Runs 2 consumers of `pipeline` on `cluster` as job `job`; with `kill_worker`, worker 1 is
// SIGKILLed once consumer 0 has printed step 20 (consumers paused around the kill, so that it
// lands mid-epoch). Returns each consumer's steps.
void RunJob(ProcessCluster& cluster, const std::string& job, const std::string& pipeline,
            bool kill_worker, std::vector<std::vector<ModelStep>>* views) {
  std::vector<std::unique_ptr<Subprocess>> consumers;
  for (int c = 0; c < 2; ++c) {
    auto p = StartSluicectl({"run", "--coordinator=" + cluster.coordinator(), "--job=" + job,
                             "--pipeline=" + pipeline, "--devices=CPU:0,CPU:1",
                             absl::StrCat("--consumer_index=", c), "--num_consumers=2",
                             "--sharding_policy=DATA", "--read_mode=coordinated",
                             "--format=json", "--retry_deadline=60s",
                             // A small receive budget keeps each consumer a few steps ahead:
                             // with the 64 MiB default it could hold this whole small job by
                             // step 20, and worker 1 would have no unfinished task to lose.
                             "--receive_budget_bytes=1024"});
    ASSERT_TRUE(p.ok()) << p.status();
    consumers.push_back(*std::move(p));
  }
  if (kill_worker) {
    auto seen = consumers[0]->WaitForOutput(SubprocessStream::kStdout, "{\"step\": 20,",
                                            absl::Seconds(120));
    ASSERT_TRUE(seen.ok()) << seen.status() << consumers[0]->stderr_text() << cluster.Logs();
    for (auto& p : consumers) ASSERT_TRUE(p->Signal(SIGSTOP).ok());
    // The kill must cost the job a task: worker 1 holds one that is not finished.
    auto status = cluster.Status();
    ASSERT_TRUE(status.ok()) << status.status();
    bool holds_unfinished = false;
    for (const proto::JobStatus& j : status->jobs()) {
      for (const proto::TaskInfo& t : j.tasks()) {
        holds_unfinished |= j.job_name() == job && !t.finished() &&
                            t.worker_address() == cluster.worker_address(1);
      }
    }
    EXPECT_TRUE(holds_unfinished) << status->DebugString();
    ASSERT_TRUE(cluster.KillWorker(1).ok());
    for (auto& p : consumers) ASSERT_TRUE(p->Signal(SIGCONT).ok());
  }
  for (int c = 0; c < 2; ++c) {
    auto r = consumers[c]->Wait(absl::Seconds(180));
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->exit_code, 0) << "consumer " << c << ": " << r->Describe() << "\n"
                               << r->stderr_text << cluster.Logs();
    auto steps = ParseRunJson(r->stdout_text);
    ASSERT_TRUE(steps.ok()) << steps.status();
    views->push_back(*std::move(steps));
  }
}

TEST_F(S3StorageTest, ServiceJobOnS3EqualsTheLocalJobUnderAWorkerKill) {
  auto cluster = ProcessCluster::Start({.num_workers = 3,
                                        .worker_timeout = absl::Seconds(1),
                                        .heartbeat_interval = absl::Milliseconds(100),
                                        .worker_buffer_bytes = 512,
                                        .coordinator_flags = {DataRootFlag()},
                                        .worker_flags = {DataRootFlag()}});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  std::vector<std::vector<ModelStep>> local, remote;
  RunJob(**cluster, "local",
         absl::StrCat("tf_record_dataset(", PyList(Shards(false)), ").batch(4)"),
         /*kill_worker=*/false, &local);
  RunJob(**cluster, "s3", absl::StrCat("tf_record_dataset(", PyList(Shards(true)), ").batch(4)"),
         /*kill_worker=*/true, &remote);
  ASSERT_EQ(local.size(), 2u);
  ASSERT_EQ(remote.size(), 2u);
  EXPECT_EQ(remote, local);
  std::map<int64_t, int> count;
  for (const auto& view : local) {
    for (const ModelStep& step : view) {
      for (const auto& piece : step) {
        for (int64_t v : piece) ++count[v];
      }
    }
  }
  EXPECT_EQ(count.size(), static_cast<size_t>(kShards * kPerShard));
  for (const auto& [v, n] : count) EXPECT_EQ(n, 1) << "value " << v;
  EXPECT_FALSE((*cluster)->worker_running(1));
  absl::Status stopped = (*cluster)->StopAll();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

// The committed chunks of the snapshot at `url`, by size.
std::vector<uint64_t> ChunkSizes(const std::string& url) {
  std::vector<uint64_t> out;
  absl::StatusOr<std::vector<std::string>> chunks =
      GlobFiles(SnapshotChunksDirectory(url) + "/chunk-*.tfrecord");
  if (!chunks.ok()) return out;
  for (const std::string& c : *chunks) {
    absl::StatusOr<FileStat> st = StatFile(c);
    if (st.ok()) out.push_back(st->size);
  }
  return out;
}

std::vector<std::string> Sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST_F(S3StorageTest, SnapshotSavedToS3LoadsBackThePipelineExactlyOnce) {
  auto cluster = ProcessCluster::Start({.coordinator_flags = {DataRootFlag()},
                                        .worker_flags = {DataRootFlag()}});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  std::vector<std::string> files = Shards(/*remote=*/true);
  files.push_back(Remote("big/big.tfrecord"));
  const std::string pipeline = absl::StrCat("tf_record_dataset(", PyList(files), ")");
  const std::string snap = Remote("snapshots/one");
  auto save = StartSluicectl({"save", "--coordinator=" + (*cluster)->coordinator(),
                              "--pipeline=" + pipeline, "--path=" + snap, "--retry_deadline=120s",
                              DataRootFlag()});
  ASSERT_TRUE(save.ok()) << save.status();
  absl::StatusOr<SubprocessResult> r = (*save)->Wait(absl::Seconds(300));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->exit_code, 0) << r->stderr_text << (*cluster)->Logs();
  EXPECT_TRUE(absl::StrContains(r->stdout_text, "saved 640 elements in 7 chunks"))
      << r->stdout_text;

  // The big file's chunk (12 MB) went up in 1 MiB parts: a multipart upload moto completed.
  const std::vector<uint64_t> sizes = ChunkSizes(snap);
  ASSERT_EQ(sizes.size(), 7u);
  EXPECT_GT(*std::max_element(sizes.begin(), sizes.end()), 10 * kSmallPartBytes);
  // Done: the manifest lists the chunks, and the lock is gone.
  absl::StatusOr<proto::SnapshotManifest> m = ReadSnapshotManifest(snap);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(m->done());
  EXPECT_EQ(m->num_elements(), 640);
  EXPECT_TRUE(absl::IsNotFound(StatFile(SnapshotLockPath(snap)).status()));

  absl::StatusOr<std::vector<std::string>> loaded = Render(absl::StrCat("load('", snap, "')"));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  absl::StatusOr<std::vector<std::string>> expected = Render(pipeline);
  ASSERT_TRUE(expected.ok()) << expected.status();
  ASSERT_EQ(loaded->size(), 640u);
  EXPECT_EQ(Sorted(*loaded), Sorted(*expected));
  EXPECT_TRUE((*cluster)->StopAll().ok());
}

TEST_F(S3StorageTest, SnapshotSaveToS3ResumesAfterWorkerAndCoordinatorKills) {
  if (!BinaryHasFlag("bin/sluice-coordinator", "work_dir")) GTEST_SKIP() << "no --work_dir";
  auto cluster = ProcessCluster::Start({.num_workers = 3,
                                        .worker_timeout = absl::Seconds(2),
                                        .work_dir = true,
                                        .coordinator_flags = {DataRootFlag()},
                                        .worker_flags = {DataRootFlag()}});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  constexpr int64_t kN = 20000;
  const std::string snap = Remote("snapshots/faults");
  auto save = StartSluicectl({"save", "--coordinator=" + (*cluster)->coordinator(),
                              "--pipeline=range(20000)", "--path=" + snap, "--split_size=50",
                              "--retry_deadline=120s", DataRootFlag()});
  ASSERT_TRUE(save.ok()) << save.status();
  // Faults once the first chunks are committed (bounded: 60 s of 20 ms polls).
  for (int i = 0; i < 3000 && ChunkSizes(snap).size() < 5; ++i) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  const size_t before = ChunkSizes(snap).size();
  ASSERT_TRUE((*cluster)->KillWorker(0).ok());
  ASSERT_TRUE((*cluster)->KillCoordinator().ok());
  ASSERT_TRUE((*cluster)->RestartCoordinator().ok());
  absl::StatusOr<SubprocessResult> r = (*save)->Wait(absl::Seconds(300));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->exit_code, 0) << r->stderr_text << (*cluster)->Logs();
  EXPECT_TRUE(absl::StrContains(r->stdout_text, "saved 20000 elements in 400 chunks"))
      << r->stdout_text;
  std::cout << "chunks committed before the faults: " << before << " of 400\n";

  // Every element exactly once: the loaded multiset is range(20000)'s.
  absl::StatusOr<std::vector<std::string>> loaded = Render(absl::StrCat("load('", snap, "')"));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  absl::StatusOr<std::vector<std::string>> expected = Render("range(20000)");
  ASSERT_TRUE(expected.ok()) << expected.status();
  ASSERT_EQ(loaded->size(), static_cast<size_t>(kN));
  EXPECT_EQ(Sorted(*loaded), Sorted(*expected));
  EXPECT_TRUE((*cluster)->StopAll().ok());
}

TEST_F(S3StorageTest, InterruptedSaveToS3ResumesWithEveryElementOnce) {
  auto cluster = ProcessCluster::Start({.coordinator_flags = {DataRootFlag()},
                                        .worker_flags = {DataRootFlag()}});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string snap = Remote("snapshots/resumed");
  const std::vector<std::string> args = {"save", "--coordinator=" + (*cluster)->coordinator(),
                                         "--pipeline=range(20000)", "--path=" + snap,
                                         "--split_size=50", "--retry_deadline=120s",
                                         DataRootFlag()};
  auto first = StartSluicectl(args);
  ASSERT_TRUE(first.ok()) << first.status();
  // The save is killed once its first chunks are committed (bounded: 60 s of 20 ms polls).
  for (int i = 0; i < 3000 && ChunkSizes(snap).size() < 5; ++i) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_TRUE((*first)->Signal(SIGKILL).ok());
  ASSERT_TRUE((*first)->Wait(absl::Seconds(30)).ok());
  std::cout << "chunks committed before the kill: " << ChunkSizes(snap).size() << " of 400\n";

  // Without --resume the lock refuses; with it the save finishes.
  absl::StatusOr<SubprocessResult> refused =
      RunSubprocess([&] {
        std::vector<std::string> argv = {BuildDir() + "/bin/sluicectl"};
        argv.insert(argv.end(), args.begin(), args.end());
        return argv;
      }(), {.timeout = absl::Seconds(120)});
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_NE(refused->exit_code, 0);
  EXPECT_TRUE(absl::StrContains(refused->stderr_text, "two saves to one directory"))
      << refused->stderr_text;
  std::vector<std::string> resume_args = args;
  resume_args.push_back("--resume");
  auto second = StartSluicectl(resume_args);
  ASSERT_TRUE(second.ok()) << second.status();
  absl::StatusOr<SubprocessResult> r = (*second)->Wait(absl::Seconds(300));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->exit_code, 0) << r->stderr_text << (*cluster)->Logs();
  EXPECT_TRUE(absl::StrContains(r->stdout_text, "saved 20000 elements in 400 chunks"))
      << r->stdout_text;

  absl::StatusOr<std::vector<std::string>> loaded = Render(absl::StrCat("load('", snap, "')"));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  absl::StatusOr<std::vector<std::string>> expected = Render("range(20000)");
  ASSERT_TRUE(expected.ok()) << expected.status();
  EXPECT_EQ(Sorted(*loaded), Sorted(*expected));
  EXPECT_TRUE((*cluster)->StopAll().ok());
}

TEST_F(S3StorageTest, SecondSaveToALockedS3PathIsRefused) {
  const std::string snap = Remote("snapshots/locked");
  ASSERT_TRUE(AcquireSnapshotLock(snap, "first-owner").ok());
  // The conditional PUT is what refuses: the lock object exists.
  absl::Status again = AcquireSnapshotLock(snap, "second-owner");
  EXPECT_TRUE(absl::IsAlreadyExists(again)) << again;
  EXPECT_TRUE(absl::StrContains(again.message(), "first-owner")) << again;
  absl::StatusOr<std::string> owner = SnapshotLockOwner(snap);
  ASSERT_TRUE(owner.ok()) << owner.status();
  EXPECT_EQ(*owner, "first-owner");

  // A whole save is refused before it starts a job (the coordinator is never reached).
  absl::StatusOr<Dataset> ds = Dataset::Parse("range(10)");
  ASSERT_TRUE(ds.ok());
  SnapshotSaveOptions options;
  options.service.coordinator_address = "127.0.0.1:1";
  absl::StatusOr<SnapshotSaveResult> saved = SaveSnapshot(*ds, snap, options);
  EXPECT_TRUE(absl::IsAlreadyExists(saved.status())) << saved.status();
  EXPECT_TRUE(absl::StrContains(saved.status().message(), "two saves to one directory"))
      << saved.status();

  ASSERT_TRUE(ReleaseSnapshotLock(snap).ok());
  EXPECT_TRUE(absl::IsNotFound(SnapshotLockOwner(snap).status()));
  EXPECT_TRUE(AcquireSnapshotLock(snap, "third-owner").ok());
}

}  // namespace
}  // namespace sluice
