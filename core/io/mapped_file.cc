#include "core/io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "core/io/confined_open.h"
#include "core/io/file_system.h"
#include "core/io/input_stream.h"
#include "core/util/status_macros.h"

namespace sluice {

absl::StatusOr<std::shared_ptr<MappedFile>> MappedFile::Map(const std::string& path) {
  const std::string local = LocalPathOf(path);
  ASSIGN_OR_RETURN(const int fd, OpenLocalFile(local, O_RDONLY));  // confined to the data roots
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return FileError(err, "stat", path);
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* data = nullptr;
  if (size > 0) {
    data = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (data == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return FileError(err, "map", path);
    }
    // Readers walk the file front to back: read ahead further on a page-cache miss.
    ::madvise(data, size, MADV_SEQUENTIAL);
  }
  ::close(fd);  // the mapping keeps the file
  return std::shared_ptr<MappedFile>(new MappedFile(path, data, size));
}

MappedFile::~MappedFile() {
  if (data_ == nullptr) return;
  // In pieces: unmapping zaps the page-table entry of every page mapped (about 1 ms for 50 MB
  // here) under the process's mmap lock, which another thread mapping a file (mmap) then waits
  // for whole; between pieces it takes its turn.
  constexpr size_t kUnmapPiece = size_t{4} << 20;
  char* const bytes = static_cast<char*>(data_);
  for (size_t at = 0; at < size_; at += kUnmapPiece) {
    ::munmap(bytes + at, std::min(kUnmapPiece, size_ - at));
  }
}

}  // namespace sluice
