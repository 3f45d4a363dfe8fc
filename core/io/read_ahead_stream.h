// A sequential InputStream over a RandomAccessFile of known size that keeps `parallel` chunks
// of `chunk_bytes` in flight ahead of the reader, each fetched on its own thread (for a remote
// store: parallel ranged GETs). Seeking forward inside the fetched or in-flight window reuses
// it; any other seek drops the window and starts again at the new offset.
//
// Errors: a chunk's read error is returned by the Read that reaches it; a chunk that comes back
// short (the file shrank) is DATA_LOSS naming the file and the offset; one whose thread cannot
// start is RESOURCE_EXHAUSTED naming the file (core/util/start_thread.h).
//
// Thread safety: one caller at a time (an InputStream); the fetch threads share only the file,
// which is thread-safe.
#ifndef SLUICE_CORE_READ_AHEAD_STREAM_H_
#define SLUICE_CORE_READ_AHEAD_STREAM_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/io/file_system.h"

namespace sluice {

struct ReadAheadOptions {
  // Bytes per fetch (one ranged GET).
  size_t chunk_bytes = 4 << 20;
  // Fetches in flight, the one being read included. Memory per stream: parallel * chunk_bytes.
  int parallel = 4;
};

std::unique_ptr<InputStream> NewReadAheadStream(std::shared_ptr<const RandomAccessFile> file,
                                                uint64_t size, const ReadAheadOptions& options);

}  // namespace sluice

#endif  // SLUICE_CORE_READ_AHEAD_STREAM_H_
