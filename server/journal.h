// Journal: the coordinator's write-ahead log (docs/SERVICE.md, "Journal and restart"). Every
// state change is appended to a segment file in the work directory as a checksummed record and
// synced before the request that made it is answered; every `snapshot_every` records the whole
// state is written as a snapshot and a new segment begins, so that replay stays short.
//
// Files in the directory (sequence numbers are 20 decimal digits, so names sort by number):
//   snapshot-<seq>   one record: a proto::StateSnapshot of the state after segments < seq
//   journal-<seq>    records: proto::JournalRecord, appended in order
// Replay restores the newest snapshot, then applies the segments numbered from it on, in
// order. Files older than the newest snapshot are deleted.
//
// Record framing (little-endian): u32 payload length, u32 masked CRC32C of the payload
// (core/util/crc32c.h), payload. A record cut short at the end of the last segment, or whose
// checksum fails when it is the file's last record (a crash during its write: the request was
// never answered), is a torn tail: it is dropped and the file cut back. Anything else that
// does not decode or apply is DATA_LOSS naming the file and byte offset.
//
// Group commit (server/group_commit.h): Write() appends a record without syncing it and
// WaitDurable() makes it durable, sharing one sync among the requests that wait together.
//
// Thread safety: none, except WaitDurable() and written(), which may be called from any thread
// at any time; the Coordinator calls the rest under its mutex.
#ifndef SLUICE_SERVER_JOURNAL_H_
#define SLUICE_SERVER_JOURNAL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/journal.pb.h"
#include "proto/journal_record.pb.h"
#include "server/coordinator_state.h"
#include "server/group_commit.h"
#include "server/journal_file.h"

namespace sluice {

// Bytes of a record's header: length and masked checksum.
inline constexpr size_t kJournalRecordHeaderBytes = 8;

// `payload` framed as one record.
std::string EncodeJournalRecord(absl::string_view payload);

// The records of one file, as read.
struct DecodedJournalFile {
  struct Record {
    uint64_t offset = 0;  // of its header
    absl::string_view payload;  // into the decoded data
  };
  std::vector<Record> records;
  // Bytes up to the end of the last good record; the rest (a torn tail) was dropped.
  uint64_t valid_bytes = 0;
  uint64_t dropped_bytes = 0;
};

// Splits `data` (the content of the file `name`) into records. With `allow_torn_tail`, a torn
// last record is dropped (see above); otherwise it is an error too. DATA_LOSS naming `name`,
// the byte offset and what is wrong for any other corruption.
absl::StatusOr<DecodedJournalFile> DecodeJournalRecords(absl::string_view data,
                                                        const std::string& name,
                                                        bool allow_torn_tail);

struct JournalOptions {
  // The work directory; created if absent. Required.
  std::string dir;
  // Records appended between snapshots. At least 1.
  int64_t snapshot_every = 1000;
  // Borrowed, must outlive the Journal. nullptr: RealJournalFileSystem().
  JournalFileSystem* fs = nullptr;
  // One line per replay and snapshot, and for a dropped torn tail. Unset: no lines.
  std::function<void(absl::string_view)> log;
};

class Journal {
 public:
  // Opens the journal in options.dir and replays it into `state`, which must be empty; an
  // empty or absent directory is an empty journal. A torn tail is dropped (one log line giving
  // the bytes dropped). DATA_LOSS naming the file and byte offset for a corrupt record, a
  // record that does not apply, or a missing segment; the error of the file system otherwise.
  static absl::StatusOr<std::unique_ptr<Journal>> Open(JournalOptions options,
                                                       CoordinatorState* state);

  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  // Appends one record holding `updates` and syncs it; when this returns OK the updates
  // survive a crash. On error the segment is cut back to before the record, so that the
  // journal still ends in a whole record, and the file system's error is returned; if even
  // that fails, this and every later Append fail with FAILED_PRECONDITION (restart the
  // coordinator: replay drops the torn tail). Write() then WaitDurable().
  absl::Status Append(absl::Span<const proto::Update> updates);
  // Appends one record holding `updates` without syncing it; returns its number for
  // WaitDurable. Errors as Append's.
  absl::StatusOr<uint64_t> Write(absl::Span<const proto::Update> updates);
  // Returns once the records numbered up to `seq` (Write's numbers) are durable: one sync
  // covers every record written when it starts (group commit). A sync's error sticks: every
  // later call returns it (the coordinator exits; a restart replays the journal).
  absl::Status WaitDurable(uint64_t seq) { return commit_.WaitDurable(seq); }
  // The number of the last record written, and the syncs made so far.
  uint64_t written() const { return commit_.written(); }
  int64_t syncs() const { return commit_.syncs(); }
  // Test hook: waits until `n` callers of WaitDurable wait behind a running sync.
  void TEST_AwaitSyncWaiters(int n) { commit_.TEST_AwaitWaiters(n); }

  // Whether snapshot_every records were appended since the last snapshot.
  bool snapshot_due() const { return records_since_snapshot_ >= options_.snapshot_every; }

  // Writes `snapshot` (the state after every record appended so far), starts a new segment and
  // deletes the older files. On error the journal goes on in its current segment and the next
  // attempt is due snapshot_every records later.
  absl::Status WriteSnapshot(const proto::StateSnapshot& snapshot);

  // Replays the directory again into `state`, which must be empty: the state of the records
  // appended successfully so far (the Coordinator uses it to undo a batch that failed).
  absl::Status Reload(CoordinatorState* state);

  // The segment being appended to, and the records in it and in all segments since the last
  // snapshot.
  std::string segment_path() const;
  int64_t records_since_snapshot() const { return records_since_snapshot_; }

  static std::string SnapshotName(int64_t seq);
  static std::string SegmentName(int64_t seq);

 private:
  struct Loaded {
    int64_t seq = 0;  // of the last segment (or of the snapshot, when no segment follows it)
    bool segment_exists = false;
    int64_t records = 0;  // in the segments since the snapshot
    uint64_t size = 0;  // of the last segment, after dropping a torn tail
  };

  explicit Journal(JournalOptions options);
  // Restores the newest snapshot and applies the segments after it. With `repair`, drops a
  // torn tail (cutting the file) and deletes stale files.
  absl::StatusOr<Loaded> Load(CoordinatorState* state, bool repair);
  std::string Path(const std::string& name) const;
  void Log(absl::string_view line) const;

  const JournalOptions options_;
  JournalFileSystem* const fs_;
  int64_t seq_ = 0;
  std::shared_ptr<AppendFile> file_;  // shared with a sync running without the caller's lock
  GroupCommit commit_;
  uint64_t size_ = 0;  // of the current segment: the end of its last whole record
  int64_t records_since_snapshot_ = 0;
  absl::Status broken_;  // set when a failed append could not be undone
};

}  // namespace sluice

#endif  // SLUICE_SERVER_JOURNAL_H_
