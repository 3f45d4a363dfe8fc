// DataRoots: the folders a server may read data from. A dataset graph that names a file, a
// list_files pattern or a cache file elsewhere is refused with PERMISSION_DENIED naming the path
// and the roots, before anything is opened.
//
//   ASSIGN_OR_RETURN(DataRoots roots, DataRoots::Create({"/data", "/scratch/cache"}));
//   RETURN_IF_ERROR(roots.CheckDataset(def));
//
// Paths are resolved as open(2) would resolve them: relative to the working directory, with
// symbolic links followed (realpath(3)) as far as the path exists and `.`/`..` applied to the
// rest, so neither `..` nor a symlink can lead out of a root. A list_files pattern is checked
// by the folder before its first wildcard and may not use `..` after it; the files it matches
// are checked again when a pipeline opens them (interleave builds a graph per file, which goes
// through the same check: ExecutorOptions::check_graph). An empty DataRoots allows everything.
//
// Remote URLs (s3://, gs://, http(s)://; core/io/file_system.h) are allowed only under a root given
// as a URL prefix ("s3://bucket/datasets"). Both are normalized first (core/io/url.h: scheme and
// host case, default ports, numeric IPv4 hosts, percent-decoding of unreserved characters, `.`,
// `..` and empty segments; encoded slashes and backslashes refused) and compared on their parts:
// the same scheme, host and port, and the root's path segments a prefix of the URL's, so
// "s3://bucket/data/%2e%2e/secret" and "s3://bucket/database" are both outside
// "s3://bucket/data". Local roots never admit a URL, so a server restricted to local folders reads
// no object store with its credentials. Errors name URLs without userinfo or query.
//
// Checking a graph is not all: InstallProcessDataRoots makes the same roots hold when files are
// opened and connections made (a symbolic link swapped in later, a name that resolves to the
// metadata service), and makes an http(s) root the way to reach a non-public address.
//
// Thread safety: immutable after Create; thread-safe.
#ifndef SLUICE_CORE_DATA_ROOTS_H_
#define SLUICE_CORE_DATA_ROOTS_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/data/dataset_limits.h"
#include "core/io/url.h"
#include "proto/dataset.pb.h"

namespace sluice {

class DataRoots {
 public:
  // No restriction.
  DataRoots() = default;

  // Roots given as folders (each resolved with realpath) or URL prefixes (normalized, with a
  // trailing '/'). INVALID_ARGUMENT naming a local root that does not exist or is not a folder,
  // or a URL root that is malformed, uses '..', or holds userinfo or a query. An empty list: no
  // restriction.
  static absl::StatusOr<DataRoots> Create(const std::vector<std::string>& roots);

  bool restricted() const { return !roots_.empty(); }
  // The resolved roots.
  const std::vector<std::string>& roots() const { return roots_; }

  // OK when `path` resolves inside a root (or there are no roots); else PERMISSION_DENIED
  // naming the path, what it resolves to and the roots. A malformed URL is PERMISSION_DENIED
  // too (saying what is wrong with it).
  absl::Status CheckPath(const std::string& path) const;
  // As CheckPath for the folder of a glob pattern before its first wildcard; PERMISSION_DENIED
  // too for `..` after a wildcard.
  absl::Status CheckPattern(const std::string& pattern) const;
  // Every file name (`filenames`, `filename`) and pattern (`patterns`) anywhere in the graph,
  // interleave functions and permuted sources included. The first refusal is returned.
  absl::Status CheckDataset(const proto::DatasetDef& def) const;

 private:
  std::vector<std::string> roots_;
  std::vector<Url> url_roots_;  // the URL roots of roots_, normalized
};

// Makes `roots` hold for this process's opens and connections, not only its graphs:
//  - local files open confined beneath the local roots (core/io/confined_open.h); with roots
//    but no local root, no local file opens; without roots, local opens are not confined;
//  - remote reads connect only to public addresses, and to the endpoints the http(s) roots name
//    (core/io/remote_access.h); without roots, public addresses only.
// Called by each server's main() with its --data_root (and by sluicectl). Never fails for
// roots made by Create; INVALID_ARGUMENT otherwise.
absl::Status InstallProcessDataRoots(const DataRoots& roots);

// A server's check of every graph it builds (ExecutorOptions::check_graph): the bounds of
// `limits`, then the roots.
std::function<absl::Status(const proto::DatasetDef&)> GraphAdmission(DataRoots roots,
                                                                     DatasetLimits limits);

// `path` made absolute and resolved as described above (no check). INVALID_ARGUMENT for an
// empty path.
absl::StatusOr<std::string> ResolvePath(const std::string& path);

}  // namespace sluice

#endif  // SLUICE_CORE_DATA_ROOTS_H_
