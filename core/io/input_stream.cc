#include "core/io/input_stream.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace sluice {
namespace {

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

class StringStream : public InputStream {
 public:
  StringStream(std::string name, std::string data)
      : name_(std::move(name)), data_(std::move(data)) {}

  absl::StatusOr<size_t> Read(char* dst, size_t n) override {
    size_t k = std::min(n, data_.size() - pos_);
    std::memcpy(dst, data_.data() + pos_, k);
    pos_ += k;
    return k;
  }
  absl::Status Seek(uint64_t offset) override {
    pos_ = static_cast<size_t>(std::min<uint64_t>(offset, data_.size()));
    return absl::OkStatus();
  }
  const std::string& name() const override { return name_; }

 private:
  const std::string name_;
  const std::string data_;
  size_t pos_ = 0;
};

}  // namespace

absl::Status FileError(int err, absl::string_view what, const std::string& filename) {
  std::string message = absl::StrCat("could not ", what, " file ", filename, ": ", strerror(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    case EISDIR:
    case EINVAL:
      return absl::InvalidArgumentError(message);
    case ENOSPC:
    case EMFILE:
    case ENFILE:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::UnknownError(message);
  }
}

absl::StatusOr<std::unique_ptr<InputStream>> OpenFileStream(const std::string& filename) {
  int fd;
  do {
    fd = ::open(filename.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return FileError(errno, "open", filename);
  struct stat st;
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    ::close(fd);
    return FileError(EISDIR, "read", filename);
  }
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  return std::unique_ptr<InputStream>(new FileStream(filename, fd));
}

std::unique_ptr<InputStream> NewStringStream(std::string name, std::string data) {
  return std::make_unique<StringStream>(std::move(name), std::move(data));
}

absl::StatusOr<FileStat> StatFile(const std::string& filename) {
  struct stat st;
  if (::stat(filename.c_str(), &st) != 0) return FileError(errno, "stat", filename);
  FileStat out;
  out.size = static_cast<uint64_t>(st.st_size);
  out.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return out;
}

}  // namespace sluice
