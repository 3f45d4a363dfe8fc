#include "core/io/zlib_stream.h"

#include <zlib.h>

#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/escaping.h"

namespace sluice {
namespace {

class ZlibInputStream : public InputStream {
 public:
  ZlibInputStream(std::unique_ptr<InputStream> raw, Compression c, size_t buffer_size)
      : raw_(std::move(raw)), compression_(c), in_(std::max<size_t>(buffer_size, 1024)) {
    std::memset(&z_, 0, sizeof(z_));
    init_status_ = inflateInit2(&z_, ZlibWindowBits(c));
  }
  ~ZlibInputStream() override {
    if (init_status_ == Z_OK) inflateEnd(&z_);
  }

  absl::StatusOr<size_t> Read(char* dst, size_t n) override {
    if (init_status_ != Z_OK) {
      return absl::InternalError(absl::StrCat("zlib inflateInit2 failed for ", name()));
    }
    if (!error_.ok()) return error_;
    size_t done = 0;
    while (done < n && !finished_) {
      if (z_.avail_in == 0 && !raw_eof_) {
        absl::StatusOr<size_t> got = raw_->Read(in_.data(), in_.size());
        if (!got.ok()) return error_ = got.status();
        if (*got == 0) {
          raw_eof_ = true;
        } else {
          z_.next_in = reinterpret_cast<Bytef*>(in_.data());
          z_.avail_in = static_cast<uInt>(*got);
        }
      }
      if (z_.avail_in == 0 && raw_eof_) {
        if (member_ended_) {  // a clean end after a complete stream (or gzip member)
          finished_ = true;
          break;
        }
        return error_ = absl::DataLossError(absl::StrCat(
                   CompressionTypeName(compression_), " stream of ", name(),
                   " ends early (truncated file) at compressed byte offset ", compressed_pos_));
      }
      member_ended_ = false;
      z_.next_out = reinterpret_cast<Bytef*>(dst + done);
      z_.avail_out = static_cast<uInt>(std::min<size_t>(n - done, 1u << 30));
      uInt before_in = z_.avail_in;
      uInt before_out = z_.avail_out;
      int rc = inflate(&z_, Z_NO_FLUSH);
      compressed_pos_ += before_in - z_.avail_in;
      done += before_out - z_.avail_out;
      if (rc == Z_STREAM_END) {
        member_ended_ = true;
        // Another gzip member may follow; a ZLIB stream ends here, and bytes after it are
        // ignored as TF's reader ignores them.
        if (compression_ == Compression::kZlib) {
          finished_ = true;
          break;
        }
        inflateReset(&z_);
        continue;
      }
      if (rc == Z_BUF_ERROR && before_in - z_.avail_in == 0 && before_out == z_.avail_out) {
        continue;  // needs more input
      }
      if (rc != Z_OK) {
        return error_ = absl::DataLossError(absl::StrCat(
                   "corrupt ", CompressionTypeName(compression_), " data in ", name(),
                   " at compressed byte offset ", compressed_pos_, ": ",
                   z_.msg != nullptr ? z_.msg : absl::StrCat("zlib error ", rc)));
      }
    }
    return done;
  }

  absl::Status Seek(uint64_t) override {
    return absl::UnimplementedError(
        absl::StrCat("cannot seek in the compressed file ", name()));
  }
  const std::string& name() const override { return raw_->name(); }

 private:
  std::unique_ptr<InputStream> raw_;
  const Compression compression_;
  std::vector<char> in_;
  z_stream z_;
  int init_status_;
  bool raw_eof_ = false;
  bool member_ended_ = false;
  bool finished_ = false;
  uint64_t compressed_pos_ = 0;
  absl::Status error_;
};

}  // namespace

absl::StatusOr<Compression> ParseCompressionType(absl::string_view type) {
  if (type.empty()) return Compression::kNone;
  if (type == "GZIP") return Compression::kGzip;
  if (type == "ZLIB") return Compression::kZlib;
  return absl::InvalidArgumentError(absl::StrCat("unsupported compression_type '",
                                                 absl::CHexEscape(type),
                                                 "' (expected '', 'GZIP' or 'ZLIB')"));
}

absl::string_view CompressionTypeName(Compression c) {
  switch (c) {
    case Compression::kNone: return "";
    case Compression::kGzip: return "GZIP";
    case Compression::kZlib: return "ZLIB";
  }
  return "";
}

int ZlibWindowBits(Compression c) { return c == Compression::kGzip ? MAX_WBITS + 16 : MAX_WBITS; }

std::unique_ptr<InputStream> NewZlibInputStream(std::unique_ptr<InputStream> raw, Compression c,
                                                size_t buffer_size) {
  return std::make_unique<ZlibInputStream>(std::move(raw), c, buffer_size);
}

}  // namespace sluice
