#include "core/rpc/step_frame.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

class UninitializedHostBuffer : public TensorBuffer {
 public:
  explicit UninitializedHostBuffer(size_t bytes)
      : size_(bytes),
        data_(std::aligned_alloc(kAlignment, RoundUp(bytes == 0 ? 1 : bytes))) {}
  ~UninitializedHostBuffer() override { std::free(data_); }
  void* data() override { return data_; }
  size_t size() const override { return size_; }
  bool ok() const { return data_ != nullptr; }

 private:
  static size_t RoundUp(size_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }
  size_t size_;
  void* data_;
};

void PutFixed32(std::string* out, uint32_t v) {
  char b[4] = {static_cast<char>(v & 0xff), static_cast<char>((v >> 8) & 0xff),
               static_cast<char>((v >> 16) & 0xff), static_cast<char>((v >> 24) & 0xff)};
  out->append(b, 4);
}

void DeleteString(void* p) { delete static_cast<std::string*>(p); }
void DeleteBufferRef(void* p) { delete static_cast<std::shared_ptr<TensorBuffer>*>(p); }

// Collects the frame's slices: copied bytes accumulate in `pending_` and become one slice
// before each zero-copy slice and at the end.
class SliceBuilder {
 public:
  std::string* pending() { return &pending_; }
  void AddZeroCopy(const Tensor& t) {
    Flush();
    auto* ref = new std::shared_ptr<TensorBuffer>(t.buffer());
    void* data = const_cast<void*>(t.raw_data());
    slices_.emplace_back(data, t.byte_size(), &DeleteBufferRef, ref);
  }
  void Flush() {
    if (pending_.empty()) return;
    auto* s = new std::string(std::move(pending_));
    pending_ = std::string();
    slices_.emplace_back(s->data(), s->size(), &DeleteString, s);
  }
  std::vector<grpc::Slice>* slices() { return &slices_; }

 private:
  std::string pending_;
  std::vector<grpc::Slice> slices_;
};

// Reads the received slices as one byte stream.
class SliceReader {
 public:
  explicit SliceReader(std::vector<grpc::Slice> slices) : slices_(std::move(slices)) {
    for (const grpc::Slice& s : slices_) remaining_ += s.size();
  }
  size_t remaining() const { return remaining_; }

  // Requires n <= remaining().
  void Read(void* dst, size_t n) {
    char* out = static_cast<char*>(dst);
    while (n > 0) {
      const grpc::Slice& s = slices_[index_];
      size_t take = std::min(n, s.size() - offset_);
      std::memcpy(out, s.begin() + offset_, take);
      out += take;
      n -= take;
      Advance(take);
    }
  }
  // A pointer to the next n bytes when they lie in one slice, else nullptr. Does not advance.
  const uint8_t* Peek(size_t n) {
    SkipEmpty();
    if (index_ >= slices_.size()) return n == 0 ? reinterpret_cast<const uint8_t*>("") : nullptr;
    const grpc::Slice& s = slices_[index_];
    if (s.size() - offset_ < n) return nullptr;
    return s.begin() + offset_;
  }
  void Skip(size_t n) {
    while (n > 0) {
      size_t take = std::min(n, slices_[index_].size() - offset_);
      n -= take;
      Advance(take);
    }
  }

 private:
  void Advance(size_t n) {
    offset_ += n;
    remaining_ -= n;
    SkipEmpty();
  }
  void SkipEmpty() {
    while (index_ < slices_.size() && offset_ == slices_[index_].size()) {
      ++index_;
      offset_ = 0;
    }
  }

  std::vector<grpc::Slice> slices_;
  size_t index_ = 0;
  size_t offset_ = 0;
  size_t remaining_ = 0;
};

// Reads [fixed32 L][L bytes] and parses the L bytes into `message`.
absl::Status ReadHeader(SliceReader* reader, google::protobuf::MessageLite* message,
                        const char* what) {
  if (reader->remaining() < 4) {
    return absl::DataLossError(absl::StrCat(what, ": ", reader->remaining(),
                                            " byte(s), shorter than the 4-byte length prefix"));
  }
  uint8_t b[4];
  reader->Read(b, 4);
  const uint32_t len = uint32_t{b[0]} | (uint32_t{b[1]} << 8) | (uint32_t{b[2]} << 16) |
                       (uint32_t{b[3]} << 24);
  if (len > reader->remaining()) {
    return absl::DataLossError(absl::StrCat(what, ": header length ", len, " exceeds the ",
                                            reader->remaining(), " byte(s) that follow"));
  }
  bool parsed;
  if (const uint8_t* p = reader->Peek(len)) {
    parsed = message->ParseFromArray(p, static_cast<int>(len));
    reader->Skip(len);
  } else {
    std::string copy(len, '\0');
    reader->Read(copy.data(), len);
    parsed = message->ParseFromString(copy);
  }
  if (!parsed) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": the ", len, "-byte header does not parse"));
  }
  return absl::OkStatus();
}

bool ValidDType(int d) {
  return d >= static_cast<int>(DType::kBool) && d <= static_cast<int>(DType::kString);
}

// Names a tensor of a frame in error messages; the text is built only for an error.
struct Where {
  int64_t step;
  int piece;
  int tensor;
};

// "step frame: step S piece P tensor T", for error messages.
std::string WhereText(const Where& w) {
  return absl::StrCat("step frame: step ", w.step, " piece ", w.piece, " tensor ", w.tensor);
}

// Checks one tensor header against itself; returns its element count.
absl::StatusOr<int64_t> CheckTensorHeader(const proto::TensorHeader& h, const Where& at) {
  auto where = [&at] { return WhereText(at); };
  if (!ValidDType(h.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat(where(), ": unknown dtype ", h.dtype()));
  }
  int64_t n = 1;
  for (int64_t d : h.shape()) {
    if (d < 0) {
      return absl::InvalidArgumentError(absl::StrCat(where(), ": negative dimension ", d));
    }
    if (__builtin_mul_overflow(n, d, &n) || n > (int64_t{1} << 48)) {
      return absl::InvalidArgumentError(absl::StrCat(where(), ": shape too large"));
    }
  }
  const DType dtype = static_cast<DType>(h.dtype());
  if (dtype == DType::kString) {
    if (h.string_lengths_size() != n) {
      return absl::InvalidArgumentError(absl::StrCat(where(), ": ", h.string_lengths_size(),
                                                     " string lengths for ", n, " elements"));
    }
    uint64_t sum = 0;
    for (uint64_t l : h.string_lengths()) {
      if (__builtin_add_overflow(sum, l, &sum)) {
        return absl::InvalidArgumentError(absl::StrCat(where(), ": string lengths overflow"));
      }
    }
    if (sum != h.byte_size()) {
      return absl::InvalidArgumentError(absl::StrCat(where(), ": string lengths sum to ", sum,
                                                     ", byte_size is ", h.byte_size()));
    }
  } else {
    const uint64_t want = static_cast<uint64_t>(n) * DTypeSize(dtype);
    if (h.byte_size() != want || h.string_lengths_size() != 0) {
      return absl::InvalidArgumentError(absl::StrCat(where(), ": byte_size ", h.byte_size(),
                                                     " does not match ", n, " x ",
                                                     DTypeName(dtype), " (", want, ")"));
    }
  }
  return n;
}

constexpr size_t RoundUpToAlignment(size_t n) {
  return (n + TensorBuffer::kAlignment - 1) / TensorBuffer::kAlignment * TensorBuffer::kAlignment;
}

// Reads one tensor: a numeric one into `frame_buffer` at `offset` (a view, no allocation), a
// string one into a tensor of its own.
absl::StatusOr<Tensor> ReadTensor(SliceReader* reader, const proto::TensorHeader& h, int64_t n,
                                  const std::shared_ptr<TensorBuffer>& frame_buffer,
                                  size_t offset) {
  const DType dtype = static_cast<DType>(h.dtype());
  Shape shape(std::vector<int64_t>(h.shape().begin(), h.shape().end()));
  if (dtype == DType::kString) {
    Tensor t = Tensor::Allocate(DType::kString, shape);
    for (int64_t i = 0; i < n; ++i) {
      std::string* s = t.mutable_string(i);
      s->resize(h.string_lengths(static_cast<int>(i)));
      reader->Read(s->data(), s->size());
    }
    return t;
  }
  if (h.byte_size() == 0) return Tensor::Allocate(dtype, shape);
  reader->Read(static_cast<char*>(frame_buffer->data()) + offset, h.byte_size());
  return Tensor::Wrap(dtype, shape, frame_buffer, offset);
}

}  // namespace

std::shared_ptr<TensorBuffer> AllocateUninitializedHost(size_t bytes) {
  auto b = std::make_shared<UninitializedHostBuffer>(bytes);
  if (!b->ok()) return nullptr;
  return b;
}

size_t StepPayloadBytes(const WireStep& step) {
  size_t n = 0;
  for (const auto& piece : step.pieces) {
    for (const Tensor& t : piece) n += t.payload_bytes();
  }
  return n;
}

size_t StepCreditBytes(const WireStep& step) {
  return StepPayloadBytes(step) + kStepCreditOverheadBytes;
}

int64_t CreditForAnyStep(int64_t window_bytes) {
  return std::max<int64_t>(window_bytes - window_bytes / 4, 1);
}

absl::Status EncodeStepFrame(const StepFrame& frame, grpc::ByteBuffer* out) {
  proto::StepFrameHeader header;
  header.set_end_of_task(frame.end_of_task);
  if (!frame.status.ok()) {
    header.set_error_code(static_cast<int32_t>(frame.status.code()));
    header.set_error_message(std::string(frame.status.message()));
  }
  for (const WireStep& step : frame.steps) {
    proto::StepHeader* sh = header.add_steps();
    sh->set_task_step(step.task_step);
    sh->set_global_step(step.global_step);
    sh->set_num_real_pieces(step.num_real_pieces);
    for (size_t p = 0; p < step.pieces.size(); ++p) {
      proto::PieceHeader* ph = sh->add_pieces();
      for (size_t i = 0; i < step.pieces[p].size(); ++i) {
        const Tensor& t = step.pieces[p][i];
        if (!t.valid()) {
          return absl::InvalidArgumentError(absl::StrCat("step ", step.task_step, " piece ", p,
                                                         " tensor ", i, ": invalid tensor"));
        }
        if (t.dtype() != DType::kString && t.buffer() != nullptr &&
            t.buffer()->space() == MemorySpace::kDevice) {
          return absl::InvalidArgumentError(absl::StrCat("step ", step.task_step, " piece ", p,
                                                         " tensor ", i,
                                                         ": device memory cannot be sent"));
        }
        proto::TensorHeader* th = ph->add_tensors();
        th->set_dtype(static_cast<proto::DataType>(t.dtype()));
        for (int64_t d : t.shape().dims()) th->add_shape(d);
        th->set_byte_size(t.payload_bytes());
        if (t.dtype() == DType::kString) {
          for (int64_t e = 0; e < t.num_elements(); ++e) {
            th->add_string_lengths(t.string_at(e).size());
          }
        }
      }
    }
  }
  const size_t header_size = header.ByteSizeLong();
  if (header_size > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError("step frame header exceeds 4 GiB");
  }
  SliceBuilder builder;
  std::string* pending = builder.pending();
  pending->reserve(4 + header_size);
  PutFixed32(pending, static_cast<uint32_t>(header_size));
  header.AppendToString(pending);
  for (const WireStep& step : frame.steps) {
    for (const auto& piece : step.pieces) {
      for (const Tensor& t : piece) {
        if (t.dtype() == DType::kString) {
          for (int64_t e = 0; e < t.num_elements(); ++e) pending->append(t.string_at(e));
        } else if (t.byte_size() >= kZeroCopyMinBytes) {
          builder.AddZeroCopy(t);
        } else if (t.byte_size() > 0) {
          pending->append(static_cast<const char*>(t.raw_data()), t.byte_size());
        }
      }
    }
  }
  builder.Flush();
  grpc::ByteBuffer bb(builder.slices()->data(), builder.slices()->size());
  out->Swap(&bb);
  return absl::OkStatus();
}

absl::Status DecodeStepFrame(const grpc::ByteBuffer& buffer, const TensorAllocator& allocator,
                             StepFrame* out) {
  std::vector<grpc::Slice> slices;
  if (buffer.Valid()) {
    grpc::Status dumped = buffer.Dump(&slices);
    if (!dumped.ok()) {
      return absl::DataLossError(absl::StrCat("step frame: ", dumped.error_message()));
    }
  }
  SliceReader reader(std::move(slices));
  proto::StepFrameHeader header;
  RETURN_IF_ERROR(ReadHeader(&reader, &header, "step frame"));

  // Validate everything and check the payload size before allocating anything, so that a
  // corrupt header cannot make us allocate what the frame does not carry. Numeric tensors get
  // 64-byte aligned offsets in one buffer for the whole frame.
  std::vector<int64_t> counts;
  std::vector<size_t> offsets;
  uint64_t payload = 0;
  size_t numeric = 0;
  for (int s = 0; s < header.steps_size(); ++s) {
    const proto::StepHeader& sh = header.steps(s);
    for (int p = 0; p < sh.pieces_size(); ++p) {
      for (int i = 0; i < sh.pieces(p).tensors_size(); ++i) {
        const proto::TensorHeader& th = sh.pieces(p).tensors(i);
        ASSIGN_OR_RETURN(int64_t n, CheckTensorHeader(th, Where{sh.task_step(), p, i}));
        counts.push_back(n);
        if (__builtin_add_overflow(payload, th.byte_size(), &payload)) {
          return absl::InvalidArgumentError("step frame: payload size overflows");
        }
        size_t offset = 0;
        if (th.dtype() != static_cast<int>(DType::kString) && th.byte_size() > 0) {
          offset = RoundUpToAlignment(numeric);
          numeric = offset + th.byte_size();
        }
        offsets.push_back(offset);
      }
    }
  }
  if (payload != reader.remaining()) {
    return absl::DataLossError(absl::StrCat("step frame: the header describes ", payload,
                                            " payload byte(s) but ", reader.remaining(),
                                            " follow"));
  }
  std::shared_ptr<TensorBuffer> frame_buffer;
  if (numeric > 0) {
    frame_buffer = allocator ? allocator(numeric) : AllocateUninitializedHost(numeric);
    if (frame_buffer == nullptr || frame_buffer->data() == nullptr ||
        frame_buffer->size() < numeric) {
      return absl::ResourceExhaustedError(
          absl::StrCat("step frame: cannot allocate ", numeric, " bytes"));
    }
  }

  out->steps.clear();
  out->end_of_task = header.end_of_task();
  out->status = header.error_code() == 0
                    ? absl::OkStatus()
                    : absl::Status(static_cast<absl::StatusCode>(header.error_code()),
                                   header.error_message());
  out->steps.reserve(header.steps_size());
  size_t next = 0;
  for (int s = 0; s < header.steps_size(); ++s) {
    const proto::StepHeader& sh = header.steps(s);
    WireStep step;
    step.task_step = sh.task_step();
    step.global_step = sh.global_step();
    step.num_real_pieces = sh.num_real_pieces();
    step.pieces.resize(sh.pieces_size());
    for (int p = 0; p < sh.pieces_size(); ++p) {
      const proto::PieceHeader& ph = sh.pieces(p);
      step.pieces[p].reserve(ph.tensors_size());
      for (int i = 0; i < ph.tensors_size(); ++i) {
        absl::StatusOr<Tensor> t =
            ReadTensor(&reader, ph.tensors(i), counts[next], frame_buffer, offsets[next]);
        ++next;
        if (!t.ok()) {
          return absl::Status(t.status().code(),
                              absl::StrCat(WhereText(Where{sh.task_step(), p, i}),
                                           ": ", t.status().message()));
        }
        step.pieces[p].push_back(*std::move(t));
      }
    }
    out->steps.push_back(std::move(step));
  }
  return absl::OkStatus();
}

grpc::ByteBuffer EncodeConsumerMessage(const proto::ConsumerMessage& message) {
  std::string bytes;
  PutFixed32(&bytes, static_cast<uint32_t>(message.ByteSizeLong()));
  message.AppendToString(&bytes);
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

absl::Status DecodeConsumerMessage(const grpc::ByteBuffer& buffer, proto::ConsumerMessage* out) {
  std::vector<grpc::Slice> slices;
  if (buffer.Valid()) {
    grpc::Status dumped = buffer.Dump(&slices);
    if (!dumped.ok()) {
      return absl::DataLossError(absl::StrCat("consumer message: ", dumped.error_message()));
    }
  }
  SliceReader reader(std::move(slices));
  RETURN_IF_ERROR(ReadHeader(&reader, out, "consumer message"));
  if (reader.remaining() != 0) {
    return absl::DataLossError(
        absl::StrCat("consumer message: ", reader.remaining(), " byte(s) left over"));
  }
  return absl::OkStatus();
}

}  // namespace sluice
