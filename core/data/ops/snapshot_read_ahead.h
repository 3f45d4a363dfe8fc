// SnapshotReadAhead: the queue through which load(DIR, num_parallel_calls=N > 1) (load_op.cc)
// reads a snapshot's mapped chunks: the records' checksums are verified on the process's pool
// (core/util/thread_pool.h) ahead of the consumer, which decodes each verified record and hands
// the elements out in the order their records were framed: the same elements, order and errors
// as reading them one after the other.
//
// Why this split: a loaded element costs one pass over its bytes, the checksum's, which is the
// first touch of the page cache's memory (half of a load's CPU, bound by memory bandwidth, not
// by the CRC instruction); then the decode, whose string copies read the bytes again from the
// cache and allocate. The pass runs on pool threads, records in parallel, ahead of the consumer;
// the decode stays on the consumer's thread, so the strings are allocated and (usually) freed by
// one thread, with no hand-over of each element between threads (decoding on the pool measured
// 15-20% more CPU per element, mostly malloc's arena traffic). It still costs 10-20% more CPU
// per element than the sequential read, whose checksum is fused with the parse (the copy here
// reads bytes another core's pass brought into the cache): opt-in, for consumers with idle
// cores (docs/SNAPSHOTS.md). tf.data's Dataset.load reads its
// chunks in parallel too (an interleave with num_parallel_calls), in an order that depends on
// the machine's cores; this one keeps load's order (chunk by chunk).
//
// Records are verified in units: consecutive records of one chunk, up to kUnitRecords of them
// or kUnitBytes (a larger record is a unit of its own), one pool job each, so that small records
// do not cost a job each. Bounds: at most 2 * parallelism units queued (verifying, verified or
// waiting), and no record is queued once the queued records' bytes reach max_bytes_ahead (one
// always is). The queue holds views of the mappings, not elements: it charges nothing to the
// memory budget. The consumer never waits for a unit that no pool thread has started (it
// verifies that one itself: the pool may be busy with other pipelines), only for one being
// verified. The destructor waits for the jobs running, not for those queued.
//
//   SnapshotReadAhead ahead(parallelism, SnapshotReadAhead::kDefaultMaxBytesAhead);
//   while (ahead.HasRoom()) ahead.Add(reader, record);   // reader: shared_ptr, record: framed
//   ahead.Flush();
//   RETURN_IF_ERROR(ahead.TakeFront(&element));
//
// Thread safety: one consumer thread calls the methods (as an Iterator's caller); the pool's
// threads verify units meanwhile.
#ifndef SLUICE_CORE_DATA_OPS_SNAPSHOT_READ_AHEAD_H_
#define SLUICE_CORE_DATA_OPS_SNAPSHOT_READ_AHEAD_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/data/ops/snapshot_chunk.h"
#include "core/util/thread_pool.h"
#include "sluice/element.h"

namespace sluice {

class SnapshotReadAhead {
 public:
  static constexpr size_t kDefaultMaxBytesAhead = 64 << 20;
  static constexpr size_t kUnitRecords = 32;
  static constexpr size_t kUnitBytes = 256 << 10;

  // Requires parallelism >= 1; `pool` (the process's, ProcessThreadPool()) must outlive the
  // queue.
  SnapshotReadAhead(int parallelism, size_t max_bytes_ahead, ThreadPool* pool);
  ~SnapshotReadAhead();
  SnapshotReadAhead(const SnapshotReadAhead&) = delete;
  SnapshotReadAhead& operator=(const SnapshotReadAhead&) = delete;

  // Whether another record may be queued (the bounds above).
  bool HasRoom() const;
  bool empty() const { return entries_.empty(); }

  // Queues `record`, framed by `reader` (kept alive while the record is queued), into the unit
  // being gathered; a full unit is handed to the pool.
  void Add(std::shared_ptr<const SnapshotChunkReader> reader,
           SnapshotChunkReader::FramedRecord record);
  // Queues what the consumer gets at this position: an element decoded already (a chunk that is
  // not mapped is decoded by its reader), or an error (a chunk that failed to open or to frame
  // a record, or a count that does not match the manifest's).
  void AddResult(absl::StatusOr<Element> result);
  // Hands the unit being gathered to the pool (the consumer will want it before it fills).
  void Flush();

  // The front element (requires !empty()), decoded here, or the error in its place: the
  // records' checksum error, the decode's error, or an AddResult error. Verifies the front unit
  // here when no pool thread has started it; waits for it when one is verifying it.
  absl::Status TakeFront(Element* out);

 private:
  // One queued position: a unit of records, or a result. Its state changes under mu_.
  struct Entry {
    enum class State { kGathering, kQueued, kVerifying, kVerified };
    State state = State::kGathering;
    std::shared_ptr<const SnapshotChunkReader> reader;  // a unit's
    std::vector<SnapshotChunkReader::FramedRecord> records;
    size_t bytes = 0;      // the records', counted in bytes_ahead_ while queued
    size_t verified = 0;   // once kVerified: records [0, verified) passed
    absl::Status error;    // once kVerified: records[verified]'s, when verified < size
    size_t next = 0;       // the consumer's: the next record to decode
    std::optional<absl::StatusOr<Element>> result;  // a result's
  };

  // Ends gathering into the last entry and schedules its verification.
  void Schedule(const std::shared_ptr<Entry>& entry);
  // A pool job: verifies `entry` unless the consumer took it first.
  void VerifyOnPool(const std::shared_ptr<Entry>& entry);
  // Verifies the records of `entry` (whose state the caller set to kVerifying) and marks it
  // verified.
  void Verify(Entry* entry) ABSL_LOCKS_EXCLUDED(mu_);
  // Removes the front entry.
  void PopFront();

  const int parallelism_;
  const size_t max_bytes_ahead_;
  ThreadPool* const pool_;
  const std::shared_ptr<PoolJobGate> gate_ = std::make_shared<PoolJobGate>();
  std::deque<std::shared_ptr<Entry>> entries_;  // the consumer's: front is the next element
  std::shared_ptr<Entry> gathering_;            // the consumer's: the unit Add fills, if any
  size_t bytes_ahead_ = 0;                      // the consumer's: queued records' bytes
  absl::Mutex mu_;
  absl::CondVar verified_;  // an entry became kVerified
};

}  // namespace sluice

#endif  // SLUICE_CORE_DATA_OPS_SNAPSHOT_READ_AHEAD_H_
