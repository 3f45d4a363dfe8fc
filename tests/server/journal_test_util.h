// Helpers for the journal tests: an in-memory JournalFileSystem that can fail, cut writes
// short and be copied (a "crash" keeps only what reached it), and a comparison of two
// CoordinatorStates field by field.
#ifndef SLUICE_TESTS_SERVER_JOURNAL_TEST_UTIL_H_
#define SLUICE_TESTS_SERVER_JOURNAL_TEST_UTIL_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "server/coordinator_state.h"
#include "server/journal_file.h"

namespace sluice {
namespace journal_test {

// Files are byte strings; "synced" is not modelled: what Append wrote is what a crash keeps
// (the tests cut files by hand to model torn writes). Faults: the next `fail_appends` appends
// fail after writing `partial_bytes` of their data; `fail_truncates` makes truncation fail.
class FakeFileSystem : public JournalFileSystem {
 public:
  FakeFileSystem() = default;
  FakeFileSystem(const FakeFileSystem& other) {
    absl::MutexLock lock(&other.mu_);
    files_ = other.files_;
    dirs_ = other.dirs_;
  }

  absl::Status CreateDir(const std::string& dir) override {
    absl::MutexLock lock(&mu_);
    dirs_.push_back(dir);
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<std::string>> ListDir(const std::string& dir) override {
    absl::MutexLock lock(&mu_);
    if (std::find(dirs_.begin(), dirs_.end(), dir) == dirs_.end()) {
      return absl::NotFoundError(absl::StrCat("no directory ", dir));
    }
    std::vector<std::string> out;
    for (const auto& [path, data] : files_) {
      if (absl::StartsWith(path, dir + "/")) out.push_back(path.substr(dir.size() + 1));
    }
    return out;
  }
  absl::StatusOr<std::string> ReadFile(const std::string& path) override {
    absl::MutexLock lock(&mu_);
    auto it = files_.find(path);
    if (it == files_.end()) return absl::NotFoundError(absl::StrCat("no file ", path));
    return it->second;
  }
  absl::StatusOr<std::unique_ptr<AppendFile>> OpenAppend(const std::string& path) override {
    absl::MutexLock lock(&mu_);
    files_[path];  // created if absent
    return std::unique_ptr<AppendFile>(new File(this, path));
  }
  absl::Status Truncate(const std::string& path, uint64_t size) override {
    absl::MutexLock lock(&mu_);
    if (fail_truncates_) return absl::InternalError("injected truncate failure");
    auto it = files_.find(path);
    if (it == files_.end()) return absl::NotFoundError(absl::StrCat("no file ", path));
    it->second.resize(std::min<uint64_t>(size, it->second.size()));
    return absl::OkStatus();
  }
  absl::Status WriteFile(const std::string& path, absl::string_view data) override {
    absl::MutexLock lock(&mu_);
    if (fail_atomic_writes_) return absl::InternalError("injected write failure");
    files_[path] = std::string(data);
    return absl::OkStatus();
  }
  absl::Status Rename(const std::string& from, const std::string& to) override {
    absl::MutexLock lock(&mu_);
    auto it = files_.find(from);
    if (it == files_.end()) return absl::NotFoundError(absl::StrCat("no file ", from));
    std::string data = std::move(it->second);
    files_.erase(it);
    files_[to] = std::move(data);
    return absl::OkStatus();
  }
  absl::Status SyncDir(const std::string&) override { return absl::OkStatus(); }
  absl::Status Delete(const std::string& path) override {
    absl::MutexLock lock(&mu_);
    files_.erase(path);
    return absl::OkStatus();
  }

  // Test controls.
  void FailAppends(int n, size_t partial_bytes = 0) {
    absl::MutexLock lock(&mu_);
    fail_appends_ = n;
    partial_bytes_ = partial_bytes;
  }
  void FailTruncates(bool fail) {
    absl::MutexLock lock(&mu_);
    fail_truncates_ = fail;
  }
  void FailAtomicWrites(bool fail) {
    absl::MutexLock lock(&mu_);
    fail_atomic_writes_ = fail;
  }
  std::map<std::string, std::string> files() const {
    absl::MutexLock lock(&mu_);
    return files_;
  }
  void SetFile(const std::string& path, std::string data) {
    absl::MutexLock lock(&mu_);
    files_[path] = std::move(data);
  }

 private:
  class File : public AppendFile {
   public:
    File(FakeFileSystem* fs, std::string path) : fs_(fs), path_(std::move(path)) {}
    absl::Status Append(absl::string_view data) override {
      absl::MutexLock lock(&fs_->mu_);
      std::string& f = fs_->files_[path_];
      if (fs_->fail_appends_ > 0) {
        --fs_->fail_appends_;
        f.append(data.data(), std::min(data.size(), fs_->partial_bytes_));
        return absl::ResourceExhaustedError(absl::StrCat("injected: no space left on ", path_));
      }
      f.append(data.data(), data.size());
      return absl::OkStatus();
    }
    absl::Status Sync() override { return absl::OkStatus(); }
    absl::Status Truncate(uint64_t size) override { return fs_->Truncate(path_, size); }

   private:
    FakeFileSystem* const fs_;
    const std::string path_;
  };

  mutable absl::Mutex mu_;
  std::map<std::string, std::string> files_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> dirs_ ABSL_GUARDED_BY(mu_);
  int fail_appends_ ABSL_GUARDED_BY(mu_) = 0;
  size_t partial_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool fail_truncates_ ABSL_GUARDED_BY(mu_) = false;
  bool fail_atomic_writes_ ABSL_GUARDED_BY(mu_) = false;
};

inline bool ProtoEq(const google::protobuf::Message& a, const google::protobuf::Message& b) {
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

// The number of members of an aggregate (as boost::pfr counts them): the most initializers
// T{...} accepts.
struct AnyField {
  template <typename U>
  operator U&() const;
};
template <typename T, typename... A>
constexpr int FieldCount() {
  if constexpr (requires { T{A{}..., AnyField{}}; }) {
    return FieldCount<T, A..., AnyField>();
  } else {
    return static_cast<int>(sizeof...(A));
  }
}

// SHARDING_RANGES' fields, compared when the structs have them.
template <typename T>
void ExpectSameRangesFields(const T& a, const T& b) {
  if constexpr (requires { a.skip_steps; }) {
    EXPECT_EQ(a.skip_steps, b.skip_steps);
  }
  if constexpr (requires { a.first_step; }) {
    EXPECT_EQ(a.first_step, b.first_step);
  }
  if constexpr (requires { a.num_steps; }) {
    EXPECT_EQ(a.num_steps, b.num_steps);
  }
  if constexpr (requires { a.ranges; }) {
    EXPECT_EQ(a.ranges, b.ranges);
  }
  if constexpr (requires { a.steps_per_epoch; }) {
    EXPECT_EQ(a.steps_per_epoch, b.steps_per_epoch);
  }
  if constexpr (requires { a.total_steps; }) {
    EXPECT_EQ(a.total_steps, b.total_steps);
  }
  if constexpr (requires { a.num_ranges; }) {
    EXPECT_EQ(a.num_ranges, b.num_ranges);
  }
  if constexpr (requires { a.fallback_reason; }) {
    EXPECT_EQ(a.fallback_reason, b.fallback_reason);
  }
}
template <typename T>
constexpr int NumRangesFields() {
  return (requires(T t) { t.skip_steps; } ? 1 : 0) + (requires(T t) { t.first_step; } ? 1 : 0) +
         (requires(T t) { t.num_steps; } ? 1 : 0) + (requires(T t) { t.ranges; } ? 1 : 0) +
         (requires(T t) { t.steps_per_epoch; } ? 1 : 0) +
         (requires(T t) { t.total_steps; } ? 1 : 0) + (requires(T t) { t.num_ranges; } ? 1 : 0) +
         (requires(T t) { t.fallback_reason; } ? 1 : 0);
}
// The members compared below.
inline constexpr int kJobFields = 16 + NumRangesFields<CoordinatorState::Job>();
inline constexpr int kTaskFields = 12 + NumRangesFields<CoordinatorState::Task>();

// Every field of every entity, the lookups and the id counters.
inline void ExpectSameState(const CoordinatorState& a, const CoordinatorState& b,
                            const std::string& where) {
  SCOPED_TRACE(where);
  // A field added to an entity must be compared here and carried by Snapshot(): the member
  // counts remind whoever adds one.
  EXPECT_EQ(FieldCount<CoordinatorState::Dataset>(), 5)
      << "CoordinatorState::Dataset changed: compare the new field here, check Snapshot()";
  EXPECT_EQ(FieldCount<CoordinatorState::Worker>(), 5)
      << "CoordinatorState::Worker changed: compare the new field here, check Snapshot()";
  EXPECT_EQ(FieldCount<CoordinatorState::Split>(), 4)
      << "CoordinatorState::Split changed: compare the new field here, check Snapshot()";
  EXPECT_EQ(FieldCount<CoordinatorState::Job>(), kJobFields)
      << "CoordinatorState::Job changed: compare the new field here, check Snapshot()";
  EXPECT_EQ(FieldCount<CoordinatorState::Task>(), kTaskFields)
      << "CoordinatorState::Task changed: compare the new field here, check Snapshot()";

  EXPECT_EQ(a.num_datasets(), b.num_datasets());
  for (const auto& [id, d] : a.datasets()) {
    const CoordinatorState::Dataset* o = b.FindDataset(id);
    ASSERT_NE(o, nullptr) << "dataset " << id;
    EXPECT_TRUE(ProtoEq(d.def, o->def)) << "dataset " << id;
    EXPECT_EQ(d.owner, o->owner) << "dataset " << id;
    EXPECT_EQ(d.bytes, o->bytes) << "dataset " << id;
    EXPECT_EQ(d.num_jobs, o->num_jobs) << "dataset " << id;
    EXPECT_EQ(d.id, o->id);
  }
  EXPECT_EQ(a.unused_datasets(), b.unused_datasets());
  EXPECT_EQ(a.num_owners(), b.num_owners());
  EXPECT_EQ(a.NextWorkerId(), b.NextWorkerId());
  EXPECT_EQ(a.NextJobId(), b.NextJobId());
  EXPECT_EQ(a.NextTaskId(), b.NextTaskId());
  ASSERT_EQ(a.workers().size(), b.workers().size());
  for (const auto& [id, w] : a.workers()) {
    const CoordinatorState::Worker* o = b.FindWorker(id);
    ASSERT_NE(o, nullptr) << "worker " << id;
    EXPECT_EQ(w.id, o->id);
    EXPECT_EQ(w.address, o->address);
    EXPECT_EQ(w.alive, o->alive) << "worker " << id;
    EXPECT_EQ(w.task_ids, o->task_ids) << "worker " << id;
    EXPECT_EQ(w.finished_tasks, o->finished_tasks) << "worker " << id;
    EXPECT_EQ(b.FindWorkerByAddress(w.address), o);
    EXPECT_EQ(a.NumUnfinishedTasks(id), b.NumUnfinishedTasks(id));
  }
  ASSERT_EQ(a.jobs().size(), b.jobs().size());
  for (const auto& [id, j] : a.jobs()) {
    const CoordinatorState::Job* o = b.FindJob(id);
    ASSERT_NE(o, nullptr) << "job " << id;
    EXPECT_EQ(j.id, o->id);
    EXPECT_EQ(j.name, o->name);
    EXPECT_EQ(j.owner, o->owner) << "job " << id;
    EXPECT_EQ(a.Usage(j.owner).unfinished_jobs, b.Usage(j.owner).unfinished_jobs);
    EXPECT_TRUE(ProtoEq(j.options, o->options)) << "job " << id;
    EXPECT_EQ(j.task_ids, o->task_ids) << "job " << id;
    EXPECT_EQ(j.finished, o->finished) << "job " << id;
    EXPECT_EQ(j.error, o->error) << "job " << id;
    EXPECT_EQ(j.released, o->released) << "job " << id;
    EXPECT_EQ(j.trainer_ids, o->trainer_ids) << "job " << id;
    EXPECT_EQ(j.dropped_trainer_ids, o->dropped_trainer_ids) << "job " << id;
    EXPECT_EQ(j.released_consumers, o->released_consumers) << "job " << id;
    EXPECT_EQ(j.split_source_size, o->split_source_size);
    EXPECT_EQ(j.split_size, o->split_size);
    EXPECT_EQ(j.split_cursor, o->split_cursor) << "job " << id;
    ASSERT_EQ(j.splits.size(), o->splits.size()) << "job " << id;
    for (size_t i = 0; i < j.splits.size(); ++i) {
      EXPECT_EQ(j.splits[i].index, o->splits[i].index);
      EXPECT_EQ(j.splits[i].task_id, o->splits[i].task_id);
      EXPECT_EQ(j.splits[i].begin, o->splits[i].begin);
      EXPECT_EQ(j.splits[i].end, o->splits[i].end);
    }
    // Every field the job was created with (SHARDING_RANGES' included).
    EXPECT_TRUE(ProtoEq(j.created, o->created)) << "job " << id;
    ExpectSameRangesFields(j, *o);
    if (!j.name.empty()) {
      EXPECT_EQ(b.FindJobByName(j.name), o);
    }
  }
  ASSERT_EQ(a.tasks().size(), b.tasks().size());
  for (const auto& [id, t] : a.tasks()) {
    const CoordinatorState::Task* o = b.FindTask(id);
    ASSERT_NE(o, nullptr) << "task " << id;
    EXPECT_EQ(t.id, o->id);
    EXPECT_EQ(t.job_id, o->job_id);
    EXPECT_EQ(t.index, o->index);
    EXPECT_TRUE(ProtoEq(t.dataset, o->dataset)) << "task " << id;
    EXPECT_EQ(t.step_sharded, o->step_sharded);
    EXPECT_EQ(t.worker_id, o->worker_id) << "task " << id;
    EXPECT_EQ(t.finished, o->finished) << "task " << id;
    EXPECT_EQ(t.split_indices, o->split_indices) << "task " << id;
    EXPECT_EQ(t.lost_on_workers, o->lost_on_workers) << "task " << id;
    EXPECT_EQ(t.completed_by, o->completed_by) << "task " << id;
    ASSERT_EQ(t.poison_deaths.size(), o->poison_deaths.size()) << "task " << id;
    for (size_t i = 0; i < t.poison_deaths.size(); ++i) {
      EXPECT_EQ(t.poison_deaths[i].worker_id, o->poison_deaths[i].worker_id) << "task " << id;
      EXPECT_EQ(t.poison_deaths[i].evidence, o->poison_deaths[i].evidence) << "task " << id;
    }
    EXPECT_TRUE(ProtoEq(t.created, o->created)) << "task " << id;
    ExpectSameRangesFields(t, *o);
  }
  // Anything the comparisons above miss, Snapshot() must still agree on.
  EXPECT_TRUE(ProtoEq(a.Snapshot(), b.Snapshot()));
}

}  // namespace journal_test
}  // namespace sluice

#endif  // SLUICE_TESTS_SERVER_JOURNAL_TEST_UTIL_H_
