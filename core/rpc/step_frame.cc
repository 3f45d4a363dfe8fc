#include "core/rpc/step_frame.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <limits>
#include <map>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/rpc/bulk_channel.h"
#include "core/rpc/shared_step_payload.h"
#include "core/tensor/aligned_size.h"
#include "core/tensor/host_memory.h"
#include "core/tensor/uninitialized_tensor.h"
#include "core/util/aligned_memory.h"
#include "core/util/streaming_copy.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

void PutFixed32(std::string* out, uint32_t v) {
  char b[4] = {static_cast<char>(v & 0xff), static_cast<char>((v >> 8) & 0xff),
               static_cast<char>((v >> 16) & 0xff), static_cast<char>((v >> 24) & 0xff)};
  out->append(b, 4);
}

void DeleteBufferRef(void* p) { delete static_cast<std::shared_ptr<TensorBuffer>*>(p); }

// This thread's CPU time, for the codec's cost.
double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// The most raw bytes `codec` can make of `compressed` bytes: LZ4's block format expands a byte
// at most 255 times; a zstd block of at most 128 KiB takes at least 3 bytes. A header claiming
// more is refused before anything is allocated.
uint64_t MaxRawBytes(WireCompression codec, uint64_t compressed) {
  const uint64_t ratio = codec == WireCompression::kLz4 ? 256 : 43691;
  const uint64_t slack = codec == WireCompression::kLz4 ? 64 : (uint64_t{1} << 17);
  if (compressed > (std::numeric_limits<uint64_t>::max() - slack) / ratio) {
    return std::numeric_limits<uint64_t>::max();
  }
  return compressed * ratio + slack;
}

// One received gRPC slice that decoded tensors view (StepFrameDecoder's view_received_slices):
// holds a reference to the slice, so gRPC frees its memory only when the last tensor viewing
// it goes, and charges the slice's size to the process's memory budget meanwhile.
class ReceivedSliceBuffer : public TensorBuffer {
 public:
  // nullptr when the budget refuses the slice's size (the tensors are then copied).
  static std::shared_ptr<TensorBuffer> Create(const grpc::Slice& slice) {
    const int64_t charge = static_cast<int64_t>(slice.size());
    if (!ProcessMemoryBudget().TryCharge(charge)) return nullptr;
    return std::shared_ptr<TensorBuffer>(new ReceivedSliceBuffer(slice, charge));
  }
  ~ReceivedSliceBuffer() override { ProcessMemoryBudget().Release(charged_); }
  // gRPC hands received bytes out as const; they are this buffer's alone once received (see
  // step_frame.h), so a trainer may write its tensor's bytes.
  void* data() override { return const_cast<uint8_t*>(slice_.begin()); }
  size_t size() const override { return slice_.size(); }

 private:
  ReceivedSliceBuffer(const grpc::Slice& slice, int64_t charged)
      : slice_(slice), charged_(charged) {}
  const grpc::Slice slice_;
  const int64_t charged_;
};

}  // namespace

// Strings that hold a frame's copied bytes (header, small tensors) while gRPC sends them: a
// string comes back when gRPC releases its slice, keeping its capacity, so that a stream's
// steady state neither allocates nor faults in fresh pages per frame. Thread-safe (slices are
// released on gRPC's threads).
class SendBufferPool : public std::enable_shared_from_this<SendBufferPool> {
 public:
  // One string out with a slice; `pool` keeps the pool alive while it is (the pool itself
  // holds only idle strings, with `pool` empty, so there is no cycle).
  struct Buffer {
    std::shared_ptr<SendBufferPool> pool;
    std::string bytes;
  };

  Buffer* Take() {
    Buffer* b = nullptr;
    {
      absl::MutexLock lock(&mu_);
      if (!idle_.empty()) {
        b = idle_.back();
        idle_.pop_back();
      }
    }
    if (b == nullptr) b = new Buffer;
    b->pool = shared_from_this();
    b->bytes.clear();
    return b;
  }

  // The slice destroy callback.
  static void Release(void* p) {
    Buffer* b = static_cast<Buffer*>(p);
    std::shared_ptr<SendBufferPool> pool = std::move(b->pool);
    if (b->bytes.capacity() <= kMaxPooledCapacity) {
      absl::MutexLock lock(&pool->mu_);
      if (pool->idle_.size() < kMaxIdle) {
        pool->idle_.push_back(b);
        return;
      }
    }
    delete b;
  }

  ~SendBufferPool() {
    for (Buffer* b : idle_) delete b;
  }

 private:
  // Enough for the frames in flight of one stream; a frame larger than the cap (rare: large
  // tensors go zero-copy) is not kept.
  static constexpr size_t kMaxIdle = 8;
  static constexpr size_t kMaxPooledCapacity = size_t{4} << 20;

  absl::Mutex mu_;
  std::vector<Buffer*> idle_ ABSL_GUARDED_BY(mu_);
};

namespace {

// Collects the frame's slices: copied bytes accumulate in a pooled string and become one slice
// before each zero-copy slice and at the end.
class SliceBuilder {
 public:
  // `pool` must outlive the builder (its strings keep it alive once handed to slices).
  SliceBuilder(SendBufferPool* pool, std::vector<grpc::Slice>* slices)
      : pool_(pool), slices_(slices) {
    slices_->clear();
  }
  ~SliceBuilder() {
    if (pending_ != nullptr) SendBufferPool::Release(pending_);
  }
  // The string being filled; `reserve`: bytes it will take.
  std::string* pending(size_t reserve = 0) {
    if (pending_ == nullptr) {
      pending_ = pool_->Take();
      pending_->bytes.reserve(reserve);
    }
    return &pending_->bytes;
  }
  void AddZeroCopy(const Tensor& t) {
    Flush();
    auto* ref = new std::shared_ptr<TensorBuffer>(t.buffer());
    void* data = const_cast<void*>(t.raw_data());
    slices_->emplace_back(data, t.byte_size(), &DeleteBufferRef, ref);
  }
  // Slices encoded earlier (SharedStepPayload), after what is pending.
  void AddShared(const std::vector<grpc::Slice>& slices) {
    Flush();
    slices_->insert(slices_->end(), slices.begin(), slices.end());
  }
  void Flush() {
    if (pending_ == nullptr) return;
    SendBufferPool::Buffer* b = pending_;
    pending_ = nullptr;
    if (b->bytes.empty()) {
      SendBufferPool::Release(b);
      return;
    }
    slices_->emplace_back(b->bytes.data(), b->bytes.size(), &SendBufferPool::Release, b);
  }

 private:
  SendBufferPool* const pool_;
  std::vector<grpc::Slice>* const slices_;
  SendBufferPool::Buffer* pending_ = nullptr;
};

// Starts the frame in `builder`: [fixed32 L][`header`, whose cached size is `header_size`], in
// a pending buffer with room for `more` bytes after it. Returns that buffer.
std::string* PutHeader(const proto::StepFrameHeader& header, size_t header_size, size_t more,
                       SliceBuilder* builder) {
  std::string* pending = builder->pending(4 + header_size + more);
  PutFixed32(pending, static_cast<uint32_t>(header_size));
  const size_t at = pending->size();
  pending->resize(at + header_size);
  header.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(pending->data() + at));
  return pending;
}

// Adds the payload of `num_pieces` pieces to `builder` in header order: strings and small
// numeric tensors copied, larger numeric ones zero-copy; with `numeric_elsewhere` (in a
// shared-memory region) the strings only.
void AppendPayload(const std::vector<Tensor>* pieces, size_t num_pieces, bool numeric_elsewhere,
                   SliceBuilder* builder) {
  for (size_t p = 0; p < num_pieces; ++p) {
    for (const Tensor& t : pieces[p]) {
      if (t.dtype() == DType::kString) {
        for (int64_t e = 0; e < t.num_elements(); ++e) {
          builder->pending()->append(t.string_at(e));
        }
      } else if (numeric_elsewhere) {
        continue;  // in the shared region
      } else if (t.byte_size() >= kZeroCopyMinBytes) {
        builder->AddZeroCopy(t);
      } else if (t.byte_size() > 0) {
        builder->pending()->append(static_cast<const char*>(t.raw_data()), t.byte_size());
      }
    }
  }
}

// The buffers SharedStepPayload's copies live in (one pool for the process: a step's copy
// comes back when its last slice goes, for the next step's).
SendBufferPool* SharedPayloadPool() {
  static auto* pool = new std::shared_ptr<SendBufferPool>(std::make_shared<SendBufferPool>());
  return pool->get();
}

}  // namespace

namespace step_frame_internal {

size_t EncodePayloadSlices(const std::vector<Tensor>* pieces, size_t num_pieces,
                           bool strings_only, std::vector<grpc::Slice>* out) {
  size_t copied = 0;
  for (size_t p = 0; p < num_pieces; ++p) {
    for (const Tensor& t : pieces[p]) {
      if (t.dtype() == DType::kString ||
          (!strings_only && t.byte_size() < kZeroCopyMinBytes)) {
        copied += t.payload_bytes();
      }
    }
  }
  SliceBuilder builder(SharedPayloadPool(), out);
  if (copied > 0) builder.pending(copied);
  AppendPayload(pieces, num_pieces, strings_only, &builder);
  builder.Flush();
  return copied;
}

// Reads the received slices as one byte stream.
class SliceReader {
 public:
  explicit SliceReader(std::vector<grpc::Slice> slices) : slices_(std::move(slices)) {
    for (const grpc::Slice& s : slices_) remaining_ += s.size();
  }
  size_t remaining() const { return remaining_; }
  // Hands back the slices' vector, cleared (its capacity kept for the next frame).
  std::vector<grpc::Slice> TakeSlices() {
    slices_.clear();
    return std::move(slices_);
  }

  // Where the reader is: Seek(position()) returns to it.
  struct Position {
    size_t index;
    size_t offset;
    size_t remaining;
  };
  Position position() const { return Position{index_, offset_, remaining_}; }
  void Seek(const Position& p) {
    index_ = p.index;
    offset_ = p.offset;
    remaining_ = p.remaining;
  }
  // After a successful Peek: the slice the bytes lie in, and their offset in it.
  size_t slice_index() const { return index_; }
  size_t slice_offset() const { return offset_; }
  const grpc::Slice& slice(size_t i) const { return slices_[i]; }
  size_t num_slices() const { return slices_.size(); }

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

}  // namespace step_frame_internal

namespace {

using step_frame_internal::SliceReader;

// Reads [fixed32 L][L bytes] and parses the L bytes into `message` (which parsing clears).
absl::Status ReadHeader(SliceReader* reader, google::protobuf::MessageLite* message,
                        const char* what, std::string* copy) {
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
    copy->resize(len);
    reader->Read(copy->data(), len);
    parsed = message->ParseFromArray(copy->data(), static_cast<int>(len));
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
  int64_t piece;
  int64_t tensor;
};

// "step frame: step S piece P tensor T", for error messages.
std::string WhereText(const Where& w) {
  return absl::StrCat("step frame: step ", w.step, " piece ", w.piece, " tensor ", w.tensor);
}

constexpr int64_t kMaxElements = int64_t{1} << 48;
// A compact header names its pieces by count alone: bounded so that a corrupt count cannot
// make the decoder describe more tensors than any consumer has replicas.
constexpr int64_t kMaxCompactPiecesPerStep = int64_t{1} << 16;
constexpr int64_t kMaxCompactPiecesPerFrame = int64_t{1} << 20;

// Writes the header of `steps` in the full form into `header` (cleared).
absl::Status FillFullHeader(absl::Span<const WireStepView> steps, proto::StepFrameHeader* header) {
  for (const WireStepView& step : steps) {
    proto::StepHeader* sh = header->add_steps();
    sh->set_task_step(step.task_step);
    sh->set_global_step(step.global_step);
    sh->set_num_real_pieces(step.num_real_pieces);
    for (size_t p = 0; p < step.num_pieces; ++p) {
      const std::vector<Tensor>& piece = step.pieces[p];
      proto::PieceHeader* ph = sh->add_pieces();
      for (size_t i = 0; i < piece.size(); ++i) {
        const Tensor& t = piece[i];
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
  return absl::OkStatus();
}

// Writes the compact form; requires every piece to match `spec`.
void FillCompactHeader(absl::Span<const WireStepView> steps, const CompactSpec& spec,
                       proto::StepFrameHeader* header) {
  header->set_compact_steps(static_cast<uint32_t>(steps.size()));
  google::protobuf::RepeatedField<int64_t>* v = header->mutable_compact_values();
  for (const WireStepView& step : steps) {
    v->Add(step.task_step);
    v->Add(step.global_step);
    v->Add(step.num_real_pieces);
    v->Add(static_cast<int64_t>(step.num_pieces));
    for (size_t p = 0; p < step.num_pieces; ++p) {
      const std::vector<Tensor>& piece = step.pieces[p];
      for (size_t i = 0; i < piece.size(); ++i) {
        const Tensor& t = piece[i];
        const Shape& want = spec.leaves()[i].shape;
        for (int d = 0; d < want.rank(); ++d) {
          if (want.dim(d) < 0) v->Add(t.shape().dim(d));
        }
        if (t.dtype() == DType::kString) {
          for (int64_t e = 0; e < t.num_elements(); ++e) {
            v->Add(static_cast<int64_t>(t.string_at(e).size()));
          }
        }
      }
    }
  }
}

}  // namespace

std::shared_ptr<TensorBuffer> AllocateUninitializedHost(size_t bytes) {
  // The refusal's message is the decoder's to write (TensorAllocator): RESOURCE_EXHAUSTED.
  absl::StatusOr<std::shared_ptr<TensorBuffer>> buffer =
      TryAllocateUninitializedBuffer(bytes, "step frame", "a frame's tensors");
  return buffer.ok() ? *std::move(buffer) : nullptr;
}

namespace {

// Idle host buffers by size class; see PooledHostAllocator.
class HostPool : public std::enable_shared_from_this<HostPool> {
 public:
  HostPool(size_t max_idle_bytes, size_t max_total_bytes)
      : max_idle_bytes_(max_idle_bytes), max_total_bytes_(max_total_bytes) {}
  ~HostPool() {
    for (auto& [size_class, buffers] : idle_) {
      for (void* p : buffers) FreeAligned(p);
    }
  }

  // nullptr when the process's memory budget or the system refuses (decoding then fails with
  // RESOURCE_EXHAUSTED); a buffer handed out is charged to the budget until it comes back.
  std::shared_ptr<TensorBuffer> Allocate(size_t bytes) {
    size_t size_class = 4096;
    while (size_class < bytes) {
      if (size_class > (size_t{1} << 62)) return nullptr;
      size_class *= 2;
    }
    if (!ProcessMemoryBudget().TryCharge(static_cast<int64_t>(size_class))) {
      return nullptr;
    }
    void* data = nullptr;
    {
      absl::MutexLock lock(&mu_);
      auto it = idle_.find(size_class);
      if (it != idle_.end() && !it->second.empty()) {
        data = it->second.back();
        it->second.pop_back();
        idle_bytes_ -= size_class;
      }
      held_bytes_ += size_class;  // one lock per allocation: undone below if the system refuses
    }
    if (data == nullptr) data = AllocateAligned(TensorBuffer::kAlignment, size_class);
    if (data == nullptr) {
      {
        absl::MutexLock lock(&mu_);
        held_bytes_ -= size_class;
      }
      ProcessMemoryBudget().Release(static_cast<int64_t>(size_class));
      return nullptr;
    }
    return std::make_shared<Buffer>(shared_from_this(), data, bytes, size_class);
  }

 private:
  class Buffer : public TensorBuffer {
   public:
    Buffer(std::shared_ptr<HostPool> pool, void* data, size_t size, size_t size_class)
        : pool_(std::move(pool)), data_(data), size_(size), size_class_(size_class) {}
    ~Buffer() override {
      pool_->Release(data_, size_class_);
      ProcessMemoryBudget().Release(static_cast<int64_t>(size_class_));
    }
    void* data() override { return data_; }
    size_t size() const override { return size_; }

   private:
    const std::shared_ptr<HostPool> pool_;
    void* const data_;
    const size_t size_;
    const size_t size_class_;
  };

  // Keeps the buffer when the idle ones stay within max_idle_bytes_, or when they and the ones
  // out stay within max_total_bytes_ (sizes held and idle are size classes, so no sum of them
  // overflows: each was allocated).
  void Release(void* data, size_t size_class) {
    {
      absl::MutexLock lock(&mu_);
      held_bytes_ -= size_class;
      if (idle_bytes_ + size_class <= max_idle_bytes_ ||
          held_bytes_ + idle_bytes_ + size_class <= max_total_bytes_) {
        idle_[size_class].push_back(data);
        idle_bytes_ += size_class;
        return;
      }
    }
    FreeAligned(data);
  }

  const size_t max_idle_bytes_;
  const size_t max_total_bytes_;
  absl::Mutex mu_;
  std::map<size_t, std::vector<void*>> idle_ ABSL_GUARDED_BY(mu_);
  size_t idle_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  size_t held_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // handed out and not yet released
};

}  // namespace

TensorAllocator PooledHostAllocator(size_t max_idle_bytes, size_t max_total_bytes) {
  auto pool = std::make_shared<HostPool>(max_idle_bytes, max_total_bytes);
  return [pool](size_t bytes) { return pool->Allocate(bytes); };
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

// ---- CompactSpec ----

CompactSpec CompactSpec::FromElementSpec(const ElementSpec& spec) {
  return CompactSpec(spec.Flatten());
}

absl::StatusOr<CompactSpec> CompactSpec::FromProto(
    const google::protobuf::RepeatedPtrField<proto::TensorSpecProto>& leaves) {
  std::vector<TensorSpec> out;
  out.reserve(leaves.size());
  for (int i = 0; i < leaves.size(); ++i) {
    const proto::TensorSpecProto& l = leaves.Get(i);
    if (!ValidDType(l.dtype())) {
      return absl::InvalidArgumentError(
          absl::StrCat("compact spec: leaf ", i, " has unknown dtype ", l.dtype()));
    }
    for (int64_t d : l.shape()) {
      if (d < -1) {
        return absl::InvalidArgumentError(
            absl::StrCat("compact spec: leaf ", i, " has dimension ", d, " (below -1)"));
      }
    }
    out.push_back(TensorSpec{static_cast<DType>(l.dtype()),
                             Shape(std::vector<int64_t>(l.shape().begin(), l.shape().end()))});
  }
  return CompactSpec(std::move(out));
}

void CompactSpec::ToProto(google::protobuf::RepeatedPtrField<proto::TensorSpecProto>* out) const {
  out->Clear();
  for (const TensorSpec& l : leaves_) {
    proto::TensorSpecProto* p = out->Add();
    p->set_dtype(static_cast<proto::DataType>(l.dtype));
    for (int64_t d : l.shape.dims()) p->add_shape(d);
  }
}

bool CompactSpec::Matches(const std::vector<Tensor>& piece) const {
  if (piece.size() != leaves_.size()) return false;
  for (size_t i = 0; i < piece.size(); ++i) {
    if (!leaves_[i].IsCompatibleWith(piece[i])) return false;
  }
  return true;
}

// ---- StepFrameEncoder ----

namespace {

// Calls fn(tensor, end) for each numeric tensor of `steps` with bytes, in header order, `end`
// being where it ends in the frame buffer the decoder lays out (StepFrameDecoder::Scratch::Add:
// each tensor at the next 64-byte aligned offset). The last `end` is the buffer's extent.
template <typename Fn>
void ForEachNumeric(absl::Span<const WireStepView> steps, Fn fn) {
  size_t extent = 0;
  for (const WireStepView& step : steps) {
    for (size_t p = 0; p < step.num_pieces; ++p) {
      for (const Tensor& t : step.pieces[p]) {
        if (t.dtype() == DType::kString || t.byte_size() == 0) continue;
        extent = AlignedSize(extent) + t.byte_size();
        fn(t, extent);
      }
    }
  }
}

}  // namespace

bool StepFrameEncoder::AllMatch(absl::Span<const WireStepView> steps) const {
  for (const WireStepView& step : steps) {
    for (size_t p = 0; p < step.num_pieces; ++p) {
      if (!spec_->Matches(step.pieces[p])) return false;
    }
  }
  return true;
}

absl::Status StepFrameEncoder::Encode(const StepFrame& frame, grpc::ByteBuffer* out) {
  views_.clear();
  for (const WireStep& step : frame.steps) {
    views_.push_back(WireStepView{step.task_step, step.global_step, step.num_real_pieces,
                                  step.pieces.data(), step.pieces.size()});
  }
  return Encode(views_, frame.end_of_task, frame.status, out);
}

absl::Status StepFrameEncoder::Encode(absl::Span<const WireStepView> steps, bool end_of_task,
                                      const absl::Status& status, grpc::ByteBuffer* out) {
  // Check every tensor first: the header's forms may then assume valid host tensors.
  for (const WireStepView& step : steps) {
    for (size_t p = 0; p < step.num_pieces; ++p) {
      const std::vector<Tensor>& piece = step.pieces[p];
      for (size_t i = 0; i < piece.size(); ++i) {
        const Tensor& t = piece[i];
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
      }
    }
  }
  header_.Clear();  // keeps its repeated fields' memory for the next frame
  header_.set_end_of_task(end_of_task);
  if (!status.ok()) {
    header_.set_error_code(static_cast<int32_t>(status.code()));
    header_.set_error_message(std::string(status.message()));
  }
  last_compact_ = spec_ != nullptr && !steps.empty() && AllMatch(steps);
  if (last_compact_) {
    FillCompactHeader(steps, *spec_, &header_);
  } else {
    RETURN_IF_ERROR(FillFullHeader(steps, &header_));
  }
  if (accept_.has_value()) {
    *header_.mutable_shm_accept() = *std::move(accept_);
    accept_.reset();
  }
  // A job segment: a frame of one step written there once for every co-located consumer is
  // its header alone.
  last_job_placed_ = job_sink_ != nullptr && compression_ == WireCompression::kNone &&
                     steps.size() == 1 && steps[0].shared_payload != nullptr && status.ok() &&
                     job_sink_->Place(steps[0], header_.mutable_job_shm_payload());
  if (last_job_placed_) {
    last_in_place_ = false;
    last_shared_bytes_ = static_cast<size_t>(header_.job_shm_payload().bytes());
    return EncodeHeaderOnly(out);
  }
  header_.clear_job_shm_payload();
  // Shared memory: the numeric tensors go to the sink's region when it has room; else, on the
  // bulk data channel, to its socket when it takes them. Either way their layout first: each
  // at its 64-byte aligned offset (InPlace's and Take's arguments), `extent` bytes in all.
  uint8_t* shared = nullptr;
  size_t extent = 0;
  const bool bulk_wanted =
      sink_ == nullptr && bulk_sink_ != nullptr && compression_ == WireCompression::kNone;
  if (sink_ != nullptr || bulk_wanted) {
    shared_tensors_.clear();
    shared_at_.clear();
    ForEachNumeric(steps, [&](const Tensor& t, size_t end) {
      shared_tensors_.push_back(&t);
      shared_at_.push_back(end - t.byte_size());
      extent = end;
    });
  }
  // A frame built in the sink already (worker/step_placement.h) is sent as its header alone.
  last_in_place_ = false;
  if (sink_ != nullptr) {
    if (extent > 0) {
      last_in_place_ =
          sink_->InPlace(shared_tensors_, shared_at_, extent, header_.mutable_shm_payload());
      if (!last_in_place_) shared = sink_->Reserve(extent, header_.mutable_shm_payload());
    }
    if (shared == nullptr && !last_in_place_) header_.clear_shm_payload();
  }
  if (bulk_accept_.has_value()) {
    *header_.mutable_bulk_accept() = *std::move(bulk_accept_);
    bulk_accept_.reset();
  }
  const bool bulk =
      bulk_wanted && extent > 0 && bulk_sink_->Take(shared_tensors_, shared_at_, extent);
  if (bulk) header_.mutable_bulk_payload()->set_bytes(extent);
  // The numeric bytes are in the sink (copied there below, or there already) or on the
  // bulk channel.
  const bool in_sink = shared != nullptr || last_in_place_ || bulk;
  last_shared_bytes_ = in_sink ? extent : 0;
  const size_t header_size = header_.ByteSizeLong();
  if (header_size > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError("step frame header exceeds 4 GiB");
  }
  size_t inline_bytes = 0;
  for (const WireStepView& step : steps) {
    if (step.shared_payload != nullptr) continue;  // its own slices
    for (size_t p = 0; p < step.num_pieces; ++p) {
      for (const Tensor& t : step.pieces[p]) {
        if (t.dtype() == DType::kString ||
            (!in_sink && t.byte_size() < kZeroCopyMinBytes)) {
          inline_bytes += t.payload_bytes();
        }
      }
    }
  }
  if (send_pool_ == nullptr) send_pool_ = std::make_shared<SendBufferPool>();
  if (compression_ != WireCompression::kNone && !in_sink) {  // never both
    bool sent = false;
    RETURN_IF_ERROR(EncodeCompressed(steps, out, &sent));
    if (sent) return absl::OkStatus();
  }
  SliceBuilder builder(send_pool_.get(), &slices_);
  PutHeader(header_, header_size, inline_bytes, &builder);
  if (shared != nullptr) {
    ForEachNumeric(steps, [&](const Tensor& t, size_t end) {
      StreamingCopy(shared + (end - t.byte_size()), t.raw_data(), t.byte_size());
    });
  }
  for (const WireStepView& step : steps) {
    if (step.shared_payload != nullptr) {
      // Encoded once for every stream sending the step: references, no copy.
      builder.AddShared(step.shared_payload->Slices(
          in_sink ? SharedStepPayload::Form::kStringsOnly : SharedStepPayload::Form::kWhole,
          step.pieces, step.num_pieces));
    } else {
      AppendPayload(step.pieces, step.num_pieces, in_sink, &builder);
    }
  }
  builder.Flush();
  grpc::ByteBuffer bb(slices_.data(), slices_.size());
  slices_.clear();
  out->Swap(&bb);
  return absl::OkStatus();
}

absl::Status StepFrameEncoder::EncodeHeaderOnly(grpc::ByteBuffer* out) {
  const size_t header_size = header_.ByteSizeLong();
  if (send_pool_ == nullptr) send_pool_ = std::make_shared<SendBufferPool>();
  SliceBuilder builder(send_pool_.get(), &slices_);
  PutHeader(header_, header_size, /*more=*/0, &builder);
  builder.Flush();
  grpc::ByteBuffer bb(slices_.data(), slices_.size());
  slices_.clear();
  out->Swap(&bb);
  return absl::OkStatus();
}

absl::Status StepFrameEncoder::EncodeCompressed(absl::Span<const WireStepView> steps,
                                                grpc::ByteBuffer* out, bool* sent) {
  parts_.clear();
  size_t raw = 0;
  for (const WireStepView& step : steps) {
    for (size_t p = 0; p < step.num_pieces; ++p) {
      for (const Tensor& t : step.pieces[p]) {
        if (t.dtype() == DType::kString) {
          for (int64_t e = 0; e < t.num_elements(); ++e) {
            if (!t.string_at(e).empty()) parts_.push_back(t.string_at(e));
          }
        } else if (t.byte_size() > 0) {
          parts_.emplace_back(static_cast<const char*>(t.raw_data()), t.byte_size());
        }
        raw += t.payload_bytes();
      }
    }
  }
  // The payload compressed into a pooled string; sent only when it shrank enough.
  SendBufferPool::Buffer* compressed = nullptr;
  if (raw > 0) {
    compressed = send_pool_->Take();
    const double cpu_start = ThreadCpuSeconds();
    absl::Status s = CompressPayload(compression_, parts_, &compressed->bytes);
    const double cpu = ThreadCpuSeconds() - cpu_start;
    compression_stats_.cpu_seconds += cpu;
    // Counted whether it is sent compressed or not: the CPU was spent either way.
    CountCompression(s.ok() && compressed->bytes.size() <= raw - raw / 16
                         ? compressed->bytes.size()
                         : raw,
                     raw, cpu);
    // Sent compressed only when it saves at least 1/16 of the bytes: below that the
    // consumer's decompression costs more than the wire saves (bench/RESULTS.md, issue 28).
    if (!s.ok() || compressed->bytes.size() > raw - raw / 16) {
      SendBufferPool::Release(compressed);
      compressed = nullptr;
      if (!s.ok() && s.code() != absl::StatusCode::kInvalidArgument) return s;
    }
  }
  compression_stats_.raw_bytes += raw;
  if (compressed == nullptr) {  // the caller sends the frame raw
    ++compression_stats_.frames_raw;
    compression_stats_.sent_bytes += raw;
    *sent = false;
    return absl::OkStatus();
  }
  ++compression_stats_.frames_compressed;
  compression_stats_.sent_bytes += compressed->bytes.size();
  header_.set_compression(ToProto(compression_));
  header_.set_compressed_bytes(compressed->bytes.size());
  header_.set_raw_payload_bytes(raw);
  const size_t header_size = header_.ByteSizeLong();
  SliceBuilder builder(send_pool_.get(), &slices_);
  PutHeader(header_, header_size, /*more=*/0, &builder);
  builder.Flush();
  slices_.emplace_back(compressed->bytes.data(), compressed->bytes.size(),
                       &SendBufferPool::Release, compressed);
  grpc::ByteBuffer bb(slices_.data(), slices_.size());
  slices_.clear();
  out->Swap(&bb);
  *sent = true;
  return absl::OkStatus();
}

absl::Status EncodeStepFrame(const StepFrame& frame, grpc::ByteBuffer* out) {
  StepFrameEncoder encoder;
  return encoder.Encode(frame, out);
}

// ---- StepFrameDecoder ----

// What the decoder keeps between frames: the parsed header and the frame's description, in
// vectors whose capacity stays.
struct StepFrameDecoder::Scratch {
  // One tensor of the frame, described by either header form.
  struct TensorDesc {
    DType dtype;
    uint32_t dims_begin;  // into dims
    uint32_t rank;
    int64_t elements;
    uint64_t byte_size;
    uint32_t lengths_begin;  // into lengths (strings)
    size_t offset;           // in the frame buffer (numeric, byte_size > 0, copied)
    // A view (PlanViews): the received slice it lies in (into slice_buffers) and its offset
    // there; -1: copied into the frame buffer.
    int64_t view_slice = -1;
    size_t view_offset = 0;
  };
  struct StepDesc {
    int64_t task_step;
    int64_t global_step;
    int64_t num_real_pieces;
    uint32_t pieces_begin;  // into piece_sizes
    uint32_t num_pieces;
  };

  void Clear() {
    tensors.clear();
    steps.clear();
    piece_sizes.clear();
    dims.clear();
    lengths.clear();
    payload = 0;
    numeric = 0;
    strings = 0;
  }
  // Adds one tensor after its dims and lengths were appended; checks the payload fits
  // `available` so that a corrupt header cannot make the decoder describe (or later
  // allocate) what the frame does not carry.
  absl::Status Add(DType dtype, uint32_t dims_begin, int64_t elements, uint64_t byte_size,
                   uint32_t lengths_begin, size_t available) {
    if (__builtin_add_overflow(payload, byte_size, &payload) || payload > available) {
      return absl::DataLossError(absl::StrCat("step frame: the header describes more than the ",
                                              available, " payload byte(s) that follow"));
    }
    size_t offset = 0;
    if (dtype != DType::kString && byte_size > 0) {
      offset = AlignedSize(numeric);
      numeric = offset + byte_size;
    } else if (dtype == DType::kString) {
      strings += byte_size;
    }
    tensors.push_back(TensorDesc{dtype, dims_begin,
                                 static_cast<uint32_t>(dims.size() - dims_begin), elements,
                                 byte_size, lengths_begin, offset});
    return absl::OkStatus();
  }

  proto::StepFrameHeader header;
  std::string header_copy;  // a header split across slices
  std::string compressed_copy;  // a compressed payload split across slices
  std::vector<grpc::Slice> slices;
  // Per received slice of the frame being decoded, the buffer its views share (null: none
  // yet); emptied after each frame, so that only the decoded tensors keep slices alive.
  std::vector<std::shared_ptr<TensorBuffer>> slice_buffers;
  std::vector<TensorDesc> tensors;
  std::vector<StepDesc> steps;
  std::vector<uint32_t> piece_sizes;  // tensors per piece
  std::vector<int64_t> dims;
  std::vector<uint64_t> lengths;
  uint64_t payload = 0;
  size_t numeric = 0;
  uint64_t strings = 0;  // of payload, the string tensors' bytes
};

namespace {

using Scratch = StepFrameDecoder::Scratch;

// Describes the full form's tensors.
absl::Status DescribeFull(const proto::StepFrameHeader& header, size_t available, Scratch* x) {
  for (const proto::StepHeader& sh : header.steps()) {
    x->steps.push_back(Scratch::StepDesc{sh.task_step(), sh.global_step(), sh.num_real_pieces(),
                                         static_cast<uint32_t>(x->piece_sizes.size()),
                                         static_cast<uint32_t>(sh.pieces_size())});
    for (int p = 0; p < sh.pieces_size(); ++p) {
      const proto::PieceHeader& ph = sh.pieces(p);
      x->piece_sizes.push_back(static_cast<uint32_t>(ph.tensors_size()));
      for (int i = 0; i < ph.tensors_size(); ++i) {
        const proto::TensorHeader& h = ph.tensors(i);
        const Where at{sh.task_step(), p, i};
        if (!ValidDType(h.dtype())) {
          return absl::InvalidArgumentError(
              absl::StrCat(WhereText(at), ": unknown dtype ", h.dtype()));
        }
        const uint32_t dims_begin = static_cast<uint32_t>(x->dims.size());
        int64_t n = 1;
        for (int64_t d : h.shape()) {
          if (d < 0) {
            return absl::InvalidArgumentError(
                absl::StrCat(WhereText(at), ": negative dimension ", d));
          }
          if (__builtin_mul_overflow(n, d, &n) || n > kMaxElements) {
            return absl::InvalidArgumentError(absl::StrCat(WhereText(at), ": shape too large"));
          }
          x->dims.push_back(d);
        }
        const DType dtype = static_cast<DType>(h.dtype());
        const uint32_t lengths_begin = static_cast<uint32_t>(x->lengths.size());
        if (dtype == DType::kString) {
          if (h.string_lengths_size() != n) {
            return absl::InvalidArgumentError(absl::StrCat(WhereText(at), ": ",
                                                           h.string_lengths_size(),
                                                           " string lengths for ", n,
                                                           " elements"));
          }
          uint64_t sum = 0;
          for (uint64_t l : h.string_lengths()) {
            if (__builtin_add_overflow(sum, l, &sum)) {
              return absl::InvalidArgumentError(
                  absl::StrCat(WhereText(at), ": string lengths overflow"));
            }
            x->lengths.push_back(l);
          }
          if (sum != h.byte_size()) {
            return absl::InvalidArgumentError(absl::StrCat(WhereText(at),
                                                           ": string lengths sum to ", sum,
                                                           ", byte_size is ", h.byte_size()));
          }
        } else {
          const uint64_t want = static_cast<uint64_t>(n) * DTypeSize(dtype);
          if (h.byte_size() != want || h.string_lengths_size() != 0) {
            return absl::InvalidArgumentError(absl::StrCat(WhereText(at), ": byte_size ",
                                                           h.byte_size(), " does not match ",
                                                           n, " x ", DTypeName(dtype), " (",
                                                           want, ")"));
          }
        }
        RETURN_IF_ERROR(x->Add(dtype, dims_begin, n, h.byte_size(), lengths_begin, available));
      }
    }
  }
  return absl::OkStatus();
}

// Describes the compact form's tensors against `spec`.
absl::Status DescribeCompact(const proto::StepFrameHeader& header, const CompactSpec& spec,
                             size_t available, Scratch* x) {
  const google::protobuf::RepeatedField<int64_t>& v = header.compact_values();
  const size_t count = static_cast<size_t>(v.size());
  const std::vector<TensorSpec>& leaves = spec.leaves();
  const uint64_t num_steps = header.compact_steps();
  if (num_steps > count / 4) {
    return absl::InvalidArgumentError(absl::StrCat("step frame: compact header of ", num_steps,
                                                   " steps has only ", count, " values"));
  }
  size_t k = 0;
  int64_t frame_pieces = 0;
  for (uint64_t s = 0; s < num_steps; ++s) {
    if (count - k < 4) {
      return absl::InvalidArgumentError(absl::StrCat(
          "step frame: compact header ends inside the description of its step #", s));
    }
    const int64_t task_step = v.Get(static_cast<int>(k));
    const int64_t global_step = v.Get(static_cast<int>(k + 1));
    const int64_t num_real = v.Get(static_cast<int>(k + 2));
    const int64_t num_pieces = v.Get(static_cast<int>(k + 3));
    k += 4;
    if (num_pieces < 0 || num_pieces > kMaxCompactPiecesPerStep ||
        (frame_pieces += num_pieces) > kMaxCompactPiecesPerFrame) {
      return absl::InvalidArgumentError(absl::StrCat("step frame: step ", task_step, " has ",
                                                     num_pieces, " pieces (0 to ",
                                                     kMaxCompactPiecesPerStep, " allowed)"));
    }
    x->steps.push_back(Scratch::StepDesc{task_step, global_step, num_real,
                                         static_cast<uint32_t>(x->piece_sizes.size()),
                                         static_cast<uint32_t>(num_pieces)});
    for (int64_t p = 0; p < num_pieces; ++p) {
      x->piece_sizes.push_back(static_cast<uint32_t>(leaves.size()));
      for (size_t i = 0; i < leaves.size(); ++i) {
        const TensorSpec& leaf = leaves[i];
        const uint32_t dims_begin = static_cast<uint32_t>(x->dims.size());
        int64_t n = 1;
        for (int r = 0; r < leaf.shape.rank(); ++r) {
          int64_t d = leaf.shape.dim(r);
          if (d < 0) {
            if (k == count) {
              return absl::InvalidArgumentError(
                  absl::StrCat(WhereText(Where{task_step, p, static_cast<int64_t>(i)}),
                               ": compact header ends before its dimension ", r));
            }
            d = v.Get(static_cast<int>(k++));
            if (d < 0) {
              return absl::InvalidArgumentError(
                  absl::StrCat(WhereText(Where{task_step, p, static_cast<int64_t>(i)}),
                               ": negative dimension ", d));
            }
          }
          if (__builtin_mul_overflow(n, d, &n) || n > kMaxElements) {
            return absl::InvalidArgumentError(absl::StrCat(
                WhereText(Where{task_step, p, static_cast<int64_t>(i)}), ": shape too large"));
          }
          x->dims.push_back(d);
        }
        const uint32_t lengths_begin = static_cast<uint32_t>(x->lengths.size());
        uint64_t bytes;
        if (leaf.dtype == DType::kString) {
          if (static_cast<uint64_t>(n) > count - k) {
            return absl::InvalidArgumentError(
                absl::StrCat(WhereText(Where{task_step, p, static_cast<int64_t>(i)}),
                             ": compact header has ", count - k, " values left for ", n,
                             " string lengths"));
          }
          bytes = 0;
          for (int64_t e = 0; e < n; ++e) {
            const int64_t l = v.Get(static_cast<int>(k++));
            if (l < 0 || __builtin_add_overflow(bytes, static_cast<uint64_t>(l), &bytes)) {
              return absl::InvalidArgumentError(
                  absl::StrCat(WhereText(Where{task_step, p, static_cast<int64_t>(i)}),
                               ": bad string length ", l, " of element ", e));
            }
            x->lengths.push_back(static_cast<uint64_t>(l));
          }
        } else {
          bytes = static_cast<uint64_t>(n) * DTypeSize(leaf.dtype);
        }
        RETURN_IF_ERROR(x->Add(leaf.dtype, dims_begin, n, bytes, lengths_begin, available));
      }
    }
  }
  if (k != count) {
    return absl::InvalidArgumentError(absl::StrCat("step frame: compact header has ", count - k,
                                                   " value(s) left over after ", num_steps,
                                                   " step(s)"));
  }
  return absl::OkStatus();
}

// A compressed frame's header: a codec this build knows, compressed_bytes exactly what
// follows, and a raw size the codec could make of them (the caller then checks it against the
// tensors the header describes and the credit).
absl::Status CheckCompressedSizes(const proto::StepFrameHeader& header, size_t following,
                                  WireCompression* codec) {
  absl::StatusOr<WireCompression> c = FromProto(header.compression());
  if (!c.ok()) return absl::InvalidArgumentError(absl::StrCat("step frame: ", c.status().message()));
  if (header.compressed_bytes() != following) {
    return absl::DataLossError(absl::StrCat("step frame: the header says ",
                                            header.compressed_bytes(), " compressed bytes, ",
                                            following, " follow"));
  }
  if (header.raw_payload_bytes() > MaxRawBytes(*c, following)) {
    return absl::DataLossError(absl::StrCat(
        "step frame: ", following, " bytes of ", WireCompressionName(*c),
        " cannot decompress to the ", header.raw_payload_bytes(), " raw bytes the header says"));
  }
  *codec = *c;
  return absl::OkStatus();
}

// For view_received_slices: decides, for each numeric tensor of the described frame, whether
// it is a view of the slice it lies in (large enough, inside one slice, aligned to its dtype,
// the budget accepting the slice) or copied, and lays the copied ones out in the frame buffer
// again (x->numeric shrinks to their size). `reader` is at the payload and is left there.
// `decompressed`: the buffer the reader's one slice is (a decompressed payload), whose tensors
// are views of it where aligned; null: the received slices.
void PlanViews(SliceReader* reader, Scratch* x, std::shared_ptr<TensorBuffer> decompressed) {
  const SliceReader::Position start = reader->position();
  x->slice_buffers.assign(reader->num_slices(), nullptr);
  if (decompressed != nullptr && !x->slice_buffers.empty()) {
    x->slice_buffers[0] = std::move(decompressed);
  }
  x->numeric = 0;
  for (Scratch::TensorDesc& d : x->tensors) {
    d.view_slice = -1;
    if (d.dtype != DType::kString && d.byte_size >= kViewMinBytes) {
      const uint8_t* p = reader->Peek(d.byte_size);
      if (p != nullptr && reinterpret_cast<uintptr_t>(p) % DTypeSize(d.dtype) == 0) {
        std::shared_ptr<TensorBuffer>& buffer = x->slice_buffers[reader->slice_index()];
        if (buffer == nullptr) buffer = ReceivedSliceBuffer::Create(reader->slice(reader->slice_index()));
        if (buffer != nullptr) {
          d.view_slice = static_cast<int64_t>(reader->slice_index());
          d.view_offset = reader->slice_offset();
        }
      }
    }
    if (d.view_slice < 0 && d.dtype != DType::kString && d.byte_size > 0) {
      d.offset = AlignedSize(x->numeric);
      x->numeric = d.offset + d.byte_size;
    }
    reader->Skip(d.byte_size);
  }
  reader->Seek(start);
}

}  // namespace

StepFrameDecoder::StepFrameDecoder(TensorAllocator allocator,
                                   std::shared_ptr<const CompactSpec> spec,
                                   bool view_received_slices)
    : allocator_(allocator ? std::move(allocator) : PooledHostAllocator()),
      spec_(std::move(spec)), view_received_slices_(view_received_slices),
      scratch_(std::make_unique<Scratch>()) {}

StepFrameDecoder::~StepFrameDecoder() = default;

absl::Status StepFrameDecoder::Decode(const grpc::ByteBuffer& buffer, StepFrame* out) {
  return Decode(buffer, out, FrameCreditLimit{});
}

absl::Status StepFrameDecoder::Decompress(WireCompression codec, size_t raw_bytes,
                                          step_frame_internal::SliceReader* reader,
                                          std::shared_ptr<TensorBuffer>* raw) {
  Scratch* x = scratch_.get();
  const size_t compressed = reader->remaining();
  const uint8_t* src = reader->Peek(compressed);
  if (src == nullptr) {  // spread over slices: one contiguous copy
    x->compressed_copy.resize(compressed);
    reader->Read(x->compressed_copy.data(), compressed);
    src = reinterpret_cast<const uint8_t*>(x->compressed_copy.data());
  }
  if (raw_bytes > 0) {
    *raw = allocator_(raw_bytes);
    if (*raw == nullptr || (*raw)->data() == nullptr || (*raw)->size() < raw_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "step frame: cannot allocate ", raw_bytes, " bytes to decompress the payload into"));
    }
  }
  const double cpu_start = ThreadCpuSeconds();
  absl::Status s = DecompressPayload(
      codec, src, compressed,
      raw_bytes > 0 ? static_cast<uint8_t*>((*raw)->data()) : nullptr, raw_bytes);
  const double cpu = ThreadCpuSeconds() - cpu_start;
  stats_.decompress_cpu_seconds += cpu;
  if (!s.ok()) return absl::DataLossError(absl::StrCat("step frame: ", s.message()));
  CountDecompression(compressed, raw_bytes, cpu);
  stats_.compressed_frames += 1;
  stats_.compressed_bytes += compressed;
  stats_.decompressed_bytes += raw_bytes;
  // From here the reader reads the decompressed payload (the received slices go back).
  x->slices = reader->TakeSlices();
  std::vector<grpc::Slice> one;
  if (raw_bytes > 0) {
    one.emplace_back((*raw)->data(), raw_bytes, &DeleteBufferRef,
                     new std::shared_ptr<TensorBuffer>(*raw));
  }
  *reader = SliceReader(std::move(one));
  return absl::OkStatus();
}

absl::Status StepFrameDecoder::Decode(const grpc::ByteBuffer& buffer, StepFrame* out,
                                      const FrameCreditLimit& limit) {
  Scratch* x = scratch_.get();
  x->Clear();
  x->slices.clear();
  if (buffer.Valid()) {
    grpc::Status dumped = buffer.Dump(&x->slices);
    if (!dumped.ok()) {
      return absl::DataLossError(absl::StrCat("step frame: ", dumped.error_message()));
    }
  }
  // The reader borrows the slices' vector for this frame only; it is handed back below.
  SliceReader reader(std::move(x->slices));
  proto::StepFrameHeader& header = x->header;
  absl::Status s = ReadHeader(&reader, &header, "step frame", &x->header_copy);
  // The payload's bytes: what follows, what it decompresses to, or (a shared-memory frame) the
  // strings that follow plus the numeric bytes in the segment. A frame is never both compressed
  // and shared (workers compress only for consumers on other hosts).
  // A bulk frame's numeric bytes follow on the bulk socket: laid out as a shared one's.
  const bool bulk = s.ok() && header.has_bulk_payload();
  const bool job = s.ok() && header.has_job_shm_payload();
  const bool shared = s.ok() && (header.has_shm_payload() || bulk || job);
  const uint64_t shared_bytes = job    ? header.job_shm_payload().bytes()
                                : bulk ? header.bulk_payload().bytes()
                                       : header.shm_payload().bytes();
  size_t available = reader.remaining();
  WireCompression codec = WireCompression::kNone;
  if (s.ok() && bulk && header.has_shm_payload()) {
    s = absl::DataLossError("step frame: both a shared-memory and a bulk payload");
  }
  if (s.ok() && job && (bulk || header.has_shm_payload())) {
    s = absl::DataLossError("step frame: a job segment payload with another shared payload");
  }
  if (s.ok() && header.compression() != proto::WIRE_COMPRESSION_NONE) {
    if (shared) {
      s = absl::DataLossError("step frame: a compressed frame with a shared-memory payload");
    } else {
      s = CheckCompressedSizes(header, available, &codec);
      if (s.ok()) available = static_cast<size_t>(header.raw_payload_bytes());
    }
  }
  if (s.ok() && shared) {
    if (job ? job_source_ == nullptr
            : (bulk ? bulk_source_ == nullptr : source_ == nullptr)) {
      s = absl::DataLossError(
          job    ? "step frame: a job segment payload on a stream without the job segment"
          : bulk ? "step frame: a bulk payload on a stream without a bulk socket"
                 : "step frame: a shared-memory payload on a stream without a segment");
    } else if (__builtin_add_overflow(available, shared_bytes, &available)) {
      available = std::numeric_limits<size_t>::max();
    }
  }
  if (s.ok()) {
    if (header.compact_steps() > 0 || header.compact_values_size() > 0) {
      if (header.steps_size() > 0) {
        s = absl::InvalidArgumentError("step frame: the header has both full and compact steps");
      } else if (spec_ == nullptr) {
        s = absl::InvalidArgumentError(
            "step frame: a compact header on a stream that did not ask for one");
      } else {
        s = DescribeCompact(header, *spec_, available, x);
      }
    } else {
      s = DescribeFull(header, available, x);
    }
  }
  if (s.ok() && job) {
    // The region holds the step whole: its numeric layout, then its strings; nothing follows.
    if (x->steps.size() != 1 || reader.remaining() != 0 ||
        x->numeric + x->strings != shared_bytes) {
      s = absl::DataLossError(absl::StrCat(
          "step frame: the header describes ", x->steps.size(), " step(s) of ", x->numeric,
          " numeric and ", x->strings, " string byte(s) but the job segment region has ",
          shared_bytes, " and ", reader.remaining(), " follow"));
    }
  } else if (s.ok() && shared) {
    if (x->numeric != shared_bytes || x->strings != reader.remaining() ||
        (bulk && shared_bytes == 0)) {
      s = absl::DataLossError(absl::StrCat(
          "step frame: the header describes ", x->numeric, " shared and ", x->strings,
          " inline byte(s) but the ", bulk ? "bulk payload" : "shared-memory region", " has ",
          shared_bytes,
          " and ", reader.remaining(), " follow"));
    }
  } else if (s.ok() && x->payload != available) {
    s = absl::DataLossError(absl::StrCat("step frame: the header describes ", x->payload,
                                         " payload byte(s) but ", available, " follow"));
  }
  if (s.ok() && limit.credit != std::numeric_limits<int64_t>::max()) {
    // payload <= the bytes received, so the sum cannot overflow.
    const uint64_t cost = x->payload + kStepCreditOverheadBytes * x->steps.size();
    const bool any_step = x->steps.size() == 1 && limit.credit >= limit.any_step_credit;
    if (!any_step && cost > static_cast<uint64_t>(std::max<int64_t>(limit.credit, 0))) {
      s = absl::DataLossError(absl::StrCat("step frame: ", x->steps.size(),
                                           " step(s) costing ", cost,
                                           " credit bytes, beyond the ", limit.credit,
                                           " bytes of credit granted"));
    }
  }
  if (s.ok() && codec != WireCompression::kNone) {
    std::shared_ptr<TensorBuffer> raw;
    s = Decompress(codec, available, &reader, &raw);
    if (s.ok()) PlanViews(&reader, x, std::move(raw));
  } else if (s.ok() && view_received_slices_ && !shared) {
    PlanViews(&reader, x, nullptr);
  }
  std::shared_ptr<TensorBuffer> frame_buffer;
  if (s.ok() && shared) {
    absl::StatusOr<std::shared_ptr<TensorBuffer>> region =
        job    ? job_source_->Resolve(header.job_shm_payload())
        : bulk ? bulk_source_->Receive(x->numeric, allocator_)
               : source_->Resolve(header.shm_payload());
    if (region.ok()) {
      frame_buffer = *std::move(region);
    } else {
      s = region.status();
    }
  } else if (s.ok() && x->numeric > 0) {
    frame_buffer = allocator_(x->numeric);
    if (frame_buffer == nullptr || frame_buffer->data() == nullptr ||
        frame_buffer->size() < x->numeric) {
      s = absl::ResourceExhaustedError(
          absl::StrCat("step frame: cannot allocate ", x->numeric, " bytes"));
    }
  }
  if (!s.ok()) {
    x->slice_buffers.clear();
    x->slices = reader.TakeSlices();
    return s;
  }

  // A job segment frame's strings are read from the region, after its numeric layout.
  std::optional<SliceReader> region_strings;
  if (job) {
    std::vector<grpc::Slice> tail;
    tail.emplace_back(static_cast<const uint8_t*>(frame_buffer->data()) + x->numeric,
                      static_cast<size_t>(x->strings), grpc::Slice::STATIC_SLICE);
    region_strings.emplace(std::move(tail));
  }
  SliceReader& strings_from = job ? *region_strings : reader;
  Stats counted;
  out->steps.clear();
  out->end_of_task = header.end_of_task();
  out->status = header.error_code() == 0
                    ? absl::OkStatus()
                    : absl::Status(static_cast<absl::StatusCode>(header.error_code()),
                                   header.error_message());
  out->steps.resize(x->steps.size());
  size_t next = 0;
  for (size_t si = 0; si < x->steps.size(); ++si) {
    const Scratch::StepDesc& sd = x->steps[si];
    WireStep& step = out->steps[si];
    step.task_step = sd.task_step;
    step.global_step = sd.global_step;
    step.num_real_pieces = sd.num_real_pieces;
    step.pieces.resize(sd.num_pieces);
    for (uint32_t p = 0; p < sd.num_pieces; ++p) {
      const uint32_t n = x->piece_sizes[sd.pieces_begin + p];
      std::vector<Tensor>& piece = step.pieces[p];
      piece.reserve(n);
      for (uint32_t i = 0; i < n; ++i) {
        const Scratch::TensorDesc& d = x->tensors[next++];
        Shape shape(std::vector<int64_t>(x->dims.begin() + d.dims_begin,
                                         x->dims.begin() + d.dims_begin + d.rank));
        if (d.dtype == DType::kString) {
          int64_t chars = 0;
          for (int64_t e = 0; e < d.elements; ++e) {
            chars += static_cast<int64_t>(x->lengths[d.lengths_begin + e]);
          }
          absl::StatusOr<Tensor> strings = Tensor::TryAllocateStrings(shape, chars, "step frame");
          if (!strings.ok()) {
            x->slice_buffers.clear();
            x->slices = reader.TakeSlices();
            return absl::Status(strings.status().code(),
                                absl::StrCat(WhereText(Where{sd.task_step, p, i}), ": ",
                                             strings.status().message()));
          }
          Tensor t = *std::move(strings);
          for (int64_t e = 0; e < d.elements; ++e) {
            std::string* str = t.mutable_string(e);
            str->resize(x->lengths[d.lengths_begin + e]);
            strings_from.Read(str->data(), str->size());
          }
          piece.push_back(std::move(t));
        } else if (d.byte_size == 0) {
          piece.push_back(Tensor::Allocate(d.dtype, shape));  // no bytes
        } else {
          absl::StatusOr<Tensor> t;
          if (d.view_slice >= 0) {
            reader.Skip(d.byte_size);
            t = Tensor::Wrap(d.dtype, shape, x->slice_buffers[d.view_slice], d.view_offset);
            ++counted.viewed_tensors;
            counted.viewed_bytes += d.byte_size;
          } else if (shared) {
            t = Tensor::Wrap(d.dtype, shape, frame_buffer, d.offset);  // a view of the segment
          } else {
            reader.Read(static_cast<char*>(frame_buffer->data()) + d.offset, d.byte_size);
            t = Tensor::Wrap(d.dtype, shape, frame_buffer, d.offset);
            ++counted.copied_tensors;
            counted.copied_bytes += d.byte_size;
          }
          if (!t.ok()) {
            x->slice_buffers.clear();
            x->slices = reader.TakeSlices();
            return absl::Status(t.status().code(),
                                absl::StrCat(WhereText(Where{sd.task_step, p, i}), ": ",
                                             t.status().message()));
          }
          piece.push_back(*std::move(t));
        }
      }
    }
  }
  x->slice_buffers.clear();
  x->slices = reader.TakeSlices();
  stats_.viewed_tensors += counted.viewed_tensors;
  stats_.viewed_bytes += counted.viewed_bytes;
  stats_.copied_tensors += counted.copied_tensors;
  stats_.copied_bytes += counted.copied_bytes;
  if (bulk) {
    ++stats_.bulk_frames;
    stats_.bulk_bytes += x->numeric;
  }
  if (job) {
    ++stats_.job_frames;
    stats_.job_string_bytes += x->strings;
  }
  return absl::OkStatus();
}

const proto::BulkAccept* StepFrameDecoder::last_bulk_accept() const {
  return scratch_->header.has_bulk_accept() ? &scratch_->header.bulk_accept() : nullptr;
}

const proto::ShmAccept* StepFrameDecoder::last_shm_accept() const {
  return scratch_->header.has_shm_accept() ? &scratch_->header.shm_accept() : nullptr;
}

absl::Status DecodeStepFrame(const grpc::ByteBuffer& buffer, const TensorAllocator& allocator,
                             StepFrame* out) {
  StepFrameDecoder decoder(allocator, nullptr);
  return decoder.Decode(buffer, out);
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
  std::string copy;
  RETURN_IF_ERROR(ReadHeader(&reader, out, "consumer message", &copy));
  if (reader.remaining() != 0) {
    return absl::DataLossError(
        absl::StrCat("consumer message: ", reader.remaining(), " byte(s) left over"));
  }
  return absl::OkStatus();
}

}  // namespace sluice
