#include "core/tensor/element_wire.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/tensor/proto_convert.h"

namespace sluice {
namespace {

// Protobuf wire types and the tags of the fields written (field_number << 3 | wire_type).
constexpr uint8_t kElementStructureTag = (1 << 3) | 2;
constexpr uint8_t kElementTensorsTag = (2 << 3) | 2;
constexpr uint8_t kTensorDtypeTag = (1 << 3) | 0;
constexpr uint8_t kTensorShapeTag = (2 << 3) | 2;
constexpr uint8_t kTensorContentTag = (3 << 3) | 2;
constexpr uint8_t kTensorStringValTag = (4 << 3) | 2;

size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

// Writes `v` at p; returns the position after it.
char* PutVarint(char* p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<char>(v);
  return p;
}

char* PutBytes(char* p, uint8_t tag, const void* data, size_t size) {
  *p++ = static_cast<char>(tag);
  p = PutVarint(p, size);
  if (size > 0) std::memcpy(p, data, size);
  return p + size;
}

// The sizes a tensor's TensorProto needs, computed once and used to write it.
struct TensorWireSize {
  size_t shape_payload = 0;  // the packed varints of the dims
  size_t body = 0;           // the TensorProto's serialized size
};

TensorWireSize SizeOf(const Tensor& t) {
  TensorWireSize s;
  const uint64_t dtype = static_cast<uint64_t>(static_cast<int64_t>(t.dtype()));
  if (dtype != 0) s.body += 1 + VarintSize(dtype);
  for (int64_t d : t.shape().dims()) s.shape_payload += VarintSize(static_cast<uint64_t>(d));
  if (s.shape_payload > 0) s.body += 1 + VarintSize(s.shape_payload) + s.shape_payload;
  if (t.dtype() == DType::kString) {
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      const size_t n = t.string_at(i).size();
      s.body += 1 + VarintSize(n) + n;
    }
  } else if (t.byte_size() > 0) {
    s.body += 1 + VarintSize(t.byte_size()) + t.byte_size();
  }
  return s;
}

char* PutTensor(char* p, const Tensor& t, const TensorWireSize& s) {
  *p++ = static_cast<char>(kElementTensorsTag);
  p = PutVarint(p, s.body);
  const uint64_t dtype = static_cast<uint64_t>(static_cast<int64_t>(t.dtype()));
  if (dtype != 0) {
    *p++ = static_cast<char>(kTensorDtypeTag);
    p = PutVarint(p, dtype);
  }
  if (s.shape_payload > 0) {
    *p++ = static_cast<char>(kTensorShapeTag);
    p = PutVarint(p, s.shape_payload);
    for (int64_t d : t.shape().dims()) p = PutVarint(p, static_cast<uint64_t>(d));
  }
  if (t.dtype() == DType::kString) {
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      const std::string& v = t.string_at(i);
      p = PutBytes(p, kTensorStringValTag, v.data(), v.size());
    }
  } else if (t.byte_size() > 0) {
    p = PutBytes(p, kTensorContentTag, t.raw_data(), t.byte_size());
  }
  return p;
}

}  // namespace

void SerializeElementProto(const Element& e, std::string* out) {
  // The structure is a few bytes: the proto library writes it.
  const std::string structure = StructureToProto(e).SerializeAsString();
  const std::vector<Tensor> leaves = e.Flatten();
  std::vector<TensorWireSize> sizes;
  sizes.reserve(leaves.size());
  size_t total = 1 + VarintSize(structure.size()) + structure.size();
  for (const Tensor& t : leaves) {
    sizes.push_back(SizeOf(t));
    total += 1 + VarintSize(sizes.back().body) + sizes.back().body;
  }
  out->resize(total);
  char* p = out->data();
  p = PutBytes(p, kElementStructureTag, structure.data(), structure.size());
  for (size_t i = 0; i < leaves.size(); ++i) p = PutTensor(p, leaves[i], sizes[i]);
}

}  // namespace sluice
