// RandomAccessSource: element i of an indexed source, read without reading the elements before
// it. What a global order (core/data/distribute/global_order.h) reads through its permutation.
//
// Supported sources and how element i is found:
//   range                       start + i * step
//   from_tensors                its one element
//   from_tensor_slices          row i of every leaf (sharing the literal's storage)
//   tf_record_dataset           uncompressed only: the record index of each file
//                               (core/io/record_index.h, built and cached on first use), over all
//                               files in order; one pread of the framed record, both checksums
//                               checked. num_parallel_reads does not change the positions: they
//                               always count over the files in order.
//   fixed_length_record_dataset uncompressed only: header_bytes + i * record_bytes of its file
//   npy_dataset                 row i over the files in order, read with pread (byte-swapped
//                               when the file's byte order is not the machine's)
//   jsonl_dataset               the i-th non-blank line over the files in order, read forward
//                               from the last checkpoint before it of its file's sparse line
//                               index (ops/jsonl_line_index.h, built and cached on first use),
//                               or from where the previous Get stopped; a bad line is the same
//                               element error, naming file and line, as in order
// A record_range (tf_record, fixed_length_record) is honoured: element i is record start + i
// counted over the files, and size() is what the range keeps of them.
//
// Not supported (FAILED_PRECONDITION naming the source and why): text_line_dataset and
// csv_dataset (a line's position is known only by reading the lines before it: TF's text
// semantics, header rows and quoted newlines, are theirs to index), list_files
// (its elements exist only once its patterns are expanded), compressed record files (a
// compressed stream is read from its start), permuted (already a range of a global order).
//
// Thread safety: none per object (Get keeps file descriptors and is not thread-safe); any
// number of objects may be used on different threads.
#ifndef SLUICE_CORE_RANDOM_ACCESS_SOURCE_H_
#define SLUICE_CORE_RANDOM_ACCESS_SOURCE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sluice/element.h"
#include "core/io/record_index.h"
#include "proto/dataset.pb.h"

namespace sluice {

class RandomAccessSource {
 public:
  // FAILED_PRECONDITION for the unsupported sources above (CheckRandomAccess); INVALID_ARGUMENT
  // for bad source arguments (no files, step 0, ...); NOT_FOUND naming a missing file;
  // DATA_LOSS naming a corrupt file while indexing; ABORTED naming a jsonl file that changed
  // while its lines were indexed. Opens (and indexes) every file to count its elements. Record
  // and line indexes are cached per process by file name, size and modification time,
  // so opening the same files again (one range after another) costs a stat per file.
  static absl::StatusOr<std::unique_ptr<RandomAccessSource>> Open(
      const proto::SourceDef& source);
  // The same, with record indexes kept as `index_options` says.
  static absl::StatusOr<std::unique_ptr<RandomAccessSource>> Open(
      const proto::SourceDef& source, const RecordIndexOptions& index_options);

  virtual ~RandomAccessSource() = default;

  // The number of elements.
  virtual int64_t size() const = 0;
  // Element `index` (0 <= index < size(), else INVALID_ARGUMENT). Errors name the file and the
  // record (jsonl: the line): DATA_LOSS for a checksum mismatch or a file that changed since it
  // was indexed, the errno's code for a failed read; a jsonl line that is no element (bad JSON,
  // a missing key, ...) is the element error (IsElementError) jsonl_reader.h describes. Not
  // thread-safe.
  virtual absl::StatusOr<Element> Get(int64_t index) = 0;
};

// Whether Open would succeed without touching files (for planning): OK or FAILED_PRECONDITION
// with the reason, e.g. "text_line_dataset source has no random access: ...". Arguments are
// not checked here (Dataset::Validate() does).
// Each source's registration says (SourceRegistration::random_access in
// core/data/op_registry.h).
absl::Status CheckRandomAccess(const proto::SourceDef& source);
// For a record source's random_access: OK for uncompressed files, else FAILED_PRECONDITION.
absl::Status CheckUncompressedRandomAccess(const proto::SourceDef& source,
                                           const std::string& compression_type);

}  // namespace sluice

#endif  // SLUICE_CORE_RANDOM_ACCESS_SOURCE_H_
