#include "core/data/ops/jpeg_window_decoder.h"

// jpeglib.h needs size_t and FILE declared first.
#include <csetjmp>
#include <cstddef>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>

#include <jpeglib.h>
#include <jerror.h>  // after jpeglib.h: the JWRN_ message codes

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/tensor/uninitialized_tensor.h"

namespace sluice {
namespace {

// libjpeg reports errors by calling error_exit, which must not return: it longjmps back to
// DecodeJpegWindow. Everything that lives across a libjpeg call is in a Session on the heap,
// made before setjmp, and no frame between setjmp and a libjpeg call holds an object with a
// destructor, so the jump skips no destructor.
struct ErrorManager {
  jpeg_error_mgr pub;  // first: libjpeg sees a jpeg_error_mgr*
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

struct Session {
  jpeg_decompress_struct cinfo;
  ErrorManager err;
  absl::Status status;  // a planner or allocator error (no jump involved)
  DecodedJpegWindow out;
};

[[noreturn]] void OnError(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Warnings (level -1) are ignored as TF's decoder ignores them, except those that mean the data
// stopped early: those end the decode as errors.
void OnMessage(j_common_ptr cinfo, int level) {
  if (level >= 0) return;
  const int code = cinfo->err->msg_code;
  if (code == JWRN_JPEG_EOF || code == JWRN_HIT_MARKER) OnError(cinfo);
}

// True if the data ends with an EOI marker (within its last KiB: writers may pad), which a file
// cut short lacks. Checked when the decode stops before the image's last row, so that a
// truncated file is an error even when the window lies above the cut.
bool EndsWithEoi(absl::string_view bytes) {
  const size_t from = bytes.size() > 1024 ? bytes.size() - 1024 : 0;
  for (size_t i = bytes.size(); i-- > from + 1;) {
    if (static_cast<unsigned char>(bytes[i - 1]) == 0xFF &&
        static_cast<unsigned char>(bytes[i]) == 0xD9) {
      return true;
    }
  }
  return false;
}

// The steps between setjmp and the end; may longjmp out of any libjpeg call. Returns with
// s->status set on a planner, allocator or window error.
void Decode(Session* s, absl::string_view bytes,
            absl::FunctionRef<absl::StatusOr<JpegWindowPlan>(const JpegHeader&)> plan,
            absl::string_view op) {
  jpeg_decompress_struct* cinfo = &s->cinfo;
  jpeg_mem_src(cinfo, reinterpret_cast<const unsigned char*>(bytes.data()),
               static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(cinfo, TRUE);
  if (cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK) {
    s->status = absl::InvalidArgumentError("CMYK JPEGs are not supported");
    return;
  }
  JpegHeader header;
  header.width = cinfo->image_width;
  header.height = cinfo->image_height;
  header.components = cinfo->num_components;
  header.multi_scan = jpeg_has_multiple_scans(cinfo);
  {
    absl::StatusOr<JpegWindowPlan> p = plan(header);
    if (!p.ok()) {
      s->status = p.status();
      return;
    }
    s->out.plan = *p;
  }
  const JpegWindowPlan& p = s->out.plan;
  // Compared without sums: a hostile window's y + height could overflow.
  if (p.y < 0 || p.x < 0 || p.height < 1 || p.width < 1 || p.height > header.height ||
      p.y > header.height - p.height || p.width > header.width ||
      p.x > header.width - p.width || (p.channels != 1 && p.channels != 3) ||
      (p.scale_denom != 1 && p.scale_denom != 2 && p.scale_denom != 4 && p.scale_denom != 8)) {
    s->status = absl::InvalidArgumentError(absl::StrCat(
        op, ": the window [", p.y, ", ", p.x, ", ", p.height, ", ", p.width,
        "] (y, x, height, width) does not fit the ", header.height, " x ", header.width,
        " image"));
    return;
  }
  cinfo->out_color_space = p.channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  cinfo->dct_method = JDCT_IFAST;
  cinfo->do_fancy_upsampling = TRUE;
  cinfo->scale_num = 1;
  cinfo->scale_denom = static_cast<unsigned int>(p.scale_denom);
  jpeg_start_decompress(cinfo);
  const int64_t d = p.scale_denom;
  s->out.scaled_height = cinfo->output_height;
  s->out.scaled_width = cinfo->output_width;
  const int64_t row0 = p.y / d;
  const int64_t row_end = std::min<int64_t>((p.y + p.height + d - 1) / d, cinfo->output_height);
  const int64_t col0 = p.x / d;
  const int64_t col_end = std::min<int64_t>((p.x + p.width + d - 1) / d, cinfo->output_width);
  JDIMENSION xoffset = static_cast<JDIMENSION>(col0);
  JDIMENSION width = static_cast<JDIMENSION>(col_end - col0);
  if (width < cinfo->output_width) jpeg_crop_scanline(cinfo, &xoffset, &width);
  s->out.row0 = row0;
  s->out.col0 = xoffset;
  {
    absl::StatusOr<Tensor> pixels = TryAllocateUninitialized(
        DType::kUInt8, Shape({row_end - row0, static_cast<int64_t>(cinfo->output_width),
                              p.channels}),
        op);
    if (!pixels.ok()) {
      s->status = pixels.status();
      jpeg_abort_decompress(cinfo);
      return;
    }
    s->out.pixels = *std::move(pixels);
  }
  if (row0 > 0) jpeg_skip_scanlines(cinfo, static_cast<JDIMENSION>(row0));
  uint8_t* data = s->out.pixels.mutable_data<uint8_t>();
  const int64_t stride = static_cast<int64_t>(cinfo->output_width) * p.channels;
  while (static_cast<int64_t>(cinfo->output_scanline) < row_end) {
    JSAMPROW row = data + (static_cast<int64_t>(cinfo->output_scanline) - row0) * stride;
    if (jpeg_read_scanlines(cinfo, &row, 1) != 1) {
      s->status = absl::InvalidArgumentError("corrupt JPEG: the data ends inside the window");
      jpeg_abort_decompress(cinfo);
      return;
    }
  }
  if (cinfo->output_scanline < cinfo->output_height) {
    // The rows below the window are not decoded; a file cut short still fails.
    jpeg_abort_decompress(cinfo);
    if (!EndsWithEoi(bytes)) {
      s->status = absl::InvalidArgumentError(
          "corrupt JPEG: Premature end of JPEG file (no EOI marker at the end of the data)");
    }
    return;
  }
  jpeg_finish_decompress(cinfo);
}

}  // namespace

bool IsTruncationWarning(absl::string_view message) {
  return absl::StrContains(absl::AsciiStrToLower(message), "premature end");
}

absl::StatusOr<DecodedJpegWindow> DecodeJpegWindow(
    absl::string_view bytes,
    absl::FunctionRef<absl::StatusOr<JpegWindowPlan>(const JpegHeader&)> plan,
    absl::string_view op) {
  const auto session = std::make_unique<Session>();
  Session* const s = session.get();
  s->cinfo.err = jpeg_std_error(&s->err.pub);
  s->err.pub.error_exit = OnError;
  s->err.pub.emit_message = OnMessage;
  // The Session is zero-initialized: destroying a decompressor that was never created is safe.
  if (setjmp(s->err.jump) != 0) {
    jpeg_destroy_decompress(&s->cinfo);
    return absl::InvalidArgumentError(absl::StrCat("corrupt JPEG: ", s->err.message));
  }
  jpeg_create_decompress(&s->cinfo);
  Decode(s, bytes, plan, op);
  jpeg_destroy_decompress(&s->cinfo);
  if (!s->status.ok()) return s->status;
  return std::move(s->out);
}

}  // namespace sluice
