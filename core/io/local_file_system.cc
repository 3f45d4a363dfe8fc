#include "core/io/local_file_system.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace sluice {
namespace {

absl::StatusOr<int> OpenForReading(const std::string& url) {
  const std::string path = LocalPathOf(url);
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return FileError(errno, "open", url);
  struct stat st;
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    ::close(fd);
    return FileError(EISDIR, "read", url);
  }
  return fd;
}

class FileStream : public InputStream {
 public:
  FileStream(std::string name, int fd) : name_(std::move(name)), fd_(fd) {}
  ~FileStream() override { ::close(fd_); }

  absl::StatusOr<size_t> Read(char* dst, size_t n) override {
    size_t done = 0;
    while (done < n) {
      ssize_t r = ::read(fd_, dst + done, n - done);
      if (r < 0) {
        if (errno == EINTR) continue;
        return FileError(errno, "read", name_);
      }
      if (r == 0) break;
      done += static_cast<size_t>(r);
    }
    return done;
  }

  absl::Status Seek(uint64_t offset) override {
    if (::lseek(fd_, static_cast<off_t>(offset), SEEK_SET) < 0) {
      return FileError(errno, absl::StrCat("seek to byte ", offset, " of"), name_);
    }
    return absl::OkStatus();
  }

  const std::string& name() const override { return name_; }

 private:
  const std::string name_;
  const int fd_;
};

class LocalRandomAccessFile : public RandomAccessFile {
 public:
  LocalRandomAccessFile(std::string name, int fd) : name_(std::move(name)), fd_(fd) {}
  ~LocalRandomAccessFile() override { ::close(fd_); }

  absl::StatusOr<size_t> ReadAt(uint64_t offset, char* dst, size_t n) const override {
    size_t done = 0;
    while (done < n) {
      const ssize_t r = ::pread(fd_, dst + done, n - done, static_cast<off_t>(offset + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        return FileError(errno, absl::StrCat("read byte ", offset + done, " of"), name_);
      }
      if (r == 0) break;
      done += static_cast<size_t>(r);
    }
    return done;
  }

  const std::string& name() const override { return name_; }

 private:
  const std::string name_;
  const int fd_;
};

class LocalFileSystem : public FileSystem {
 public:
  absl::StatusOr<std::unique_ptr<InputStream>> NewInputStream(const std::string& url) override {
    absl::StatusOr<int> fd = OpenForReading(url);
    if (!fd.ok()) return fd.status();
    ::posix_fadvise(*fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    return std::unique_ptr<InputStream>(new FileStream(url, *fd));
  }

  absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& url) override {
    absl::StatusOr<int> fd = OpenForReading(url);
    if (!fd.ok()) return fd.status();
    return std::unique_ptr<RandomAccessFile>(new LocalRandomAccessFile(url, *fd));
  }

  absl::StatusOr<FileStat> Stat(const std::string& url) override {
    struct stat st;
    if (::stat(LocalPathOf(url).c_str(), &st) != 0) return FileError(errno, "stat", url);
    FileStat out;
    out.size = static_cast<uint64_t>(st.st_size);
    out.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    return out;
  }

  absl::StatusOr<std::vector<std::string>> Glob(const std::string& pattern) override {
    const bool file_url = UrlScheme(pattern) == "file";
    glob_t g = {};
    const int rc = ::glob(LocalPathOf(pattern).c_str(), GLOB_NOSORT, nullptr, &g);
    if (rc != 0 && rc != GLOB_NOMATCH) {
      ::globfree(&g);
      return absl::UnavailableError(
          absl::StrCat("cannot expand file pattern '", pattern, "' (glob error ", rc, ")"));
    }
    std::vector<std::string> matched;
    for (size_t i = 0; i < g.gl_pathc; ++i) {
      matched.push_back(file_url ? absl::StrCat("file://", g.gl_pathv[i]) : g.gl_pathv[i]);
    }
    ::globfree(&g);
    std::sort(matched.begin(), matched.end());
    return matched;
  }
};

}  // namespace

std::shared_ptr<FileSystem> NewLocalFileSystem() { return std::make_shared<LocalFileSystem>(); }

}  // namespace sluice
