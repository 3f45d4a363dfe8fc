#include "core/tensor/raw_element.h"

#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/tensor/charged_view.h"
#include "core/tensor/uninitialized_tensor.h"
#include "core/util/crc32c.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

constexpr size_t kWord = 8;
// More dimensions than any spec could have; a record claiming more is corrupt.
constexpr uint64_t kMaxRank = 254;

size_t Padded(size_t n) { return (n + kWord - 1) / kWord * kWord; }

size_t DataBytes(const Tensor& t) {
  if (t.dtype() != DType::kString) return Padded(t.byte_size());
  size_t chars = 0;
  for (int64_t i = 0; i < t.num_elements(); ++i) chars += t.string_at(i).size();
  return static_cast<size_t>(t.num_elements()) * kWord + Padded(chars);
}

// Zeroes the padding after `n` bytes at p; returns the position after it.
char* Pad(char* p, size_t n) {
  std::memset(p + n, 0, Padded(n) - n);
  return p + Padded(n);
}

char* PutU64(char* p, uint64_t v) {
  std::memcpy(p, &v, kWord);
  return p + kWord;
}

// Reads the record front to back; every read is checked against what is left. With `crc`, the
// CRC32C of the bytes passed is kept in *crc as they are read (front to back, so after the last
// read it is the record's CRC): the checksum pass and the parse are one pass over the bytes.
class RecordCursor {
 public:
  RecordCursor(absl::string_view record, uint32_t* crc)
      : p_(record.data()), left_(record.size()), crc_(crc) {}

  size_t left() const { return left_; }
  size_t offset(absl::string_view record) const { return p_ - record.data(); }

  bool U64(uint64_t* v) {
    if (left_ < kWord) return false;
    std::memcpy(v, p_, kWord);
    Sum(p_, kWord);
    Skip(kWord);
    return true;
  }
  // `n` bytes at the cursor, then the cursor moves past them and their padding.
  bool Bytes(size_t n, const char** data) {
    if (!BytesUnsummed(n, data)) return false;
    Sum(*data, Padded(n));
    return true;
  }
  // As Bytes, leaving the n bytes and their padding out of the CRC: the caller sums them
  // (Sum), in order, before the next read (from its copy, while that is in the cache).
  bool BytesUnsummed(size_t n, const char** data) {
    if (n > left_ || Padded(n) > left_) return false;
    *data = p_;
    Skip(Padded(n));
    return true;
  }
  bool summing() const { return crc_ != nullptr; }
  void Sum(const char* data, size_t n) {
    if (crc_ != nullptr && n > 0) *crc_ = crc32c::Extend(*crc_, data, n);
  }

 private:
  void Skip(size_t n) {
    p_ += n;
    left_ -= n;
  }
  const char* p_;
  size_t left_;
  uint32_t* const crc_;  // null: no checksum kept
};

absl::Status Corrupt(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("raw element record: ", what));
}

absl::Status OtherSpec(size_t component, absl::string_view got, const TensorSpec& want) {
  return absl::FailedPreconditionError(absl::StrCat(
      "raw element record: component ", component, " is ", got, ", the element spec says ",
      want.ToString()));
}

// The header of one component: its dtype and shape, checked against `want` and against the
// bytes the record has left (each element of any dtype takes at least one byte of data).
absl::StatusOr<std::pair<DType, Shape>> ReadComponentHeader(RecordCursor* c, size_t component,
                                                            const TensorSpec& want) {
  uint64_t word;
  if (!c->U64(&word)) return Corrupt(absl::StrCat("component ", component, " header truncated"));
  const uint64_t dtype_value = word & 0xFFFFFFFFu;
  const uint64_t rank = word >> 32;
  if (dtype_value == 0 || dtype_value > static_cast<uint64_t>(DType::kString)) {
    return Corrupt(absl::StrCat("component ", component, " has no dtype (", dtype_value, ")"));
  }
  if (rank > kMaxRank || rank * kWord > c->left()) {
    return Corrupt(absl::StrCat("component ", component, " claims rank ", rank, " with ",
                                c->left(), " bytes left"));
  }
  std::vector<int64_t> dims(rank);
  for (uint64_t i = 0; i < rank; ++i) {
    uint64_t d = 0;
    c->U64(&d);  // fits: rank * 8 bytes are left
    if (d > static_cast<uint64_t>(INT64_MAX)) {
      return Corrupt(absl::StrCat("component ", component, " has a negative dimension"));
    }
    dims[i] = static_cast<int64_t>(d);
  }
  const DType dtype = static_cast<DType>(dtype_value);
  Shape shape(std::move(dims));
  if (dtype != want.dtype || !want.shape.IsCompatibleWith(shape)) {
    return OtherSpec(component,
                     absl::StrCat(DTypeName(dtype), " of shape ", shape.ToString()), want);
  }
  return std::make_pair(dtype, std::move(shape));
}

// The element count of `shape` when its data can fit in `left` bytes (one byte per element at
// least); -1 otherwise (also on overflow).
int64_t FittingElements(const Shape& shape, size_t left) {
  uint64_t n = 1;
  for (int64_t d : shape.dims()) {
    if (d == 0) return 0;
  }
  for (int64_t d : shape.dims()) {
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n) || n > left) return -1;
  }
  return static_cast<int64_t>(n);
}

// A numeric component: a charged view of `backing` (null: none) when its bytes are aligned for
// its dtype there, else a copy.
absl::StatusOr<Tensor> ReadNumeric(RecordCursor* c, size_t component, DType dtype,
                                   const Shape& shape, absl::string_view what,
                                   const std::shared_ptr<TensorBuffer>* backing) {
  const int64_t n = FittingElements(shape, c->left());
  const size_t bytes = n < 0 ? 0 : static_cast<size_t>(n) * DTypeSize(dtype);
  const char* data = nullptr;
  if (n < 0 || bytes / DTypeSize(dtype) != static_cast<size_t>(n) || !c->Bytes(bytes, &data)) {
    return Corrupt(absl::StrCat("component ", component, " of shape ", shape.ToString(),
                                " does not fit the record's ", c->left(), " bytes left"));
  }
  if (dtype == DType::kBool) {
    for (size_t i = 0; i < bytes; ++i) {
      if (static_cast<unsigned char>(data[i]) > 1) {
        return Corrupt(absl::StrCat("component ", component, " bool ", i, " is neither 0 nor 1"));
      }
    }
  }
  if (backing != nullptr && bytes > 0 &&
      reinterpret_cast<uintptr_t>(data) % DTypeSize(dtype) == 0) {
    const char* base = static_cast<const char*>((*backing)->data());
    return TryWrapCharged(dtype, shape, *backing, static_cast<size_t>(data - base), what);
  }
  ASSIGN_OR_RETURN(Tensor t, TryAllocateUninitialized(dtype, shape, what));
  if (bytes > 0) std::memcpy(t.mutable_raw_data(), data, bytes);
  return t;
}

absl::StatusOr<Tensor> ReadStrings(RecordCursor* c, size_t component, const Shape& shape,
                                   absl::string_view what) {
  const int64_t n = FittingElements(shape, c->left() / kWord);
  const char* lengths = nullptr;
  if (n < 0 || !c->Bytes(static_cast<size_t>(n) * kWord, &lengths)) {
    return Corrupt(absl::StrCat("component ", component, ": the lengths of ", shape.ToString(),
                                " strings do not fit the record's ", c->left(), " bytes left"));
  }
  uint64_t chars = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint64_t len;
    std::memcpy(&len, lengths + i * kWord, kWord);
    if (len > c->left() || chars + len > c->left()) {
      return Corrupt(absl::StrCat("component ", component, ": string ", i, " of ", len,
                                  " bytes does not fit the record's ", c->left(), " bytes left"));
    }
    chars += len;
  }
  const char* data = nullptr;
  if (!c->BytesUnsummed(chars, &data)) {
    return Corrupt(absl::StrCat("component ", component, ": strings truncated"));
  }
  ASSIGN_OR_RETURN(Tensor t,
                   Tensor::TryAllocateStrings(shape, static_cast<int64_t>(chars), what));
  for (int64_t i = 0; i < n; ++i) {
    uint64_t len;
    std::memcpy(&len, lengths + i * kWord, kWord);
    std::string* s = t.mutable_string(i);
    s->assign(data, len);
    c->Sum(s->data(), len);  // from the copy, in the cache: the source is read once
    data += len;
  }
  c->Sum(data, Padded(chars) - chars);
  return t;
}

}  // namespace

void SerializeRawElement(const Element& e, std::string* out) {
  const std::vector<Tensor> leaves = e.Flatten();
  size_t total = kWord;
  for (const Tensor& t : leaves) total += kWord * (1 + t.shape().dims().size()) + DataBytes(t);
  out->resize(total);  // keeps the capacity; every byte is written below, padding with zeros
  char* p = PutU64(out->data(), leaves.size());
  for (const Tensor& t : leaves) {
    const uint64_t rank = t.shape().dims().size();
    p = PutU64(p, static_cast<uint64_t>(static_cast<uint32_t>(t.dtype())) | rank << 32);
    for (int64_t d : t.shape().dims()) p = PutU64(p, static_cast<uint64_t>(d));
  }
  for (const Tensor& t : leaves) {
    if (t.dtype() != DType::kString) {
      if (t.byte_size() > 0) std::memcpy(p, t.raw_data(), t.byte_size());
      p = Pad(p, t.byte_size());
      continue;
    }
    const int64_t n = t.num_elements();
    for (int64_t i = 0; i < n; ++i) p = PutU64(p, t.string_at(i).size());
    size_t chars = 0;
    for (int64_t i = 0; i < n; ++i) {
      const std::string& s = t.string_at(i);
      if (!s.empty()) std::memcpy(p + chars, s.data(), s.size());
      chars += s.size();
    }
    p = Pad(p, chars);
  }
}

namespace {

absl::StatusOr<Element> Parse(absl::string_view record, const ElementSpec& spec,
                              absl::string_view what,
                              const std::shared_ptr<TensorBuffer>* backing, uint32_t* crc) {
  if (crc != nullptr) *crc = 0;
  RecordCursor c(record, crc);
  uint64_t count;
  if (!c.U64(&count)) return Corrupt("shorter than its header");
  const std::vector<TensorSpec> specs = spec.Flatten();
  if (count != specs.size()) {
    return absl::FailedPreconditionError(absl::StrCat("raw element record: ", count,
                                                      " components, the element spec has ",
                                                      specs.size()));
  }
  std::vector<std::pair<DType, Shape>> headers;
  headers.reserve(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    ASSIGN_OR_RETURN(auto h, ReadComponentHeader(&c, i, specs[i]));
    headers.push_back(std::move(h));
  }
  std::vector<Tensor> leaves;
  leaves.reserve(specs.size());
  for (size_t i = 0; i < headers.size(); ++i) {
    const auto& [dtype, shape] = headers[i];
    absl::StatusOr<Tensor> t = dtype == DType::kString ? ReadStrings(&c, i, shape, what)
                                                       : ReadNumeric(&c, i, dtype, shape, what,
                                                                     backing);
    if (!t.ok()) return t.status();
    leaves.push_back(*std::move(t));
  }
  if (c.left() != 0) {
    return Corrupt(absl::StrCat(c.left(), " bytes left over after the last component"));
  }
  return Element::Pack(spec, std::move(leaves));
}

}  // namespace

absl::StatusOr<Element> ParseRawElement(absl::string_view record, const ElementSpec& spec,
                                        absl::string_view what) {
  return Parse(record, spec, what, nullptr, nullptr);
}

absl::StatusOr<Element> ParseRawElementInPlace(absl::string_view record,
                                               const std::shared_ptr<TensorBuffer>& backing,
                                               const ElementSpec& spec, absl::string_view what,
                                               uint32_t* crc) {
  const char* base = backing == nullptr ? nullptr : static_cast<const char*>(backing->data());
  if (base == nullptr || record.data() < base ||
      record.size() > backing->size() - static_cast<size_t>(record.data() - base)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ParseRawElementInPlace: the record is not inside its backing"));
  }
  return Parse(record, spec, what, &backing, crc);
}

}  // namespace sluice
