#include "core/io/mapped_tfrecord_reader.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/io/tfrecord_reader.h"
#include "core/util/crc32c.h"
#include "core/util/status_macros.h"

namespace sluice {

absl::Status MappedTFRecordReader::Next(absl::string_view* record) {
  if (!error_.ok()) return error_;
  const absl::string_view bytes = file_->bytes();
  const uint64_t left = bytes.size() - offset_;
  if (left == 0) return absl::OutOfRangeError(absl::StrCat("end of file ", file_->name()));
  const auto truncated = [&](uint64_t record_bytes) {
    return Fail(absl::DataLossError(absl::StrCat(
        "truncated record at byte offset ", offset_, " of file ", file_->name(),
        ": the file ends after ", left, " of the record's ", record_bytes, " bytes")));
  };
  if (left < kTFRecordHeaderBytes) return truncated(kTFRecordHeaderBytes + kTFRecordFooterBytes);
  const char* h = bytes.data() + offset_;
  uint64_t length;
  uint32_t masked;
  std::memcpy(&length, h, 8);
  std::memcpy(&masked, h + 8, 4);
  if (crc32c::Unmask(masked) != crc32c::Value(h, 8)) {
    return Fail(absl::DataLossError(absl::StrCat("corrupted record at byte offset ", offset_,
                                                 " of file ", file_->name(),
                                                 " (length checksum mismatch)")));
  }
  const uint64_t framing = kTFRecordHeaderBytes + kTFRecordFooterBytes;
  if (length > left || left - length < framing) return truncated(length + framing);
  TFRecordReader::UncheckedData unchecked{offset_, 0};
  std::memcpy(&unchecked.masked_crc, h + kTFRecordHeaderBytes + length, 4);
  const absl::string_view data(h + kTFRecordHeaderBytes, length);
  absl::Status checked = TFRecordReader::CheckData(data, unchecked, file_->name());
  if (!checked.ok()) return Fail(checked);
  offset_ += length + framing;
  *record = data;
  return absl::OkStatus();
}

}  // namespace sluice
