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
// (core/util/crc32c.h), payload. Each JournalRecord also says how many bytes of its segment
// were synced when it was written (synced_bytes). Replay tolerates exactly one torn tail, in
// the last segment, after its last synced byte: from the first record that is cut short or
// whose checksum fails, when no later record in the file says that byte was synced (a crash
// while records no request was answered for were in flight; the disk may have written their
// pages in any order, a later one and not an earlier one). It is dropped and the file cut
// back. Anything else that does not decode or apply is DATA_LOSS naming the file and offset.
//
// Durability (every step can crash, every sync can fail):
// - Group commit (server/group_commit.h): Write() appends a record without syncing it and
//   WaitDurable() makes it durable, sharing one sync among the requests that wait together.
// - Every failed sync is sticky and fatal: a failed fdatasync, a failed undo of a failed
//   append (truncate + sync), a failed sync of the directory after a snapshot's rename. From
//   then on WaitDurable and Write return the error (the coordinator exits; a restart replays
//   the journal), so that no later successful sync acknowledges records whose pages the
//   failed one may have dropped.
// - A snapshot starts a new segment first (StartSnapshot, under the caller's lock: it syncs
//   the current segment and creates the next one), and is written afterwards, outside the
//   lock (InstallSnapshot: file, fsync, rename, directory sync). So snapshot-N+1 always holds
//   exactly the segments < N+1, and whether or not it survives a crash, replay finds either
//   it and the segments from N+1, or the older snapshot and every segment since: no record
//   appended after it can sit in a segment it hides. Older files are deleted only once its
//   directory entry is synced.
//
// Thread safety: none, except WaitDurable(), written(), syncs(), sync_error() and
// InstallSnapshot(), which may be called from any thread at any time; the Coordinator calls the
// rest under its mutex.
#ifndef SLUICE_SERVER_JOURNAL_H_
#define SLUICE_SERVER_JOURNAL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
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

// The bytes a record's payload says were synced when it was written; nullopt when it does not
// parse.
using SyncedBytesOf = std::function<std::optional<uint64_t>(absl::string_view payload)>;

// Splits `data` (the content of the file `name`) into records. With `allow_torn_tail`, a torn
// tail is dropped (see above); otherwise it is an error too. With `synced_bytes_of`, the
// records after a bad one are looked for (at every byte offset) and the tail is torn only if
// none of them says the bad one's offset was synced; without it, only a bad last record or
// one followed by zeros is a torn tail. DATA_LOSS naming `name`, the byte offset and what is
// wrong for any other corruption.
absl::StatusOr<DecodedJournalFile> DecodeJournalRecords(absl::string_view data,
                                                        const std::string& name,
                                                        bool allow_torn_tail,
                                                        const SyncedBytesOf& synced_bytes_of = {});

// The synced_bytes of a JournalRecord payload (for DecodeJournalRecords).
std::optional<uint64_t> JournalRecordSyncedBytes(absl::string_view payload);

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
  // survive a crash. On error the segment is cut back (and synced) to before the record, so
  // that the journal still ends in a whole record, and UNAVAILABLE is returned (the request
  // changed nothing and may be retried; the message holds the file system's error);
  // if even that fails, the error sticks (as a failed sync's): this and every later call fail
  // (restart the coordinator: replay drops the torn tail). Write() then WaitDurable().
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

  // The sticky error of a failed sync (see above); OK while there is none.
  absl::Status sync_error() const { return commit_.error(); }

  // Whether snapshot_every records were appended since the last snapshot and no snapshot is
  // being written.
  bool snapshot_due() const {
    return records_since_snapshot_ >= options_.snapshot_every && !snapshot_in_flight_.load();
  }

  // The first half of a snapshot, under the caller's lock: syncs the current segment and
  // starts the next one, N+1; later records go there. Returns N+1: the caller then writes the
  // state as of now (after every record appended so far) with InstallSnapshot(N+1, ...),
  // possibly without its lock. Until that returns, snapshot_due() is false. On error nothing
  // changed (the sync's error sticks).
  absl::StatusOr<int64_t> StartSnapshot();
  // The second half, from any thread: writes snapshot-<seq> (a temporary file, synced,
  // renamed, the directory synced), then deletes the files it makes stale. A failure before
  // the rename leaves no snapshot (the segments still hold everything; the next one is due
  // snapshot_every records later); a failed directory sync sticks (see above).
  absl::Status InstallSnapshot(int64_t seq, const proto::StateSnapshot& snapshot);
  // Both halves at once: `snapshot` is the state after every record appended so far.
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
  absl::StatusOr<Loaded> Load(CoordinatorState* state, bool repair) ABSL_LOCKS_EXCLUDED(files_mu_);
  // The sticky error of a journal that failed (a failed sync), for Write and StartSnapshot.
  absl::Status Broken() const;
  std::string Path(const std::string& name) const;
  void Log(absl::string_view line) const;

  const JournalOptions options_;
  JournalFileSystem* const fs_;
  int64_t seq_ = 0;
  std::shared_ptr<AppendFile> file_;  // shared with a sync running without the caller's lock
  GroupCommit commit_;
  uint64_t size_ = 0;  // of the current segment: the end of its last whole record
  int64_t records_since_snapshot_ = 0;
  // Set by StartSnapshot, cleared when InstallSnapshot returns.
  std::atomic<bool> snapshot_in_flight_{false};
  // Held while a Load reads the directory and while InstallSnapshot deletes stale files, so
  // that a Reload never lists a file that is gone when it reads it.
  absl::Mutex files_mu_;
};

}  // namespace sluice

#endif  // SLUICE_SERVER_JOURNAL_H_
