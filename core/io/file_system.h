// FileSystem: where every reader and list_files get their bytes, chosen by the URL's scheme.
//
//   ASSIGN_OR_RETURN(FileSystem * fs, FileSystemFor("s3://bucket/train/part-0.tfrecord"));
//   ASSIGN_OR_RETURN(std::unique_ptr<InputStream> in, fs->NewInputStream(url));
//   ASSIGN_OR_RETURN(std::vector<std::string> names, GlobFiles("s3://bucket/train/*.tfrecord"));
//
// Schemes: a plain path or `file://` (the local file system, core/io/local_file_system.h),
// `s3://bucket/key`, `gs://bucket/key`, `http://` and `https://` (core/io/object_store_file_system.h).
// Tests and plugins may register more (RegisterFileSystem), e.g. an in-memory fake.
//
// Errors keep one meaning per code whatever the scheme, and name the URL (and the byte offset
// where one applies): NOT_FOUND the file or object does not exist, PERMISSION_DENIED access was
// refused, INVALID_ARGUMENT a malformed URL or an unknown scheme, UNAVAILABLE a remote store
// failed after its retries, UNIMPLEMENTED what a scheme cannot do (globbing http URLs).
//
// Writes (NewWritableFile, DeleteFile) exist for the object stores (s3://, gs://): a file appears
// whole when it is closed, so a writer needs no rename (docs/SNAPSHOTS.md).
//
// Thread safety: FileSystem objects are thread-safe; a RandomAccessFile may be read from many
// threads at once; an InputStream has one caller at a time.
#ifndef SLUICE_CORE_FILE_SYSTEM_H_
#define SLUICE_CORE_FILE_SYSTEM_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/io/input_stream.h"

namespace sluice {

// Positioned reads of one file. Thread-safe.
class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  // Reads up to `n` bytes at `offset` into `dst`; returns how many: fewer than `n` only at the
  // end of the file (0 at or past it). Errors name the file and the offset.
  virtual absl::StatusOr<size_t> ReadAt(uint64_t offset, char* dst, size_t n) const = 0;
  // The name errors use (the URL or path it was opened with).
  virtual const std::string& name() const = 0;
};

// A file being written, that appears whole or not at all: nothing is visible under its name
// until Close() succeeds (then all of it is), and a file destroyed without a successful
// Close() leaves nothing behind (an object store aborts the upload). One caller at a time.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  // Adds `data` at the end. Errors name the file; after one, the file can only be destroyed.
  virtual absl::Status Append(absl::string_view data) = 0;
  // Makes the whole file visible under its name, replacing what was there (ALREADY_EXISTS
  // naming it instead when it was opened with `fail_if_exists` and something is there).
  virtual absl::Status Close() = 0;
  // The name errors use (the URL or path it was opened with).
  virtual const std::string& name() const = 0;
};

struct WritableFileOptions {
  // Close() fails with ALREADY_EXISTS rather than replace an existing file (a lock). A store
  // that cannot refuse conditionally says UNIMPLEMENTED at Close().
  bool fail_if_exists = false;
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;

  // A sequential stream over `url` from byte 0, reading ahead of the caller where the scheme
  // benefits (remote stores fetch the next ranges in parallel). NOT_FOUND naming a missing file.
  virtual absl::StatusOr<std::unique_ptr<InputStream>> NewInputStream(const std::string& url) = 0;
  // Positioned reads of `url`. NOT_FOUND naming a missing file.
  virtual absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& url) = 0;
  // Size and modification time. NOT_FOUND naming a missing file.
  virtual absl::StatusOr<FileStat> Stat(const std::string& url) = 0;
  // The names matching `pattern` (`*`, `?`, `[...]` within one path segment), sorted bytewise,
  // in the pattern's own form (URLs for URLs). No match is an empty list, not an error.
  virtual absl::StatusOr<std::vector<std::string>> Glob(const std::string& pattern) = 0;

  // A new file `url` (see WritableFile). UNIMPLEMENTED naming the URL where the scheme has no
  // writes (the default; the local file system's writes are the snapshot writer's own).
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& url, const WritableFileOptions& options);
  // Removes `url`; OK when it is already gone. UNIMPLEMENTED where the scheme has no writes.
  virtual absl::Status DeleteFile(const std::string& url);
};

// The scheme of `url` in lower case ("s3" for "s3://b/k"); empty for a local path (no "://"
// after a run of scheme characters).
std::string UrlScheme(absl::string_view url);
// True when `url` names a local file (no scheme, or file://).
bool IsLocalPath(absl::string_view url);
// `url` without a leading "file://"; other names unchanged.
std::string LocalPathOf(absl::string_view url);

// The file system serving `url`'s scheme. INVALID_ARGUMENT naming the URL for an unknown scheme.
// The returned pointer lives as long as the process (or until its scheme is registered again).
absl::StatusOr<FileSystem*> FileSystemFor(absl::string_view url);

// Serves `scheme` ("" for local paths) with `fs` from now on, replacing what served it (tests
// swap in fakes this way; a replaced file system must no longer be in use). Thread-safe.
void RegisterFileSystem(const std::string& scheme, std::shared_ptr<FileSystem> fs);

// Shorthands through FileSystemFor.
absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenRandomAccessFile(const std::string& url);
absl::StatusOr<std::vector<std::string>> GlobFiles(const std::string& pattern);

// For stores that list by prefix: the part of `pattern` before the segment holding its first
// wildcard ("a/b/c*.x" -> "a/b/"); the whole pattern when it has none.
std::string GlobListPrefix(absl::string_view pattern);
// True when `name` matches glob `pattern` with `*` and `?` not crossing '/' (fnmatch(3) with
// FNM_PATHNAME).
bool GlobMatches(const std::string& pattern, const std::string& name);

}  // namespace sluice

#endif  // SLUICE_CORE_FILE_SYSTEM_H_
