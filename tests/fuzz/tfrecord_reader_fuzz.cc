// Fuzz target: the TFRecord reader (core/io/tfrecord_reader.h) on arbitrary file bytes. The
// compression is chosen from the bytes' magic (gzip 1f 8b, zlib 78 xx, else none), the buffer
// size from the input length, so the committed fixtures are meaningful seeds. Every outcome
// must be a record, OUT_OF_RANGE or DATA_LOSS: nothing crashes, nothing loops forever. Records
// read as views (ReadRecordView, then CheckData in order, as a parallel map does) must be
// exactly ReadRecord's records, ending with exactly its error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/io/tfrecord_reader.h"

namespace {

// ReadRecord's records and final status, or (views) ReadRecordView's, each checked with
// CheckData in order, ending at the first failed check or read error.
absl::Status ReadAll(sluice::TFRecordReader* reader, bool views,
                     std::vector<std::string>* records) {
  if (!views) {
    for (int i = 0; i < 1 << 20; ++i) {
      std::string record;
      absl::Status s = reader->ReadRecord(&record);
      if (!s.ok()) return s;
      records->push_back(std::move(record));
    }
    std::abort();
  }
  struct Held {
    absl::string_view data;
    sluice::TFRecordReader::UncheckedData unchecked;
  };
  std::vector<Held> held;
  std::vector<std::shared_ptr<const void>> owners;
  std::shared_ptr<const void> owner;
  absl::Status end;
  for (int i = 0; i < 1 << 20 && end.ok(); ++i) {
    Held h;
    end = reader->ReadRecordView(&h.data, &h.unchecked, &owner);
    if (!end.ok()) break;
    if (owners.empty() || owners.back() != owner) owners.push_back(owner);
    held.push_back(h);
  }
  if (end.ok()) std::abort();
  for (const Held& h : held) {
    absl::Status c = sluice::TFRecordReader::CheckData(h.data, h.unchecked, reader->filename());
    if (!c.ok()) return c;
    records->emplace_back(h.data);
  }
  return end;
}

}  // namespace

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
  std::vector<std::string> records[2];
  absl::Status ends[2];
  for (int views = 0; views < 2; ++views) {
    auto reader = sluice::TFRecordReader::FromStream(
        sluice::NewStringStream("fuzz", bytes), options,
        options.compression == sluice::Compression::kNone
            ? std::optional<uint64_t>(bytes.size())
            : std::nullopt);
    ends[views] = ReadAll(reader.get(), views == 1, &records[views]);
  }
  if (ends[0] != ends[1] || records[0] != records[1]) std::abort();
  return 0;
}
