// Group commit of the journal (server/group_commit.h, server/journal.h): records written by
// concurrent requests share one sync, and every one of them is durable and replayed. The file
// is a fake whose Sync() blocks until the test lets it go, so that the overlap is certain.
#include "server/group_commit.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"
#include "server/coordinator_state.h"
#include "server/journal.h"
#include "tests/server/journal_test_util.h"

namespace sluice {
namespace {

// Counts syncs; the `gate_at`-th one blocks until release() (no sleeps: the test waits on the
// GroupCommit's own count of waiters).
class GatedFile : public AppendFile {
 public:
  explicit GatedFile(std::unique_ptr<AppendFile> inner, int gate_at = 1)
      : inner_(std::move(inner)), gate_at_(gate_at) {}
  absl::Status Append(absl::string_view data) override { return inner_->Append(data); }
  absl::Status Sync() override {
    {
      absl::MutexLock lock(&mu_);
      ++syncs_;
      if (syncs_ == gate_at_) {
        entered_.Notify();
        mu_.Await(absl::Condition(&released_));
      }
    }
    return inner_->Sync();
  }
  absl::Status Truncate(uint64_t size) override { return inner_->Truncate(size); }

  void release() {
    absl::MutexLock lock(&mu_);
    released_ = true;
  }
  int syncs() {
    absl::MutexLock lock(&mu_);
    return syncs_;
  }
  absl::Notification entered_;

 private:
  std::unique_ptr<AppendFile> inner_;
  const int gate_at_;
  absl::Mutex mu_;
  int syncs_ = 0;
  bool released_ = false;
};

// The journal's file system, with every segment gated at its second sync (the first is the
// journal's own when it opens the segment, before any request).
class GatedFileSystem : public journal_test::FakeFileSystem {
 public:
  absl::StatusOr<std::unique_ptr<AppendFile>> OpenAppend(const std::string& path) override {
    absl::StatusOr<std::unique_ptr<AppendFile>> inner = FakeFileSystem::OpenAppend(path);
    if (!inner.ok()) return inner.status();
    auto file = std::make_unique<GatedFile>(*std::move(inner), /*gate_at=*/2);
    last_ = file.get();
    return std::unique_ptr<AppendFile>(std::move(file));
  }
  GatedFile* last_ = nullptr;
};

proto::Update Dataset(int i) {
  proto::Update u;
  u.mutable_register_dataset()->set_dataset_id(absl::StrCat("ds-", i));
  return u;
}

TEST(GroupCommitTest, ConcurrentAppendsShareSyncsAndAllAreReplayed) {
  constexpr int kAppends = 8;
  GatedFileSystem fs;
  JournalOptions options;
  options.dir = "/journal";
  options.fs = &fs;
  CoordinatorState state;
  auto journal = Journal::Open(options, &state);
  ASSERT_TRUE(journal.ok()) << journal.status();
  GatedFile* file = fs.last_;
  ASSERT_NE(file, nullptr);

  // The first request writes its record and syncs: the sync blocks.
  absl::StatusOr<uint64_t> first = (*journal)->Write({Dataset(0)});
  ASSERT_TRUE(first.ok());
  std::vector<absl::Status> results(kAppends);
  std::vector<std::thread> waiting;
  waiting.emplace_back([&] { results[0] = (*journal)->WaitDurable(*first); });
  file->entered_.WaitForNotification();
  // Meanwhile the others write theirs (under the coordinator's lock, in turn) and wait.
  for (int i = 1; i < kAppends; ++i) {
    absl::StatusOr<uint64_t> seq = (*journal)->Write({Dataset(i)});
    ASSERT_TRUE(seq.ok());
    waiting.emplace_back([&, i, s = *seq] { results[i] = (*journal)->WaitDurable(s); });
  }
  (*journal)->TEST_AwaitSyncWaiters(kAppends - 1);
  file->release();
  for (auto& t : waiting) t.join();
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
  // One sync for the first record, one for the seven written while it ran (and the one when
  // the journal opened).
  EXPECT_EQ(file->syncs(), 3);
  EXPECT_EQ((*journal)->syncs(), 2);
  EXPECT_LT(file->syncs(), kAppends);

  // Every record is in the journal: a restart replays all of them.
  CoordinatorState replayed;
  auto again = Journal::Open(options, &replayed);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(replayed.num_datasets(), static_cast<size_t>(kAppends));
  for (int i = 0; i < kAppends; ++i) {
    EXPECT_NE(replayed.FindDataset(absl::StrCat("ds-", i)), nullptr) << i;
  }
}

TEST(GroupCommitTest, TheCoordinatorSyncsWithoutItsLockAndRequestsShareSyncs) {
  // Requests that change the state while another request's journal sync runs are served (the
  // sync does not hold the coordinator's mutex) and then share the next sync.
  constexpr int kRequests = 6;
  GatedFileSystem fs;
  CoordinatorOptions options;
  options.work_dir = "/journal";
  options.journal_fs = &fs;
  options.log = [](absl::string_view) {};
  auto coordinator = Coordinator::Create(options);
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  GatedFile* file = fs.last_;
  ASSERT_NE(file, nullptr);
  auto register_dataset = [&](int i) {
    proto::RegisterDatasetRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_pipeline(absl::StrCat("range(", 10 + i, ").batch(2)"));
    proto::RegisterDatasetResponse resp;
    return (*coordinator)->RegisterDataset(req, &resp);
  };
  std::vector<absl::Status> results(kRequests);
  std::vector<std::thread> threads;
  threads.emplace_back([&] { results[0] = register_dataset(0); });
  file->entered_.WaitForNotification();  // request 0's sync runs, and blocks
  for (int i = 1; i < kRequests; ++i) {
    threads.emplace_back([&, i] { results[i] = register_dataset(i); });
  }
  (*coordinator)->TEST_AwaitSyncWaiters(kRequests - 1);  // each wrote its record meanwhile
  EXPECT_EQ((*coordinator)->Snapshot().updates_size(), kRequests);
  file->release();
  for (auto& t : threads) t.join();
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(file->syncs(), 3);  // the open's, request 0's, and one shared by the others

  // A restart replays every dataset.
  coordinator->reset();
  auto again = Coordinator::Create(options);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->Snapshot().updates_size(), kRequests);
}

TEST(GroupCommitTest, ARecordAlreadyCoveredNeedsNoSync) {
  GroupCommit commit;
  journal_test::FakeFileSystem fs;
  ASSERT_TRUE(fs.CreateDir("/d").ok());
  auto inner = fs.OpenAppend("/d/f");
  ASSERT_TRUE(inner.ok());
  auto file = std::make_shared<GatedFile>(*std::move(inner));
  file->release();
  const uint64_t a = commit.Written(file, 0);
  const uint64_t b = commit.Written(file, 0);
  EXPECT_TRUE(commit.WaitDurable(b).ok());
  EXPECT_TRUE(commit.WaitDurable(a).ok());  // covered by the sync for b
  EXPECT_EQ(file->syncs(), 1);
  commit.Written(file, 0);
  commit.AllDurable();  // a snapshot covers it
  EXPECT_TRUE(commit.WaitDurable(3).ok());
  EXPECT_EQ(file->syncs(), 1);
}

}  // namespace
}  // namespace sluice
