#include "server/group_commit.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace sluice {

uint64_t GroupCommit::Written(std::shared_ptr<AppendFile> file, uint64_t file_bytes) {
  absl::MutexLock lock(&mu_);
  if (file != file_) durable_bytes_ = 0;  // a new segment
  file_ = std::move(file);
  written_bytes_ = file_bytes;
  return ++written_;
}

void GroupCommit::AllDurable() {
  absl::MutexLock lock(&mu_);
  durable_ = std::max(durable_, written_);
  durable_bytes_ = std::max(durable_bytes_, written_bytes_);
  cv_.SignalAll();
}

void GroupCommit::Opened(std::shared_ptr<AppendFile> file, uint64_t file_bytes) {
  absl::MutexLock lock(&mu_);
  file_ = std::move(file);
  written_bytes_ = durable_bytes_ = file_bytes;
}

uint64_t GroupCommit::durable_bytes() const {
  absl::MutexLock lock(&mu_);
  return durable_bytes_;
}

void GroupCommit::Fail(const absl::Status& error) {
  absl::MutexLock lock(&mu_);
  if (error_.ok()) error_ = error;
  cv_.SignalAll();
}

absl::Status GroupCommit::error() const {
  absl::MutexLock lock(&mu_);
  return error_;
}

uint64_t GroupCommit::written() const {
  absl::MutexLock lock(&mu_);
  return written_;
}

int64_t GroupCommit::syncs() const {
  absl::MutexLock lock(&mu_);
  return syncs_;
}

absl::Status GroupCommit::WaitDurable(uint64_t seq) {
  absl::MutexLock lock(&mu_);
  while (true) {
    if (!error_.ok()) return error_;
    if (durable_ >= seq) return absl::OkStatus();
    if (syncing_) {
      ++waiters_;
      cv_.SignalAll();  // TEST_AwaitWaiters
      cv_.Wait(&mu_);
      --waiters_;
      continue;
    }
    // Lead: one sync for every record written so far.
    syncing_ = true;
    const uint64_t target = written_;
    const uint64_t target_bytes = written_bytes_;
    std::shared_ptr<AppendFile> file = file_;
    ++syncs_;
    mu_.Unlock();
    absl::Status s = file != nullptr ? file->Sync() : absl::OkStatus();
    mu_.Lock();
    syncing_ = false;
    if (!error_.ok()) {
      // Another sync failed meanwhile: this one acknowledges nothing.
    } else if (s.ok()) {
      durable_ = std::max(durable_, target);
      if (file == file_) durable_bytes_ = std::max(durable_bytes_, target_bytes);
    } else {
      error_ = absl::Status(s.code(), absl::StrCat("journal sync: ", s.message()));
    }
    cv_.SignalAll();
  }
}

void GroupCommit::TEST_AwaitWaiters(int n) {
  absl::MutexLock lock(&mu_);
  while (waiters_ < n) cv_.Wait(&mu_);
}

}  // namespace sluice
