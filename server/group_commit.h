// GroupCommit: journal syncs shared by concurrent requests (docs/SERVICE.md, "Journal and
// restart"). The coordinator appends a request's journal record under its mutex (Written()
// numbers it), releases the mutex, then waits until the record is durable (WaitDurable()).
// The first waiter that finds no sync running syncs the file for every record written so far;
// waiters whose records that sync covers return when it ends, the others wait for the next
// one. So N requests that arrive together cost one or two fsyncs, not N, and none holds the
// coordinator's mutex while the disk works.
//
// A failed sync is not retried: the file's unsynced data may be lost (the kernel drops the
// dirty pages of a failed fsync), so the error sticks and every later WaitDurable returns it;
// the coordinator then exits and a restart replays what the journal holds. The journal's
// other syncs (undoing a failed append, a new segment, a snapshot's directory) report their
// failures through Fail(), with the same effect: no later sync acknowledges a record whose
// pages a failed one may have dropped (the PostgreSQL fsync lesson).
//
// Thread safety: every method may be called from any thread.
#ifndef SLUICE_SERVER_GROUP_COMMIT_H_
#define SLUICE_SERVER_GROUP_COMMIT_H_

#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/journal_file.h"

namespace sluice {

class GroupCommit {
 public:
  // A record was appended to `file` (the journal's current segment), which now holds
  // `file_bytes` bytes; returns its number (1, 2, ...). The caller's lock orders the calls.
  uint64_t Written(std::shared_ptr<AppendFile> file, uint64_t file_bytes)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The journal opened `file`, whose `file_bytes` bytes are durable.
  void Opened(std::shared_ptr<AppendFile> file, uint64_t file_bytes) ABSL_LOCKS_EXCLUDED(mu_);
  // Bytes of the current file known durable (synced): 0 for a new file.
  uint64_t durable_bytes() const ABSL_LOCKS_EXCLUDED(mu_);
  // A sync of the journal failed outside WaitDurable: `error` sticks as a failed sync's does
  // (the first error is kept).
  void Fail(const absl::Status& error) ABSL_LOCKS_EXCLUDED(mu_);
  // The sticky error; OK while every sync succeeded.
  absl::Status error() const ABSL_LOCKS_EXCLUDED(mu_);
  // Everything written is durable by other means (a snapshot that covers it was synced).
  void AllDurable() ABSL_LOCKS_EXCLUDED(mu_);
  // Returns once records 1..seq are durable (syncing them, or waiting for a sync that covers
  // them), or with the first sync's error.
  absl::Status WaitDurable(uint64_t seq) ABSL_LOCKS_EXCLUDED(mu_);
  // The last record number written, and the syncs made so far.
  uint64_t written() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t syncs() const ABSL_LOCKS_EXCLUDED(mu_);
  // Test hook: waits until `n` callers wait in WaitDurable behind a running sync.
  void TEST_AwaitWaiters(int n) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  uint64_t written_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t durable_ ABSL_GUARDED_BY(mu_) = 0;
  std::shared_ptr<AppendFile> file_ ABSL_GUARDED_BY(mu_);
  uint64_t written_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // of file_
  uint64_t durable_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // of file_
  bool syncing_ ABSL_GUARDED_BY(mu_) = false;
  int waiters_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t syncs_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice

#endif  // SLUICE_SERVER_GROUP_COMMIT_H_
