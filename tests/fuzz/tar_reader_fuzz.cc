// Fuzz target: the tar reader (core/io/tar_reader.h) on arbitrary archive bytes, reading every
// other member's data and skipping the rest (the seek path), with a member limit derived from
// the input length so that both the limit and truncation are reached. Every outcome must be a
// member, OUT_OF_RANGE, DATA_LOSS or RESOURCE_EXHAUSTED (over the limit): nothing crashes,
// nothing loops, no member's data is larger than the archive, and each member moves forward.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/io/input_stream.h"
#include "core/io/tar_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  sluice::TarReaderOptions options;
  options.max_member_bytes = size % 3 == 0 ? size / 2 : uint64_t{1} << 40;
  sluice::TarReader tar(sluice::NewStringStream("fuzz.tar", bytes), options);
  uint64_t last_offset = 0;
  // Every entry takes at least one 512-byte header, so there are at most size / 512 + 1.
  for (size_t i = 0; i <= size / 512 + 1; ++i) {
    sluice::TarMember m;
    absl::Status s = tar.Next(&m);
    if (!s.ok()) {
      if (!absl::IsOutOfRange(s) && !absl::IsDataLoss(s)) std::abort();
      return 0;
    }
    if (m.offset <= last_offset || m.offset > size) std::abort();
    last_offset = m.offset;
    if (i % 2 == 1) continue;
    std::string member;
    s = tar.ReadData(&member);
    if (!s.ok()) {
      if (!absl::IsDataLoss(s) && !absl::IsResourceExhausted(s)) std::abort();
      if (absl::IsResourceExhausted(s) && m.size <= options.max_member_bytes) std::abort();
      continue;
    }
    if (member.size() != m.size || member.size() > size) std::abort();
  }
  // One more Next must end the archive or fail: the bound above was not reached by a loop.
  sluice::TarMember m;
  if (tar.Next(&m).ok()) std::abort();
  return 0;
}
