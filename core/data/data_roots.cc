#include "core/data/data_roots.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/io/confined_open.h"
#include "core/io/file_system.h"
#include "core/io/remote_access.h"
#include "core/io/url.h"
#include "core/util/status_macros.h"
#include "proto/dataset.pb.h"

namespace sluice {
namespace {

// Applies `rest` (components, possibly `.` and `..`) to the resolved folder `base`.
std::string ApplyLexically(std::string base, const std::vector<std::string>& rest) {
  for (const std::string& c : rest) {
    if (c.empty() || c == ".") continue;
    if (c == "..") {
      const size_t slash = base.rfind('/');
      base = slash == 0 || slash == std::string::npos ? "/" : base.substr(0, slash);
      continue;
    }
    if (base != "/") base += "/";
    base += c;
  }
  return base;
}

bool Within(const std::string& path, const std::string& root) {
  if (root == "/") return true;
  return path == root || (absl::StartsWith(path, root) && path.size() > root.size() &&
                          path[root.size()] == '/');
}

bool HasDotDot(absl::string_view url) {
  for (absl::string_view c : absl::StrSplit(url, '/')) {
    if (c == "..") return true;
  }
  return false;
}

std::vector<absl::string_view> Segments(absl::string_view path) {
  return absl::StrSplit(path, '/', absl::SkipEmpty());
}

// True when normalized `url` is `root` or below it: the same scheme, host and port, and the
// root's path segments a prefix of the URL's.
bool UrlWithin(const Url& url, const Url& root) {
  if (url.scheme != root.scheme || url.host != root.host ||
      url.EffectivePort() != root.EffectivePort()) {
    return false;
  }
  const std::vector<absl::string_view> want = Segments(root.path);
  const std::vector<absl::string_view> have = Segments(url.path);
  if (have.size() < want.size()) return false;
  for (size_t i = 0; i < want.size(); ++i) {
    if (have[i] != want[i]) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::string> ResolvePath(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("an empty file name");
  std::string absolute = path;
  if (path[0] != '/') {
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof(cwd)) == nullptr) {
      return absl::InternalError(absl::StrCat("cannot resolve ", path, ": getcwd failed"));
    }
    absolute = absl::StrCat(cwd, "/", path);
  }
  // Resolve the longest prefix that exists; the components after it are applied lexically
  // (they do not exist, so they hold no symlink to follow).
  std::vector<std::string> parts = absl::StrSplit(absolute, '/', absl::SkipEmpty());
  std::vector<std::string> rest;
  while (true) {
    const std::string prefix = absl::StrCat("/", absl::StrJoin(parts, "/"));
    char resolved[PATH_MAX];
    if (realpath(prefix.c_str(), resolved) != nullptr) {
      std::vector<std::string> tail(rest.rbegin(), rest.rend());
      return ApplyLexically(resolved, tail);
    }
    if (parts.empty()) return std::string("/");
    rest.push_back(parts.back());
    parts.pop_back();
  }
}

absl::StatusOr<DataRoots> DataRoots::Create(const std::vector<std::string>& roots) {
  DataRoots out;
  for (const std::string& given : roots) {
    if (given.empty()) continue;
    if (!IsLocalPath(given)) {
      if (HasDotDot(given)) {
        return absl::InvalidArgumentError(
            absl::StrCat("data root ", RedactUrl(given), " uses '..'"));
      }
      absl::StatusOr<Url> url = NormalizeUrl(given);
      if (!url.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("data root: ", url.status().message()));
      }
      if (!url->userinfo.empty() || url->has_query) {
        return absl::InvalidArgumentError(absl::StrCat(
            "data root ", RedactUrl(given), " may not hold credentials or a query"));
      }
      url->path = Segments(url->path).empty()
                      ? "/"
                      : absl::StrCat("/", absl::StrJoin(Segments(url->path), "/"), "/");
      out.roots_.push_back(url->ToString());
      out.url_roots_.push_back(*std::move(url));
      continue;
    }
    const std::string root = LocalPathOf(given);
    char resolved[PATH_MAX];
    struct stat st;
    if (realpath(root.c_str(), resolved) == nullptr || stat(resolved, &st) != 0 ||
        !S_ISDIR(st.st_mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat("data root ", root, " does not exist or is not a folder"));
    }
    out.roots_.push_back(resolved);
  }
  return out;
}

absl::Status DataRoots::CheckPath(const std::string& path) const {
  if (roots_.empty()) return absl::OkStatus();
  if (!IsLocalPath(path)) {
    absl::StatusOr<Url> url = NormalizeUrl(path);
    if (!url.ok()) {
      return absl::PermissionDeniedError(absl::StrCat(url.status().message(), " (data roots [",
                                                      absl::StrJoin(roots_, ", "), "])"));
    }
    for (const Url& root : url_roots_) {
      if (UrlWithin(*url, root)) return absl::OkStatus();
    }
    const std::string named = RedactUrl(path);
    const std::string normalized = RedactUrl(url->ToString());
    return absl::PermissionDeniedError(absl::StrCat(
        named, normalized != named ? absl::StrCat(" (normalized: ", normalized, ")") : "",
        " is outside the data roots [", absl::StrJoin(roots_, ", "), "]"));
  }
  ASSIGN_OR_RETURN(std::string resolved, ResolvePath(LocalPathOf(path)));
  for (const std::string& root : roots_) {
    if (IsLocalPath(root) && Within(resolved, root)) return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      path, resolved != path ? absl::StrCat(" (resolved: ", resolved, ")") : "",
      " is outside the data roots [", absl::StrJoin(roots_, ", "), "]"));
}

absl::Status DataRoots::CheckPattern(const std::string& pattern) const {
  if (roots_.empty()) return absl::OkStatus();
  const size_t wildcard = pattern.find_first_of("*?[");
  if (wildcard == std::string::npos) return CheckPath(pattern);
  if (!IsLocalPath(pattern)) {
    // The folder the store lists and the whole pattern (its dot segments applied, wildcards
    // as literal characters) must both be inside a root.
    absl::Status s = CheckPath(GlobListPrefix(pattern));
    if (s.ok()) s = CheckPath(pattern);
    if (!s.ok()) {
      return absl::PermissionDeniedError(
          absl::StrCat("file pattern ", RedactUrl(pattern), ": ", s.message()));
    }
    return absl::OkStatus();
  }
  for (absl::string_view c : absl::StrSplit(pattern.substr(wildcard), '/')) {
    if (c == "..") {
      return absl::PermissionDeniedError(absl::StrCat(
          "file pattern ", pattern, " uses '..' after a wildcard; with data roots [",
          absl::StrJoin(roots_, ", "), "] patterns must stay inside a root"));
    }
  }
  const size_t slash = pattern.rfind('/', wildcard);
  const std::string folder = slash == std::string::npos ? "." : pattern.substr(0, slash + 1);
  absl::Status s = CheckPath(folder.empty() ? "/" : folder);
  if (!s.ok()) {
    return absl::PermissionDeniedError(absl::StrCat("file pattern ", pattern, ": ", s.message()));
  }
  return absl::OkStatus();
}

namespace {

// Walks every field of `m`; tensors and elements hold no paths and are skipped.
absl::Status CheckMessage(const DataRoots& roots, const google::protobuf::Message& m) {
  const std::string& type = m.GetDescriptor()->full_name();
  if (type == "sluice.proto.TensorProto" || type == "sluice.proto.ElementProto") {
    return absl::OkStatus();
  }
  const google::protobuf::Reflection* r = m.GetReflection();
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  r->ListFields(m, &fields);
  for (const google::protobuf::FieldDescriptor* f : fields) {
    if (f->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) {
      if (f->is_repeated()) {
        for (int i = 0; i < r->FieldSize(m, f); ++i) {
          RETURN_IF_ERROR(CheckMessage(roots, r->GetRepeatedMessage(m, f, i)));
        }
      } else {
        RETURN_IF_ERROR(CheckMessage(roots, r->GetMessage(m, f)));
      }
      continue;
    }
    if (f->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_STRING) continue;
    // "model": tokenize's SentencePiece model file (proto::TokenizeFn), read by the workers.
    const bool is_path = f->name() == "filenames" || f->name() == "filename" ||
                         f->name() == "directory" || f->name() == "model";
    const bool is_pattern = f->name() == "patterns";
    if (!is_path && !is_pattern) continue;
    std::vector<std::string> values;
    if (f->is_repeated()) {
      for (int i = 0; i < r->FieldSize(m, f); ++i) values.push_back(r->GetRepeatedString(m, f, i));
    } else {
      values.push_back(r->GetString(m, f));
    }
    for (const std::string& v : values) {
      if (v.empty()) continue;  // an in-memory cache, an interleave fn's placeholder
      RETURN_IF_ERROR(is_pattern ? roots.CheckPattern(v) : roots.CheckPath(v));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status DataRoots::CheckDataset(const proto::DatasetDef& def) const {
  if (roots_.empty()) return absl::OkStatus();
  return CheckMessage(*this, def);
}

absl::Status InstallProcessDataRoots(const DataRoots& roots) {
  RemoteAccessOptions remote;
  LocalConfinement local;
  local.confined = roots.restricted();
  for (const std::string& root : roots.roots()) {
    (IsLocalPath(root) ? local.roots : remote.allowed).push_back(root);
  }
  ASSIGN_OR_RETURN(std::shared_ptr<const RemoteAccessPolicy> policy,
                   RemoteAccessPolicy::Create(std::move(remote)));
  SetProcessRemoteAccessPolicy(std::move(policy));
  SetProcessLocalConfinement(std::move(local));
  return absl::OkStatus();
}

std::function<absl::Status(const proto::DatasetDef&)> GraphAdmission(DataRoots roots,
                                                                     DatasetLimits limits) {
  return [roots = std::move(roots), limits](const proto::DatasetDef& def) -> absl::Status {
    RETURN_IF_ERROR(CheckDatasetLimits(def, limits));
    return roots.CheckDataset(def);
  };
}

}  // namespace sluice
