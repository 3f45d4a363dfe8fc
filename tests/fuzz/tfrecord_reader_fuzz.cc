// Fuzz target: the TFRecord reader (core/io/tfrecord_reader.h) on arbitrary file bytes. The
// compression is chosen from the bytes' magic (gzip 1f 8b, zlib 78 xx, else none), the buffer
// size from the input length, so the committed fixtures are meaningful seeds. Every outcome
// must be a record, OUT_OF_RANGE or DATA_LOSS: nothing crashes, nothing loops forever.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/io/tfrecord_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  sluice::TFRecordReaderOptions options;
  if (size >= 2 && data[0] == 0x1f && data[1] == 0x8b) {
    options.compression = sluice::Compression::kGzip;
  } else if (size >= 2 && data[0] == 0x78) {
    options.compression = sluice::Compression::kZlib;
  }
  options.buffer_size = 64 + size % 97;
  for (int pass = 0; pass < 2; ++pass) {
    auto reader = sluice::TFRecordReader::FromStream(
        sluice::NewStringStream("fuzz", bytes), options,
        options.compression == sluice::Compression::kNone
            ? std::optional<uint64_t>(bytes.size())
            : std::nullopt);
    std::string record;
    // Each successful record consumes at least its 16 framing bytes of (decompressed) input;
    // the bound only guards against a reader bug.
    for (int i = 0; i < 1 << 20; ++i) {
      absl::Status s = pass == 0 ? reader->ReadRecord(&record) : reader->SkipRecord();
      if (!s.ok()) {
        if (!absl::IsOutOfRange(s) && !absl::IsDataLoss(s)) std::abort();
        break;
      }
      if (pass == 0 && record.size() > bytes.size() * 1100 + (1 << 20)) std::abort();
    }
  }
  return 0;
}
