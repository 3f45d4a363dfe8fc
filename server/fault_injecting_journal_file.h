// FaultInjectingJournalFileSystem: a JournalFileSystem (server/journal_file.h) that forwards to
// another and fails chosen operations the way a failing disk does (LevelDB's
// FaultInjectionTestEnv is the model): ENOSPC or EIO on a write (after part of it reached the
// file), EIO on fdatasync, on a truncation, on a directory sync, on a rename. For the journal
// tests and the control-plane soak (bench/control_plane_soak.py), which turns it on in the real
// sluice-coordinator with the test-only environment variable SLUICE_TEST_JOURNAL_FAULTS.
//
// Faults are scripted (FailNext: the n-th next operation of a kind, or the next append whose
// data a predicate picks) or random (each operation of a kind fails with a probability, from
// a fixed seed). What a crash keeps is not modelled here; tests wrap an in-memory file system
// that does (tests/server/crash_simulating_fs.h).
//
// Thread safety: thread-safe; the faults are drawn in the order the operations arrive.
#ifndef SLUICE_SERVER_FAULT_INJECTING_JOURNAL_FILE_H_
#define SLUICE_SERVER_FAULT_INJECTING_JOURNAL_FILE_H_

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "server/journal_file.h"

namespace sluice {

// The operations faults can hit.
enum class JournalFileOp {
  kAppend = 0,    // AppendFile::Append
  kSync,          // AppendFile::Sync (fdatasync)
  kTruncate,      // AppendFile::Truncate and JournalFileSystem::Truncate
  kOpenAppend,    // JournalFileSystem::OpenAppend
  kWriteFile,     // JournalFileSystem::WriteFile (a snapshot's temporary file)
  kRename,        // JournalFileSystem::Rename
  kSyncDir,       // JournalFileSystem::SyncDir
  kDelete,        // JournalFileSystem::Delete
};
inline constexpr int kNumJournalFileOps = 8;
// "append", "sync", ... as in FaultInjectingJournalFileSystem::Parse.
absl::string_view JournalFileOpName(JournalFileOp op);

class FaultInjectingJournalFileSystem : public JournalFileSystem {
 public:
  // Forwards to `base` (borrowed, must outlive this).
  explicit FaultInjectingJournalFileSystem(JournalFileSystem* base);

  // A spec for random faults: comma-separated `key=value`, keys `seed` (an integer) and an
  // operation's name (append, sync, truncate, open_append, write_file, rename, sync_dir,
  // delete) with a probability in [0, 1]. E.g. "seed=7,append=0.001,sync=0.0005,sync_dir=0.01".
  // A failed append writes a random prefix of its data first and fails with ENOSPC or EIO
  // (alternately drawn); other operations fail with EIO. INVALID_ARGUMENT naming the bad item.
  absl::Status SetRandomFaults(absl::string_view spec) ABSL_LOCKS_EXCLUDED(mu_);

  // Scripted: the (skip + 1)-th next operation of kind `op` fails with `error` (a failed
  // append first writes `partial_bytes` of its data). Several may be queued per kind.
  void FailNext(JournalFileOp op, absl::Status error, int skip = 0, size_t partial_bytes = 0)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Scripted: the next append whose data `pick` returns true for fails with `error`, having
  // written nothing.
  void FailAppendIf(std::function<bool(absl::string_view data)> pick, absl::Status error)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Drops every scripted and random fault.
  void Clear() ABSL_LOCKS_EXCLUDED(mu_);

  // Faults injected so far, per kind, and in all.
  int64_t injected(JournalFileOp op) const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t injected_total() const ABSL_LOCKS_EXCLUDED(mu_);

  absl::Status CreateDir(const std::string& dir) override;
  absl::StatusOr<std::vector<std::string>> ListDir(const std::string& dir) override;
  absl::StatusOr<std::string> ReadFile(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<AppendFile>> OpenAppend(const std::string& path) override;
  absl::Status Truncate(const std::string& path, uint64_t size) override;
  absl::Status WriteFile(const std::string& path, absl::string_view data) override;
  absl::Status Rename(const std::string& from, const std::string& to) override;
  absl::Status SyncDir(const std::string& dir) override;
  absl::Status Delete(const std::string& path) override;

 private:
  class File;
  struct Fault {
    absl::Status error;  // OK: none
    size_t partial_bytes = 0;
  };
  struct Scripted {
    int skip = 0;
    absl::Status error;
    size_t partial_bytes = 0;
  };
  // Whether the operation `op` on `path` fails now; `data` for an append.
  Fault Draw(JournalFileOp op, const std::string& path, absl::string_view data)
      ABSL_LOCKS_EXCLUDED(mu_);

  JournalFileSystem* const base_;
  mutable absl::Mutex mu_;
  std::array<std::deque<Scripted>, kNumJournalFileOps> scripted_ ABSL_GUARDED_BY(mu_);
  std::function<bool(absl::string_view)> append_pick_ ABSL_GUARDED_BY(mu_);
  absl::Status append_pick_error_ ABSL_GUARDED_BY(mu_);
  std::array<double, kNumJournalFileOps> rate_ ABSL_GUARDED_BY(mu_) = {};
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
  std::array<int64_t, kNumJournalFileOps> injected_ ABSL_GUARDED_BY(mu_) = {};
};

}  // namespace sluice

#endif  // SLUICE_SERVER_FAULT_INJECTING_JOURNAL_FILE_H_
