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
#include "core/io/file_system.h"
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

// A remote URL root as a prefix ending in '/' ("s3://bucket/data" -> "s3://bucket/data/").
std::string UrlRoot(const std::string& root) {
  return absl::EndsWith(root, "/") ? root : absl::StrCat(root, "/");
}

bool HasDotDot(absl::string_view url) {
  for (absl::string_view c : absl::StrSplit(url, '/')) {
    if (c == "..") return true;
  }
  return false;
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
        return absl::InvalidArgumentError(absl::StrCat("data root ", given, " uses '..'"));
      }
      out.roots_.push_back(UrlRoot(given));
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
    for (const std::string& root : roots_) {
      if (!IsLocalPath(root) && absl::StartsWith(path, root) && !HasDotDot(path)) {
        return absl::OkStatus();
      }
    }
    return absl::PermissionDeniedError(absl::StrCat(
        path, " is outside the data roots [", absl::StrJoin(roots_, ", "), "]",
        HasDotDot(path) ? " (a URL may not use '..')" : ""));
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
    absl::Status s = HasDotDot(pattern) ? CheckPath(pattern) : CheckPath(GlobListPrefix(pattern));
    if (!s.ok()) {
      return absl::PermissionDeniedError(
          absl::StrCat("file pattern ", pattern, ": ", s.message()));
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
    const bool is_path = f->name() == "filenames" || f->name() == "filename";
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

std::function<absl::Status(const proto::DatasetDef&)> GraphAdmission(DataRoots roots,
                                                                     DatasetLimits limits) {
  return [roots = std::move(roots), limits](const proto::DatasetDef& def) -> absl::Status {
    RETURN_IF_ERROR(CheckDatasetLimits(def, limits));
    return roots.CheckDataset(def);
  };
}

}  // namespace sluice
