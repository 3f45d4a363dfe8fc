#include "core/io/local_file_system.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <cerrno>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/io/confined_open.h"

namespace sluice {
namespace {

absl::StatusOr<int> OpenForReading(const LocalConfinement& confinement, const std::string& url) {
  absl::StatusOr<int> opened = OpenConfined(confinement, url, O_RDONLY);
  if (!opened.ok()) return opened.status();
  const int fd = *opened;
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
  explicit LocalFileSystem(std::optional<LocalConfinement> confinement)
      : confinement_(std::move(confinement)) {}

  absl::StatusOr<std::unique_ptr<InputStream>> NewInputStream(const std::string& url) override {
    absl::StatusOr<int> fd = OpenForReading(Confinement(), url);
    if (!fd.ok()) return fd.status();
    ::posix_fadvise(*fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    return std::unique_ptr<InputStream>(new FileStream(url, *fd));
  }

  absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& url) override {
    absl::StatusOr<int> fd = OpenForReading(Confinement(), url);
    if (!fd.ok()) return fd.status();
    return std::unique_ptr<RandomAccessFile>(new LocalRandomAccessFile(url, *fd));
  }

  absl::StatusOr<FileStat> Stat(const std::string& url) override {
    absl::StatusOr<int> fd = OpenConfined(Confinement(), url, O_PATH);
    if (!fd.ok()) return fd.status();
    struct stat st;
    const int rc = ::fstat(*fd, &st);
    const int err = errno;
    ::close(*fd);
    if (rc != 0) return FileError(err, "stat", url);
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

 private:
  LocalConfinement Confinement() const {
    return confinement_.has_value() ? *confinement_ : ProcessLocalConfinement();
  }

  const std::optional<LocalConfinement> confinement_;
};

}  // namespace

std::shared_ptr<FileSystem> NewLocalFileSystem(std::optional<LocalConfinement> confinement) {
  return std::make_shared<LocalFileSystem>(std::move(confinement));
}

}  // namespace sluice
