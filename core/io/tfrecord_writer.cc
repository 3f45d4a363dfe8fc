#include "core/io/tfrecord_writer.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/util/crc32c.h"
#include "core/io/input_stream.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

constexpr size_t kOutBufferSize = 256 << 10;  // TF's ZlibOutputBuffer size
constexpr int kTfZlibMemLevel = 9;

void PutFixed64(char* p, uint64_t v) { std::memcpy(p, &v, 8); }
void PutFixed32(char* p, uint32_t v) { std::memcpy(p, &v, 4); }

}  // namespace

void AppendTFRecord(absl::string_view record, std::string* out) {
  char header[12];
  PutFixed64(header, record.size());
  PutFixed32(header + 8, crc32c::Mask(crc32c::Value(header, 8)));
  char footer[4];
  PutFixed32(footer, crc32c::Mask(crc32c::Value(record.data(), record.size())));
  out->append(header, 12);
  out->append(record.data(), record.size());
  out->append(footer, 4);
}

struct TFRecordWriter::ZState {
  z_stream z;
};

absl::StatusOr<std::unique_ptr<TFRecordWriter>> TFRecordWriter::Open(const std::string& filename,
                                                                     Compression compression) {
  int fd;
  do {
    fd = ::open(filename.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return FileError(errno, "create", filename);
  return FromDescriptor(filename, fd, compression);
}

absl::StatusOr<std::unique_ptr<TFRecordWriter>> TFRecordWriter::FromDescriptor(
    const std::string& filename, int fd, Compression compression) {
  std::unique_ptr<TFRecordWriter> w(new TFRecordWriter(filename, fd, compression));
  if (!w->error_.ok()) return w->error_;
  return w;
}

absl::StatusOr<std::unique_ptr<TFRecordWriter>> TFRecordWriter::ToFile(
    std::unique_ptr<WritableFile> file, Compression compression) {
  std::unique_ptr<TFRecordWriter> w(new TFRecordWriter(file->name(), -1, compression));
  w->file_ = std::move(file);
  if (!w->error_.ok()) return w->error_;
  return w;
}

TFRecordWriter::TFRecordWriter(std::string filename, int fd, Compression compression)
    : filename_(std::move(filename)), fd_(fd), compression_(compression), out_(kOutBufferSize) {
  if (compression_ != Compression::kNone) {
    z_ = std::make_unique<ZState>();
    std::memset(&z_->z, 0, sizeof(z_->z));
    if (deflateInit2(&z_->z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, ZlibWindowBits(compression_),
                     kTfZlibMemLevel, Z_DEFAULT_STRATEGY) != Z_OK) {
      z_.reset();
      error_ = absl::InternalError(absl::StrCat("zlib deflateInit2 failed for ", filename_));
    }
  }
}

TFRecordWriter::~TFRecordWriter() {
  if (fd_ >= 0) Close().IgnoreError();
  // A WritableFile not closed is abandoned whole (nothing appears): no Close() here.
  if (z_ != nullptr) deflateEnd(&z_->z);
}

absl::Status TFRecordWriter::FlushOut() {
  if (file_ != nullptr) {
    absl::Status s = file_->Append(absl::string_view(out_.data(), out_len_));
    if (!s.ok()) return error_ = s;
    out_len_ = 0;
    return absl::OkStatus();
  }
  size_t done = 0;
  while (done < out_len_) {
    ssize_t w = ::write(fd_, out_.data() + done, out_len_ - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      return error_ = FileError(errno, "write", filename_);
    }
    done += static_cast<size_t>(w);
  }
  out_len_ = 0;
  return absl::OkStatus();
}

absl::Status TFRecordWriter::WriteRaw(const char* data, size_t n) {
  while (n > 0) {
    if (out_len_ == out_.size()) RETURN_IF_ERROR(FlushOut());
    size_t k = std::min(n, out_.size() - out_len_);
    std::memcpy(out_.data() + out_len_, data, k);
    out_len_ += k;
    data += k;
    n -= k;
  }
  return absl::OkStatus();
}

absl::Status TFRecordWriter::Deflate(const char* data, size_t n, int flush) {
  z_stream& z = z_->z;
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data));
  z.avail_in = static_cast<uInt>(n);
  for (;;) {
    if (out_len_ == out_.size()) RETURN_IF_ERROR(FlushOut());
    z.next_out = reinterpret_cast<Bytef*>(out_.data() + out_len_);
    z.avail_out = static_cast<uInt>(out_.size() - out_len_);
    int rc = deflate(&z, flush);
    out_len_ = out_.size() - z.avail_out;
    if (rc == Z_STREAM_END) return absl::OkStatus();
    if (rc != Z_OK && rc != Z_BUF_ERROR) {
      return error_ = absl::InternalError(absl::StrCat("zlib deflate failed (", rc, ") for ",
                                                       filename_));
    }
    if (flush == Z_NO_FLUSH && z.avail_in == 0) return absl::OkStatus();
  }
}

absl::Status TFRecordWriter::Write(absl::string_view record) {
  if (!error_.ok()) return error_;
  if (fd_ < 0 && file_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(filename_, " is closed"));
  }
  char header[12];
  PutFixed64(header, record.size());
  PutFixed32(header + 8, crc32c::Mask(crc32c::Value(header, 8)));
  char footer[4];
  PutFixed32(footer, crc32c::Mask(crc32c::Value(record.data(), record.size())));
  if (z_ == nullptr) {
    RETURN_IF_ERROR(WriteRaw(header, 12));
    RETURN_IF_ERROR(WriteRaw(record.data(), record.size()));
    return WriteRaw(footer, 4);
  }
  RETURN_IF_ERROR(Deflate(header, 12, Z_NO_FLUSH));
  // deflate takes uInt counts.
  for (size_t done = 0; done < record.size();) {
    size_t k = std::min<size_t>(record.size() - done, 1u << 30);
    RETURN_IF_ERROR(Deflate(record.data() + done, k, Z_NO_FLUSH));
    done += k;
  }
  return Deflate(footer, 4, Z_NO_FLUSH);
}

absl::Status TFRecordWriter::Close() {
  if (fd_ < 0 && file_ == nullptr) return error_;
  absl::Status s = error_;
  if (s.ok() && z_ != nullptr) s = Deflate(nullptr, 0, Z_FINISH);
  if (s.ok()) s = FlushOut();
  if (file_ != nullptr) {
    if (s.ok()) s = file_->Close();
    file_.reset();  // not closed after an error: abandoned whole
  } else if (::close(fd_) != 0 && s.ok()) {
    s = FileError(errno, "close", filename_);
  }
  fd_ = -1;
  if (!s.ok()) error_ = s;
  return s;
}

}  // namespace sluice
