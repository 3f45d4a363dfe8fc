// GZIP and ZLIB decompression for the record readers, as TensorFlow's ZlibInputStream does it
// (zlib with window bits 15, +16 for the gzip wrapper), and the compression_type names TF uses.
//
// Thread safety: none; one caller at a time.
#ifndef SLUICE_CORE_ZLIB_STREAM_H_
#define SLUICE_CORE_ZLIB_STREAM_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/io/input_stream.h"

namespace sluice {

enum class Compression { kNone, kGzip, kZlib };

// TF's compression_type strings: "" (none), "GZIP", "ZLIB". INVALID_ARGUMENT naming the value
// otherwise.
absl::StatusOr<Compression> ParseCompressionType(absl::string_view type);
// "", "GZIP" or "ZLIB".
absl::string_view CompressionTypeName(Compression c);

// zlib's parameters for `c` (kGzip or kZlib), shared with the writer so both match TF.
int ZlibWindowBits(Compression c);

// Decompresses `raw`. Read() returns DATA_LOSS naming the stream and the compressed byte
// offset on corrupt data, and DATA_LOSS when the compressed stream ends early (truncated file).
// Concatenated gzip members read as one stream, as gzip(1) does. Seek() is UNIMPLEMENTED.
// `buffer_size`: compressed bytes read from `raw` at a time.
std::unique_ptr<InputStream> NewZlibInputStream(std::unique_ptr<InputStream> raw, Compression c,
                                                size_t buffer_size = 256 << 10);

}  // namespace sluice

#endif  // SLUICE_CORE_ZLIB_STREAM_H_
