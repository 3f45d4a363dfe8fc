// SnapshotReadAhead: the queue through which load() (load_op.cc) reads a snapshot's mapped
// chunks ahead of its consumer, on the process's thread pool (core/util/thread_pool.h), and hands
// the elements out in the order their records were framed: the same elements, order and errors
// as reading them one after the other.
//
// Why: a loaded element costs one pass over its bytes (the first touch of the page cache's
// memory, which the data checksum makes) and a copy of its strings; that is all the work left,
// and it is independent per record. So the consumer's thread only frames records (their lengths:
// SnapshotChunkReader::NextRecord) and queues them; pool threads verify each record's checksum
// and decode it (SnapshotChunkReader::DecodeRecord), the checksum on the thread that first
// touches the bytes, just before the decode reads them again from its cache. tf.data's
// Dataset.load reads its chunks in parallel too (an interleave with num_parallel_calls), in an
// order that depends on the machine's cores; this one keeps load's order (chunk by chunk).
//
// Bounds: at most 2 * parallelism records queued (decoding, decoded or waiting), and no record
// is queued once the queued records' bytes reach max_bytes_ahead (at least one always is): the
// decoded elements are charged to the memory budget like any, and a refusal is that element's
// RESOURCE_EXHAUSTED in its place. The consumer never waits for a decode that no pool thread has
// started (it decodes that record itself: the pool may be busy with other pipelines), only for
// one running. The destructor waits for the decodes running, not for those queued.
//
//   SnapshotReadAhead ahead(parallelism, SnapshotReadAhead::kDefaultMaxBytesAhead);
//   while (ahead.HasRoom()) ahead.Add(reader, record);   // reader: shared_ptr, record: framed
//   RETURN_IF_ERROR(ahead.TakeFront(&element));
//
// Thread safety: one consumer thread calls the methods (as an Iterator's caller); the pool's
// threads work on the queue meanwhile.
#ifndef SLUICE_CORE_DATA_OPS_SNAPSHOT_READ_AHEAD_H_
#define SLUICE_CORE_DATA_OPS_SNAPSHOT_READ_AHEAD_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>

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

  // Requires parallelism >= 1; `pool` (the process's by default) must outlive the queue.
  SnapshotReadAhead(int parallelism, size_t max_bytes_ahead,
                    ThreadPool* pool = &ProcessThreadPool());
  ~SnapshotReadAhead();
  SnapshotReadAhead(const SnapshotReadAhead&) = delete;
  SnapshotReadAhead& operator=(const SnapshotReadAhead&) = delete;

  // Whether another record may be queued (the bounds above).
  bool HasRoom() const;
  bool empty() const { return entries_.empty(); }

  // Queues `record`, framed by `reader` (kept alive until it is decoded), and schedules its
  // decode on the pool.
  void Add(std::shared_ptr<const SnapshotChunkReader> reader,
           SnapshotChunkReader::FramedRecord record);
  // Queues what the consumer gets at this position: an element decoded already (a chunk that is
  // not mapped is decoded by its reader), or an error (a chunk that failed to open or to frame
  // a record, or a count that does not match the manifest's).
  void AddResult(absl::StatusOr<Element> result);

  // Removes the front entry (requires !empty()) and returns its element in *out, or its error.
  // Decodes it here when no pool thread has started it; waits for it when one is decoding it.
  absl::Status TakeFront(Element* out);

 private:
  // One queued position; its state changes under mu_.
  struct Entry {
    enum class State { kQueued, kDecoding, kDone };
    State state = State::kQueued;
    std::shared_ptr<const SnapshotChunkReader> reader;  // null once decoded
    SnapshotChunkReader::FramedRecord record;
    size_t bytes = 0;  // the record's, counted in bytes_ahead_ while queued
    std::optional<absl::StatusOr<Element>> result;
  };

  // A pool job: decodes `entry` unless the consumer took it first.
  void DecodeOnPool(const std::shared_ptr<Entry>& entry);
  // Decodes entry (whose state the caller set to kDecoding) and marks it done.
  void Decode(Entry* entry) ABSL_LOCKS_EXCLUDED(mu_);

  const int parallelism_;
  const size_t max_bytes_ahead_;
  ThreadPool* const pool_;
  const std::shared_ptr<PoolJobGate> gate_ = std::make_shared<PoolJobGate>();
  std::deque<std::shared_ptr<Entry>> entries_;  // the consumer's: front is the next element
  size_t bytes_ahead_ = 0;                      // the consumer's: queued records' bytes
  mutable absl::Mutex mu_;
  absl::CondVar done_;  // an entry became kDone
};

}  // namespace sluice

#endif  // SLUICE_CORE_DATA_OPS_SNAPSHOT_READ_AHEAD_H_
