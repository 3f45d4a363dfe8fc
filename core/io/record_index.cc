#include "core/io/record_index.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/io/file_system.h"
#include "core/io/local_file_system.h"
#include "core/io/tfrecord_reader.h"
#include "core/util/crc32c.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

constexpr char kMagic[8] = {'S', 'L', 'U', 'I', 'C', 'E', 'I', 'X'};
constexpr uint32_t kKindTFRecord = 1;
constexpr size_t kFixedHeader = 8 + 4 + 4 + 8 + 8 + 8;

void Put32(std::string* out, uint32_t v) { out->append(reinterpret_cast<const char*>(&v), 4); }
void Put64(std::string* out, uint64_t v) { out->append(reinterpret_cast<const char*>(&v), 8); }
uint32_t Get32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t Get64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

uint64_t Fnv1a64(absl::string_view s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

bool DirWritable(const std::string& dir) { return ::access(dir.c_str(), W_OK) == 0; }

std::string CacheName(const std::string& filename) {
  if (!IsLocalPath(filename)) {
    return absl::StrFormat("%016x-%s.sluice-idx", Fnv1a64(filename),
                           std::filesystem::path(filename).filename().string());
  }
  std::error_code ec;
  std::filesystem::path abs = std::filesystem::absolute(filename, ec);
  std::string key = ec ? filename : abs.lexically_normal().string();
  return absl::StrFormat("%016x-%s.sluice-idx", Fnv1a64(key),
                         std::filesystem::path(filename).filename().string());
}

}  // namespace

std::string RecordIndexPath(const std::string& filename, const RecordIndexOptions& options) {
  if (!options.cache_dir.empty()) {
    return (std::filesystem::path(options.cache_dir) / CacheName(filename)).string();
  }
  std::filesystem::path dir = std::filesystem::path(filename).parent_path();
  if (IsLocalPath(filename) && DirWritable(dir.empty() ? "." : dir.string())) {
    return absl::StrCat(filename, ".sluice-idx");
  }
  const char* tmp = std::getenv("TMPDIR");
  std::filesystem::path base = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  return (base / "sluice-index" / CacheName(filename)).string();
}

absl::StatusOr<RecordIndex> RecordIndex::Build(const std::string& filename) {
  RecordIndex index;
  ASSIGN_OR_RETURN(index.stat_, StatFile(filename));
  ASSIGN_OR_RETURN(std::unique_ptr<TFRecordReader> reader, TFRecordReader::Open(filename));
  for (;;) {
    uint64_t at = reader->offset();
    absl::Status s = reader->SkipRecord();
    if (absl::IsOutOfRange(s)) break;
    RETURN_IF_ERROR(s);
    index.offsets_.push_back(at);
  }
  return index;
}

absl::Status RecordIndex::Save(const std::string& index_path) const {
  std::string out;
  out.reserve(kFixedHeader + 8 * offsets_.size() + 4);
  out.append(kMagic, 8);
  Put32(&out, kRecordIndexVersion);
  Put32(&out, kKindTFRecord);
  Put64(&out, stat_.size);
  Put64(&out, static_cast<uint64_t>(stat_.mtime_ns));
  Put64(&out, offsets_.size());
  for (uint64_t o : offsets_) Put64(&out, o);
  Put32(&out, crc32c::Mask(crc32c::Value(out)));

  std::error_code ec;
  std::filesystem::path parent = std::filesystem::path(index_path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  std::string tmp = absl::StrCat(index_path, ".tmp.", ::getpid(), ".",
                                 reinterpret_cast<uintptr_t>(&out));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return FileError(errno, "create", tmp);
  size_t done = 0;
  while (done < out.size()) {
    ssize_t w = ::write(fd, out.data() + done, out.size() - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return FileError(err, "write", tmp);
    }
    done += static_cast<size_t>(w);
  }
  if (::close(fd) != 0 || ::rename(tmp.c_str(), index_path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return FileError(err, "write", index_path);
  }
  return absl::OkStatus();
}

absl::StatusOr<RecordIndex> RecordIndex::Load(const std::string& index_path) {
  // The index's place is the server's choice (next to the data, --index_cache_dir, $TMPDIR), not
  // a client's, so it is read outside the data-root confinement (core/io/confined_open.h): a
  // cache in $TMPDIR for a read-only data root must keep working.
  static const auto* unconfined =
      new std::shared_ptr<FileSystem>(NewLocalFileSystem(LocalConfinement{}));
  FileSystem* fs = unconfined->get();
  if (!IsLocalPath(index_path)) {
    ASSIGN_OR_RETURN(fs, FileSystemFor(index_path));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<InputStream> in, fs->NewInputStream(index_path));
  ASSIGN_OR_RETURN(FileStat st, fs->Stat(index_path));
  auto corrupt = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat("corrupt record index ", index_path, ": ", why));
  };
  if (st.size < kFixedHeader + 4) return corrupt("too short");
  std::string data(st.size, '\0');
  ASSIGN_OR_RETURN(size_t got, in->Read(data.data(), data.size()));
  if (got != data.size()) return corrupt("short read");
  if (std::memcmp(data.data(), kMagic, 8) != 0) return corrupt("bad magic");
  uint32_t version = Get32(data.data() + 8);
  if (version != kRecordIndexVersion) {
    return corrupt(absl::StrCat("version ", version, ", this build reads ",
                                kRecordIndexVersion));
  }
  if (Get32(data.data() + 12) != kKindTFRecord) return corrupt("unknown kind");
  uint64_t n = Get64(data.data() + 32);
  if (n > (data.size() - kFixedHeader - 4) / 8 || kFixedHeader + 8 * n + 4 != data.size()) {
    return corrupt("size does not match the record count");
  }
  if (crc32c::Unmask(Get32(data.data() + data.size() - 4)) !=
      crc32c::Value(data.data(), data.size() - 4)) {
    return corrupt("checksum mismatch");
  }
  RecordIndex index;
  index.stat_.size = Get64(data.data() + 16);
  index.stat_.mtime_ns = static_cast<int64_t>(Get64(data.data() + 24));
  index.offsets_.resize(n);
  for (uint64_t i = 0; i < n; ++i) index.offsets_[i] = Get64(data.data() + kFixedHeader + 8 * i);
  return index;
}

absl::StatusOr<RecordIndex> RecordIndex::LoadOrBuild(const std::string& filename,
                                                     const RecordIndexOptions& options,
                                                     bool* built) {
  if (built != nullptr) *built = false;
  ASSIGN_OR_RETURN(FileStat st, StatFile(filename));
  std::string path = RecordIndexPath(filename, options);
  absl::StatusOr<RecordIndex> cached = Load(path);
  if (cached.ok() && cached->stat_.size == st.size && cached->stat_.mtime_ns == st.mtime_ns) {
    return cached;
  }
  if (built != nullptr) *built = true;
  ASSIGN_OR_RETURN(RecordIndex index, Build(filename));
  if (options.persist) {
    // A cache we cannot write is not an error: the index still serves this process.
    index.Save(path).IgnoreError();
  }
  return index;
}

}  // namespace sluice
