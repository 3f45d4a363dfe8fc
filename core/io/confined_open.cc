#include "core/io/confined_open.h"

#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "core/io/file_system.h"
#include "core/io/input_stream.h"

namespace sluice {
namespace {

// Closes a descriptor when it goes out of scope.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  void reset(int fd) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

absl::Status LeadsOut(const std::string& name, const std::string& root, absl::string_view why) {
  return absl::PermissionDeniedError(absl::StrCat(
      name, " leads outside the data root ", root, " when opened (", why, ")"));
}

// The descriptor, or -errno.
int Openat2Beneath(int root_fd, const std::string& relative, int flags, mode_t mode) {
  open_how how = {};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
  const bool creates = (flags & O_CREAT) != 0 || (flags & O_TMPFILE) == O_TMPFILE;
  how.mode = creates ? mode : 0;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  long fd;
  int tries = 0;
  do {
    fd = ::syscall(SYS_openat2, root_fd, relative.c_str(), &how, sizeof(how));
  } while (fd < 0 && (errno == EINTR || errno == EAGAIN) && ++tries < 100);
  if (fd < 0) return -errno;
  return static_cast<int>(fd);
}

// The walk: every component opened with O_NOFOLLOW from the folder before it.
absl::StatusOr<int> WalkBeneath(int root_fd, const std::string& root, const std::string& relative,
                                int flags, mode_t mode, const std::string& name) {
  std::vector<std::string> parts = absl::StrSplit(relative, '/', absl::SkipEmpty());
  std::vector<std::string> kept;
  for (std::string& p : parts) {
    if (p == ".") continue;
    if (p == "..") return LeadsOut(name, root, "'..' is not followed without openat2");
    kept.push_back(std::move(p));
  }
  if (kept.empty()) kept.push_back(".");
  Fd dir(::dup(root_fd));
  if (dir.get() < 0) return FileError(errno, "open", name);
  for (size_t i = 0; i + 1 < kept.size(); ++i) {
    const int next = ::openat(dir.get(), kept[i].c_str(),
                              O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0) {
      const int err = errno;
      struct stat st;
      if (err == ELOOP || (::fstatat(dir.get(), kept[i].c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                           S_ISLNK(st.st_mode))) {
        return LeadsOut(name, root, absl::StrCat("'", kept[i], "' is a symbolic link"));
      }
      return FileError(err, "open", name);
    }
    dir.reset(next);
    struct stat st;
    if (::fstat(dir.get(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      // O_PATH | O_NOFOLLOW may open a symbolic link itself rather than fail.
      return LeadsOut(name, root, absl::StrCat("'", kept[i], "' is a symbolic link"));
    }
  }
  int fd;
  do {
    fd = ::openat(dir.get(), kept.back().c_str(), flags | O_NOFOLLOW | O_CLOEXEC, mode);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    if (errno == ELOOP) {
      return LeadsOut(name, root, absl::StrCat("'", kept.back(), "' is a symbolic link"));
    }
    return FileError(errno, "open", name);
  }
  struct stat st;
  if ((flags & O_PATH) != 0 && ::fstat(fd, &st) == 0 && S_ISLNK(st.st_mode)) {
    ::close(fd);  // O_PATH | O_NOFOLLOW opens the link itself
    return LeadsOut(name, root, absl::StrCat("'", kept.back(), "' is a symbolic link"));
  }
  return fd;
}

absl::StatusOr<int> OpenBeneathNamed(const std::string& root, const std::string& relative,
                                     int flags, mode_t mode, BeneathMethod method,
                                     const std::string& name) {
  Fd root_fd(::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (root_fd.get() < 0) return FileError(errno, "open data root", root);
  if (method != BeneathMethod::kComponentWalk) {
    const int fd = Openat2Beneath(root_fd.get(), relative, flags, mode);
    if (fd >= 0) return fd;
    const int err = -fd;
    if (err == EXDEV) {
      return LeadsOut(name, root, "a symbolic link or '..' points out of it");
    }
    if (err != ENOSYS) return FileError(err, "open", name);
    if (method == BeneathMethod::kOpenat2) {
      return absl::UnimplementedError(absl::StrCat("open ", name, ": no openat2 on this kernel"));
    }
  }
  return WalkBeneath(root_fd.get(), root, relative, flags, mode, name);
}

bool Within(const std::string& path, const std::string& root) {
  if (root == "/") return true;
  return path == root || (absl::StartsWith(path, root) && path.size() > root.size() &&
                          path[root.size()] == '/');
}

absl::StatusOr<int> PlainOpen(const std::string& path, int flags, mode_t mode) {
  int fd;
  do {
    fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return FileError(errno, "open", path);
  return fd;
}

// `path` absolute with the folders above its last component resolved (realpath); the last
// component as given, unless it is `.` or `..`.
absl::StatusOr<std::string> ResolveParent(const std::string& name, const std::string& path) {
  std::string absolute = path;
  if (path.empty() || path[0] != '/') {
    char cwd[PATH_MAX];
    if (::getcwd(cwd, sizeof(cwd)) == nullptr) return FileError(errno, "resolve", name);
    absolute = absl::StrCat(cwd, "/", path);
  }
  std::vector<std::string> parts = absl::StrSplit(absolute, '/', absl::SkipEmpty());
  if (parts.empty() || parts.back() == "." || parts.back() == "..") {
    char resolved[PATH_MAX];
    if (::realpath(absolute.c_str(), resolved) == nullptr) return FileError(errno, "open", name);
    return std::string(resolved);
  }
  const std::string last = parts.back();
  parts.pop_back();
  const std::string parent = absl::StrCat("/", absl::StrJoin(parts, "/"));
  char resolved[PATH_MAX];
  if (::realpath(parent.c_str(), resolved) == nullptr) return FileError(errno, "open", name);
  const std::string base = resolved;
  return base == "/" ? absl::StrCat("/", last) : absl::StrCat(base, "/", last);
}

struct ProcessConfinement {
  absl::Mutex mu;
  LocalConfinement confinement ABSL_GUARDED_BY(mu);
};

ProcessConfinement& Process() {
  static ProcessConfinement* p = new ProcessConfinement();
  return *p;
}

}  // namespace

absl::StatusOr<int> OpenBeneath(const std::string& root, const std::string& relative, int flags,
                                mode_t mode, BeneathMethod method) {
  return OpenBeneathNamed(root, relative, flags, mode, method,
                          absl::StrCat(root, root == "/" ? "" : "/", relative));
}

absl::StatusOr<int> OpenConfined(const LocalConfinement& confinement, const std::string& url,
                                 int flags, mode_t mode) {
  const std::string path = LocalPathOf(url);
  if (!confinement.confined) return PlainOpen(path, flags, mode);
  absl::StatusOr<std::string> full = ResolveParent(url, path);
  if (!full.ok()) return full.status();
  const std::string* root = nullptr;
  for (const std::string& r : confinement.roots) {
    if (Within(*full, r) && (root == nullptr || r.size() > root->size())) root = &r;
  }
  if (root == nullptr) {
    return absl::PermissionDeniedError(absl::StrCat(
        url, *full != path ? absl::StrCat(" (resolved: ", *full, ")") : "",
        " is outside the data roots [", absl::StrJoin(confinement.roots, ", "), "]"));
  }
  std::string relative = ".";
  if (*full != *root) relative = full->substr(*root == "/" ? 1 : root->size() + 1);
  return OpenBeneathNamed(*root, relative, flags, mode, confinement.method, url);
}

void SetProcessLocalConfinement(LocalConfinement confinement) {
  ProcessConfinement& p = Process();
  absl::MutexLock lock(&p.mu);
  p.confinement = std::move(confinement);
}

LocalConfinement ProcessLocalConfinement() {
  ProcessConfinement& p = Process();
  absl::MutexLock lock(&p.mu);
  return p.confinement;
}

absl::StatusOr<int> OpenLocalFile(const std::string& path, int flags, mode_t mode) {
  return OpenConfined(ProcessLocalConfinement(), path, flags, mode);
}

}  // namespace sluice
