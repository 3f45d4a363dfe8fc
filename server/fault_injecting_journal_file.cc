#include "server/fault_injecting_journal_file.h"

#include <errno.h>

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace sluice {

namespace {

constexpr std::array<absl::string_view, kNumJournalFileOps> kOpNames = {
    "append", "sync", "truncate", "open_append", "write_file", "rename", "sync_dir", "delete"};

absl::Status Injected(int err, JournalFileOp op, const std::string& path) {
  return absl::ErrnoToStatus(
      err, absl::StrCat("injected fault: ", JournalFileOpName(op), " ", path));
}

}  // namespace

absl::string_view JournalFileOpName(JournalFileOp op) {
  return kOpNames[static_cast<size_t>(op)];
}

class FaultInjectingJournalFileSystem::File : public AppendFile {
 public:
  File(FaultInjectingJournalFileSystem* fs, std::string path, std::unique_ptr<AppendFile> base)
      : fs_(fs), path_(std::move(path)), base_(std::move(base)) {}

  absl::Status Append(absl::string_view data) override {
    Fault f = fs_->Draw(JournalFileOp::kAppend, path_, data);
    if (!f.error.ok()) {
      const size_t partial = std::min(f.partial_bytes, data.size());
      if (partial > 0) {
        absl::Status s = base_->Append(data.substr(0, partial));
        if (!s.ok()) return s;
      }
      return f.error;
    }
    return base_->Append(data);
  }

  absl::Status Sync() override {
    Fault f = fs_->Draw(JournalFileOp::kSync, path_, {});
    if (!f.error.ok()) return f.error;
    return base_->Sync();
  }

  absl::Status Truncate(uint64_t size) override {
    Fault f = fs_->Draw(JournalFileOp::kTruncate, path_, {});
    if (!f.error.ok()) return f.error;
    return base_->Truncate(size);
  }

 private:
  FaultInjectingJournalFileSystem* const fs_;
  const std::string path_;
  const std::unique_ptr<AppendFile> base_;
};

FaultInjectingJournalFileSystem::FaultInjectingJournalFileSystem(JournalFileSystem* base)
    : base_(base) {}

absl::Status FaultInjectingJournalFileSystem::SetRandomFaults(absl::string_view spec) {
  std::array<double, kNumJournalFileOps> rate = {};
  uint64_t seed = 0;
  for (absl::string_view item : absl::StrSplit(spec, ',', absl::SkipWhitespace())) {
    item = absl::StripAsciiWhitespace(item);
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    if (kv.first == "seed") {
      if (!absl::SimpleAtoi(kv.second, &seed)) {
        return absl::InvalidArgumentError(
            absl::StrCat("journal faults: seed must be an integer, got \"", kv.second, "\""));
      }
      continue;
    }
    auto it = std::find(kOpNames.begin(), kOpNames.end(), kv.first);
    if (it == kOpNames.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "journal faults: unknown item \"", item,
          "\" (want seed=N or append, sync, truncate, open_append, write_file, rename, "
          "sync_dir, delete = a probability)"));
    }
    double p = 0;
    if (!absl::SimpleAtod(kv.second, &p) || !(p >= 0 && p <= 1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "journal faults: ", kv.first, " must be a probability in [0, 1], got \"", kv.second,
          "\""));
    }
    rate[it - kOpNames.begin()] = p;
  }
  absl::MutexLock lock(&mu_);
  rate_ = rate;
  rng_.seed(seed);
  return absl::OkStatus();
}

void FaultInjectingJournalFileSystem::FailNext(JournalFileOp op, absl::Status error, int skip,
                                               size_t partial_bytes) {
  absl::MutexLock lock(&mu_);
  scripted_[static_cast<size_t>(op)].push_back({skip, std::move(error), partial_bytes});
}

void FaultInjectingJournalFileSystem::FailAppendIf(std::function<bool(absl::string_view)> pick,
                                                   absl::Status error) {
  absl::MutexLock lock(&mu_);
  append_pick_ = std::move(pick);
  append_pick_error_ = std::move(error);
}

void FaultInjectingJournalFileSystem::Clear() {
  absl::MutexLock lock(&mu_);
  for (auto& q : scripted_) q.clear();
  append_pick_ = nullptr;
  rate_ = {};
}

int64_t FaultInjectingJournalFileSystem::injected(JournalFileOp op) const {
  absl::MutexLock lock(&mu_);
  return injected_[static_cast<size_t>(op)];
}

int64_t FaultInjectingJournalFileSystem::injected_total() const {
  absl::MutexLock lock(&mu_);
  int64_t n = 0;
  for (int64_t i : injected_) n += i;
  return n;
}

FaultInjectingJournalFileSystem::Fault FaultInjectingJournalFileSystem::Draw(
    JournalFileOp op, const std::string& path, absl::string_view data) {
  absl::MutexLock lock(&mu_);
  const size_t k = static_cast<size_t>(op);
  Fault f;
  if (op == JournalFileOp::kAppend && append_pick_ && append_pick_(data)) {
    append_pick_ = nullptr;
    f.error = append_pick_error_;
  } else if (!scripted_[k].empty()) {
    Scripted& next = scripted_[k].front();
    if (next.skip > 0) {
      --next.skip;
    } else {
      f.error = next.error;
      f.partial_bytes = next.partial_bytes;
      scripted_[k].pop_front();
    }
  }
  if (f.error.ok() && rate_[k] > 0 && std::uniform_real_distribution<double>(0, 1)(rng_) < rate_[k]) {
    int err = EIO;
    if (op == JournalFileOp::kAppend) {
      err = std::uniform_int_distribution<int>(0, 1)(rng_) == 0 ? ENOSPC : EIO;
      f.partial_bytes = data.empty() ? 0 : std::uniform_int_distribution<size_t>(0, data.size() - 1)(rng_);
    }
    f.error = Injected(err, op, path);
  }
  if (!f.error.ok()) ++injected_[k];
  return f;
}

absl::Status FaultInjectingJournalFileSystem::CreateDir(const std::string& dir) {
  return base_->CreateDir(dir);
}

absl::StatusOr<std::vector<std::string>> FaultInjectingJournalFileSystem::ListDir(
    const std::string& dir) {
  return base_->ListDir(dir);
}

absl::StatusOr<std::string> FaultInjectingJournalFileSystem::ReadFile(const std::string& path) {
  return base_->ReadFile(path);
}

absl::StatusOr<std::unique_ptr<AppendFile>> FaultInjectingJournalFileSystem::OpenAppend(
    const std::string& path) {
  Fault f = Draw(JournalFileOp::kOpenAppend, path, {});
  if (!f.error.ok()) return f.error;
  absl::StatusOr<std::unique_ptr<AppendFile>> base = base_->OpenAppend(path);
  if (!base.ok()) return base.status();
  return std::unique_ptr<AppendFile>(new File(this, path, *std::move(base)));
}

absl::Status FaultInjectingJournalFileSystem::Truncate(const std::string& path, uint64_t size) {
  Fault f = Draw(JournalFileOp::kTruncate, path, {});
  if (!f.error.ok()) return f.error;
  return base_->Truncate(path, size);
}

absl::Status FaultInjectingJournalFileSystem::WriteFile(const std::string& path,
                                                        absl::string_view data) {
  Fault f = Draw(JournalFileOp::kWriteFile, path, data);
  if (!f.error.ok()) return f.error;
  return base_->WriteFile(path, data);
}

absl::Status FaultInjectingJournalFileSystem::Rename(const std::string& from,
                                                     const std::string& to) {
  Fault f = Draw(JournalFileOp::kRename, from, {});
  if (!f.error.ok()) return f.error;
  return base_->Rename(from, to);
}

absl::Status FaultInjectingJournalFileSystem::SyncDir(const std::string& dir) {
  Fault f = Draw(JournalFileOp::kSyncDir, dir, {});
  if (!f.error.ok()) return f.error;
  return base_->SyncDir(dir);
}

absl::Status FaultInjectingJournalFileSystem::Delete(const std::string& path) {
  Fault f = Draw(JournalFileOp::kDelete, path, {});
  if (!f.error.ok()) return f.error;
  return base_->Delete(path);
}

}  // namespace sluice
