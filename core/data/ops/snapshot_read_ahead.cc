#include "core/data/ops/snapshot_read_ahead.h"

#include <utility>

namespace sluice {

SnapshotReadAhead::SnapshotReadAhead(int parallelism, size_t max_bytes_ahead, ThreadPool* pool)
    : parallelism_(parallelism < 1 ? 1 : parallelism),
      max_bytes_ahead_(max_bytes_ahead),
      pool_(pool) {}

SnapshotReadAhead::~SnapshotReadAhead() {
  // Jobs still queued on the pool find the gate closed; the jobs running are waited for, and
  // drop their references to entries before they leave the gate: the entries, the readers and
  // the mappings they hold go with the queue.
  gate_->Close();
}

bool SnapshotReadAhead::HasRoom() const {
  if (entries_.empty()) return true;
  if (bytes_ahead_ >= max_bytes_ahead_) return false;
  // The unit being gathered takes more records; a new one needs a free place.
  return gathering_ != nullptr || entries_.size() < static_cast<size_t>(2 * parallelism_);
}

void SnapshotReadAhead::Add(std::shared_ptr<const SnapshotChunkReader> reader,
                            SnapshotChunkReader::FramedRecord record) {
  if (gathering_ != nullptr && gathering_->reader != reader) Flush();
  if (gathering_ == nullptr) {
    gathering_ = std::make_shared<Entry>();
    gathering_->reader = std::move(reader);
    entries_.push_back(gathering_);
  }
  gathering_->records.push_back(record);
  gathering_->bytes += record.data.size();
  bytes_ahead_ += record.data.size();
  if (gathering_->records.size() >= kUnitRecords || gathering_->bytes >= kUnitBytes) Flush();
}

void SnapshotReadAhead::AddResult(absl::StatusOr<Element> result) {
  Flush();
  auto entry = std::make_shared<Entry>();
  entry->state = Entry::State::kVerified;
  entry->result = std::move(result);
  entries_.push_back(std::move(entry));
}

void SnapshotReadAhead::Flush() {
  if (gathering_ == nullptr) return;
  Schedule(gathering_);
  gathering_ = nullptr;
}

void SnapshotReadAhead::Schedule(const std::shared_ptr<Entry>& entry) {
  {
    absl::MutexLock lock(&mu_);
    entry->state = Entry::State::kQueued;
  }
  // The job holds the entry weakly: the queue owns its entries, so that once the queue is gone
  // (or has handed an entry out) no job still queued on the pool keeps a reader, and its file
  // mapped, alive.
  pool_->Schedule([this, gate = gate_, weak = std::weak_ptr<Entry>(entry)] {
    if (!gate->Enter()) return;  // the queue is gone
    if (std::shared_ptr<Entry> e = weak.lock()) VerifyOnPool(e);
    gate->Leave();
  });
}

void SnapshotReadAhead::VerifyOnPool(const std::shared_ptr<Entry>& entry) {
  {
    absl::MutexLock lock(&mu_);
    if (entry->state != Entry::State::kQueued) return;  // the consumer took it
    entry->state = Entry::State::kVerifying;
  }
  Verify(entry.get());
}

void SnapshotReadAhead::Verify(Entry* entry) {
  // Only the thread that moved the entry to kVerifying reads its records until it is verified;
  // the consumer reads `verified` and `error` only after that, under mu_.
  size_t verified = 0;
  absl::Status error;
  for (const SnapshotChunkReader::FramedRecord& record : entry->records) {
    error = entry->reader->VerifyRecord(record);
    if (!error.ok()) break;
    ++verified;
  }
  absl::MutexLock lock(&mu_);
  entry->verified = verified;
  entry->error = std::move(error);
  entry->state = Entry::State::kVerified;
  verified_.SignalAll();
}

void SnapshotReadAhead::PopFront() {
  bytes_ahead_ -= entries_.front()->bytes;
  entries_.pop_front();
}

absl::Status SnapshotReadAhead::TakeFront(Element* out) {
  std::shared_ptr<Entry> entry = entries_.front();
  if (entry == gathering_) {
    // Wanted before it filled: not scheduled, so verified here below.
    gathering_ = nullptr;
    absl::MutexLock lock(&mu_);
    entry->state = Entry::State::kQueued;
  }
  bool verify_here = false;
  {
    absl::MutexLock lock(&mu_);
    if (entry->state == Entry::State::kQueued) {
      entry->state = Entry::State::kVerifying;
      verify_here = true;
    }
  }
  if (verify_here) Verify(entry.get());
  {
    absl::MutexLock lock(&mu_);
    while (entry->state != Entry::State::kVerified) verified_.Wait(&mu_);
  }
  if (entry->result.has_value()) {
    absl::StatusOr<Element> result = std::move(*entry->result);
    PopFront();
    if (!result.ok()) return result.status();
    *out = *std::move(result);
    return absl::OkStatus();
  }
  if (entry->next == entry->verified) {  // the record whose checksum failed
    absl::Status error = entry->error;
    PopFront();
    return error;
  }
  const SnapshotChunkReader::FramedRecord& record = entry->records[entry->next++];
  absl::StatusOr<Element> e = entry->reader->DecodeVerified(record);
  if (entry->next == entry->records.size()) PopFront();
  if (!e.ok()) return e.status();
  *out = *std::move(e);
  return absl::OkStatus();
}

}  // namespace sluice
