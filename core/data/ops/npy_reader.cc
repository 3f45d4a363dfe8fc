#include "core/data/ops/npy_reader.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/data/op_iterator.h"
#include "core/data/shape_limits.h"
#include "core/format/python_literal.h"
#include "core/io/file_system.h"
#include "core/io/input_stream.h"
#include "core/io/mapped_file.h"
#include "core/util/status_macros.h"
#include "proto/dataset.pb.h"

namespace sluice {
namespace {

constexpr char kNpyMagic[] = "\x93NUMPY";
// Headers larger than this are refused: NumPy writes a few hundred bytes.
constexpr uint32_t kMaxHeaderBytes = 1 << 20;

absl::Status BadFile(const std::string& file, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("npy file '", file, "': ", why));
}

absl::StatusOr<DType> DTypeOfDescr(const std::string& file, const std::string& descr,
                                   bool* big_endian) {
  if (descr.size() < 3) return BadFile(file, absl::StrCat("unsupported dtype '", descr, "'"));
  const char order = descr[0];
  const std::string code = descr.substr(1);
  if (order != '<' && order != '>' && order != '|' && order != '=') {
    return BadFile(file, absl::StrCat("unsupported dtype '", descr, "'"));
  }
  *big_endian = order == '>' || (order == '=' && std::endian::native == std::endian::big);
  static const std::pair<const char*, DType> kCodes[] = {
      {"b1", DType::kBool},    {"i1", DType::kInt8},    {"i2", DType::kInt16},
      {"i4", DType::kInt32},   {"i8", DType::kInt64},   {"u1", DType::kUInt8},
      {"u2", DType::kUInt16},  {"u4", DType::kUInt32},  {"u8", DType::kUInt64},
      {"f2", DType::kFloat16}, {"f4", DType::kFloat32}, {"f8", DType::kFloat64},
  };
  for (const auto& [c, d] : kCodes) {
    if (code == c) return d;
  }
  return BadFile(file, absl::StrCat("unsupported dtype '", descr,
                                    "' (Sluice reads bool, integer and float arrays)"));
}

class NpyIterator : public OpIterator {
 public:
  NpyIterator(std::string label, proto::NpySource source)
      : OpIterator(std::move(label)),
        source_(std::move(source)),
        dtype_(static_cast<DType>(source_.dtype())),
        row_shape_(std::vector<int64_t>(source_.row_shape().begin(), source_.row_shape().end())) {}

 protected:
  absl::Status GetNextInternal(Element* out, bool* end_of_sequence) override {
    while (next_row_ >= rows_) {
      if (next_file_ >= source_.filenames_size()) {
        *end_of_sequence = true;
        return absl::OkStatus();
      }
      absl::Status s = OpenFile(source_.filenames(next_file_++));
      if (!s.ok()) return OpError(s.code(), s.message());
    }
    const size_t row_bytes = static_cast<size_t>(row_shape_.num_elements()) * DTypeSize(dtype_);
    const size_t offset = header_.data_offset + static_cast<size_t>(next_row_) * row_bytes;
    ++next_row_;
    if (!swap_) {
      absl::StatusOr<Tensor> t = Tensor::Wrap(dtype_, row_shape_, mapping_, offset);
      if (!t.ok()) return InvalidArgument(t.status().message());
      *out = Element(*std::move(t));
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(Tensor t, Tensor::TryAllocate(dtype_, row_shape_, label()));
    const char* src = static_cast<const char*>(mapping_->data()) + offset;
    char* dst = static_cast<char*>(t.mutable_raw_data());
    const size_t width = DTypeSize(dtype_);
    for (size_t i = 0; i < row_bytes; i += width) {
      for (size_t b = 0; b < width; ++b) dst[i + b] = src[i + width - 1 - b];
    }
    *out = Element(std::move(t));
    return absl::OkStatus();
  }

  bool SupportsBlocks() const override { return true; }

  // Consecutive rows of the current file as one tensor: a view of the mapping when the file's
  // byte order is the machine's, else one byte-swapped copy. A block ends at a file's end.
  absl::Status GetNextBlockInternal(int64_t max_elements, Element* out, int64_t* n,
                                    bool* end_of_sequence) override {
    while (next_row_ >= rows_) {
      if (next_file_ >= source_.filenames_size()) {
        *end_of_sequence = true;
        return absl::OkStatus();
      }
      absl::Status s = OpenFile(source_.filenames(next_file_++));
      if (!s.ok()) return OpError(s.code(), s.message());
    }
    const int64_t count = std::min(max_elements, rows_ - next_row_);
    const size_t row_bytes = static_cast<size_t>(row_shape_.num_elements()) * DTypeSize(dtype_);
    const size_t offset = header_.data_offset + static_cast<size_t>(next_row_) * row_bytes;
    next_row_ += count;
    const Shape shape = row_shape_.Prepend(count);
    *n = count;
    if (!swap_) {
      absl::StatusOr<Tensor> t = Tensor::Wrap(dtype_, shape, mapping_, offset);
      if (!t.ok()) return InvalidArgument(t.status().message());
      *out = Element(*std::move(t));
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(Tensor t, Tensor::TryAllocate(dtype_, shape, label()));
    const char* src = static_cast<const char*>(mapping_->data()) + offset;
    char* dst = static_cast<char*>(t.mutable_raw_data());
    const size_t width = DTypeSize(dtype_);
    const size_t bytes = row_bytes * static_cast<size_t>(count);
    for (size_t i = 0; i < bytes; i += width) {
      for (size_t b = 0; b < width; ++b) dst[i + b] = src[i + width - 1 - b];
    }
    *out = Element(std::move(t));
    return absl::OkStatus();
  }

 private:
  absl::Status OpenFile(const std::string& file) {
    mapping_.reset();
    rows_ = next_row_ = 0;
    ASSIGN_OR_RETURN(header_, ReadNpyHeader(file));
    if (header_.dtype != dtype_ || header_.shape.DropFirst() != row_shape_) {
      return BadFile(file, absl::StrCat("holds ", DTypeName(header_.dtype), " rows of shape ",
                                        header_.shape.DropFirst().ToString(), " but the dataset's "
                                        "are ", DTypeName(dtype_), " of shape ",
                                        row_shape_.ToString(), " (from the first file)"));
    }
    rows_ = header_.shape.dim(0);
    swap_ = header_.big_endian != (std::endian::native == std::endian::big) &&
            DTypeSize(dtype_) > 1;
    if (rows_ == 0) return absl::OkStatus();
    const uint64_t need = header_.data_offset + static_cast<uint64_t>(rows_) *
                                                    row_shape_.num_elements() * DTypeSize(dtype_);
    if (!IsLocalPath(file)) return ReadWhole(file, need);
    absl::StatusOr<std::shared_ptr<MappedFile>> mapped = MappedFile::Map(file);
    if (!mapped.ok()) {
      return absl::Status(mapped.status().code(), absl::StrCat("cannot open npy file '", file,
                                                               "': ", mapped.status().message()));
    }
    if ((*mapped)->size() < need) return Truncated(file, need, (*mapped)->size());
    mapping_ = *std::move(mapped);
    return absl::OkStatus();
  }

  static absl::Status Truncated(const std::string& file, uint64_t need, uint64_t size) {
    return BadFile(file, absl::StrCat("is truncated: the header describes ", need,
                                      " bytes but the file has ", size));
  }

  // A remote file (no mmap): its first `need` bytes read into host memory. The header's size
  // is the file's word: the file's real size is checked before the buffer is allocated.
  absl::Status ReadWhole(const std::string& file, uint64_t need) {
    ASSIGN_OR_RETURN(const FileStat stat, StatFile(file));
    if (stat.size < need) return Truncated(file, need, stat.size);
    ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> f, OpenRandomAccessFile(file));
    ASSIGN_OR_RETURN(std::shared_ptr<TensorBuffer> buffer,
                     TensorBuffer::TryAllocateHost(static_cast<size_t>(need), file));
    ASSIGN_OR_RETURN(const size_t got,
                     f->ReadAt(0, static_cast<char*>(buffer->data()), static_cast<size_t>(need)));
    if (got < need) return Truncated(file, need, got);
    mapping_ = std::move(buffer);
    return absl::OkStatus();
  }

  const proto::NpySource source_;
  const DType dtype_;
  const Shape row_shape_;
  int next_file_ = 0;
  NpyHeader header_;
  std::shared_ptr<TensorBuffer> mapping_;
  bool swap_ = false;
  int64_t rows_ = 0;
  int64_t next_row_ = 0;
};

}  // namespace

absl::StatusOr<NpyHeader> ReadNpyHeader(const std::string& file) {
  absl::StatusOr<std::unique_ptr<InputStream>> stream = OpenFileStream(file);
  if (!stream.ok()) return stream.status();
  InputStream* in = stream->get();
  absl::Status read_error;
  auto read_exact = [in, &read_error](void* buf, size_t n) {
    absl::StatusOr<size_t> got = in->Read(static_cast<char*>(buf), n);
    if (!got.ok()) read_error = got.status();
    return got.ok() && *got == n;
  };
  // A failed read is the store's error when there was one, else the file's fault.
  auto short_read = [&file, &read_error](absl::string_view why) {
    return read_error.ok() ? BadFile(file, why) : read_error;
  };
  unsigned char prefix[8];
  if (!read_exact(prefix, 8) || std::memcmp(prefix, kNpyMagic, 6) != 0) {
    return short_read("not a NumPy .npy file (bad magic)");
  }
  const int major = prefix[6];
  uint32_t header_len = 0;
  size_t prefix_len = 0;
  if (major == 1) {
    unsigned char len[2];
    if (!read_exact(len, 2)) {
      return short_read("truncated header");
    }
    header_len = len[0] | (len[1] << 8);
    prefix_len = 10;
  } else if (major == 2 || major == 3) {
    unsigned char len[4];
    if (!read_exact(len, 4)) {
      return short_read("truncated header");
    }
    header_len = len[0] | (len[1] << 8) | (len[2] << 16) | (uint32_t{len[3]} << 24);
    prefix_len = 12;
  } else {
    return BadFile(file, absl::StrCat("unsupported format version ", major, ".", prefix[7]));
  }
  if (header_len > kMaxHeaderBytes) {
    return BadFile(file, absl::StrCat("header of ", header_len, " bytes is too large"));
  }
  std::string text(header_len, '\0');
  const bool got = read_exact(text.data(), header_len);
  if (!got) return short_read("truncated header");

  absl::StatusOr<PyValue> dict = ParsePythonLiteral(absl::StripAsciiWhitespace(text));
  if (!dict.ok() || dict->kind != PyValue::Kind::kDict) {
    return BadFile(file, "the header is not a Python dict literal");
  }
  const PyValue* descr = nullptr;
  const PyValue* fortran = nullptr;
  const PyValue* shape = nullptr;
  for (size_t i = 0; i < dict->keys.size(); ++i) {
    if (dict->keys[i] == "descr") descr = &dict->items[i];
    if (dict->keys[i] == "fortran_order") fortran = &dict->items[i];
    if (dict->keys[i] == "shape") shape = &dict->items[i];
  }
  if (descr == nullptr || fortran == nullptr || shape == nullptr) {
    return BadFile(file, "the header lacks descr, fortran_order or shape");
  }
  if (descr->kind != PyValue::Kind::kStr) {
    return BadFile(file, "unsupported dtype (a structured dtype?); Sluice reads bool, integer and "
                         "float arrays");
  }
  NpyHeader h;
  ASSIGN_OR_RETURN(h.dtype, DTypeOfDescr(file, descr->text, &h.big_endian));
  if (fortran->kind != PyValue::Kind::kBool) return BadFile(file, "bad fortran_order");
  if (fortran->bool_value) {
    return BadFile(file, "is stored in Fortran (column-major) order, which Sluice does not read; "
                         "save it with np.save(f, np.ascontiguousarray(a))");
  }
  if (shape->kind != PyValue::Kind::kTuple) return BadFile(file, "bad shape in the header");
  std::vector<int64_t> dims;
  for (const PyValue& d : shape->items) {
    std::optional<int64_t> v = d.AsInt64();
    if (d.kind != PyValue::Kind::kInt || !v.has_value() || *v < 0) {
      return BadFile(file, "bad shape in the header");
    }
    dims.push_back(*v);
  }
  if (dims.empty()) {
    return BadFile(file, "holds a 0-d array (a single value); npy_dataset needs an array with "
                         "rows");
  }
  // The data's byte count must fit in int64: a wrapped product would pass the file-size check.
  std::vector<int64_t> byte_dims = dims;
  byte_dims.push_back(static_cast<int64_t>(DTypeSize(h.dtype)));
  if (absl::Status s = CheckedNumElements(byte_dims, "the header's shape").status(); !s.ok()) {
    return BadFile(file, s.message());
  }
  h.shape = Shape(std::move(dims));
  h.data_offset = prefix_len + header_len;
  return h;
}

absl::StatusOr<proto::NpySource> MakeNpySource(std::vector<std::string> filenames) {
  proto::NpySource s;
  if (filenames.empty()) return absl::InvalidArgumentError("npy_dataset: no files given");
  ASSIGN_OR_RETURN(NpyHeader h, ReadNpyHeader(filenames[0]));
  s.set_dtype(static_cast<proto::DataType>(h.dtype));
  const Shape row = h.shape.DropFirst();
  for (int64_t d : row.dims()) s.add_row_shape(d);
  for (std::string& f : filenames) s.add_filenames(std::move(f));
  return s;
}

std::unique_ptr<Iterator> NewNpyIterator(std::string label, proto::NpySource source) {
  return std::make_unique<NpyIterator>(std::move(label), std::move(source));
}

}  // namespace sluice
