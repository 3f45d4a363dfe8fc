#include "server/journal_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace sluice {
namespace {

absl::Status Errno(int err, absl::string_view what, const std::string& path) {
  return absl::ErrnoToStatus(err, absl::StrCat(what, " ", path));
}

std::string Parent(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

absl::Status SyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno(errno, "open directory", dir);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return Errno(err, "fsync directory", dir);
  return absl::OkStatus();
}

absl::Status WriteAll(int fd, absl::string_view data, const std::string& path) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno(errno, "write", path);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

class RealAppendFile : public AppendFile {
 public:
  RealAppendFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~RealAppendFile() override { ::close(fd_); }

  absl::Status Append(absl::string_view data) override { return WriteAll(fd_, data, path_); }

  absl::Status Sync() override {
    if (::fdatasync(fd_) != 0) return Errno(errno, "fdatasync", path_);
    return absl::OkStatus();
  }

  absl::Status Truncate(uint64_t size) override {
    if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) return Errno(errno, "truncate", path_);
    return Sync();
  }

 private:
  const std::string path_;
  const int fd_;
};

class RealFileSystem : public JournalFileSystem {
 public:
  absl::Status CreateDir(const std::string& dir) override {
    if (dir.empty()) return absl::InvalidArgumentError("journal directory: empty path");
    struct stat st;
    if (::stat(dir.c_str(), &st) == 0) {
      if (S_ISDIR(st.st_mode)) return absl::OkStatus();
      return absl::FailedPreconditionError(absl::StrCat(dir, " exists and is not a directory"));
    }
    const std::string parent = Parent(dir);
    if (parent != dir && parent != "." && parent != "/") {
      absl::Status s = CreateDir(parent);
      if (!s.ok()) return s;
    }
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return Errno(errno, "mkdir", dir);
    return SyncDir(parent);
  }

  absl::StatusOr<std::vector<std::string>> ListDir(const std::string& dir) override {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return Errno(errno, "open directory", dir);
    std::vector<std::string> names;
    while (struct dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    ::closedir(d);
    return names;
  }

  absl::StatusOr<std::string> ReadFile(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Errno(errno, "open", path);
    std::string out;
    char buf[1 << 16];
    while (true) {
      const ssize_t n = ::read(fd, buf, sizeof(buf));
      if (n < 0) {
        if (errno == EINTR) continue;
        const int err = errno;
        ::close(fd);
        return Errno(err, "read", path);
      }
      if (n == 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    ::close(fd);
    return out;
  }

  absl::StatusOr<std::unique_ptr<AppendFile>> OpenAppend(const std::string& path) override {
    struct stat st;
    const bool existed = ::stat(path.c_str(), &st) == 0;
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return Errno(errno, "open for append", path);
    if (!existed) {
      absl::Status s = SyncDir(Parent(path));
      if (!s.ok()) {
        ::close(fd);
        return s;
      }
    }
    return std::unique_ptr<AppendFile>(new RealAppendFile(path, fd));
  }

  absl::Status Truncate(const std::string& path, uint64_t size) override {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return Errno(errno, "open", path);
    RealAppendFile file(path, fd);  // closes fd
    return file.Truncate(size);
  }

  absl::Status WriteFile(const std::string& path, absl::string_view data) override {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return Errno(errno, "create", path);
    absl::Status s = WriteAll(fd, data, path);
    if (s.ok() && ::fsync(fd) != 0) s = Errno(errno, "fsync", path);
    ::close(fd);
    return s;
  }

  absl::Status Rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      return Errno(errno, absl::StrCat("rename ", from, " to"), to);
    }
    return absl::OkStatus();
  }

  absl::Status SyncDir(const std::string& dir) override { return SyncDirectory(dir); }

  absl::Status Delete(const std::string& path) override {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return Errno(errno, "unlink", path);
    return absl::OkStatus();
  }
};

}  // namespace

JournalFileSystem* RealJournalFileSystem() {
  static JournalFileSystem* const fs = new RealFileSystem();
  return fs;
}

}  // namespace sluice
