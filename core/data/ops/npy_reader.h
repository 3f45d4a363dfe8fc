// npy_dataset(filenames): NumPy .npy arrays (format versions 1.0, 2.0 and 3.0), memory-mapped.
// Row i of an array of shape (n, d1, d2, ...) is element i, a tensor of shape (d1, d2, ...);
// files are read in order. Elements share the mapping (no copy) unless the file's byte order
// differs from the machine's, when each row is byte-swapped into its own buffer.
//
// Supported dtypes (the header's 'descr'): bool ('|b1'), signed and unsigned integers of 1, 2,
// 4 and 8 bytes, float16, float32 and float64, each with '<', '>', '|' or '=' byte order.
// Anything else (object, strings, structured dtypes, complex) is INVALID_ARGUMENT naming the
// file and the descr, and so are fortran_order=True arrays ("save it with
// np.ascontiguousarray"), 0-d arrays (they have no rows), a bad header, and a file shorter than
// its header says. A missing file is NOT_FOUND naming it.
#ifndef SLUICE_CORE_NPY_READER_H_
#define SLUICE_CORE_NPY_READER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sluice/dtype.h"
#include "core/data/iterator.h"
#include "sluice/shape.h"
#include "proto/dataset.pb.h"

namespace sluice {

struct NpyHeader {
  DType dtype = DType::kInvalid;
  bool big_endian = false;   // the data's byte order
  Shape shape;               // the whole array's
  uint64_t data_offset = 0;  // where the data begins in the file
};

// Reads and checks the header of `filename` (the errors above).
absl::StatusOr<NpyHeader> ReadNpyHeader(const std::string& filename);

// The source for `filenames`, with its spec (dtype and row shape) from the first file's header.
absl::StatusOr<proto::NpySource> MakeNpySource(std::vector<std::string> filenames);

// Yields the rows of each file in turn. A file whose dtype or row shape differs from the
// source's is INVALID_ARGUMENT naming it. Not thread-safe.
std::unique_ptr<Iterator> NewNpyIterator(std::string label, proto::NpySource source);

}  // namespace sluice

#endif  // SLUICE_CORE_NPY_READER_H_
