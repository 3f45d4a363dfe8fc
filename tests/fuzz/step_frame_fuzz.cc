// Fuzz target: the data plane's frame decoder (core/rpc/step_frame.h), two ways per input:
//  - the bytes as a frame, split into two slices, through a decoder with a compact spec and one
//    without, and as a consumer message;
//  - a valid frame built from the bytes (1-3 steps of 1-2 pieces, each an int32 vector and a
//    string vector whose sizes and contents come from the input), encoded compact and full,
//    which must decode to what was encoded; then corrupted at an input-chosen byte or cut short.
// Every outcome must be a frame, DATA_LOSS, INVALID_ARGUMENT or RESOURCE_EXHAUSTED: nothing
// crashes, nothing allocates what a header merely claims.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/rpc/step_frame.h"
#include "grpcpp/support/slice.h"

namespace {

using sluice::DType;
using sluice::Shape;
using sluice::Tensor;

const std::shared_ptr<const sluice::CompactSpec>& Spec() {
  static const auto* const spec =
      new std::shared_ptr<const sluice::CompactSpec>(std::make_shared<const sluice::CompactSpec>(
          sluice::CompactSpec::FromElementSpec(sluice::ElementSpec::Tuple(
              {sluice::ElementSpec(sluice::TensorSpec{DType::kInt32, Shape({sluice::kUnknownDim})}),
               sluice::ElementSpec(
                   sluice::TensorSpec{DType::kString, Shape({sluice::kUnknownDim})})}))));
  return *spec;
}

grpc::ByteBuffer Buffer(const std::string& bytes, size_t split) {
  if (split == 0 || split >= bytes.size()) {
    grpc::Slice one(bytes.data(), bytes.size());
    return grpc::ByteBuffer(&one, 1);
  }
  grpc::Slice two[2] = {grpc::Slice(bytes.data(), split),
                        grpc::Slice(bytes.data() + split, bytes.size() - split)};
  return grpc::ByteBuffer(two, 2);
}

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) std::abort();
  std::string out;
  for (const grpc::Slice& s : slices)
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

void ExpectDecodeError(const absl::Status& s) {
  if (s.ok() || absl::IsDataLoss(s) || absl::IsInvalidArgument(s) || absl::IsResourceExhausted(s)) {
    return;
  }
  std::abort();
}

// Reads the input as a stream of bytes, zeros past its end.
class Bytes {
 public:
  Bytes(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t Next() { return at_ < size_ ? data_[at_++] : 0; }
  std::string Take(size_t n) {
    std::string out;
    while (n-- > 0) out.push_back(static_cast<char>(Next()));
    return out;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

sluice::StepFrame BuildFrame(Bytes* in) {
  sluice::StepFrame frame;
  const int steps = 1 + in->Next() % 3;
  for (int s = 0; s < steps; ++s) {
    sluice::WireStep step;
    step.task_step = s;
    step.global_step = in->Next() % 2 == 0 ? -1 : s;
    const int pieces = 1 + in->Next() % 2;
    step.num_real_pieces = pieces;
    for (int p = 0; p < pieces; ++p) {
      const int64_t n = in->Next() % 9;
      std::vector<int32_t> ints;
      for (int64_t i = 0; i < n; ++i) ints.push_back(static_cast<int32_t>(in->Next()) * 16777619);
      const int64_t m = in->Next() % 4;
      std::vector<std::string> strings;
      for (int64_t i = 0; i < m; ++i) strings.push_back(in->Take(in->Next() % 6));
      step.pieces.push_back(
          {Tensor::FromVector(ints), Tensor::FromStrings(std::move(strings), Shape({m}))});
    }
    frame.steps.push_back(std::move(step));
  }
  frame.end_of_task = in->Next() % 2 == 0;
  return frame;
}

bool SameTensors(const sluice::StepFrame& a, const sluice::StepFrame& b) {
  if (a.steps.size() != b.steps.size() || a.end_of_task != b.end_of_task) return false;
  for (size_t s = 0; s < a.steps.size(); ++s) {
    const auto& pa = a.steps[s].pieces;
    const auto& pb = b.steps[s].pieces;
    if (pa.size() != pb.size() || a.steps[s].task_step != b.steps[s].task_step ||
        a.steps[s].global_step != b.steps[s].global_step) {
      return false;
    }
    for (size_t p = 0; p < pa.size(); ++p) {
      if (pa[p].size() != pb[p].size()) return false;
      for (size_t t = 0; t < pa[p].size(); ++t) {
        const Tensor& x = pa[p][t];
        const Tensor& y = pb[p][t];
        if (x.dtype() != y.dtype() || x.shape() != y.shape()) return false;
        if (x.dtype() == DType::kString) {
          for (int64_t e = 0; e < x.num_elements(); ++e) {
            if (x.string_at(e) != y.string_at(e)) return false;
          }
        } else if (x.byte_size() > 0 &&
                   std::memcmp(x.raw_data(), y.raw_data(), x.byte_size()) != 0) {
          return false;
        }
      }
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  sluice::StepFrameDecoder full(nullptr, nullptr);
  sluice::StepFrameDecoder compact(nullptr, Spec());
  sluice::StepFrame out;
  ExpectDecodeError(full.Decode(Buffer(bytes, size / 3), &out));
  ExpectDecodeError(compact.Decode(Buffer(bytes, size / 2), &out));
  sluice::proto::ConsumerMessage message;
  ExpectDecodeError(sluice::DecodeConsumerMessage(Buffer(bytes, size / 4), &message));

  Bytes in(data, size);
  const sluice::StepFrame frame = BuildFrame(&in);
  const uint8_t flip = in.Next() | 1;
  const size_t where = static_cast<size_t>(in.Next()) << 8 | in.Next();
  for (bool use_spec : {true, false}) {
    sluice::StepFrameEncoder encoder(use_spec ? Spec() : nullptr);
    grpc::ByteBuffer encoded;
    if (!encoder.Encode(frame, &encoded).ok()) std::abort();
    sluice::StepFrameDecoder& decoder = use_spec ? compact : full;
    if (!decoder.Decode(encoded, &out).ok() || !SameTensors(frame, out)) std::abort();
    std::string wire = Flatten(encoded);
    const size_t at = where % wire.size();
    ExpectDecodeError(decoder.Decode(Buffer(wire.substr(0, at), at / 2), &out));
    wire[at] = static_cast<char>(wire[at] ^ flip);
    ExpectDecodeError(decoder.Decode(Buffer(wire, at), &out));
  }
  return 0;
}
