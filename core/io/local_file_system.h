// The local file system: plain paths and file:// URLs. Streams are read(2) on a descriptor with
// POSIX_FADV_SEQUENTIAL (the kernel reads ahead); random access is pread(2); globs are glob(3)
// (`*`, `?`, `[...]`; no `**`), sorted bytewise. Errors carry the errno's code (core/io/input_stream.h
// FileError) and name the path.
//
// Opens (streams, random access, stat) are confined to the data roots at open time
// (core/io/confined_open.h): a symbolic link inside a root that points out of it is
// PERMISSION_DENIED when the file is opened, however late it was made. Globs list with glob(3)
// unconfined; what they match is confined when opened.
//
// Thread safety: thread-safe; see core/io/file_system.h for the objects it returns.
#ifndef SLUICE_CORE_LOCAL_FILE_SYSTEM_H_
#define SLUICE_CORE_LOCAL_FILE_SYSTEM_H_

#include <memory>
#include <optional>

#include "core/io/confined_open.h"
#include "core/io/file_system.h"

namespace sluice {

// `confinement`: where opens may go. nullopt: the process's (ProcessLocalConfinement), read at
// each open.
std::shared_ptr<FileSystem> NewLocalFileSystem(
    std::optional<LocalConfinement> confinement = std::nullopt);

}  // namespace sluice

#endif  // SLUICE_CORE_LOCAL_FILE_SYSTEM_H_
