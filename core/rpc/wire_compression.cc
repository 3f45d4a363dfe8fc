#include "core/rpc/wire_compression.h"

#include <lz4frame.h>
#include <zstd.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace sluice {

absl::string_view WireCompressionName(WireCompression c) {
  switch (c) {
    case WireCompression::kNone:
      return "none";
    case WireCompression::kLz4:
      return "lz4";
    case WireCompression::kZstd:
      return "zstd";
  }
  return "unknown";
}

absl::StatusOr<WireCompression> ParseWireCompression(absl::string_view name) {
  for (WireCompression c : {WireCompression::kNone, WireCompression::kLz4, WireCompression::kZstd}) {
    if (name == WireCompressionName(c)) return c;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("compression \"", name, "\": expected none, lz4 or zstd"));
}

absl::StatusOr<WireCompression> FromProto(proto::WireCompression c) {
  switch (c) {
    case proto::WIRE_COMPRESSION_NONE:
      return WireCompression::kNone;
    case proto::WIRE_COMPRESSION_LZ4:
      return WireCompression::kLz4;
    case proto::WIRE_COMPRESSION_ZSTD:
      return WireCompression::kZstd;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown wire compression ", static_cast<int>(c)));
  }
}

proto::WireCompression ToProto(WireCompression c) {
  return static_cast<proto::WireCompression>(static_cast<int>(c));
}

bool IsLocalPeer(absl::string_view peer) {
  return absl::StartsWith(peer, "ipv4:127.") || absl::StartsWith(peer, "ipv6:[::1]") ||
         absl::StartsWith(peer, "ipv6:%5B::1%5D") || absl::StartsWith(peer, "unix:") ||
         absl::StartsWith(peer, "ipv6:[::ffff:127.") ||
         absl::StartsWith(peer, "ipv6:%5B::ffff:127.");
}

WireCompression ChooseWireCompression(const proto::JobOptions& job,
                                      const google::protobuf::RepeatedField<int>& accepted,
                                      absl::string_view peer) {
  absl::StatusOr<WireCompression> wanted = FromProto(job.compression());
  if (!wanted.ok() || *wanted == WireCompression::kNone) return WireCompression::kNone;
  if (!job.force_compression() && IsLocalPeer(peer)) return WireCompression::kNone;
  for (int a : accepted) {
    if (a == static_cast<int>(*wanted)) return *wanted;
  }
  return WireCompression::kNone;
}

absl::Status CompressPayload(WireCompression codec, absl::Span<const absl::string_view> parts,
                             std::string* out) {
  size_t total = 0;
  for (absl::string_view p : parts) total += p.size();
  switch (codec) {
    case WireCompression::kLz4: {
      // The frame format, streamed part by part: its content size and checksum let the
      // decoder tell corrupt data from good.
      thread_local std::unique_ptr<LZ4F_cctx, LZ4F_errorCode_t (*)(LZ4F_cctx*)> owned(
          [] {
            LZ4F_cctx* c = nullptr;
            return LZ4F_isError(LZ4F_createCompressionContext(&c, LZ4F_VERSION)) ? nullptr : c;
          }(),
          &LZ4F_freeCompressionContext);
      LZ4F_cctx* const cctx = owned.get();
      if (cctx == nullptr) return absl::InternalError("lz4: cannot create a context");
      LZ4F_preferences_t prefs{};
      prefs.frameInfo.blockSizeID = LZ4F_max256KB;
      prefs.frameInfo.blockMode = LZ4F_blockIndependent;
      prefs.frameInfo.contentChecksumFlag = LZ4F_contentChecksumEnabled;
      prefs.frameInfo.contentSize = total;
      out->resize(LZ4F_HEADER_SIZE_MAX + LZ4F_compressBound(total, &prefs));
      char* dst = out->data();
      size_t pos = 0;
      auto check = [](size_t r) -> absl::Status {
        if (LZ4F_isError(r)) return absl::InternalError(absl::StrCat("lz4: ", LZ4F_getErrorName(r)));
        return absl::OkStatus();
      };
      size_t r = LZ4F_compressBegin(cctx, dst, out->size(), &prefs);
      if (absl::Status s = check(r); !s.ok()) return s;
      pos += r;
      for (absl::string_view p : parts) {
        r = LZ4F_compressUpdate(cctx, dst + pos, out->size() - pos, p.data(), p.size(), nullptr);
        if (absl::Status s = check(r); !s.ok()) return s;
        pos += r;
      }
      r = LZ4F_compressEnd(cctx, dst + pos, out->size() - pos, nullptr);
      if (absl::Status s = check(r); !s.ok()) return s;
      out->resize(pos + r);
      return absl::OkStatus();
    }
    case WireCompression::kZstd: {
      // Streamed part by part; level 1 (the fast end, for links of GB/s), with the content
      // size and a checksum in the frame.
      thread_local std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx*)> owned(ZSTD_createCCtx(),
                                                                            &ZSTD_freeCCtx);
      ZSTD_CCtx* const cctx = owned.get();
      if (cctx == nullptr) return absl::InternalError("zstd: cannot create a context");
      ZSTD_CCtx_reset(cctx, ZSTD_reset_session_only);
      ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, 1);
      ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
      ZSTD_CCtx_setPledgedSrcSize(cctx, total);
      out->resize(ZSTD_compressBound(total));
      ZSTD_outBuffer o{out->data(), out->size(), 0};
      for (size_t i = 0; i <= parts.size(); ++i) {
        const bool last = i == parts.size();
        ZSTD_inBuffer in{last ? nullptr : parts[i].data(), last ? 0 : parts[i].size(), 0};
        const ZSTD_EndDirective mode = last ? ZSTD_e_end : ZSTD_e_continue;
        size_t left;
        do {
          left = ZSTD_compressStream2(cctx, &o, &in, mode);
          if (ZSTD_isError(left)) {
            return absl::InternalError(absl::StrCat("zstd: ", ZSTD_getErrorName(left)));
          }
        } while (last ? left != 0 : in.pos < in.size);
      }
      out->resize(o.pos);
      return absl::OkStatus();
    }
    case WireCompression::kNone:
      break;
  }
  return absl::InvalidArgumentError("CompressPayload: no codec");
}

namespace {

absl::Status DecompressLz4(const uint8_t* src, size_t src_size, uint8_t* dst, size_t raw_size) {
  thread_local std::unique_ptr<LZ4F_dctx, LZ4F_errorCode_t (*)(LZ4F_dctx*)> owned(
      [] {
        LZ4F_dctx* d = nullptr;
        return LZ4F_isError(LZ4F_createDecompressionContext(&d, LZ4F_VERSION)) ? nullptr : d;
      }(),
      &LZ4F_freeDecompressionContext);
  LZ4F_dctx* const dctx = owned.get();
  if (dctx == nullptr) return absl::InternalError("lz4: cannot create a context");
  LZ4F_resetDecompressionContext(dctx);
  uint8_t none = 0;  // a valid pointer for an empty payload
  uint8_t* const out = raw_size > 0 ? dst : &none;
  size_t in_pos = 0, out_pos = 0;
  while (true) {
    size_t out_len = raw_size - out_pos;
    size_t in_len = src_size - in_pos;
    const size_t r = LZ4F_decompress(dctx, out + out_pos, &out_len, src + in_pos, &in_len, nullptr);
    if (LZ4F_isError(r)) {
      return absl::DataLossError(absl::StrCat("lz4: corrupt data (", src_size,
                                              " compressed bytes): ", LZ4F_getErrorName(r)));
    }
    in_pos += in_len;
    out_pos += out_len;
    if (r == 0) break;  // the frame is complete (its checksum verified)
    if (in_len == 0 && out_len == 0) {
      if (in_pos == src_size) return absl::DataLossError("lz4: the data ends inside its frame");
      return absl::DataLossError(absl::StrCat("lz4: the data decompresses to more than the ",
                                              raw_size, " bytes the header says"));
    }
  }
  if (in_pos != src_size) {
    return absl::DataLossError(
        absl::StrCat("lz4: ", src_size - in_pos, " byte(s) after the end of the frame"));
  }
  if (out_pos != raw_size) {
    return absl::DataLossError(absl::StrCat("lz4: the data decompresses to ", out_pos,
                                            " bytes, the header says ", raw_size));
  }
  return absl::OkStatus();
}

absl::Status DecompressZstd(const uint8_t* src, size_t src_size, uint8_t* dst, size_t raw_size) {
  const unsigned long long content = ZSTD_getFrameContentSize(src, src_size);
  if (content == ZSTD_CONTENTSIZE_ERROR) {
    return absl::DataLossError(
        absl::StrCat("zstd: corrupt data (", src_size, " compressed bytes)"));
  }
  if (content != ZSTD_CONTENTSIZE_UNKNOWN && content != raw_size) {
    return absl::DataLossError(absl::StrCat("zstd: the data says ", content,
                                            " raw bytes, the header says ", raw_size));
  }
  thread_local std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> owned(ZSTD_createDCtx(),
                                                                        &ZSTD_freeDCtx);
  ZSTD_DCtx* const dctx = owned.get();
  if (dctx == nullptr) return absl::InternalError("zstd: cannot create a context");
  uint8_t none = 0;
  const size_t n = ZSTD_decompressDCtx(dctx, raw_size > 0 ? dst : &none, raw_size, src, src_size);
  if (ZSTD_isError(n)) {
    return absl::DataLossError(absl::StrCat("zstd: corrupt data (", src_size,
                                            " compressed bytes): ", ZSTD_getErrorName(n)));
  }
  if (n != raw_size) {
    return absl::DataLossError(absl::StrCat("zstd: the data decompresses to ", n,
                                            " bytes, the header says ", raw_size));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status DecompressPayload(WireCompression codec, const uint8_t* src, size_t src_size,
                               uint8_t* dst, size_t raw_size) {
  switch (codec) {
    case WireCompression::kLz4:
      return DecompressLz4(src, src_size, dst, raw_size);
    case WireCompression::kZstd:
      return DecompressZstd(src, src_size, dst, raw_size);
    case WireCompression::kNone:
      break;
  }
  return absl::DataLossError("DecompressPayload: no codec");
}

namespace {

// One side's totals; nanoseconds of CPU so that every figure is an atomic integer.
struct AtomicTotals {
  std::atomic<uint64_t> frames{0};
  std::atomic<uint64_t> wire_bytes{0};
  std::atomic<uint64_t> raw_bytes{0};
  std::atomic<uint64_t> cpu_ns{0};

  void Add(uint64_t wire, uint64_t raw, double cpu_seconds) {
    frames.fetch_add(1, std::memory_order_relaxed);
    wire_bytes.fetch_add(wire, std::memory_order_relaxed);
    raw_bytes.fetch_add(raw, std::memory_order_relaxed);
    cpu_ns.fetch_add(static_cast<uint64_t>(std::max(cpu_seconds, 0.0) * 1e9),
                     std::memory_order_relaxed);
  }
  WireCodecTotals Get() const {
    WireCodecTotals t;
    t.frames = frames.load(std::memory_order_relaxed);
    t.wire_bytes = wire_bytes.load(std::memory_order_relaxed);
    t.raw_bytes = raw_bytes.load(std::memory_order_relaxed);
    t.cpu_seconds = static_cast<double>(cpu_ns.load(std::memory_order_relaxed)) * 1e-9;
    return t;
  }
};

AtomicTotals& Compressed() {
  static AtomicTotals* t = new AtomicTotals;
  return *t;
}
AtomicTotals& Decompressed() {
  static AtomicTotals* t = new AtomicTotals;
  return *t;
}

}  // namespace

WireCodecTotals CompressionTotals() { return Compressed().Get(); }
WireCodecTotals DecompressionTotals() { return Decompressed().Get(); }
void CountCompression(uint64_t wire_bytes, uint64_t raw_bytes, double cpu_seconds) {
  Compressed().Add(wire_bytes, raw_bytes, cpu_seconds);
}
void CountDecompression(uint64_t wire_bytes, uint64_t raw_bytes, double cpu_seconds) {
  Decompressed().Add(wire_bytes, raw_bytes, cpu_seconds);
}

}  // namespace sluice
