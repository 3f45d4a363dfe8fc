#include "core/data/ops/snapshot_manifest.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/io/confined_open.h"
#include "core/io/file_system.h"
#include "core/io/input_stream.h"
#include "core/io/tfrecord_reader.h"
#include "core/io/tfrecord_writer.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

constexpr absl::string_view kChunkPrefix = "chunk-";
constexpr absl::string_view kChunkSuffix = ".tfrecord";

std::string Join(absl::string_view directory, absl::string_view name) {
  return absl::StrCat(absl::StripSuffix(directory, "/"), "/", name);
}

absl::Status ManifestCorrupt(const std::string& filename, absl::string_view what) {
  return absl::DataLossError(
      absl::StrCat("snapshot manifest '", filename, "' is corrupt: ", what));
}

// Writes all of `bytes` to `fd`; errno's code naming `filename`.
absl::Status WriteAll(int fd, absl::string_view bytes, const std::string& filename) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return FileError(errno, "write", filename);
    done += static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

std::atomic<uint64_t> manifest_temp_counter{0};

// Writes `bytes` as the object `url` (an object store's: it appears whole at Close()).
absl::Status WriteObject(const std::string& url, absl::string_view bytes,
                         const WritableFileOptions& options) {
  ASSIGN_OR_RETURN(FileSystem * fs, FileSystemFor(url));
  ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, fs->NewWritableFile(url, options));
  RETURN_IF_ERROR(file->Append(bytes));
  return file->Close();
}

}  // namespace

std::string SnapshotManifestPath(absl::string_view directory) {
  return Join(directory, "manifest");
}
std::string SnapshotLockPath(absl::string_view directory) { return Join(directory, "save.lock"); }
std::string SnapshotChunksDirectory(absl::string_view directory) {
  return Join(directory, "chunks");
}
std::string SnapshotChunkName(absl::string_view fingerprint) {
  return absl::StrCat(kChunkPrefix, fingerprint, kChunkSuffix);
}

bool IsSnapshotChunkName(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, kChunkPrefix) || !absl::ConsumeSuffix(&name, kChunkSuffix)) {
    return false;
  }
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

absl::StatusOr<proto::SnapshotManifest> ParseSnapshotManifest(absl::string_view bytes,
                                                              const std::string& filename) {
  proto::SnapshotManifest m;
  if (!m.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return ManifestCorrupt(filename, "the record is not a SnapshotManifest");
  }
  if (m.format_version() < kOldestSnapshotFormatVersion ||
      m.format_version() > kSnapshotFormatVersion) {
    return ManifestCorrupt(filename, absl::StrCat("format_version ", m.format_version(),
                                                  " (this build reads ",
                                                  kOldestSnapshotFormatVersion, " to ",
                                                  kSnapshotFormatVersion, ")"));
  }
  if (!m.done() && m.chunks_size() > 0) {
    return ManifestCorrupt(filename, "chunks listed before the snapshot is done");
  }
  __int128 total = 0;
  std::string previous;
  for (const proto::SnapshotChunk& c : m.chunks()) {
    if (!IsSnapshotChunkName(c.name())) {
      return ManifestCorrupt(filename, absl::StrCat("'", c.name().substr(0, 80),
                                                    "' is not a chunk file name"));
    }
    if (c.name() <= previous) {
      return ManifestCorrupt(filename, absl::StrCat("chunk '", c.name(),
                                                    "' is out of order or repeated"));
    }
    previous = c.name();
    if (c.num_elements() < 0) {
      return ManifestCorrupt(filename, absl::StrCat("chunk '", c.name(), "' has ",
                                                    c.num_elements(), " elements"));
    }
    if (c.has_num_bytes() && c.num_bytes() < 0) {
      return ManifestCorrupt(filename, absl::StrCat("chunk '", c.name(), "' has ", c.num_bytes(),
                                                    " bytes"));
    }
    total += c.num_elements();
  }
  if (m.done() && total != m.num_elements()) {
    return ManifestCorrupt(filename, absl::StrCat("num_elements ", m.num_elements(),
                                                  " is not the sum of its chunks' counts"));
  }
  return m;
}

absl::StatusOr<proto::SnapshotManifest> ReadSnapshotManifest(const std::string& directory) {
  const std::string filename = SnapshotManifestPath(directory);
  ASSIGN_OR_RETURN(FileStat stat, StatFile(filename));
  if (stat.size > kMaxSnapshotManifestBytes) {
    return ManifestCorrupt(filename, absl::StrCat(stat.size, " bytes is more than a manifest (",
                                                  kMaxSnapshotManifestBytes, ")"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<InputStream> in, OpenFileStream(filename));
  std::unique_ptr<TFRecordReader> reader =
      TFRecordReader::FromStream(std::move(in), {}, stat.size);
  std::string record;
  absl::Status s = reader->ReadRecord(&record);
  if (absl::IsOutOfRange(s)) return ManifestCorrupt(filename, "it is empty");
  RETURN_IF_ERROR(s);
  std::string extra;
  s = reader->ReadRecord(&extra);
  if (s.ok()) return ManifestCorrupt(filename, "more than one record");
  if (!absl::IsOutOfRange(s)) return s;
  return ParseSnapshotManifest(record, filename);
}

absl::Status SyncLocalPath(const std::string& path) {
  ASSIGN_OR_RETURN(int fd, OpenLocalFile(path, O_RDONLY));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return FileError(err, "fsync", path);
  return absl::OkStatus();
}

absl::Status MakeLocalDirectories(const std::string& path) {
  const std::string local = LocalPathOf(path);
  for (size_t i = 1; i <= local.size(); ++i) {
    if (i != local.size() && local[i] != '/') continue;
    const std::string prefix = local.substr(0, i);
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return FileError(errno, "create directory", prefix);
    }
  }
  struct stat st;
  if (::stat(local.c_str(), &st) != 0) return FileError(errno, "stat", local);
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat("'", local, "' is not a directory"));
  }
  return absl::OkStatus();
}

absl::Status CheckSnapshotWritable(const std::string& directory) {
  const std::string scheme = UrlScheme(directory);
  if (IsLocalPath(directory) || scheme == "s3" || scheme == "gs") return absl::OkStatus();
  return absl::UnimplementedError(absl::StrCat(
      "cannot write the snapshot '", directory, "': snapshots are written to local (or "
      "mounted) paths and object stores (s3://, gs://) only; ", scheme, ":// has no writes"));
}

absl::Status WriteSnapshotManifest(const std::string& directory,
                                   const proto::SnapshotManifest& manifest) {
  RETURN_IF_ERROR(CheckSnapshotWritable(directory));
  std::string framed;
  AppendTFRecord(manifest.SerializeAsString(), &framed);
  if (!IsLocalPath(directory)) {
    // One PUT (a manifest is far below a part): the new object replaces the old whole.
    return WriteObject(SnapshotManifestPath(directory), framed, WritableFileOptions());
  }
  const std::string filename = LocalPathOf(SnapshotManifestPath(directory));
  const std::string temp = absl::StrCat(filename, ".tmp-", ::getpid(), "-",
                                        manifest_temp_counter.fetch_add(1));
  ASSIGN_OR_RETURN(int fd, OpenLocalFile(temp, O_WRONLY | O_CREAT | O_EXCL, 0644));
  absl::Status s = WriteAll(fd, framed, temp);
  if (s.ok() && ::fsync(fd) != 0) s = FileError(errno, "fsync", temp);
  ::close(fd);
  if (s.ok() && std::rename(temp.c_str(), filename.c_str()) != 0) {
    s = FileError(errno, absl::StrCat("rename to ", filename), temp);
  }
  if (!s.ok()) {
    std::remove(temp.c_str());
    return s;
  }
  return SyncLocalPath(LocalPathOf(directory));
}

absl::Status AcquireSnapshotLock(const std::string& directory, const std::string& owner) {
  if (!IsLocalPath(directory)) {
    WritableFileOptions exclusive;
    exclusive.fail_if_exists = true;  // If-None-Match: *, the store's O_EXCL
    absl::Status s = WriteObject(SnapshotLockPath(directory), owner, exclusive);
    if (!absl::IsAlreadyExists(s)) return s;
    absl::StatusOr<std::string> held = SnapshotLockOwner(directory);
    return absl::AlreadyExistsError(absl::StrCat(
        "another save is writing the snapshot '", directory, "' (", SnapshotLockPath(directory),
        " exists", held.ok() ? absl::StrCat(", held for pipeline ", *held) : std::string(), ")"));
  }
  const std::string filename = LocalPathOf(SnapshotLockPath(directory));
  absl::StatusOr<int> fd = OpenLocalFile(filename, O_WRONLY | O_CREAT | O_EXCL, 0644);
  // O_EXCL made the choice; the failed open's errno is gone, so EEXIST is told by the file.
  struct stat st;
  if (!fd.ok() && ::lstat(filename.c_str(), &st) == 0) {
    absl::StatusOr<std::string> held = SnapshotLockOwner(directory);
    return absl::AlreadyExistsError(absl::StrCat(
        "another save is writing the snapshot '", directory, "' (", filename, " exists",
        held.ok() ? absl::StrCat(", held for pipeline ", *held) : std::string(), ")"));
  }
  RETURN_IF_ERROR(fd.status());
  absl::Status s = WriteAll(*fd, owner, filename);
  if (s.ok() && ::fsync(*fd) != 0) s = FileError(errno, "fsync", filename);
  ::close(*fd);
  if (!s.ok()) {
    std::remove(filename.c_str());
    return s;
  }
  return SyncLocalPath(LocalPathOf(directory));
}

absl::StatusOr<std::string> SnapshotLockOwner(const std::string& directory) {
  if (!IsLocalPath(directory)) {
    ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> lock,
                     OpenRandomAccessFile(SnapshotLockPath(directory)));
    char buf[256];
    ASSIGN_OR_RETURN(size_t n, lock->ReadAt(0, buf, sizeof(buf)));
    return std::string(buf, n);
  }
  const std::string filename = LocalPathOf(SnapshotLockPath(directory));
  ASSIGN_OR_RETURN(int fd, OpenLocalFile(filename, O_RDONLY));
  char buf[256];
  ssize_t n;
  do {
    n = ::read(fd, buf, sizeof(buf));
  } while (n < 0 && errno == EINTR);
  const int err = errno;
  ::close(fd);
  if (n < 0) return FileError(err, "read", filename);
  return std::string(buf, static_cast<size_t>(n));
}

absl::Status ReleaseSnapshotLock(const std::string& directory) {
  if (!IsLocalPath(directory)) {
    ASSIGN_OR_RETURN(FileSystem * fs, FileSystemFor(directory));
    return fs->DeleteFile(SnapshotLockPath(directory));
  }
  const std::string filename = LocalPathOf(SnapshotLockPath(directory));
  if (std::remove(filename.c_str()) != 0 && errno != ENOENT) {
    return FileError(errno, "remove", filename);
  }
  return absl::OkStatus();
}

}  // namespace sluice
