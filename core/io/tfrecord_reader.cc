#include "core/io/tfrecord_reader.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/tensor/host_memory.h"
#include "core/util/crc32c.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

constexpr size_t kDefaultBufferSize = 256 << 10;
// A record longer than this grows its string in steps of this size, so that a corrupt (but
// checksummed) length cannot make us allocate more than the file holds.
constexpr size_t kGrowStep = 64 << 20;

uint64_t DecodeFixed64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
uint32_t DecodeFixed32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TFRecordReader>> TFRecordReader::Open(
    const std::string& filename, const TFRecordReaderOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<InputStream> stream, OpenFileStream(filename));
  std::optional<uint64_t> size;
  if (options.compression == Compression::kNone) {
    absl::StatusOr<FileStat> st = StatFile(filename);
    if (st.ok()) size = st->size;
  }
  return FromStream(std::move(stream), options, size);
}

std::unique_ptr<TFRecordReader> TFRecordReader::FromStream(std::unique_ptr<InputStream> stream,
                                                           const TFRecordReaderOptions& options,
                                                           std::optional<uint64_t> size) {
  return std::unique_ptr<TFRecordReader>(new TFRecordReader(std::move(stream), options, size));
}

TFRecordReader::TFRecordReader(std::unique_ptr<InputStream> stream,
                               const TFRecordReaderOptions& options,
                               std::optional<uint64_t> size)
    : compressed_(options.compression != Compression::kNone),
      size_(compressed_ ? std::nullopt : size) {
  size_t buffer_size = options.buffer_size == 0 ? kDefaultBufferSize : options.buffer_size;
  buffer_size = std::max<size_t>(buffer_size, 64);
  if (compressed_) {
    stream_ = NewZlibInputStream(std::move(stream), options.compression, buffer_size);
  } else {
    stream_ = std::move(stream);
  }
  buf_.resize(buffer_size);
}

absl::StatusOr<size_t> TFRecordReader::Fill(size_t n) {
  size_t avail = limit_ - pos_;
  if (avail >= n || eof_) return avail;
  if (pos_ > 0) {
    std::memmove(buf_.data(), buf_.data() + pos_, avail);
    pos_ = 0;
    limit_ = avail;
  }
  while (limit_ < n && !eof_) {
    ASSIGN_OR_RETURN(size_t got, stream_->Read(buf_.data() + limit_, buf_.size() - limit_));
    if (got == 0) eof_ = true;
    limit_ += got;
  }
  return limit_ - pos_;
}

absl::StatusOr<size_t> TFRecordReader::ReadBytes(char* dst, size_t n) {
  size_t from_buf = std::min(n, limit_ - pos_);
  std::memcpy(dst, buf_.data() + pos_, from_buf);
  pos_ += from_buf;
  size_t done = from_buf;
  if (done == n || eof_) return done;
  if (n - done >= buf_.size()) {  // large remainder: straight into dst
    ASSIGN_OR_RETURN(size_t got, stream_->Read(dst + done, n - done));
    if (got < n - done) eof_ = true;
    return done + got;
  }
  ASSIGN_OR_RETURN(size_t avail, Fill(n - done));
  size_t k = std::min(avail, n - done);
  std::memcpy(dst + done, buf_.data() + pos_, k);
  pos_ += k;
  return done + k;
}

absl::Status TFRecordReader::Truncated(uint64_t record_bytes, uint64_t got) const {
  return absl::DataLossError(absl::StrCat("truncated record at byte offset ", offset_,
                                          " of file ", filename(), ": the file ends after ", got,
                                          " of the record's ", record_bytes, " bytes"));
}

absl::Status TFRecordReader::ReadHeader(uint64_t* length) {
  ASSIGN_OR_RETURN(size_t avail, Fill(kTFRecordHeaderBytes));
  if (avail == 0) return absl::OutOfRangeError(absl::StrCat("end of file ", filename()));
  if (avail < kTFRecordHeaderBytes) {
    return Truncated(kTFRecordHeaderBytes + kTFRecordFooterBytes, avail);
  }
  const char* h = buf_.data() + pos_;
  uint64_t len = DecodeFixed64(h);
  if (crc32c::Unmask(DecodeFixed32(h + 8)) != crc32c::Value(h, 8)) {
    return absl::DataLossError(absl::StrCat("corrupted record at byte offset ", offset_,
                                            " of file ", filename(),
                                            " (length checksum mismatch)"));
  }
  *length = len;
  return absl::OkStatus();
}

absl::Status TFRecordReader::ReadRecord(std::string* record) { return Read(record, nullptr); }

absl::Status TFRecordReader::ReadRecordUnchecked(std::string* record,
                                                 UncheckedData* unchecked) {
  return Read(record, unchecked);
}

absl::Status TFRecordReader::CheckData(absl::string_view data, const UncheckedData& unchecked,
                                       absl::string_view filename) {
  if (crc32c::Unmask(unchecked.masked_crc) == crc32c::Value(data.data(), data.size())) {
    return absl::OkStatus();
  }
  return absl::DataLossError(absl::StrCat("corrupted record at byte offset ", unchecked.offset,
                                          " of file ", filename, " (data checksum mismatch)"));
}

absl::Status TFRecordReader::Read(std::string* record, UncheckedData* unchecked) {
  if (!error_.ok()) return error_;
  uint64_t length;
  absl::Status s = ReadHeader(&length);
  if (!s.ok()) return Fail(s);
  const uint64_t total = kTFRecordHeaderBytes + length + kTFRecordFooterBytes;
  if (length > UINT64_MAX - 64 ||
      (size_.has_value() && (offset_ > *size_ || total > *size_ - offset_))) {
    uint64_t got = size_.has_value() && *size_ > offset_ ? *size_ - offset_ : 0;
    return Fail(Truncated(total, got));
  }
  const int64_t element_limit = ProcessMemoryBudget().limits().element_bytes;
  if (length > static_cast<uint64_t>(element_limit)) {
    return Fail(absl::ResourceExhaustedError(absl::StrCat(
        "the record at byte offset ", offset_, " of file ", filename(), " has ", length,
        " bytes, more than the memory limit of one element, ", element_limit,
        " bytes (--max_element_bytes)")));
  }
  pos_ += kTFRecordHeaderBytes;
  // The data and its crc. Small records come out of the buffer in one piece.
  if (limit_ - pos_ >= length + kTFRecordFooterBytes) {
    const char* d = buf_.data() + pos_;
    const UncheckedData data{offset_, DecodeFixed32(d + length)};
    if (unchecked != nullptr) {
      *unchecked = data;
    } else {
      absl::Status s = CheckData(absl::string_view(d, length), data, filename());
      if (!s.ok()) return Fail(s);
    }
    record->assign(d, length);
    pos_ += length + kTFRecordFooterBytes;
    offset_ += total;
    return absl::OkStatus();
  }
  record->clear();
  uint64_t done = 0;
  while (done < length) {
    size_t step = static_cast<size_t>(std::min<uint64_t>(length - done, kGrowStep));
    record->resize(done + step);
    absl::StatusOr<size_t> got = ReadBytes(record->data() + done, step);
    if (!got.ok()) return Fail(got.status());
    done += *got;
    if (*got < step) return Fail(Truncated(total, kTFRecordHeaderBytes + done));
  }
  char crc[4];
  absl::StatusOr<size_t> got = ReadBytes(crc, 4);
  if (!got.ok()) return Fail(got.status());
  if (*got < 4) return Fail(Truncated(total, kTFRecordHeaderBytes + length + *got));
  const UncheckedData data{offset_, DecodeFixed32(crc)};
  if (unchecked != nullptr) {
    *unchecked = data;
  } else {
    absl::Status s = CheckData(*record, data, filename());
    if (!s.ok()) return Fail(s);
  }
  offset_ += total;
  return absl::OkStatus();
}

absl::Status TFRecordReader::SkipRecord() {
  if (!error_.ok()) return error_;
  uint64_t length;
  absl::Status s = ReadHeader(&length);
  if (!s.ok()) return Fail(s);
  const uint64_t total = kTFRecordHeaderBytes + length + kTFRecordFooterBytes;
  if (length > UINT64_MAX - 64 ||
      (size_.has_value() && (offset_ > *size_ || total > *size_ - offset_))) {
    uint64_t got = size_.has_value() && *size_ > offset_ ? *size_ - offset_ : 0;
    return Fail(Truncated(total, got));
  }
  uint64_t skip = total;
  if (limit_ - pos_ >= skip) {
    pos_ += skip;
    offset_ += total;
    return absl::OkStatus();
  }
  if (!compressed_ && size_.has_value()) {  // the size check above caught truncation
    offset_ += total;
    pos_ = limit_ = 0;
    eof_ = false;
    s = stream_->Seek(offset_);
    if (!s.ok()) return Fail(s);
    return absl::OkStatus();
  }
  // Compressed, or no size to check against: read through.
  skip -= limit_ - pos_;
  pos_ = limit_;
  while (skip > 0) {
    absl::StatusOr<size_t> avail = Fill(std::min<uint64_t>(skip, buf_.size()));
    if (!avail.ok()) return Fail(avail.status());
    if (*avail == 0) return Fail(Truncated(total, total - skip));
    size_t k = static_cast<size_t>(std::min<uint64_t>(skip, *avail));
    pos_ += k;
    skip -= k;
  }
  offset_ += total;
  return absl::OkStatus();
}

absl::Status TFRecordReader::Seek(uint64_t offset) {
  if (compressed_) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot seek to a record of the compressed file ", filename(),
                     "; record indexes need uncompressed TFRecord files"));
  }
  error_ = absl::OkStatus();
  RETURN_IF_ERROR(stream_->Seek(offset));
  pos_ = limit_ = 0;
  eof_ = false;
  offset_ = offset;
  return absl::OkStatus();
}

}  // namespace sluice
