// The local file system: plain paths and file:// URLs. Streams are read(2) on a descriptor with
// POSIX_FADV_SEQUENTIAL (the kernel reads ahead); random access is pread(2); globs are glob(3)
// (`*`, `?`, `[...]`; no `**`), sorted bytewise. Errors carry the errno's code (core/io/input_stream.h
// FileError) and name the path.
//
// Thread safety: thread-safe; see core/io/file_system.h for the objects it returns.
#ifndef SLUICE_CORE_LOCAL_FILE_SYSTEM_H_
#define SLUICE_CORE_LOCAL_FILE_SYSTEM_H_

#include <memory>

#include "core/io/file_system.h"

namespace sluice {

std::shared_ptr<FileSystem> NewLocalFileSystem();

}  // namespace sluice

#endif  // SLUICE_CORE_LOCAL_FILE_SYSTEM_H_
