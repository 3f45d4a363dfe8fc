// A read-only mapping of a whole local file, as a TensorBuffer: tensors view its bytes with
// Tensor::Wrap (or a charged view, core/tensor/charged_view.h) and keep the mapping alive for as
// long as any of them lives, whatever happens to the reader that mapped it.
//
//   ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> m, MappedFile::Map("/data/part-0.npy"));
//   absl::string_view bytes = m->bytes();
//
// The file is opened under the process's confinement (core/io/confined_open.h: --data_root), so
// a mapping reaches no file a read could not. The mapping is private and read-only: its pages
// are the page cache's (no copy), and writing through data() faults.
//
// SIGBUS: a mapped file that another process truncates in place makes a later access to the
// lost pages raise SIGBUS (as for LevelDB's mapped tables). Callers map only files that are
// never written in place once they can be seen under their name (a snapshot's committed chunks,
// which a writer renames into place whole), and check the size they are given against what
// they expect (a snapshot's manifest) before reading; a file being written is read, not mapped.
//
// Errors name the file: PERMISSION_DENIED outside the data roots, the open's or mmap's errno
// otherwise (NOT_FOUND for a missing file).
//
// Thread safety: immutable once mapped; any thread may read it.
#ifndef SLUICE_CORE_IO_MAPPED_FILE_H_
#define SLUICE_CORE_IO_MAPPED_FILE_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sluice/tensor.h"

namespace sluice {

class MappedFile : public TensorBuffer {
 public:
  // Maps all of the local file `path` (a plain path or a file:// URL). An empty file is an
  // empty mapping.
  static absl::StatusOr<std::shared_ptr<MappedFile>> Map(const std::string& path);

  ~MappedFile() override;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  void* data() override { return data_; }
  size_t size() const override { return size_; }
  absl::string_view bytes() const { return {static_cast<const char*>(data_), size_}; }
  const std::string& name() const { return name_; }

 private:
  MappedFile(std::string name, void* data, size_t size)
      : name_(std::move(name)), data_(data), size_(size) {}

  const std::string name_;
  void* const data_;  // null for an empty file
  const size_t size_;
};

}  // namespace sluice

#endif  // SLUICE_CORE_IO_MAPPED_FILE_H_
