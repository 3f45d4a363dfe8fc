#include "core/io/file_system.h"

#include <fnmatch.h>

#include <map>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "core/io/local_file_system.h"
#include "core/io/object_store_file_system.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

// Scheme -> file system. The built-in ones are made on first use, so a process that reads only
// local files never reads AWS settings or starts libcurl.
class Registry {
 public:
  static Registry& Get() {
    static Registry* registry = new Registry();
    return *registry;
  }

  void Register(const std::string& scheme, std::shared_ptr<FileSystem> fs) {
    absl::MutexLock lock(&mu_);
    systems_[scheme] = std::move(fs);
  }

  absl::StatusOr<FileSystem*> Find(const std::string& scheme, absl::string_view url) {
    absl::MutexLock lock(&mu_);
    auto it = systems_.find(scheme);
    if (it != systems_.end()) return it->second.get();
    std::shared_ptr<FileSystem> fs = BuiltIn(scheme);
    if (fs == nullptr) {
      std::vector<std::string> known = {"s3", "gs", "http", "https", "file"};
      for (const auto& [name, unused] : systems_) {
        if (!name.empty() && !absl::c_linear_search(known, name)) known.push_back(name);
      }
      return absl::InvalidArgumentError(absl::StrCat("no file system for scheme '", scheme,
                                                     "://' in ", url, " (known: ",
                                                     absl::StrJoin(known, "://, "), "://)"));
    }
    FileSystem* raw = fs.get();
    systems_[scheme] = std::move(fs);
    return raw;
  }

 private:
  static std::shared_ptr<FileSystem> BuiltIn(const std::string& scheme) {
    if (scheme.empty() || scheme == "file") return NewLocalFileSystem();
    if (scheme == "s3" || scheme == "gs") {
      absl::StatusOr<ObjectStoreOptions> options =
          ObjectStoreOptionsFromEnvironment(scheme, ProcessEnvironment());
      if (!options.ok()) return NewFailingFileSystem(options.status());
      return NewObjectStoreFileSystem(*std::move(options));
    }
    if (scheme == "http" || scheme == "https") return NewHttpFileSystem(HttpFileSystemOptions{});
    return nullptr;
  }

  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<FileSystem>> systems_ ABSL_GUARDED_BY(mu_);
};

bool IsSchemeChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.';
}

}  // namespace

std::string UrlScheme(absl::string_view url) {
  const size_t colon = url.find("://");
  if (colon == absl::string_view::npos || colon == 0) return "";
  if (!absl::ascii_isalpha(static_cast<unsigned char>(url[0]))) return "";
  for (size_t i = 0; i < colon; ++i) {
    if (!IsSchemeChar(url[i])) return "";
  }
  return absl::AsciiStrToLower(url.substr(0, colon));
}

bool IsLocalPath(absl::string_view url) {
  const std::string scheme = UrlScheme(url);
  return scheme.empty() || scheme == "file";
}

std::string LocalPathOf(absl::string_view url) {
  if (UrlScheme(url) == "file") return std::string(url.substr(7));
  return std::string(url);
}

absl::StatusOr<std::unique_ptr<WritableFile>> FileSystem::NewWritableFile(
    const std::string& url, const WritableFileOptions&) {
  return absl::UnimplementedError(
      absl::StrCat("cannot write ", url, ": this file system has no writes"));
}

absl::Status FileSystem::DeleteFile(const std::string& url) {
  return absl::UnimplementedError(
      absl::StrCat("cannot delete ", url, ": this file system has no writes"));
}

absl::StatusOr<FileSystem*> FileSystemFor(absl::string_view url) {
  return Registry::Get().Find(UrlScheme(url), url);
}

void RegisterFileSystem(const std::string& scheme, std::shared_ptr<FileSystem> fs) {
  Registry::Get().Register(absl::AsciiStrToLower(scheme), std::move(fs));
}

absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenRandomAccessFile(const std::string& url) {
  ASSIGN_OR_RETURN(FileSystem * fs, FileSystemFor(url));
  return fs->NewRandomAccessFile(url);
}

absl::StatusOr<std::vector<std::string>> GlobFiles(const std::string& pattern) {
  ASSIGN_OR_RETURN(FileSystem * fs, FileSystemFor(pattern));
  return fs->Glob(pattern);
}

std::string GlobListPrefix(absl::string_view pattern) {
  const size_t wildcard = pattern.find_first_of("*?[");
  if (wildcard == absl::string_view::npos) return std::string(pattern);
  const size_t slash = pattern.rfind('/', wildcard);
  return slash == absl::string_view::npos ? "" : std::string(pattern.substr(0, slash + 1));
}

bool GlobMatches(const std::string& pattern, const std::string& name) {
  return ::fnmatch(pattern.c_str(), name.c_str(), FNM_PATHNAME) == 0;
}

}  // namespace sluice
