// Decoding only the part of a JPEG that is kept: a window of its rows and columns, at a DCT
// scale of 1, 1/2, 1/4 or 1/8, through libjpeg-turbo's jpeg_crop_scanline (columns, widened to
// whole iMCUs) and jpeg_skip_scanlines (rows above and below the window are not color-converted
// or upsampled; for a baseline JPEG they are only entropy-decoded). TF's decode_and_crop_jpeg
// decodes the same way, and with scale 1 the window's pixels are its pixels (goldens); they may
// differ from a full decode's in the window's edge rows and columns, where the chroma upsampler
// sees the window's edge instead of the neighbouring pixels.
//
// Memory: the pixels come from the refusable allocator; libjpeg's own working memory (row
// buffers, and for a multi-scan JPEG every DCT coefficient) is its own malloc, which callers
// bound by checking the header first (JpegHeader::multi_scan).
//
// Decoding settings are TF's decode_jpeg defaults: fast integer DCT (JDCT_IFAST), fancy
// upsampling, RGB or grayscale output. Scaling 1/s makes libjpeg compute an s-times smaller image
// straight from the DCT coefficients (a reduced inverse DCT: each output pixel is the mean of an
// s x s block, smoothed by the transform, not a bilinear sample), so its pixels differ from
// "full decode, then shrink" by a few levels; callers that need the exact path use scale 1.
//
// Errors, INVALID_ARGUMENT "corrupt JPEG: <libjpeg's message>": data libjpeg cannot decode, and
// data that ends early or whose scan stops early (libjpeg's "Premature end of JPEG file" and
// "premature end of data segment" warnings, also a scan with no data at all), as TF fails on
// truncated files. CMYK/YCCK JPEGs are INVALID_ARGUMENT "CMYK JPEGs are not supported".
// What the planner returns is passed through (the caller's limits).
//
// Thread safety: plain functions; each call uses its own libjpeg decompressor.
#ifndef SLUICE_CORE_JPEG_WINDOW_DECODER_H_
#define SLUICE_CORE_JPEG_WINDOW_DECODER_H_

#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sluice/tensor.h"

namespace sluice {

// What the JPEG's header says.
struct JpegHeader {
  int64_t width = 0;
  int64_t height = 0;
  int components = 0;         // 1 (gray) or 3 (YCbCr/RGB)
  bool multi_scan = false;    // progressive or multi-scan: libjpeg buffers every coefficient
};

// Which part to decode: rows [y, y + height) and columns [x, x + width) of the full-size image,
// at 1 / scale_denom of its size, as `channels` (1 or 3) components.
struct JpegWindowPlan {
  int64_t y = 0, x = 0, height = 0, width = 0;
  int scale_denom = 1;  // 1, 2, 4 or 8
  int channels = 3;
};

// The decoded pixels: rows and columns of the scaled image (scaled size ceil(size / denom))
// that cover the plan's window: row `row0`, column `col0` of the scaled image is pixels[0][0].
// Columns are widened to whole iMCUs on the left and right (libjpeg decodes whole iMCUs), rows
// are exactly the window's (scaled, rounded outward).
struct DecodedJpegWindow {
  Tensor pixels;  // uint8 [rows, cols, channels]
  int64_t row0 = 0, col0 = 0;
  int64_t scaled_height = 0, scaled_width = 0;
  JpegWindowPlan plan;
};

// Reads the header, asks `plan` what to decode (its error is returned as is), and decodes it.
// The plan's window must lie inside the image and have a positive size (INVALID_ARGUMENT naming
// `op` otherwise). The tensor comes from the refusable allocator (RESOURCE_EXHAUSTED naming `op`).
absl::StatusOr<DecodedJpegWindow> DecodeJpegWindow(
    absl::string_view bytes, absl::FunctionRef<absl::StatusOr<JpegWindowPlan>(const JpegHeader&)> plan,
    absl::string_view op);

// True for libjpeg's warnings that mean the data stopped early ("Premature end of JPEG file",
// "Corrupt JPEG data: premature end of data segment"): errors, not warnings, for Sluice.
bool IsTruncationWarning(absl::string_view message);

}  // namespace sluice

#endif  // SLUICE_CORE_JPEG_WINDOW_DECODER_H_
