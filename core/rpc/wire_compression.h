// Wire compression of step frame payloads (core/rpc/step_frame.h): LZ4 (one frame, Debian's
// liblz4) or Zstandard (one frame at level 1, Debian's libzstd), chosen per job (JobOptions.compression)
// and negotiated per stream: the consumer lists what it decodes (StreamRequest.
// accepted_compression), the worker compresses only with a codec the consumer listed, and only
// when the consumer is remote or the job forces it (ChooseWireCompression). A compressed frame
// says its codec, its compressed size and its raw size in its header; the decoder checks both
// sizes before it allocates (the raw size must also be what the header's tensors describe and
// fit the consumer's credit) and that the data decompresses to exactly that size.
//
//   std::string out;
//   RETURN_IF_ERROR(CompressPayload(WireCompression::kLz4, {a, b}, &out));
//   RETURN_IF_ERROR(DecompressPayload(WireCompression::kLz4, in, in_size, dst, raw_size));
//
// Pure functions; thread-safe.
#ifndef SLUICE_CORE_RPC_WIRE_COMPRESSION_H_
#define SLUICE_CORE_RPC_WIRE_COMPRESSION_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/coordinator.pb.h"

namespace sluice {

// The same values as proto::WireCompression.
enum class WireCompression { kNone = 0, kLz4 = 1, kZstd = 2 };

// "none", "lz4", "zstd".
absl::string_view WireCompressionName(WireCompression c);
// The inverse of WireCompressionName; INVALID_ARGUMENT naming the choices for anything else.
absl::StatusOr<WireCompression> ParseWireCompression(absl::string_view name);
// INVALID_ARGUMENT for a value of the proto enum this build does not know (a newer peer).
absl::StatusOr<WireCompression> FromProto(proto::WireCompression c);
proto::WireCompression ToProto(WireCompression c);

// What a worker uses on one stream: the job's codec when the consumer accepts it and either the
// job forces it or the consumer is remote (`peer`, gRPC's "ipv4:127.0.0.1:5000" form: loopback
// addresses and Unix sockets are local); else kNone. Compression costs CPU on both ends and
// gains nothing where bytes do not cross a network.
WireCompression ChooseWireCompression(const proto::JobOptions& job,
                                      const google::protobuf::RepeatedField<int>& accepted,
                                      absl::string_view peer);
// Whether gRPC's peer string names this host (loopback, a Unix socket).
bool IsLocalPeer(absl::string_view peer);

// Compresses the concatenation of `parts` with `codec` (not kNone) into *out (replaced): one
// LZ4 frame or one zstd frame, each carrying the content size and a checksum of the content.
// INTERNAL when the library fails.
absl::Status CompressPayload(WireCompression codec, absl::Span<const absl::string_view> parts,
                             std::string* out);

// Decompresses `src` (`src_size` bytes: one whole frame of the codec, nothing after it) into
// `dst`, which must come out exactly `raw_size` bytes with a matching checksum. DATA_LOSS
// saying what is wrong (corrupt data, a truncated frame, a size other than raw_size) for any
// input that does not; never writes past dst + raw_size.
absl::Status DecompressPayload(WireCompression codec, const uint8_t* src, size_t src_size,
                               uint8_t* dst, size_t raw_size);

// What this process's step frame codecs did with compressed frames since it started, for
// `sluicectl bench` and metrics: frames, bytes on the wire, raw bytes and the CPU seconds the
// codec took (thread CPU time). Updated by StepFrameEncoder (compression: the worker side) and
// StepFrameDecoder (decompression: the consumer side). Thread-safe.
struct WireCodecTotals {
  uint64_t frames = 0;
  uint64_t wire_bytes = 0;
  uint64_t raw_bytes = 0;
  double cpu_seconds = 0;
};
WireCodecTotals CompressionTotals();
WireCodecTotals DecompressionTotals();
// Adds one frame's figures (step_frame.cc).
void CountCompression(uint64_t wire_bytes, uint64_t raw_bytes, double cpu_seconds);
void CountDecompression(uint64_t wire_bytes, uint64_t raw_bytes, double cpu_seconds);

}  // namespace sluice

#endif  // SLUICE_CORE_RPC_WIRE_COMPRESSION_H_
