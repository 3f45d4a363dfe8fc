#include "core/io/fixed_length_record_reader.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/io/record_index.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

std::string BodyMessage(const FixedLengthRecordOptions& o, const std::string& filename,
                        int64_t body) {
  return absl::StrCat("Excluding the header (", o.header_bytes, " bytes) and footer (",
                      o.footer_bytes, " bytes), input file \"", filename,
                      "\" has body length ", body,
                      " bytes, which is not an exact multiple of the record length (",
                      o.record_bytes, " bytes).");
}

}  // namespace

absl::StatusOr<std::unique_ptr<FixedLengthRecordReader>> FixedLengthRecordReader::Open(
    const std::string& filename, const FixedLengthRecordOptions& options) {
  if (options.record_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("record_bytes must be positive, got ", options.record_bytes));
  }
  if (options.header_bytes < 0 || options.footer_bytes < 0) {
    return absl::InvalidArgumentError("header_bytes and footer_bytes must be >= 0");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<InputStream> raw, OpenFileStream(filename));
  std::unique_ptr<FixedLengthRecordReader> r;
  if (options.compression == Compression::kNone) {
    ASSIGN_OR_RETURN(FileStat st, StatFile(filename));
    const int64_t size = static_cast<int64_t>(st.size);
    const int64_t body = size - options.header_bytes - options.footer_bytes;
    if (body < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input file \"", filename, "\" has ", size, " bytes, fewer than its header (",
          options.header_bytes, " bytes) and footer (", options.footer_bytes, " bytes)"));
    }
    if (body % options.record_bytes != 0) {
      return absl::InvalidArgumentError(BodyMessage(options, filename, body));
    }
    r.reset(new FixedLengthRecordReader(filename, std::move(raw), options));
    r->num_records_ = body / options.record_bytes;
    RETURN_IF_ERROR(r->stream_->Seek(static_cast<uint64_t>(options.header_bytes)));
    r->header_skipped_ = true;
  } else {
    auto z = NewZlibInputStream(std::move(raw), options.compression,
                                options.buffer_size == 0 ? 256 << 10 : options.buffer_size);
    r.reset(new FixedLengthRecordReader(filename, std::move(z), options));
  }
  return r;
}

FixedLengthRecordReader::FixedLengthRecordReader(std::string filename,
                                                 std::unique_ptr<InputStream> stream,
                                                 const FixedLengthRecordOptions& options)
    : filename_(std::move(filename)), stream_(std::move(stream)), options_(options) {}

absl::Status FixedLengthRecordReader::Fill(size_t n) {
  if (pos_ > 0 && pending_.size() - pos_ < n) {
    pending_.erase(0, pos_);
    pos_ = 0;
  }
  const size_t chunk = std::max<size_t>(options_.buffer_size == 0 ? 256 << 10
                                                                  : options_.buffer_size,
                                        4096);
  while (pending_.size() - pos_ < n && !eof_) {
    size_t at = pending_.size();
    size_t want = std::max(chunk, n - (at - pos_));
    pending_.resize(at + want);
    absl::StatusOr<size_t> got = stream_->Read(pending_.data() + at, want);
    if (!got.ok()) {
      pending_.resize(at);
      return got.status();
    }
    pending_.resize(at + *got);
    if (*got == 0) eof_ = true;
  }
  return absl::OkStatus();
}

absl::Status FixedLengthRecordReader::ReadRecord(std::string* record) {
  return ReadRecordInto([record](size_t bytes) -> absl::StatusOr<char*> {
    record->resize(bytes);
    return record->data();
  });
}

absl::Status FixedLengthRecordReader::ReadUncompressedInto(RecordDestination destination) {
  const size_t rb = static_cast<size_t>(options_.record_bytes);
  if (next_ >= *num_records_) return absl::OutOfRangeError("end of file");
  const auto shrank = [this] {  // the file has fewer bytes than its size said
    return absl::DataLossError(absl::StrCat("truncated record ", next_, " of ", filename_,
                                            " (the file changed while read)"));
  };
  const bool direct = rb >= kDirectReadBytes;
  if (!direct) {
    absl::Status s = Fill(rb);
    if (!s.ok()) return error_ = s;
  }
  const size_t buffered = std::min(pending_.size() - pos_, rb);
  if (!direct && buffered < rb) return error_ = shrank();
  absl::StatusOr<char*> to = destination(rb);
  if (!to.ok()) {  // the caller failed on this record: the next call reads the next one
    if (buffered == rb) {
      pos_ += rb;
      ++next_;
      return to.status();
    }
    absl::Status skipped = SeekToRecord(next_ + 1);
    if (!skipped.ok()) error_ = skipped;
    return to.status();
  }
  std::memcpy(*to, pending_.data() + pos_, buffered);
  pos_ += buffered;
  for (size_t done = buffered; done < rb;) {
    absl::StatusOr<size_t> got = stream_->Read(*to + done, rb - done);
    if (!got.ok()) return error_ = got.status();
    if (*got == 0) return error_ = shrank();
    done += *got;
  }
  ++next_;
  return absl::OkStatus();
}

absl::Status FixedLengthRecordReader::ReadRecordInto(RecordDestination destination) {
  if (!error_.ok()) return error_;
  if (num_records_.has_value()) return ReadUncompressedInto(destination);
  const size_t rb = static_cast<size_t>(options_.record_bytes);
  if (!header_skipped_) {
    absl::Status s = Fill(static_cast<size_t>(options_.header_bytes));
    if (!s.ok()) return error_ = s;
    size_t skip = std::min(pending_.size() - pos_, static_cast<size_t>(options_.header_bytes));
    pos_ += skip;
    header_skipped_ = true;
  }
  const size_t footer = static_cast<size_t>(options_.footer_bytes);
  absl::Status s = Fill(rb + footer);
  if (!s.ok()) return error_ = s;
  size_t avail = pending_.size() - pos_;
  if (avail >= rb + footer) {
    absl::StatusOr<char*> to = destination(rb);
    if (to.ok()) std::memcpy(*to, pending_.data() + pos_, rb);
    pos_ += rb;
    body_consumed_ += rb;
    ++next_;
    return to.status();
  }
  // The end: what is left must be exactly the footer.
  if (avail == footer) return error_ = absl::OutOfRangeError("end of file");
  int64_t body = static_cast<int64_t>(body_consumed_) + static_cast<int64_t>(avail) -
                 static_cast<int64_t>(footer);
  return error_ = absl::DataLossError(BodyMessage(options_, filename_, body));
}

absl::Status FixedLengthRecordReader::SkipRecord() {
  if (!error_.ok()) return error_;
  if (!num_records_.has_value()) return ReadRecord(&skipped_);
  if (next_ >= *num_records_) return absl::OutOfRangeError("end of file");
  const size_t rb = static_cast<size_t>(options_.record_bytes);
  if (pending_.size() - pos_ >= rb) {
    pos_ += rb;
    ++next_;
    return absl::OkStatus();
  }
  absl::Status s = SeekToRecord(next_ + 1);
  if (!s.ok()) error_ = s;
  return s;
}

absl::Status FixedLengthRecordReader::SeekToRecord(int64_t i) {
  if (num_records_.has_value()) {
    int64_t clamped = std::min(std::max<int64_t>(i, 0), *num_records_);
    RETURN_IF_ERROR(stream_->Seek(
        FixedLengthRecordOffset(options_.header_bytes, options_.record_bytes, clamped)));
    pending_.clear();
    pos_ = 0;
    eof_ = false;
    next_ = clamped;
    return absl::OkStatus();
  }
  if (i < next_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot seek back to record ", i, " of the compressed file ", filename_));
  }
  std::string skip;
  while (next_ < i) {
    absl::Status s = ReadRecord(&skip);
    if (absl::IsOutOfRange(s)) return absl::OkStatus();
    RETURN_IF_ERROR(s);
  }
  return absl::OkStatus();
}

}  // namespace sluice
