// Confined opens: a local file opened so that the kernel, at the moment of the open, keeps the
// path beneath a data root. The graph-time check (core/data/data_roots.h) resolves names when a
// pipeline is admitted; a symbolic link made or swapped in later (inside the root, pointing
// out) would otherwise be followed when the file is finally opened.
//
//   LocalConfinement c{.confined = true, .roots = {"/data"}};
//   ASSIGN_OR_RETURN(int fd, OpenConfined(c, "/data/train/a.tfrecord", O_RDONLY));
//
// How: the folders above the file are resolved (realpath(3)), the root holding the result is
// opened, and the rest is opened from it with openat2(2) RESOLVE_BENEATH: `..` or a symbolic
// link (at any depth, however it got there) that leads out of the root fails with EXDEV, while
// links that stay inside work. Where openat2 is missing (ENOSYS: Linux before 5.6, some
// sandboxes) each component is opened with openat(2) O_NOFOLLOW from the one before, so every
// symbolic link below the root is refused, even one that stays inside.
//
// Errors: PERMISSION_DENIED naming the path and the roots when the path is outside every root or
// leads out of its root at open time; otherwise the open's errno as FileError
// (core/io/input_stream.h), e.g. NOT_FOUND.
//
// Thread safety: the functions are thread-safe; the process confinement may be replaced at any
// time (opens already made keep their descriptors).
#ifndef SLUICE_CORE_IO_CONFINED_OPEN_H_
#define SLUICE_CORE_IO_CONFINED_OPEN_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace sluice {

enum class BeneathMethod {
  kAuto,           // openat2, else (ENOSYS) the component walk
  kOpenat2,        // openat2 only (ENOSYS is UNIMPLEMENTED)
  kComponentWalk,  // openat with O_NOFOLLOW per component
};

struct LocalConfinement {
  // False: opens are plain open(2), anywhere.
  bool confined = false;
  // Absolute, resolved folders (DataRoots::roots(): realpath'd). With `confined` and no roots
  // every local open is refused (a server restricted to URL roots reads no local file).
  std::vector<std::string> roots;
  BeneathMethod method = BeneathMethod::kAuto;
};

// Opens `relative` (no leading '/') beneath the folder `root` with open(2) `flags` (O_CLOEXEC is
// added; `mode` when creating). PERMISSION_DENIED naming `root`/`relative` when resolution
// leaves `root` (EXDEV from openat2; with the walk, a symbolic link or a `..`).
absl::StatusOr<int> OpenBeneath(const std::string& root, const std::string& relative, int flags,
                                mode_t mode = 0, BeneathMethod method = BeneathMethod::kAuto);

// Opens the local `path` (a plain path or a file:// URL; relative to the working directory)
// under `confinement` as described above. The caller owns the descriptor.
absl::StatusOr<int> OpenConfined(const LocalConfinement& confinement, const std::string& path,
                                 int flags, mode_t mode = 0);

// The confinement of this process's local opens (the built-in local file system, cache files,
// npy files). Until set: not confined. Servers set it from --data_root (InstallProcessDataRoots
// in core/data/data_roots.h).
void SetProcessLocalConfinement(LocalConfinement confinement);
LocalConfinement ProcessLocalConfinement();

// OpenConfined under ProcessLocalConfinement().
absl::StatusOr<int> OpenLocalFile(const std::string& path, int flags, mode_t mode = 0);

}  // namespace sluice

#endif  // SLUICE_CORE_IO_CONFINED_OPEN_H_
