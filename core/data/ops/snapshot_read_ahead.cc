#include "core/data/ops/snapshot_read_ahead.h"

#include <utility>

namespace sluice {

SnapshotReadAhead::SnapshotReadAhead(int parallelism, size_t max_bytes_ahead, ThreadPool* pool)
    : parallelism_(parallelism < 1 ? 1 : parallelism),
      max_bytes_ahead_(max_bytes_ahead),
      pool_(pool) {}

SnapshotReadAhead::~SnapshotReadAhead() {
  // Jobs still queued on the pool find the gate closed and leave their entries alone; the
  // entries (and the readers, mappings, views they hold) go with the last job's reference.
  gate_->Close();
}

bool SnapshotReadAhead::HasRoom() const {
  if (entries_.empty()) return true;
  return entries_.size() < static_cast<size_t>(2 * parallelism_) &&
         bytes_ahead_ < max_bytes_ahead_;
}

void SnapshotReadAhead::Add(std::shared_ptr<const SnapshotChunkReader> reader,
                            SnapshotChunkReader::FramedRecord record) {
  auto entry = std::make_shared<Entry>();
  entry->reader = std::move(reader);
  entry->record = record;
  entry->bytes = record.data.size();
  bytes_ahead_ += entry->bytes;
  entries_.push_back(entry);
  pool_->Schedule([this, gate = gate_, entry] {
    if (!gate->Enter()) return;  // the queue is gone
    DecodeOnPool(entry);
    gate->Leave();
  });
}

void SnapshotReadAhead::AddResult(absl::StatusOr<Element> result) {
  auto entry = std::make_shared<Entry>();
  entry->state = Entry::State::kDone;
  entry->result = std::move(result);
  entries_.push_back(std::move(entry));
}

void SnapshotReadAhead::DecodeOnPool(const std::shared_ptr<Entry>& entry) {
  {
    absl::MutexLock lock(&mu_);
    if (entry->state != Entry::State::kQueued) return;  // the consumer took it
    entry->state = Entry::State::kDecoding;
  }
  Decode(entry.get());
}

void SnapshotReadAhead::Decode(Entry* entry) {
  // Only the thread that moved the entry to kDecoding touches reader, record and result until
  // it is kDone.
  absl::StatusOr<Element> result = entry->reader->DecodeRecord(entry->record);
  std::shared_ptr<const SnapshotChunkReader> reader = std::move(entry->reader);
  absl::MutexLock lock(&mu_);
  entry->result = std::move(result);
  entry->state = Entry::State::kDone;
  done_.SignalAll();
}

absl::Status SnapshotReadAhead::TakeFront(Element* out) {
  std::shared_ptr<Entry> entry = std::move(entries_.front());
  entries_.pop_front();
  bytes_ahead_ -= entry->bytes;
  bool decode_here = false;
  {
    absl::MutexLock lock(&mu_);
    if (entry->state == Entry::State::kQueued) {
      entry->state = Entry::State::kDecoding;
      decode_here = true;
    }
  }
  if (decode_here) Decode(entry.get());
  absl::MutexLock lock(&mu_);
  while (entry->state != Entry::State::kDone) done_.Wait(&mu_);
  absl::StatusOr<Element> result = std::move(*entry->result);
  entry->result.reset();
  if (!result.ok()) return result.status();
  *out = *std::move(result);
  return absl::OkStatus();
}

}  // namespace sluice
