// The data plane's wire codec, shared by the worker (encode) and the client (decode).
//
// A StepFrame travels as one grpc::ByteBuffer laid out as
//
//   [fixed32 little-endian L][L bytes: serialized proto::StepFrameHeader][payload]
//
// where the payload is, for every step, every piece and every tensor of the header in order,
// its byte size in raw bytes: a numeric tensor's packed little-endian data, or a string
// tensor's elements back to back. Nothing else follows.
//
// The header has two forms (proto/worker.proto):
//  - full: StepFrameHeader.steps, one StepHeader per step with a TensorHeader per tensor
//    (dtype, shape, byte_size, string lengths). Example: one step with one piece holding an
//    int32 tensor [1, 2] is [L][header{steps{task_step:0 pieces{tensors{dtype:INT32 shape:2
//    byte_size:8}}}}][01 00 00 00 02 00 00 00].
//  - compact: when the stream negotiated a CompactSpec (StreamRequest.compact_headers and
//    compact_spec: the leaves of one replica's value) and every tensor of the frame matches it,
//    StepFrameHeader.compact_steps / compact_values: one packed run of integers per frame, per
//    step its task_step, global_step, num_real_pieces and piece count, then per tensor only the
//    dimensions the spec leaves open and a string tensor's element lengths. The same example
//    under the spec [int32 (2,)]: [L][header{compact_steps:1 compact_values:[0,-1,1,1]}][01 00
//    00 00 02 00 00 00] (8 header bytes instead of 13; a 1 KiB step of a static spec costs 4
//    to 6 header bytes and no nested message).
// A decoder with a spec accepts both forms; one without refuses a compact header.
//
// Encoding is zero-copy for numeric tensors of kZeroCopyMinBytes or more: their slices point at
// the tensors' own buffers and hold a reference that is dropped when gRPC is done with the
// bytes. Smaller tensors and strings are copied next to the header (fewer, larger slices).
// Decoding copies every tensor's bytes exactly once, from the received slices straight into
// one buffer per frame from an injectable TensorAllocator (pinned host memory, a pool, ...):
// the frame's numeric tensors are views of it at 64-byte aligned offsets (one allocation a
// frame, however many steps and tensors it carries; the buffer lives while any of them does).
// A decoder made with view_received_slices copies less: a numeric tensor of kViewMinBytes or
// more that lies inside one received slice, at an address aligned to its dtype's size (what
// numpy, DLPack consumers and typed C++ access need), is a view of that slice instead, its
// TensorBuffer holding a reference to the slice (gRPC frees the slice's memory when the last
// reference goes, and never writes it again: a trainer writing into such a tensor changes that
// tensor only). Tensors that straddle slices, are misaligned or small are copied as above. A
// view keeps its whole slice alive (at most one of gRPC's read chunks) and is charged to the
// process's memory budget for the slice's size while it lives; when the budget refuses, the
// tensor is copied (and the allocator decides).
// StepFrameEncoder / StepFrameDecoder keep their header message and scratch vectors from frame
// to frame, so a stream's steady state parses into memory it already has. Error messages are
// built only on the error path.
//
// Compression (core/rpc/wire_compression.h): an encoder made with a codec compresses each
// frame's payload as one block and sends [L][header][compressed payload], the header saying
// the codec, compressed_bytes and raw_payload_bytes; a frame whose payload shrinks by less
// than 1/16 (or is empty) goes raw. The decoder checks, before it allocates anything, that compressed_bytes
// is what follows, that raw_payload_bytes is what the header's tensors describe, that the
// codec could expand that many bytes to it (LZ4 at most 256x, zstd 43691x) and that it fits
// the credit; it then decompresses into one buffer from its allocator (RESOURCE_EXHAUSTED when
// refused) and decodes the tensors from there (views of it where aligned, else copies).
// Corrupt data or a size that does not match is DATA_LOSS.
//
// Consumer -> worker messages (StreamRequest, CreditGrant) are [fixed32 L][ConsumerMessage].
//
// All functions are thread-compatible and never crash on malformed input.
#ifndef SLUICE_CORE_STEP_FRAME_H_
#define SLUICE_CORE_STEP_FRAME_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/rpc/wire_compression.h"
#include "sluice/element.h"
#include "sluice/tensor.h"
#include "grpcpp/support/byte_buffer.h"
#include "proto/worker.pb.h"

namespace sluice {

class SendBufferPool;
class SharedStepPayload;  // core/rpc/shared_step_payload.h
class BulkPayloadSink;    // core/rpc/bulk_channel.h
class BulkPayloadSource;  // core/rpc/bulk_channel.h
namespace step_frame_internal {
class SliceReader;  // step_frame.cc
// The payload of `num_pieces` pieces (all numeric tensors and strings, or the strings only) as
// slices, the copied bytes in buffers of their own: SharedStepPayload's builder. Replaces *out;
// returns the bytes copied.
size_t EncodePayloadSlices(const std::vector<Tensor>* pieces, size_t num_pieces,
                           bool strings_only, std::vector<grpc::Slice>* out);
}  // namespace step_frame_internal

// One consumer's share of one step: the pieces of its local replicas, each piece the leaves of
// one element in flatten order.
struct WireStep {
  int64_t task_step = 0;
  int64_t global_step = -1;      // the job's step for step-sharded tasks, else -1
  int64_t num_real_pieces = 0;   // of the whole step; the rest are size-0 dummies
  std::vector<std::vector<Tensor>> pieces;
};

struct StepFrame {
  std::vector<WireStep> steps;
  bool end_of_task = false;
  // Not OK: the task failed after these steps (StepFrameHeader.error_code / error_message).
  absl::Status status;
};

// Allocates the destination buffer of one decoded frame's numeric tensors, `bytes` (> 0).
// Returning nullptr makes decoding fail with RESOURCE_EXHAUSTED.
using TensorAllocator = std::function<std::shared_ptr<TensorBuffer>(size_t bytes)>;

// 64-byte aligned host memory that is not zero-filled (every byte is overwritten by decoding).
std::shared_ptr<TensorBuffer> AllocateUninitializedHost(size_t bytes);

// An allocator of such memory that takes back the buffers its tensors release: by size class
// (powers of two from 4 KiB), keeping a released buffer idle while the idle ones stay within
// `max_idle_bytes`, or while they and the buffers handed out stay within `max_total_bytes`
// (a consumer's receive budget: what it may hold anyway), so that a stream's steady state
// reuses warm buffers instead of a malloc, page faults and a free per frame, also when a few
// steps fill the idle bound (16 MiB steps: a released buffer freed for every one kept made
// every other frame fault in 16 MiB afresh; bench/RESULTS.md "bulkwire"). What a
// StepFrameDecoder given no allocator uses. Thread-safe; buffers may outlive the allocator.
inline constexpr size_t kDefaultIdleHostBytes = size_t{16} << 20;
TensorAllocator PooledHostAllocator(size_t max_idle_bytes = kDefaultIdleHostBytes,
                                    size_t max_total_bytes = 0);

// Numeric tensors at least this large are sent from their own buffers; smaller ones are copied.
inline constexpr size_t kZeroCopyMinBytes = 4096;
// Numeric tensors at least this large may be received as views of gRPC's slices
// (StepFrameDecoder's view_received_slices); smaller ones are always copied, so that a small
// tensor a trainer keeps does not keep a whole read chunk alive.
inline constexpr size_t kViewMinBytes = 4096;

// Bytes of tensor payload the frame carries (what a bandwidth figure counts).
size_t StepPayloadBytes(const WireStep& step);

// What a step costs against a consumer's byte credit (proto/worker.proto, WIRE_VERSION_2): its
// payload bytes plus kStepCreditOverheadBytes, so that steps of size-0 tensors are not free.
// The worker computes the same figure from the pieces it sends (worker/consumer_frame.h).
inline constexpr size_t kStepCreditOverheadBytes = 64;
size_t StepCreditBytes(const WireStep& step);
// The credit at which a worker sends the consumer's next step whatever its cost: window -
// window / 4 (at least 1). The consumer grants whenever a quarter of its window is free, so a
// stream blocked on a step larger than its credit always gets there.
int64_t CreditForAnyStep(int64_t window_bytes);

// The leaves of one replica's value that both ends of a stream agreed on
// (StreamRequest.compact_spec): what a compact header leaves out. Immutable; thread-safe.
class CompactSpec {
 public:
  // The leaves of `spec` in flatten order.
  static CompactSpec FromElementSpec(const ElementSpec& spec);
  // INVALID_ARGUMENT naming the leaf for an unknown dtype or a dimension below -1.
  static absl::StatusOr<CompactSpec> FromProto(
      const google::protobuf::RepeatedPtrField<proto::TensorSpecProto>& leaves);
  void ToProto(google::protobuf::RepeatedPtrField<proto::TensorSpecProto>* out) const;

  const std::vector<TensorSpec>& leaves() const { return leaves_; }
  // Whether `piece` has exactly these leaves: the count, each dtype, rank and known dimension.
  bool Matches(const std::vector<Tensor>& piece) const;

 private:
  explicit CompactSpec(std::vector<TensorSpec> leaves) : leaves_(std::move(leaves)) {}
  std::vector<TensorSpec> leaves_;
};

// Shared memory (core/rpc/shm_ring.h): where an encoder may put a frame's numeric tensor bytes
// instead of the payload, laid out as the decoder lays out its frame buffer (each tensor at a
// 64-byte aligned offset in header order), the header then carrying a ShmPayload.
class SharedPayloadSink {
 public:
  virtual ~SharedPayloadSink() = default;
  // Room for `bytes` (> 0), filling *out with where it is; nullptr when there is none now
  // (the frame then carries its bytes inline).
  virtual uint8_t* Reserve(size_t bytes, proto::ShmPayload* out) = 0;
  // When the frame's numeric tensors (`tensors`, in header order, at the offsets `at` of the
  // layout above, `extent` bytes in all) already lie in one region of the sink laid out so:
  // fills *out and returns true, and the frame carries no copy of them. False otherwise.
  virtual bool InPlace(absl::Span<const Tensor* const> /*tensors*/,
                       absl::Span<const size_t> /*at*/, size_t /*extent*/,
                       proto::ShmPayload* /*out*/) {
    return false;
  }
};

// Where a decoder finds a frame's numeric bytes that a ShmPayload points at.
class SharedPayloadSource {
 public:
  virtual ~SharedPayloadSource() = default;
  // The buffer holding them (its size is payload.bytes()); an error (DATA_LOSS) when the
  // payload is out of bounds.
  virtual absl::StatusOr<std::shared_ptr<TensorBuffer>> Resolve(
      const proto::ShmPayload& payload) = 0;
};

// A job shared across trainers (core/rpc/job_shm_segment.h): where an encoder may find a
// frame's one step written once, whole (numeric tensors laid out as a frame buffer, then the
// strings), in a segment every co-located consumer of the job maps; the header then carries a
// JobShmPayload and the frame no payload.
struct WireStepView;
class JobPayloadSink {
 public:
  virtual ~JobPayloadSink() = default;
  // Fills *out and returns true when `step` (all of its pieces, shared_payload set) lies in
  // the segment for this stream's consumer (it then counts as handed to it); false: the frame
  // goes as without the sink.
  virtual bool Place(const WireStepView& step, proto::JobShmPayload* out) = 0;
};

// The consumer's side: the region a JobShmPayload names.
class JobPayloadSource {
 public:
  virtual ~JobPayloadSource() = default;
  // A buffer of exactly payload.bytes() bytes viewing the region; DATA_LOSS naming the values
  // when it is not one of the segment (another segment id, unaligned, outside it).
  virtual absl::StatusOr<std::shared_ptr<TensorBuffer>> Resolve(
      const proto::JobShmPayload& payload) = 0;
};

// A step to encode, borrowing its pieces (the caller keeps them alive during Encode): the
// worker encodes a consumer's share of its buffered steps without copying the tensors.
struct WireStepView {
  int64_t task_step = 0;
  int64_t global_step = -1;
  int64_t num_real_pieces = 0;
  const std::vector<Tensor>* pieces = nullptr;  // num_pieces of them
  size_t num_pieces = 0;
  // Set only when `pieces` are all of the step's: the step's payload encoded once for every
  // stream that sends it (borrowed, alive during Encode). An uncompressed frame then sends
  // those slices instead of copying the step's bytes again.
  const SharedStepPayload* shared_payload = nullptr;
};

// Encodes frames, in the compact form when it has a spec and every tensor of the frame
// matches it, else in the full form. Keeps its header message between frames.
// Thread-compatible (one per stream).
class StepFrameEncoder {
 public:
  // `spec`: the stream's negotiated spec; null for full headers only. `compression`: the
  // stream's negotiated codec (kNone: raw frames).
  explicit StepFrameEncoder(std::shared_ptr<const CompactSpec> spec = nullptr,
                            WireCompression compression = WireCompression::kNone)
      : spec_(std::move(spec)), compression_(compression) {}

  // INVALID_ARGUMENT naming the step, piece and tensor for an invalid tensor or one not in
  // host memory. A non-OK `status` is the frame's error (the stream's last frame).
  absl::Status Encode(absl::Span<const WireStepView> steps, bool end_of_task,
                      const absl::Status& status, grpc::ByteBuffer* out);
  absl::Status Encode(const StepFrame& frame, grpc::ByteBuffer* out);
  // Whether the last successful Encode wrote the compact form (tests, metrics).
  bool last_compact() const { return last_compact_; }
  // What compression did over this encoder's frames: payload bytes given to the codec, the
  // bytes that left (compressed, or raw where a frame did not shrink), CPU seconds of the
  // codec. Metrics and benchmarks.
  struct CompressionStats {
    uint64_t raw_bytes = 0;
    uint64_t sent_bytes = 0;
    uint64_t frames_compressed = 0;
    uint64_t frames_raw = 0;
    double cpu_seconds = 0;
  };
  const CompressionStats& compression_stats() const { return compression_stats_; }
  // From now on, frames whose numeric bytes fit `sink` put them there (borrowed; must outlive
  // the encoder's use; nullptr: inline again). The bytes the last Encode put there (0: none):
  // last_shared_bytes().
  void set_shared_payload(SharedPayloadSink* sink) { sink_ = sink; }
  size_t last_shared_bytes() const { return last_shared_bytes_; }
  // Whether the last Encode found them in the sink already (SharedPayloadSink::InPlace).
  bool last_in_place() const { return last_in_place_; }
  // The next frame encoded carries `accept` (the worker's answer to a ShmOffer).
  void AttachToNextFrame(proto::ShmAccept accept) { accept_ = std::move(accept); }
  // The bulk data channel (core/rpc/bulk_channel.h): from now on, a frame's numeric tensors
  // go to `sink` when it takes them (borrowed; nullptr: inline again), the header then saying
  // BulkPayload. Never with a shared-memory sink or compression (those win). The next frame
  // encoded carries `accept` (the worker's answer to a BulkOffer).
  void set_bulk_payload(BulkPayloadSink* sink) { bulk_sink_ = sink; }
  void AttachToNextFrame(proto::BulkAccept accept) { bulk_accept_ = std::move(accept); }
  // A job segment: from now on, an uncompressed frame of one step whose whole payload the sink
  // places is sent as its header alone (borrowed; nullptr: off). Whether the last Encode did:
  // last_job_placed() (last_shared_bytes() is then the region's size).
  void set_job_payload(JobPayloadSink* sink) { job_sink_ = sink; }
  bool last_job_placed() const { return last_job_placed_; }

 private:
  bool AllMatch(absl::Span<const WireStepView> steps) const;
  // Writes header_ (filled) as the whole frame: a job segment's frame.
  absl::Status EncodeHeaderOnly(grpc::ByteBuffer* out);
  // After the header is filled: sends the frame with its payload compressed (*sent true), or
  // leaves *out and the header alone (*sent false) when the payload is empty or shrinks by
  // less than 1/16. INTERNAL when the codec fails.
  absl::Status EncodeCompressed(absl::Span<const WireStepView> steps, grpc::ByteBuffer* out,
                                bool* sent);

  const std::shared_ptr<const CompactSpec> spec_;
  const WireCompression compression_;
  CompressionStats compression_stats_;
  std::vector<absl::string_view> parts_;
  proto::StepFrameHeader header_;
  std::vector<WireStepView> views_;
  std::vector<grpc::Slice> slices_;
  // The strings frames' copied bytes travel in, back from gRPC once sent (step_frame.cc).
  std::shared_ptr<SendBufferPool> send_pool_;
  bool last_compact_ = false;
  SharedPayloadSink* sink_ = nullptr;
  size_t last_shared_bytes_ = 0;
  bool last_in_place_ = false;
  std::vector<const Tensor*> shared_tensors_;  // InPlace's arguments, kept between frames
  std::vector<size_t> shared_at_;
  std::optional<proto::ShmAccept> accept_;
  BulkPayloadSink* bulk_sink_ = nullptr;
  std::optional<proto::BulkAccept> bulk_accept_;
  JobPayloadSink* job_sink_ = nullptr;
  bool last_job_placed_ = false;
};

// Encodes `frame` with full headers (StepFrameEncoder without a spec).
absl::Status EncodeStepFrame(const StepFrame& frame, grpc::ByteBuffer* out);

// What a consumer's stream lets one frame cost (proto/worker.proto): the StepCreditBytes of
// its steps together at most `credit` (the credit granted and not yet used), or one step of
// any cost once `credit` is at least `any_step_credit` (the raise). The default allows all.
struct FrameCreditLimit {
  int64_t credit = std::numeric_limits<int64_t>::max();
  int64_t any_step_credit = std::numeric_limits<int64_t>::max();
};

// Decodes frames of either form (compact ones only with a spec), keeping its header message
// and scratch space between frames. Thread-compatible (one per stream).
class StepFrameDecoder {
 public:
  // `allocator` may be empty (a PooledHostAllocator of the decoder's own); `spec` null: no
  // compact headers; `view_received_slices`: tensors as views of the received slices where
  // they can be (see the top of this file); only for host memory consumers (a consumer that
  // wants its tensors in the allocator's memory, pinned for a device copy, leaves it false).
  StepFrameDecoder(TensorAllocator allocator, std::shared_ptr<const CompactSpec> spec,
                   bool view_received_slices = false);
  ~StepFrameDecoder();

  // As DecodeStepFrame. A compact header is INVALID_ARGUMENT naming the step, piece and tensor
  // when it disagrees with the spec: values missing or left over, a negative dimension or
  // string length, a shape too large; and when the decoder has no spec.
  absl::Status Decode(const grpc::ByteBuffer& buffer, StepFrame* out);
  // The same, and DATA_LOSS when the frame costs more than `limit` allows, found from the
  // header before anything is allocated (a worker cannot make its consumer allocate more than
  // the consumer granted).
  absl::Status Decode(const grpc::ByteBuffer& buffer, StepFrame* out,
                      const FrameCreditLimit& limit);
  // Frames with a ShmPayload take their numeric tensors as views of what `source` resolves
  // (borrowed, outliving the decoder's use); without a source such a frame is DATA_LOSS.
  // The ShmAccept of the last frame decoded, if it had one: last_shm_accept().
  void set_shared_payload(SharedPayloadSource* source) { source_ = source; }
  const proto::ShmAccept* last_shm_accept() const;
  // Frames with a BulkPayload receive their numeric tensors from `source` (borrowed, outliving
  // the decoder's use) into one buffer from the allocator, after the header passed every check
  // above (sizes, credit); without a source such a frame is DATA_LOSS, and what the source
  // fails with is the frame's error. The BulkAccept of the last frame decoded: last_bulk_accept().
  void set_bulk_payload(BulkPayloadSource* source) { bulk_source_ = source; }
  const proto::BulkAccept* last_bulk_accept() const;
  // Frames with a JobShmPayload (one step, no payload following) take their numeric tensors
  // as views of what `source` resolves and copy their strings out of it (borrowed, outliving
  // the decoder's use); without a source such a frame is DATA_LOSS, as is one whose header
  // describes other than exactly the region's bytes.
  void set_job_payload(JobPayloadSource* source) { job_source_ = source; }

  // What the decoder did with the numeric tensors (size > 0) of the frames it decoded
  // successfully: received as views of gRPC's slices (or of a decompressed payload), or
  // copied; and the compressed frames: their bytes received, raw bytes, and the thread CPU
  // seconds decompression took. Tests, metrics and benchmarks.
  struct Stats {
    uint64_t viewed_tensors = 0;
    uint64_t viewed_bytes = 0;
    uint64_t copied_tensors = 0;
    uint64_t copied_bytes = 0;
    uint64_t compressed_frames = 0;
    uint64_t compressed_bytes = 0;
    uint64_t decompressed_bytes = 0;
    double decompress_cpu_seconds = 0;
    // Numeric bytes received on the bulk data channel (not counted above).
    uint64_t bulk_frames = 0;
    uint64_t bulk_bytes = 0;
    // Frames whose step lay in a job segment, and the string bytes copied out of it (the
    // Tensor type holds strings in std::string: one copy, on the consumer's side).
    uint64_t job_frames = 0;
    uint64_t job_string_bytes = 0;
  };
  const Stats& stats() const { return stats_; }

  // The header and frame description kept between frames (step_frame.cc only).
  struct Scratch;

 private:
  // Decompresses the rest of `reader` (`codec`, into `raw_bytes` from the allocator) and
  // points the reader at the result. RESOURCE_EXHAUSTED when the allocator refuses,
  // DATA_LOSS when the data is corrupt or not raw_bytes long.
  absl::Status Decompress(WireCompression codec, size_t raw_bytes,
                          step_frame_internal::SliceReader* reader,
                          std::shared_ptr<TensorBuffer>* raw);

  TensorAllocator allocator_;
  const std::shared_ptr<const CompactSpec> spec_;
  const bool view_received_slices_;
  Stats stats_;
  std::unique_ptr<Scratch> scratch_;
  SharedPayloadSource* source_ = nullptr;
  BulkPayloadSource* bulk_source_ = nullptr;
  JobPayloadSource* job_source_ = nullptr;
};

// Decodes a frame. DATA_LOSS when bytes are missing or left over (a short or padded frame),
// INVALID_ARGUMENT when the header does not parse or describes an impossible tensor (bad
// dtype, negative dimension, byte_size inconsistent with the shape), RESOURCE_EXHAUSTED when the
// allocator fails. `allocator` may be empty (host memory). On error *out is
// unspecified. Full headers only (a StepFrameDecoder without a spec).
absl::Status DecodeStepFrame(const grpc::ByteBuffer& buffer, const TensorAllocator& allocator,
                             StepFrame* out);

// [fixed32 L][ConsumerMessage] framing for the consumer's messages.
grpc::ByteBuffer EncodeConsumerMessage(const proto::ConsumerMessage& message);
// DATA_LOSS / INVALID_ARGUMENT as DecodeStepFrame.
absl::Status DecodeConsumerMessage(const grpc::ByteBuffer& buffer, proto::ConsumerMessage* out);

}  // namespace sluice

#endif  // SLUICE_CORE_STEP_FRAME_H_
