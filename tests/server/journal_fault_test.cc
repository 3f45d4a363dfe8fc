// The journal under a failing disk and at every crash point (issue 32, "A journal you can
// trust"): a fault-injecting file system (server/fault_injecting_journal_file.h) over an
// in-memory one that knows what a crash keeps (tests/server/crash_simulating_fs.h).
//
// - Every failed sync is sticky and fatal: a failed fdatasync, a failed undo of a failed append
//   (PostgreSQL's fsync lesson: no later successful sync acknowledges a record whose pages the
//   failed one may have dropped), a failed directory sync after a snapshot's rename.
// - A snapshot whose directory sync failed never hides records appended after it.
// - Replay tolerates one torn tail after the last synced byte: a later page kept while an
//   earlier one was lost (group commit) is not DATA_LOSS; a damaged synced record still is.
// - A crash at every operation of a scripted run, with unsynced bytes dropped, torn in pages
//   (zeros or garbage, in any order) or with unsynced directory changes kept: the coordinator
//   starts, and holds every acknowledged record (the state after a prefix of the records no
//   shorter than what was answered).
// - One event, one record: a worker's death and a task's end that ends its job, each undone
//   whole by a failed write, so that a retry applies it once.
#include <algorithm>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "core/util/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/journal_record.pb.h"
#include "server/coordinator.h"
#include "server/coordinator_state.h"
#include "server/fault_injecting_journal_file.h"
#include "server/journal.h"
#include "tests/server/crash_simulating_fs.h"
#include "tests/server/journal_history.h"
#include "tests/server/journal_test_util.h"

namespace sluice {
namespace {

using journal_test::CrashMode;
using journal_test::CrashOptions;
using journal_test::CrashSimulatingFileSystem;
using journal_test::ExpectSameState;
using journal_test::MakeJob;
using journal_test::ProtoEq;
using journal_test::Register;
using journal_test::RunHistory;
using journal_test::Workers;
using ::testing::HasSubstr;

constexpr char kDir[] = "/work";

std::string SegmentPath(int64_t seq) { return absl::StrCat(kDir, "/", Journal::SegmentName(seq)); }

absl::Status Eio(absl::string_view what) {
  return absl::ErrnoToStatus(EIO, absl::StrCat("injected: ", what));
}
absl::Status Enospc() { return absl::ErrnoToStatus(ENOSPC, "injected: no space left"); }

proto::Update Dataset(int64_t n) {
  proto::Update u;
  u.mutable_register_dataset()->set_dataset_id(absl::StrCat("ds", n));
  u.mutable_register_dataset()->mutable_dataset()->mutable_source()->mutable_range()->set_stop(n);
  return u;
}

// A journal on `fs` and the state it replayed.
struct Opened {
  CoordinatorState state;
  std::unique_ptr<Journal> journal;
  std::vector<std::string> log;
};
absl::Status Open(JournalFileSystem* fs, Opened* out, int64_t snapshot_every = 1000) {
  JournalOptions o;
  o.dir = kDir;
  o.fs = fs;
  o.snapshot_every = snapshot_every;
  o.log = [out](absl::string_view line) { out->log.emplace_back(line); };
  absl::StatusOr<std::unique_ptr<Journal>> j = Journal::Open(std::move(o), &out->state);
  if (!j.ok()) return j.status();
  out->journal = *std::move(j);
  return absl::OkStatus();
}

// The datasets a state holds, by id.
std::vector<std::string> DatasetsOf(const CoordinatorState& state) {
  std::vector<std::string> out;
  const proto::StateSnapshot snapshot = state.Snapshot();
  for (const proto::Update& u : snapshot.updates()) {
    if (u.has_register_dataset()) out.push_back(u.register_dataset().dataset_id());
  }
  return out;
}
std::vector<std::string> Datasets(int64_t from, int64_t to) {
  std::vector<std::string> out;
  for (int64_t i = from; i <= to; ++i) out.push_back(absl::StrCat("ds", i));
  return out;
}

// Reopens what a crash (`options`) of `fs` leaves; expects it to open.
void ExpectReplays(CrashSimulatingFileSystem& fs, CrashOptions options,
                   const std::vector<std::string>& want, const std::string& where) {
  SCOPED_TRACE(where);
  CrashSimulatingFileSystem crashed(fs.CrashImage(options));
  Opened r;
  absl::Status s = Open(&crashed, &r);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(DatasetsOf(r.state), want);
}

CoordinatorOptions Options(FakeClock* clock, JournalFileSystem* fs, int64_t snapshot_every,
                           std::vector<std::string>* log) {
  CoordinatorOptions o;
  o.clock = clock;
  o.worker_timeout = absl::Seconds(10);
  o.log = [log](absl::string_view line) { log->emplace_back(line); };
  o.work_dir = kDir;
  o.snapshot_every = snapshot_every;
  o.journal_fs = fs;
  return o;
}

CoordinatorState StateOf(const proto::StateSnapshot& snapshot) {
  CoordinatorState s;
  EXPECT_TRUE(s.Restore(snapshot).ok());
  return s;
}

// ----- Sticky sync errors.

TEST(JournalSyncErrorTest, AFailedSyncIsStickyNoLaterWriteOrSyncSucceeds) {
  CrashSimulatingFileSystem disk;
  FaultInjectingJournalFileSystem fs(&disk);
  Opened j;
  ASSERT_TRUE(Open(&fs, &j).ok());
  ASSERT_TRUE(j.journal->Append({Dataset(1)}).ok());
  absl::StatusOr<uint64_t> two = j.journal->Write({Dataset(2)});
  ASSERT_TRUE(two.ok());
  fs.FailNext(JournalFileOp::kSync, Eio("fdatasync"));
  EXPECT_THAT(j.journal->WaitDurable(*two).message(), HasSubstr("injected: fdatasync"));
  // The disk is fine again, but the pages of record 2 may be gone: nothing more is answered.
  EXPECT_FALSE(j.journal->WaitDurable(*two).ok());
  absl::StatusOr<uint64_t> three = j.journal->Write({Dataset(3)});
  EXPECT_EQ(three.status().code(), absl::StatusCode::kFailedPrecondition) << three.status();
  EXPECT_THAT(three.status().message(), HasSubstr("restart the coordinator"));
  EXPECT_FALSE(j.journal->StartSnapshot().ok());
  EXPECT_FALSE(j.journal->sync_error().ok());
  ExpectReplays(disk, {}, Datasets(1, 1), "after the failed sync");
}

TEST(JournalSyncErrorTest, AFailedUndoOfAFailedAppendIsStickyForRecordsWrittenBefore) {
  CrashSimulatingFileSystem disk;
  FaultInjectingJournalFileSystem fs(&disk);
  Opened j;
  ASSERT_TRUE(Open(&fs, &j).ok());
  ASSERT_TRUE(j.journal->Append({Dataset(1)}).ok());
  // Record 2 is written, not yet synced (its request waits for a group sync).
  absl::StatusOr<uint64_t> two = j.journal->Write({Dataset(2)});
  ASSERT_TRUE(two.ok());
  // Record 3's append fails half-way and so does its undo (truncate + fdatasync).
  fs.FailNext(JournalFileOp::kAppend, Enospc(), 0, /*partial_bytes=*/5);
  fs.FailNext(JournalFileOp::kTruncate, Eio("truncate's fdatasync"));
  absl::StatusOr<uint64_t> three = j.journal->Write({Dataset(3)});
  EXPECT_EQ(three.status().code(), absl::StatusCode::kUnavailable) << three.status();
  // The failed undo's sync may have dropped record 2's pages: a later successful fdatasync
  // must not acknowledge it.
  absl::Status s = j.journal->WaitDurable(*two);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("could not be undone"));
  EXPECT_FALSE(j.journal->Write({Dataset(4)}).ok());
  // A restart drops the torn bytes and keeps the acknowledged record.
  ExpectReplays(disk, {}, Datasets(1, 1), "after the failed undo");
}

TEST(JournalSyncErrorTest, AFailedAppendWhoseUndoSucceedsFailsOnlyItsRequest) {
  CrashSimulatingFileSystem disk;
  FaultInjectingJournalFileSystem fs(&disk);
  Opened j;
  ASSERT_TRUE(Open(&fs, &j).ok());
  ASSERT_TRUE(j.journal->Append({Dataset(1)}).ok());
  fs.FailNext(JournalFileOp::kAppend, Enospc(), 0, /*partial_bytes=*/7);
  EXPECT_EQ(j.journal->Append({Dataset(2)}).code(), absl::StatusCode::kUnavailable);
  ASSERT_TRUE(j.journal->Append({Dataset(3)}).ok());
  EXPECT_TRUE(j.journal->sync_error().ok());
  ExpectReplays(disk, {}, {"ds1", "ds3"}, "after the undone append");
}

// ----- Snapshots.

TEST(JournalSnapshotTest, AFailedDirectorySyncAfterTheRenameDropsNoAcknowledgedRecord) {
  for (CrashMode mode : {CrashMode::kDropUnsynced, CrashMode::kKeepEntries}) {
    SCOPED_TRACE(mode == CrashMode::kDropUnsynced ? "the rename is lost" : "the rename stays");
    CrashSimulatingFileSystem disk;
    FaultInjectingJournalFileSystem fs(&disk);
    Opened j;
    ASSERT_TRUE(Open(&fs, &j).ok());
    std::vector<std::string> acknowledged;
    for (int64_t i = 1; i <= 3; ++i) {
      ASSERT_TRUE(j.journal->Append({Dataset(i)}).ok());
      ASSERT_TRUE(j.state.Apply(Dataset(i)).ok());
      acknowledged.push_back(absl::StrCat("ds", i));
    }
    fs.FailNext(JournalFileOp::kSyncDir, Eio("fsync of the directory"));
    absl::Status s = j.journal->WriteSnapshot(j.state.Snapshot());
    EXPECT_THAT(s.message(), HasSubstr("fsync of the directory")) << s;
    // Whatever is appended now must not sit in a segment the snapshot hides.
    for (int64_t i = 4; i <= 5; ++i) {
      if (j.journal->Append({Dataset(i)}).ok()) acknowledged.push_back(absl::StrCat("ds", i));
    }
    // The undo path (a failed batch replays the directory) sees every acknowledged record.
    CoordinatorState reloaded;
    ASSERT_TRUE(j.journal->Reload(&reloaded).ok());
    EXPECT_EQ(DatasetsOf(reloaded), acknowledged);
    ExpectReplays(disk, {.mode = mode}, acknowledged, "restart");
  }
}

TEST(JournalSnapshotTest, ACrashAtEveryStepOfASnapshotDropsNoAcknowledgedRecord) {
  // 3 records, a snapshot, 2 records; `acked` gets the operations done when each append
  // returned (it is acknowledged in every crash after them).
  auto run = [](CrashSimulatingFileSystem* fs, std::vector<int64_t>* acked) {
    Opened j;
    ASSERT_TRUE(Open(fs, &j).ok());
    for (int64_t i = 1; i <= 3; ++i) {
      ASSERT_TRUE(j.journal->Append({Dataset(i)}).ok());
      acked->push_back(fs->operations());
      ASSERT_TRUE(j.state.Apply(Dataset(i)).ok());
    }
    ASSERT_TRUE(j.journal->WriteSnapshot(j.state.Snapshot()).ok());
    for (int64_t i = 4; i <= 5; ++i) {
      ASSERT_TRUE(j.journal->Append({Dataset(i)}).ok());
      acked->push_back(fs->operations());
    }
  };
  CrashSimulatingFileSystem count;
  std::vector<int64_t> acked;
  run(&count, &acked);
  const int64_t ops = count.operations();
  ASSERT_GT(ops, 10);
  for (int64_t k = 0; k <= ops; ++k) {
    for (CrashMode mode : {CrashMode::kDropUnsynced, CrashMode::kKeepEntries}) {
      SCOPED_TRACE(absl::StrCat("crash before operation ", k, " of ", ops, ", mode ",
                                static_cast<int>(mode)));
      CrashSimulatingFileSystem disk;
      disk.CrashAtOperation(k, {.mode = mode});
      std::vector<int64_t> unused;
      run(&disk, &unused);
      CrashSimulatingFileSystem crashed(disk.CrashImageAtOperation());
      Opened r;
      absl::Status s = Open(&crashed, &r);
      ASSERT_TRUE(s.ok()) << s;
      // A prefix of the records, no shorter than what was acknowledged before the crash.
      const std::vector<std::string> got = DatasetsOf(r.state);
      ASSERT_LE(got.size(), 5u);
      EXPECT_EQ(got, Datasets(1, static_cast<int64_t>(got.size())));
      const size_t acknowledged = static_cast<size_t>(
          std::count_if(acked.begin(), acked.end(), [&](int64_t at) { return at <= k; }));
      EXPECT_GE(got.size(), acknowledged);
    }
  }
}

// A snapshot's file blocks in WriteFile until released.
class GatedSnapshotFileSystem : public CrashSimulatingFileSystem {
 public:
  absl::Status WriteFile(const std::string& path, absl::string_view data) override {
    entered.Notify();
    released.WaitForNotification();
    return CrashSimulatingFileSystem::WriteFile(path, data);
  }
  absl::Notification entered, released;
};

TEST(JournalSnapshotTest, ASnapshotIsWrittenWithoutTheCoordinatorsMutex) {
  FakeClock clock;
  GatedSnapshotFileSystem disk;
  std::vector<std::string> log;
  auto c = Coordinator::Create(Options(&clock, &disk, /*snapshot_every=*/2, &log));
  ASSERT_TRUE(c.ok());
  Register(**c, "range(10).batch(2)");
  // The second record makes a snapshot due: its request writes it after releasing the mutex.
  std::thread writer([&] { Register(**c, "range(20).batch(2)"); });
  disk.entered.WaitForNotification();
  // Meanwhile other requests are served (with the mutex held across the write, this one
  // would wait for the release below: the wait is generous, the write blocks forever).
  absl::Notification served;
  std::thread other([&] {
    Register(**c, "range(30).batch(2)");
    served.Notify();
  });
  EXPECT_TRUE(served.WaitForNotificationWithTimeout(absl::Seconds(60)))
      << "a request waited for a snapshot's write";
  disk.released.Notify();
  writer.join();
  other.join();
  // The snapshot holds the state as of its record; the third record is in the new segment.
  CrashSimulatingFileSystem crashed(disk.CrashImage({}));
  auto r = Coordinator::Create(Options(&clock, &crashed, 2, &log));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(StateOf((*r)->Snapshot()).num_datasets(), 3u);
  EXPECT_TRUE(crashed.files().contains(absl::StrCat(kDir, "/", Journal::SnapshotName(1))));
}

// ----- One torn tail after the last synced byte.

TEST(JournalReplayTest, ALaterPageKeptAndAnEarlierOneLostIsATornTailNotDataLoss) {
  CrashSimulatingFileSystem disk;
  Opened j;
  ASSERT_TRUE(Open(&disk, &j).ok());
  for (int64_t i = 1; i <= 3; ++i) ASSERT_TRUE(j.journal->Append({Dataset(i)}).ok());
  const uint64_t synced = disk.files().at(SegmentPath(0)).size();
  // Group commit: three records written, their sync not yet done.
  for (int64_t i = 4; i <= 6; ++i) ASSERT_TRUE(j.journal->Write({Dataset(i)}).ok());
  std::string data = disk.files().at(SegmentPath(0));
  // Power loss: the page of record 4 never reached the disk (zeros, or whatever was there),
  // those of records 5 and 6 did.
  for (char fill : {'\0', '\x5a'}) {
    SCOPED_TRACE(fill == 0 ? "zeros" : "garbage");
    std::string torn = data;
    for (uint64_t i = synced; i < synced + 12; ++i) torn[i] = fill;
    CrashSimulatingFileSystem crashed(CrashSimulatingFileSystem::Image{{SegmentPath(0), torn}});
    Opened r;
    absl::Status s = Open(&crashed, &r);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(DatasetsOf(r.state), Datasets(1, 3));
    EXPECT_EQ(crashed.files().at(SegmentPath(0)).size(), synced);
    ASSERT_FALSE(r.log.empty());
    EXPECT_THAT(r.log.front(), HasSubstr(absl::StrCat("dropped ", data.size() - synced,
                                                      " bytes of a torn tail at byte offset ",
                                                      synced)));
  }
}

TEST(JournalReplayTest, ADamagedRecordASyncCoveredIsStillDataLoss) {
  CrashSimulatingFileSystem disk;
  Opened j;
  ASSERT_TRUE(Open(&disk, &j).ok());
  ASSERT_TRUE(j.journal->Append({Dataset(1)}).ok());
  const uint64_t second = disk.files().at(SegmentPath(0)).size();
  for (int64_t i = 2; i <= 4; ++i) ASSERT_TRUE(j.journal->Append({Dataset(i)}).ok());
  // Record 2 was synced (record 3 says so): damage to it is corruption, not a torn tail.
  std::string data = disk.files().at(SegmentPath(0));
  data[second + kJournalRecordHeaderBytes + 2] ^= 0x40;
  CrashSimulatingFileSystem crashed(CrashSimulatingFileSystem::Image{{SegmentPath(0), data}});
  Opened r;
  absl::Status s = Open(&crashed, &r);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("byte offset ", second)));
  EXPECT_THAT(s.message(), HasSubstr("says the file was synced to byte"));
}

// ----- A crash at every operation of a scripted coordinator run.

struct History {
  // The records of the run (one segment, no snapshot), the state after each prefix of them,
  // and the records written when each `after` callback of RunHistory ran.
  std::vector<proto::StateSnapshot> prefix;
  std::vector<size_t> records_at_answer;
};

History ReferenceRun() {
  History h;
  FakeClock clock;
  CrashSimulatingFileSystem disk;
  std::vector<std::string> log;
  auto c = Coordinator::Create(Options(&clock, &disk, 1000000, &log));
  EXPECT_TRUE(c.ok());
  auto records = [&] {
    const std::string data = disk.files().at(SegmentPath(0));
    auto decoded = DecodeJournalRecords(data, "journal", false);
    EXPECT_TRUE(decoded.ok()) << decoded.status();
    return decoded->records.size();
  };
  RunHistory(**c, clock, [&] { h.records_at_answer.push_back(records()); });
  CoordinatorState s;
  h.prefix.push_back(s.Snapshot());
  const std::string data = disk.files().at(SegmentPath(0));
  auto decoded = DecodeJournalRecords(data, "journal", false);
  EXPECT_TRUE(decoded.ok()) << decoded.status();
  for (const auto& r : decoded->records) {
    proto::JournalRecord record;
    EXPECT_TRUE(record.ParseFromArray(r.payload.data(), static_cast<int>(r.payload.size())));
    for (const proto::Update& u : record.updates()) EXPECT_TRUE(s.Apply(u).ok());
    h.prefix.push_back(s.Snapshot());
  }
  return h;
}

TEST(JournalCrashTest, ACrashAtEveryOperationOfAScriptedRunLosesNoAcknowledgedRecord) {
  const History history = ReferenceRun();
  ASSERT_GE(history.prefix.size(), 16u);
  std::vector<CrashOptions> crashes = {{.mode = CrashMode::kDropUnsynced},
                                       {.mode = CrashMode::kKeepEntries}};
  for (uint64_t seed : {1, 2, 3}) {
    crashes.push_back({.mode = CrashMode::kTornPages, .seed = seed});
    crashes.push_back({.mode = CrashMode::kTornPages, .seed = seed, .garbage_pages = true});
  }
  int64_t runs = 0;
  for (int64_t snapshot_every : {1000000, 3}) {
    // The operations of one run (deterministic: a fake clock, one thread).
    int64_t ops = 0;
    {
      FakeClock clock;
      CrashSimulatingFileSystem disk;
      std::vector<std::string> log;
      auto c = Coordinator::Create(Options(&clock, &disk, snapshot_every, &log));
      ASSERT_TRUE(c.ok());
      RunHistory(**c, clock, [] {});
      ops = disk.operations();
    }
    for (int64_t k = 0; k <= ops; ++k) {
      for (const CrashOptions& crash : crashes) {
        SCOPED_TRACE(absl::StrCat("snapshot_every ", snapshot_every, ", crash before operation ",
                                  k, " of ", ops, ", mode ", static_cast<int>(crash.mode),
                                  ", seed ", crash.seed, crash.garbage_pages ? ", garbage" : ""));
        FakeClock clock;
        CrashSimulatingFileSystem disk;
        disk.CrashAtOperation(k, crash);
        std::vector<std::string> log;
        auto c = Coordinator::Create(Options(&clock, &disk, snapshot_every, &log));
        ASSERT_TRUE(c.ok());
        size_t answered = 0;  // RunHistory's `after` calls that ran before the crash
        size_t call = 0;
        RunHistory(**c, clock, [&] {
          if (disk.operations() <= k) answered = call + 1;
          ++call;
        });
        const size_t acknowledged = answered == 0 ? 0 : history.records_at_answer[answered - 1];
        CrashSimulatingFileSystem crashed(disk.CrashImageAtOperation());
        auto r = Coordinator::Create(Options(&clock, &crashed, snapshot_every, &log));
        ASSERT_TRUE(r.ok()) << r.status();
        const proto::StateSnapshot got = (*r)->Snapshot();
        size_t match = history.prefix.size();
        for (size_t i = 0; i < history.prefix.size(); ++i) {
          if (ProtoEq(got, history.prefix[i])) match = i;
        }
        ASSERT_LT(match, history.prefix.size()) << "the state is no prefix of the records";
        ASSERT_GE(match, acknowledged) << "acknowledged records lost";
        // And it goes on.
        EXPECT_FALSE(Register(**r, "range(3).batch(3)").empty());
        ++runs;
      }
    }
  }
  std::cout << "crash runs: " << runs << std::endl;
}

// ----- One event, one record.

bool RecordHas(absl::string_view data, bool (*has)(const proto::Update&)) {
  if (data.size() < kJournalRecordHeaderBytes) return false;
  proto::JournalRecord record;
  if (!record.ParseFromArray(data.data() + kJournalRecordHeaderBytes,
                             static_cast<int>(data.size() - kJournalRecordHeaderBytes))) {
    return false;
  }
  for (const proto::Update& u : record.updates()) {
    if (has(u)) return true;
  }
  return false;
}

absl::Status Beat(Coordinator& c, const std::string& address, std::vector<int64_t> active,
                  std::vector<int64_t> finished, proto::WorkerHeartbeatResponse* resp) {
  proto::WorkerHeartbeatRequest req;
  req.set_wire_version(proto::WIRE_VERSION_1);
  req.set_worker_address(address);
  for (int64_t t : active) req.add_active_task_ids(t);
  for (int64_t t : finished) req.add_finished_task_ids(t);
  return c.WorkerHeartbeat(req, resp);
}

TEST(JournalBatchTest, AWorkerDeathIsOneRecordAndARetryAfterAFailedWriteCountsItOnce) {
  FakeClock clock;
  CrashSimulatingFileSystem disk;
  FaultInjectingJournalFileSystem fs(&disk);
  std::vector<std::string> log;
  auto c = Coordinator::Create(Options(&clock, &fs, 1000, &log));
  ASSERT_TRUE(c.ok());
  const std::string ds = Register(**c, "range(40).batch(2)");
  proto::WorkerHeartbeatResponse resp;
  ASSERT_TRUE(Beat(**c, "w1:1", {}, {}, &resp).ok());
  ASSERT_TRUE(Beat(**c, "w2:1", {}, {}, &resp).ok());
  auto job = MakeJob(**c, "job", ds, proto::SHARDING_OFF, 4);
  ASSERT_TRUE(job.ok()) << job.status();
  std::vector<int64_t> w1_tasks;
  ASSERT_TRUE(Beat(**c, "w1:1", {}, {}, &resp).ok());
  for (const proto::TaskDef& t : resp.new_tasks()) w1_tasks.push_back(t.task_id());
  ASSERT_GE(w1_tasks.size(), 2u) << "w1 holds several tasks, each lost with it";
  // w1 falls silent; w2's heartbeat finds it dead, and the write of the death fails.
  clock.Advance(absl::Seconds(6));
  ASSERT_TRUE(Beat(**c, "w2:1", {}, {}, &resp).ok());
  clock.Advance(absl::Seconds(6));
  fs.FailAppendIf([](absl::string_view data) {
    return RecordHas(data, [](const proto::Update& u) { return u.has_worker_died(); });
  }, Enospc());
  EXPECT_EQ(Beat(**c, "w2:1", {}, {}, &resp).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(fs.injected(JournalFileOp::kAppend), 1);
  // Nothing of the death stays: w1 is alive with its tasks.
  {
    CoordinatorState s = StateOf((*c)->Snapshot());
    const int64_t w1 = s.FindWorkerByAddress("w1:1")->id;
    EXPECT_TRUE(s.FindWorker(w1)->alive);
    for (int64_t t : w1_tasks) EXPECT_TRUE(s.FindTask(t)->lost_on_workers.empty()) << t;
  }
  // The retry applies it once.
  ASSERT_TRUE(Beat(**c, "w2:1", {}, {}, &resp).ok());
  CoordinatorState live = StateOf((*c)->Snapshot());
  const int64_t w1 = live.FindWorkerByAddress("w1:1")->id;
  EXPECT_FALSE(live.FindWorker(w1)->alive);
  for (int64_t t : w1_tasks) {
    EXPECT_EQ(live.FindTask(t)->lost_on_workers, std::vector<int64_t>{w1}) << "task " << t;
  }
  // And a restart replays the same.
  CrashSimulatingFileSystem crashed(disk.CrashImage({}));
  auto r = Coordinator::Create(Options(&clock, &crashed, 1000, &log));
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectSameState(live, StateOf((*r)->Snapshot()), "after a restart");
}

TEST(JournalBatchTest, AFailedWriteOfAJobsEndIsRetriedNotLeftUnfinished) {
  FakeClock clock;
  CrashSimulatingFileSystem disk;
  FaultInjectingJournalFileSystem fs(&disk);
  std::vector<std::string> log;
  auto c = Coordinator::Create(Options(&clock, &fs, 1000, &log));
  ASSERT_TRUE(c.ok());
  const std::string ds = Register(**c, "range(10).batch(2)");
  proto::WorkerHeartbeatResponse resp;
  ASSERT_TRUE(Beat(**c, "w1:1", {}, {}, &resp).ok());
  auto job = MakeJob(**c, "job", ds, proto::SHARDING_OFF, 1);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(Beat(**c, "w1:1", {}, {}, &resp).ok());
  ASSERT_EQ(resp.new_tasks_size(), 1);
  const int64_t task = resp.new_tasks(0).task_id();
  // The worker reports its task finished; the write of the job's end fails.
  fs.FailAppendIf([](absl::string_view data) {
    return RecordHas(data, [](const proto::Update& u) { return u.has_finish_job(); });
  }, Enospc());
  EXPECT_EQ(Beat(**c, "w1:1", {}, {task}, &resp).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(fs.injected(JournalFileOp::kAppend), 1);
  EXPECT_FALSE(StateOf((*c)->Snapshot()).FindTask(task)->finished) << "undone whole";
  // The worker reports it again (it does until an answer comes): the job ends.
  ASSERT_TRUE(Beat(**c, "w1:1", {}, {task}, &resp).ok());
  CoordinatorState live = StateOf((*c)->Snapshot());
  EXPECT_TRUE(live.FindTask(task)->finished);
  EXPECT_TRUE(live.FindJob(*job)->finished) << "the job must not stay unfinished forever";
  CrashSimulatingFileSystem crashed(disk.CrashImage({}));
  auto r = Coordinator::Create(Options(&clock, &crashed, 1000, &log));
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectSameState(live, StateOf((*r)->Snapshot()), "after a restart");
}

// ----- Fatal in the coordinator.

TEST(JournalFatalDeathTest, TheCoordinatorExitsOnAFailedSyncAndARestartKeepsWhatWasAnswered) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  FakeClock clock;
  CrashSimulatingFileSystem disk;
  FaultInjectingJournalFileSystem fs(&disk);
  std::vector<std::string> log;
  CoordinatorOptions o = Options(&clock, &fs, 1000, &log);
  o.log = [](absl::string_view line) { std::cerr << line << std::endl; };
  auto c = Coordinator::Create(o);
  ASSERT_TRUE(c.ok());
  Register(**c, "range(10).batch(2)");
  EXPECT_DEATH(
      {
        fs.FailNext(JournalFileOp::kSync, Eio("fdatasync"));
        Register(**c, "range(20).batch(2)");
      },
      "exiting: .*injected: fdatasync");
  // What the dead process left: its unanswered record's pages may or may not be there.
  for (CrashMode mode : {CrashMode::kDropUnsynced, CrashMode::kKeepEntries}) {
    CrashSimulatingFileSystem crashed(disk.CrashImage({.mode = mode}));
    auto r = Coordinator::Create(Options(&clock, &crashed, 1000, &log));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(StateOf((*r)->Snapshot()).num_datasets(), 1u);
  }
}

TEST(JournalFatalDeathTest, TheCoordinatorExitsWhenAFailedAppendCannotBeUndone) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  FakeClock clock;
  CrashSimulatingFileSystem disk;
  FaultInjectingJournalFileSystem fs(&disk);
  std::vector<std::string> log;
  CoordinatorOptions o = Options(&clock, &fs, 1000, &log);
  o.log = [](absl::string_view line) { std::cerr << line << std::endl; };
  auto c = Coordinator::Create(o);
  ASSERT_TRUE(c.ok());
  Register(**c, "range(10).batch(2)");
  EXPECT_DEATH(
      {
        fs.FailNext(JournalFileOp::kAppend, Enospc(), 0, /*partial_bytes=*/6);
        fs.FailNext(JournalFileOp::kTruncate, Eio("truncate"));
        proto::RegisterDatasetRequest req;
        req.set_wire_version(proto::WIRE_VERSION_1);
        req.set_pipeline("range(20).batch(2)");
        proto::RegisterDatasetResponse resp;
        (void)(*c)->RegisterDataset(req, &resp);
      },
      "exiting: .*could not be undone");
}

TEST(JournalFatalDeathTest, TheCoordinatorExitsWhenASnapshotsDirectorySyncFails) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  FakeClock clock;
  CrashSimulatingFileSystem disk;
  FaultInjectingJournalFileSystem fs(&disk);
  std::vector<std::string> log;
  CoordinatorOptions o = Options(&clock, &fs, /*snapshot_every=*/2, &log);
  o.log = [](absl::string_view line) { std::cerr << line << std::endl; };
  auto c = Coordinator::Create(o);
  ASSERT_TRUE(c.ok());
  Register(**c, "range(10).batch(2)");
  EXPECT_DEATH(
      {
        fs.FailNext(JournalFileOp::kSyncDir, Eio("directory fsync"));
        Register(**c, "range(20).batch(2)");  // the second record: a snapshot is due
      },
      "exiting: .*injected: directory fsync");
}

}  // namespace
}  // namespace sluice
