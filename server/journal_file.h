// JournalFileSystem: the file operations the coordinator's journal (server/journal.h) needs,
// behind an interface so that tests can fake crashes, torn writes and failing disks.
// RealJournalFileSystem() is POSIX: write(2), fdatasync(2), rename(2) and fsync(2) of a
// directory. Which steps are synced is the caller's choice (server/journal.h): a rename or a
// delete is durable only after SyncDir, so that a fault-injecting file system
// (server/fault_injecting_journal_file.h) can model what a crash keeps.
//
// Paths are plain strings; a directory's entries are named without the directory.
//
// Thread safety: the real file system is thread-safe. An AppendFile's Append and Truncate are
// called by one thread at a time (the Coordinator's, under its mutex); its Sync may run at the
// same time from another (group commit, without the mutex).
#ifndef SLUICE_SERVER_JOURNAL_FILE_H_
#define SLUICE_SERVER_JOURNAL_FILE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sluice {

// A file open for appending at its end.
class AppendFile {
 public:
  virtual ~AppendFile() = default;
  // Appends all of `data`. On error some prefix of it may have reached the file.
  virtual absl::Status Append(absl::string_view data) = 0;
  // Makes every byte appended so far durable (fdatasync).
  virtual absl::Status Sync() = 0;
  // Cuts the file to `size` bytes (to drop a record that failed half-way) and syncs.
  virtual absl::Status Truncate(uint64_t size) = 0;
};

class JournalFileSystem {
 public:
  virtual ~JournalFileSystem() = default;

  // Creates `dir` (and its parents) if absent.
  virtual absl::Status CreateDir(const std::string& dir) = 0;
  // The names of the entries of `dir`. NOT_FOUND if it does not exist.
  virtual absl::StatusOr<std::vector<std::string>> ListDir(const std::string& dir) = 0;
  // The whole content of the file.
  virtual absl::StatusOr<std::string> ReadFile(const std::string& path) = 0;
  // Opens `path` for appending, creating it (and syncing its directory) if absent.
  virtual absl::StatusOr<std::unique_ptr<AppendFile>> OpenAppend(const std::string& path) = 0;
  // Cuts the file at `path` to `size` bytes and syncs it.
  virtual absl::Status Truncate(const std::string& path, uint64_t size) = 0;
  // Creates or replaces the file at `path` with `data` and syncs its content (fsync; not the
  // directory's entry). On error the file may hold any prefix of `data`.
  virtual absl::Status WriteFile(const std::string& path, absl::string_view data) = 0;
  // Renames `from` to `to` atomically, replacing `to`. Durable only after SyncDir.
  virtual absl::Status Rename(const std::string& from, const std::string& to) = 0;
  // Makes the entries of `dir` (files created, renamed, deleted) durable: fsync(2) of it.
  virtual absl::Status SyncDir(const std::string& dir) = 0;
  // Removes the file; OK if it does not exist. Durable only after SyncDir.
  virtual absl::Status Delete(const std::string& path) = 0;
};

// The process's real file system. Never null; lives forever.
JournalFileSystem* RealJournalFileSystem();

}  // namespace sluice

#endif  // SLUICE_SERVER_JOURNAL_FILE_H_
