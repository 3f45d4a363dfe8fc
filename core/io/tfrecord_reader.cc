#include "core/io/tfrecord_reader.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/io/file_system.h"
#include "core/io/mapped_file.h"
#include "core/io/mapping_truncation_guard.h"
#include "core/tensor/host_memory.h"
#include "core/util/crc32c.h"
#include "core/util/status_macros.h"
#include "core/util/thread_pool.h"

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

// The kernel's fault-around (Linux's default fault_around_bytes): a read fault on a file mapping
// maps the cached pages of the aligned 64 KiB around it, so one read per window maps them all.
constexpr uintptr_t kFaultAroundBytes = uintptr_t{64} << 10;

}  // namespace

struct TFRecordReader::Mapping {
  explicit Mapping(std::shared_ptr<MappedFile> f) : file(std::move(f)), guard(file->bytes()) {}
  const std::shared_ptr<MappedFile> file;
  const MappingTruncationGuard guard;  // declared after file: unguarded before the unmap
};

absl::StatusOr<std::unique_ptr<TFRecordReader>> TFRecordReader::Open(
    const std::string& filename, const TFRecordReaderOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<InputStream> stream, OpenFileStream(filename));
  std::optional<uint64_t> size;
  if (options.compression == Compression::kNone) {
    absl::StatusOr<FileStat> st = StatFile(filename);
    if (st.ok()) size = st->size;
  }
  std::unique_ptr<TFRecordReader> reader = FromStream(std::move(stream), options, size);
  // Only a local file with bytes in it is mapped (a FIFO or a /proc file has size 0); one that
  // cannot be mapped or guarded is read, as before.
  if (options.map_local_file && size.value_or(0) > 0 && IsLocalPath(filename)) {
    absl::StatusOr<std::shared_ptr<MappedFile>> file = MappedFile::Map(filename);
    if (file.ok() && (*file)->size() > 0) {
      ThreadPool* const pool = options.unmap_pool;
      auto unmap = [pool](const Mapping* m) {
        if (pool == nullptr) return delete m;
        pool->Schedule([m] { delete m; });
      };
      auto mapping = std::shared_ptr<const Mapping>(new Mapping(*std::move(file)), unmap);
      if (mapping->guard.guarded()) reader->UseMapping(std::move(mapping));
    }
  }
  return reader;
}

void TFRecordReader::UseMapping(std::shared_ptr<const Mapping> mapping) {
  mapping_ = std::move(mapping);
  size_ = mapping_->file->size();
  buf_ = const_cast<char*>(mapping_->file->bytes().data());  // only ever read
  pos_ = 0;
  limit_ = mapping_->file->size();
  eof_ = true;  // Fill never reads: the mapping is the whole file
}

absl::Status TFRecordReader::CheckNotTruncated() {
  if (mapping_ == nullptr || !mapping_->guard.truncated()) return absl::OkStatus();
  return Fail(TruncatedWhileRead());
}

absl::Status TFRecordReader::TruncatedWhileRead() const {
  return absl::DataLossError(absl::StrCat("file ", filename(),
                                          " was truncated while it was read (found at byte "
                                          "offset ",
                                          offset_, ")"));
}

absl::Status TFRecordReader::ExplainMappedFailure(absl::Status s) const {
  if (!absl::IsDataLoss(s)) return s;
  if (mapping_->guard.truncated()) return TruncatedWhileRead();
  absl::StatusOr<FileStat> now = StatFile(filename());
  if (now.ok() && now->size < mapping_->file->size()) return TruncatedWhileRead();
  return s;
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
      size_(compressed_ ? std::nullopt : size),
      buffer_size_(std::max<size_t>(
          options.buffer_size == 0 ? kDefaultBufferSize : options.buffer_size, 64)) {
  if (compressed_) {
    stream_ = NewZlibInputStream(std::move(stream), options.compression, buffer_size_);
  } else {
    stream_ = std::move(stream);
  }
}

struct TFRecordReader::Chunk {
  explicit Chunk(size_t n) : bytes(new char[n]), size(n) {}
  ~Chunk() { ProcessMemoryBudget().Release(static_cast<int64_t>(size)); }
  Chunk(const Chunk&) = delete;
  Chunk& operator=(const Chunk&) = delete;

  const std::unique_ptr<char[]> bytes;
  const size_t size;
};

absl::Status TFRecordReader::NewChunk() {
  const int64_t bytes = static_cast<int64_t>(buffer_size_);
  if (!ProcessMemoryBudget().TryCharge(bytes)) {
    return ProcessMemoryBudget().Refusal(
        bytes, absl::StrCat("reading TFRecord file ", filename()),
        absl::StrCat("a read buffer of ", bytes, " bytes"));
  }
  auto chunk = std::make_shared<Chunk>(buffer_size_);
  const size_t avail = limit_ - pos_;
  if (avail > 0) std::memcpy(chunk->bytes.get(), buf_ + pos_, avail);
  chunk_ = std::move(chunk);
  buf_ = chunk_->bytes.get();
  chunk_lent_ = false;
  pos_ = 0;
  limit_ = avail;
  return absl::OkStatus();
}

absl::StatusOr<size_t> TFRecordReader::Fill(size_t n) {
  size_t avail = limit_ - pos_;
  if (avail >= n || eof_) return avail;
  if (chunk_ == nullptr || chunk_lent_) {
    RETURN_IF_ERROR(NewChunk());
  } else if (pos_ > 0) {
    std::memmove(buf_, buf_ + pos_, avail);
    pos_ = 0;
    limit_ = avail;
  }
  while (limit_ < n && !eof_) {
    ASSIGN_OR_RETURN(size_t got, stream_->Read(buf_ + limit_, buffer_size_ - limit_));
    if (got == 0) eof_ = true;
    limit_ += got;
  }
  return limit_ - pos_;
}

absl::StatusOr<size_t> TFRecordReader::ReadBytes(char* dst, size_t n) {
  size_t from_buf = std::min(n, limit_ - pos_);
  if (from_buf > 0) std::memcpy(dst, buf_ + pos_, from_buf);
  pos_ += from_buf;
  size_t done = from_buf;
  if (done == n || eof_) return done;
  if (n - done >= buffer_size_) {  // large remainder: straight into dst
    ASSIGN_OR_RETURN(size_t got, stream_->Read(dst + done, n - done));
    if (got < n - done) eof_ = true;
    return done + got;
  }
  ASSIGN_OR_RETURN(size_t avail, Fill(n - done));
  size_t k = std::min(avail, n - done);
  if (k > 0) std::memcpy(dst + done, buf_ + pos_, k);
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
  const char* h = buf_ + pos_;
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
  const uint32_t masked = unchecked.crc_follows_data ? DecodeFixed32(data.data() + data.size())
                                                     : unchecked.masked_crc;
  if (crc32c::Unmask(masked) == crc32c::Value(data.data(), data.size())) {
    return absl::OkStatus();
  }
  return absl::DataLossError(absl::StrCat("corrupted record at byte offset ", unchecked.offset,
                                          " of file ", filename, " (data checksum mismatch)"));
}

absl::Status TFRecordReader::ReadCheckedHeader(uint64_t* length, uint64_t* total) {
  absl::Status s = ReadHeader(length);
  if (!s.ok()) return Fail(s);
  *total = kTFRecordHeaderBytes + *length + kTFRecordFooterBytes;
  if (*length > UINT64_MAX - 64 ||
      (size_.has_value() && (offset_ > *size_ || *total > *size_ - offset_))) {
    uint64_t got = size_.has_value() && *size_ > offset_ ? *size_ - offset_ : 0;
    return Fail(Truncated(*total, got));
  }
  const int64_t element_limit = ProcessMemoryBudget().limits().element_bytes;
  if (*length > static_cast<uint64_t>(element_limit)) {
    return Fail(ElementLimitError(
        absl::StrCat("the record at byte offset ", offset_, " of file ", filename(), " has ",
                     *length, " bytes, more than the memory limit of one element, ",
                     element_limit, " bytes (--max_element_bytes)"),
        element_limit));
  }
  return absl::OkStatus();
}

absl::Status TFRecordReader::Read(std::string* record, UncheckedData* unchecked) {
  if (!error_.ok()) return error_;
  uint64_t length, total;
  RETURN_IF_ERROR(ReadCheckedHeader(&length, &total));
  RETURN_IF_ERROR(CheckNotTruncated());
  pos_ += kTFRecordHeaderBytes;
  const uint64_t at = offset_;
  absl::Status s = ReadData(length, total, record, unchecked);
  if (mapping_ != nullptr && mapping_->guard.truncated()) {  // zeros were copied (or checked)
    offset_ = at;
    return CheckNotTruncated();
  }
  return s;
}

absl::Status TFRecordReader::ReadData(uint64_t length, uint64_t total, std::string* record,
                                      UncheckedData* unchecked) {
  // The data and its crc. Small records come out of the buffer in one piece.
  if (limit_ - pos_ >= length + kTFRecordFooterBytes) {
    const char* d = buf_ + pos_;
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
  // The string keeps what it held (a previous record): growing it zero-fills only the bytes
  // it never had, not every record's (a reader reusing one string reads without a memset).
  uint64_t done = 0;
  while (done < length) {
    size_t step = static_cast<size_t>(std::min<uint64_t>(length - done, kGrowStep));
    if (record->size() < done + step) record->resize(done + step);
    absl::StatusOr<size_t> got = ReadBytes(record->data() + done, step);
    if (!got.ok()) return Fail(got.status());
    done += *got;
    if (*got < step) return Fail(Truncated(total, kTFRecordHeaderBytes + done));
  }
  record->resize(length);
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

absl::Status TFRecordReader::ReadRecordView(absl::string_view* data, UncheckedData* unchecked,
                                            std::shared_ptr<const void>* owner) {
  if (!error_.ok()) return error_;
  uint64_t length, total;
  RETURN_IF_ERROR(ReadCheckedHeader(&length, &total));
  RETURN_IF_ERROR(CheckNotTruncated());
  if (total > buffer_size_ && mapping_ == nullptr) {  // larger than a buffer: a string of its own
    pos_ += kTFRecordHeaderBytes;
    auto record = std::make_shared<std::string>();
    RETURN_IF_ERROR(ReadData(length, total, record.get(), unchecked));
    *data = *record;
    *owner = std::move(record);
    return absl::OkStatus();
  }
  // The whole record in the buffer: the header is there already, Fill reads the rest (into a
  // new buffer, with the header, when views hold this one).
  absl::StatusOr<size_t> avail = Fill(static_cast<size_t>(total));
  if (!avail.ok()) return Fail(avail.status());
  if (*avail < total) return Fail(Truncated(total, *avail));
  const char* d = buf_ + pos_ + kTFRecordHeaderBytes;
  const UncheckedData crc{offset_, DecodeFixed32(d + length)};
  *data = absl::string_view(d, static_cast<size_t>(length));
  if (unchecked != nullptr) {
    *unchecked = crc;
  } else {
    absl::Status s = CheckData(*data, crc, filename());
    RETURN_IF_ERROR(CheckNotTruncated());  // the zeros of a truncated mapping were checked
    if (!s.ok()) return Fail(s);
  }
  if (mapping_ != nullptr) {
    if (*owner != mapping_) *owner = mapping_;
  } else if (*owner != chunk_) {
    *owner = chunk_;
  }
  chunk_lent_ = true;
  pos_ += static_cast<size_t>(total);
  offset_ += total;
  return absl::OkStatus();
}

absl::Status TFRecordReader::FrameMappedRecords(int64_t max_records, int64_t max_bytes,
                                                std::vector<FramedRecord>* out,
                                                int64_t* data_bytes,
                                                std::shared_ptr<const void>* owner) {
  if (mapping_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("FrameMappedRecords on ", filename(), ", which is read, not mapped"));
  }
  if (!error_.ok()) return error_;
  if (*owner != mapping_) *owner = mapping_;
  // How many records ahead the next headers are prefetched, at the last record's stride.
  constexpr uint64_t kPrefetchRecords = 4;
  for (int64_t n = 0; n < max_records && *data_bytes <= max_bytes; ++n) {
    uint64_t length, total;
    // ReadRecordView's checks, in its order; the mapping holds the whole file, so every
    // record that passes them lies in it.
    RETURN_IF_ERROR(ReadCheckedHeader(&length, &total));
    RETURN_IF_ERROR(CheckNotTruncated());
    const uint64_t ahead = kPrefetchRecords * total;
    if (ahead < limit_ - pos_) __builtin_prefetch(buf_ + pos_ + ahead);
    out->push_back(FramedRecord{
        absl::string_view(buf_ + pos_ + kTFRecordHeaderBytes, static_cast<size_t>(length)),
        UncheckedData{offset_, 0, /*crc_follows_data=*/true}});
    pos_ += static_cast<size_t>(total);
    offset_ += total;
    *data_bytes += static_cast<int64_t>(length);
  }
  return absl::OkStatus();
}

absl::Status TFRecordReader::SkipRecord() {
  if (!error_.ok()) return error_;
  uint64_t length;
  absl::Status s = ReadHeader(&length);
  if (!s.ok()) return Fail(s);
  RETURN_IF_ERROR(CheckNotTruncated());
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
    absl::StatusOr<size_t> avail = Fill(std::min<uint64_t>(skip, buffer_size_));
    if (!avail.ok()) return Fail(avail.status());
    if (*avail == 0) return Fail(Truncated(total, total - skip));
    size_t k = static_cast<size_t>(std::min<uint64_t>(skip, *avail));
    pos_ += k;
    skip -= k;
  }
  offset_ += total;
  return absl::OkStatus();
}

std::shared_ptr<TensorBuffer> TFRecordReader::mapped_file() const {
  if (mapping_ == nullptr) return nullptr;
  return std::shared_ptr<TensorBuffer>(mapping_, mapping_->file.get());  // holds the guard too
}

std::optional<TFRecordReader::PagesAhead> TFRecordReader::TakePagesAhead() {
  if (mapping_ == nullptr) return std::nullopt;
  const uint64_t size = mapping_->file->size();
  const uint64_t to = std::min(size, offset_ + kFaultAheadBytes);
  const uint64_t from = std::max(faulted_ahead_to_, offset_);
  if (from >= to) return std::nullopt;
  faulted_ahead_to_ = to;
  // Whole pages: the stretches follow one another page by page (the mapping starts on one).
  static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t aligned = from - from % page;
  return PagesAhead{mapping_, mapping_->file->bytes().substr(aligned, to - aligned)};
}

void TFRecordReader::FaultIn(const PagesAhead& pages) {
  if (pages.mapping == nullptr || pages.bytes.empty()) return;
  // Reads, not madvise(MADV_POPULATE_READ): that maps the same pages by fault-around too, then
  // walks the page tables page by page (get_user_pages) under their locks, which cost more kernel
  // time than the faults (bench/RESULTS.md, "Issue 27 part autoscale"). A page past the end of a
  // file truncated since it was mapped raises SIGBUS here, which the mapping's truncation guard
  // (held by pages.mapping) answers with zeros, marking the mapping truncated.
  const uintptr_t begin = reinterpret_cast<uintptr_t>(pages.bytes.data());
  const uintptr_t end = begin + pages.bytes.size();
  for (uintptr_t at = begin; at < end; at = (at / kFaultAroundBytes + 1) * kFaultAroundBytes) {
    (void)*reinterpret_cast<const volatile char*>(at);
  }
}

absl::Status TFRecordReader::Seek(uint64_t offset) {
  if (compressed_) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot seek to a record of the compressed file ", filename(),
                     "; record indexes need uncompressed TFRecord files"));
  }
  error_ = absl::OkStatus();
  if (mapping_ != nullptr) {  // past the end: reads then find the end (or the truncation)
    pos_ = static_cast<size_t>(std::min<uint64_t>(offset, limit_));
    offset_ = offset;
    faulted_ahead_to_ = offset;
    return CheckNotTruncated();
  }
  RETURN_IF_ERROR(stream_->Seek(offset));
  pos_ = limit_ = 0;
  eof_ = false;
  offset_ = offset;
  return absl::OkStatus();
}

}  // namespace sluice
