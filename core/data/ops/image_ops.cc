#include "core/data/ops/image_ops.h"

#include <png.h>
#include <turbojpeg.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data/element_draws.h"
#include "core/data/shape_limits.h"
#include "core/data/ops/bilinear_resize.h"
#include "core/data/ops/distorted_box_sampling.h"
#include "core/data/ops/jpeg_window_decoder.h"
#include "core/data/ops/output_slot.h"
#include "core/data/ops/pixel_step.h"
#include "core/data/ops/resized_crop_sampling.h"
#include "core/tensor/uninitialized_tensor.h"
#include "core/tensor/dtype_dispatch.h"
#include "core/format/python_literal.h"
#include "core/util/status_macros.h"
#include "proto/dataset.pb.h"

namespace sluice {
namespace {

absl::Status Invalid(absl::string_view message) { return absl::InvalidArgumentError(message); }

std::string SpecString(const TensorSpec& s) {
  return absl::StrCat(DTypeName(s.dtype), " ", s.shape.ToString());
}

// An image input: rank 3, numeric.
absl::Status CheckImageSpec(const TensorSpec& s) {
  if (s.dtype == DType::kString || s.dtype == DType::kInvalid) {
    return Invalid(absl::StrCat("needs a numeric image [height, width, channels], got ",
                                SpecString(s), " (decode it first: decode_image())"));
  }
  if (s.shape.rank() != 3) {
    return Invalid(absl::StrCat("needs an image of rank 3 [height, width, channels], got ",
                                SpecString(s)));
  }
  return absl::OkStatus();
}

// Copies rows [y0, y0 + h) x columns [x0, x0 + w) x channels [c0, c0 + c) of `in`, into a
// tensor from the allocator (RESOURCE_EXHAUSTED naming `op` when refused).
absl::StatusOr<Tensor> Window(const Tensor& in, int64_t y0, int64_t x0, int64_t c0, int64_t h,
                              int64_t w, int64_t c, absl::string_view op) {
  ASSIGN_OR_RETURN(Tensor out, TryAllocateUninitialized(in.dtype(), Shape({h, w, c}), op));
  const size_t e = DTypeSize(in.dtype());
  const int64_t in_w = in.shape().dim(1), in_c = in.shape().dim(2);
  const char* src = static_cast<const char*>(in.raw_data());
  char* dst = static_cast<char*>(out.mutable_raw_data());
  if (c0 == 0 && c == in_c) {  // whole pixels: one copy a row
    const size_t row = static_cast<size_t>(w * c) * e;
    for (int64_t y = 0; y < h; ++y) {
      std::memcpy(dst + y * row, src + (((y0 + y) * in_w + x0) * in_c) * e, row);
    }
    return out;
  }
  for (int64_t y = 0; y < h; ++y) {
    for (int64_t x = 0; x < w; ++x) {
      std::memcpy(dst + ((y * w + x) * c) * e, src + (((y0 + y) * in_w + x0 + x) * in_c + c0) * e,
                  static_cast<size_t>(c) * e);
    }
  }
  return out;
}

// Mirrors each of `rows` rows of `w` pixels of kPixel bytes (a constant size, so each copy is a
// few moves, not a memcpy call).
template <size_t kPixel>
void MirrorRows(const char* src, char* dst, int64_t rows, int64_t w) {
  for (int64_t y = 0; y < rows; ++y) {
    const char* s = src + y * w * kPixel;
    char* d = dst + y * w * kPixel;
    for (int64_t x = 0; x < w; ++x) std::memcpy(d + x * kPixel, s + (w - 1 - x) * kPixel, kPixel);
  }
}

void MirrorRows(const char* src, char* dst, int64_t rows, int64_t w, size_t pixel) {
  switch (pixel) {
    case 1: return MirrorRows<1>(src, dst, rows, w);
    case 3: return MirrorRows<3>(src, dst, rows, w);
    case 4: return MirrorRows<4>(src, dst, rows, w);
    case 12: return MirrorRows<12>(src, dst, rows, w);
    default: break;
  }
  for (int64_t y = 0; y < rows; ++y) {
    for (int64_t x = 0; x < w; ++x) {
      std::memcpy(dst + (y * w + x) * pixel, src + (y * w + (w - 1 - x)) * pixel, pixel);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// decode_image

// How many components' DCT coefficients libjpeg keeps for the whole image while decoding `bytes`
// (2 bytes a pixel and component): those of the frame for a progressive JPEG or one whose first
// scan lacks a component, else 0 (it decodes row by row). Found by walking the markers up to the
// first scan, a few dozen bytes; bytes that are not well-formed markers give 0 and are left to
// libjpeg to judge.
int JpegBufferedComponents(const std::string& bytes) {
  auto byte = [&bytes](size_t i) { return static_cast<unsigned char>(bytes[i]); };
  bool progressive = false;
  int components = 0;
  size_t i = 2;  // after SOI
  // Each segment moves i forward by at least 2, so the walk ends.
  while (i + 4 <= bytes.size()) {
    if (byte(i) != 0xFF) return 0;
    const unsigned char marker = byte(i + 1);
    if (marker == 0xFF) {  // fill byte
      ++i;
      continue;
    }
    const size_t length = size_t{byte(i + 2)} << 8 | byte(i + 3);
    if (length < 2) return 0;
    const bool sof = marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 &&
                     marker != 0xCC;
    if (sof && i + 9 < bytes.size()) {
      progressive = marker == 0xC2 || marker == 0xC6 || marker == 0xCA || marker == 0xCE;
      components = byte(i + 9);
    }
    if (marker == 0xDA) {  // the first scan
      if (i + 4 >= bytes.size()) return 0;
      const int in_scan = byte(i + 4);
      return progressive || in_scan < components ? components : 0;
    }
    i += 2 + length;
  }
  return 0;
}

// What an image header claims, checked before a byte is decoded: INVALID_ARGUMENT over
// kMaxImagePixels, RESOURCE_EXHAUSTED when the decoded tensor (`channels` bytes a pixel) would
// pass the element limit. Both dimensions come from 16- or 32-bit header fields, so the
// product cannot overflow.
absl::Status CheckImageHeader(absl::string_view format, int64_t width, int64_t height,
                              int64_t channels) {
  if (width * height > kMaxImagePixels) {
    return Invalid(absl::StrCat("the ", format, " header claims ", width, " x ", height,
                                " pixels (width x height: ", width * height,
                                "), more than the limit of ", kMaxImagePixels,
                                " pixels per image"));
  }
  return CheckAllocation(absl::StrCat("the decoded ", format), DType::kUInt8,
                         {height, width, channels});
}

class DecodeImageFn : public ComponentFn {
 public:
  explicit DecodeImageFn(int64_t channels) : channels_(channels) {}

  std::string Describe() const override {
    if (channels_ == 0) return "decode_image()";
    return absl::StrCat("decode_image(channels=", channels_, ")");
  }

  absl::StatusOr<ElementSpec> OutputSpec(const TensorSpec& input) const override {
    if (input.dtype != DType::kString || input.shape.rank() != 0) {
      return Invalid(absl::StrCat("needs a string scalar of JPEG or PNG bytes, got ",
                                  SpecString(input)));
    }
    return ElementSpec(TensorSpec{
        DType::kUInt8,
        Shape({kUnknownDim, kUnknownDim, channels_ == 0 ? kUnknownDim : channels_})});
  }

  absl::StatusOr<Element> Apply(const Tensor& input) const override {
    RETURN_IF_ERROR(OutputSpec(TensorSpec{input.dtype(), input.shape()}).status());
    const std::string& bytes = input.string_at(0);
    auto byte = [&bytes](size_t i) { return static_cast<unsigned char>(bytes[i]); };
    if (bytes.size() >= 3 && byte(0) == 0xFF && byte(1) == 0xD8 && byte(2) == 0xFF) {
      return DecodeJpeg(bytes);
    }
    if (bytes.size() >= 8 &&
        png_sig_cmp(reinterpret_cast<png_const_bytep>(bytes.data()), 0, 8) == 0) {
      return DecodePng(bytes);
    }
    return Invalid(absl::StrCat("the ", bytes.size(), " bytes are neither JPEG nor PNG"));
  }

 private:
  absl::StatusOr<Element> DecodeJpeg(const std::string& bytes) const {
    // One decompressor per thread: a tjhandle is not thread-safe, and making one per image
    // costs more than the decode of a small image.
    struct Handle {
      tjhandle h = tjInitDecompress();
      ~Handle() {
        if (h != nullptr) tjDestroy(h);
      }
    };
    thread_local Handle handle;
    if (handle.h == nullptr) return absl::InternalError("tjInitDecompress failed");
    int width = 0, height = 0, subsamp = 0, colorspace = 0;
    auto* src = reinterpret_cast<const unsigned char*>(bytes.data());
    if (tjDecompressHeader3(handle.h, src, bytes.size(), &width, &height, &subsamp,
                            &colorspace) != 0) {
      return Invalid(absl::StrCat("corrupt JPEG: ", tjGetErrorStr2(handle.h)));
    }
    // libturbojpeg accepts some headers it never reached the frame of (a cut APP segment) and
    // reports 0 x 0: no image, not an empty one.
    if (width < 1 || height < 1) {
      return Invalid(absl::StrCat("corrupt JPEG: no frame header (", width, " x ", height, ")"));
    }
    if (colorspace == TJCS_CMYK || colorspace == TJCS_YCCK) {
      return Invalid("CMYK JPEGs are not supported");
    }
    int64_t c = channels_;
    if (c == 0) c = colorspace == TJCS_GRAY ? 1 : 3;
    if (c != 1 && c != 3) {
      return Invalid(absl::StrCat("a JPEG decodes to 1 or 3 channels, not ", c));
    }
    RETURN_IF_ERROR(CheckImageHeader("JPEG", width, height, c));
    if (const int components = JpegBufferedComponents(bytes); components > 0) {
      RETURN_IF_ERROR(CheckAllocation("the JPEG's DCT coefficients (a multi-scan JPEG holds them "
                                      "all while decoding)",
                                      DType::kInt16, {height, width, components}));
    }
    // Not zero-filled: the decoder writes every byte, or fails and the tensor is dropped.
    ASSIGN_OR_RETURN(Tensor out, TryAllocateUninitialized(DType::kUInt8, Shape({height, width, c}),
                                                          "decode_jpeg"));
    if (tjDecompress2(handle.h, src, bytes.size(), out.mutable_data<uint8_t>(), width, 0, height,
                      c == 1 ? TJPF_GRAY : TJPF_RGB, TJFLAG_FASTDCT) != 0) {
      // Fatal errors and truncated data fail, as TF's decode_jpeg does (try_recover_truncated
      // is off); other warnings (extraneous bytes) do not.
      const std::string why = tjGetErrorStr2(handle.h);
      if (tjGetErrorCode(handle.h) == TJERR_FATAL || IsTruncationWarning(why)) {
        return Invalid(absl::StrCat("corrupt JPEG: ", why));
      }
    }
    return Element(std::move(out));
  }

  absl::StatusOr<Element> DecodePng(const std::string& bytes) const {
    png_image image;
    std::memset(&image, 0, sizeof(image));
    image.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&image, bytes.data(), bytes.size())) {
      return Invalid(absl::StrCat("corrupt PNG: ", image.message));
    }
    const bool color = (image.format & PNG_FORMAT_FLAG_COLOR) != 0;
    const bool alpha = (image.format & PNG_FORMAT_FLAG_ALPHA) != 0;
    if (image.format & PNG_FORMAT_FLAG_LINEAR) {
      png_image_free(&image);
      return Invalid("16-bit PNGs are not supported (decode_image gives uint8)");
    }
    const int native = (color ? 3 : 1) + (alpha ? 1 : 0);
    const int64_t c = channels_ == 0 ? native : channels_;
    if (c == 1 && color) {
      png_image_free(&image);
      return Invalid("PNG color to gray (channels=1) is not supported");
    }
    const int64_t h = image.height, w = image.width;
    // The file's pixels and the output are both held: the larger of the two layouts counts.
    if (absl::Status s = CheckImageHeader("PNG", w, h, std::max<int64_t>(native, c)); !s.ok()) {
      png_image_free(&image);
      return s;
    }
    // Read in the file's own layout (no conversion by libpng: no compositing, no gamma), then
    // adapt the channels as TF's decode_png does.
    image.format = (color ? PNG_FORMAT_FLAG_COLOR : 0) | (alpha ? PNG_FORMAT_FLAG_ALPHA : 0);
    std::vector<uint8_t> pixels(static_cast<size_t>(h * w * native));
    if (!png_image_finish_read(&image, nullptr, pixels.data(), 0, nullptr)) {
      return Invalid(absl::StrCat("corrupt PNG: ", image.message));
    }
    // The alpha TF adds where the file has none is (1 << bit depth) - 1 of the file's IHDR
    // (png_set_add_alpha with the original depth): 255 for 8-bit images, 15 for a 16-color
    // palette. Mirrored so that the pixels are TF's.
    const int bit_depth = static_cast<unsigned char>(bytes[24]);
    const uint8_t opaque =
        bit_depth >= 1 && bit_depth < 8 ? static_cast<uint8_t>((1 << bit_depth) - 1) : 255;
    ASSIGN_OR_RETURN(Tensor out,
                     Tensor::TryAllocate(DType::kUInt8, Shape({h, w, c}), "decode_png"));
    uint8_t* dst = out.mutable_data<uint8_t>();
    const int64_t gray_or_rgb = color ? 3 : 1;
    for (int64_t p = 0; p < h * w; ++p) {
      const uint8_t* s = pixels.data() + p * native;
      for (int64_t k = 0; k < c; ++k) {
        uint8_t v;
        if (k < 3) {
          v = gray_or_rgb == 3 ? s[std::min<int64_t>(k, 2)] : s[0];
          if (c == 2 && k == 1) v = alpha ? s[native - 1] : opaque;  // gray + alpha
        } else {
          v = alpha ? s[native - 1] : opaque;
        }
        dst[p * c + k] = v;
      }
    }
    return Element(std::move(out));
  }

  const int64_t channels_;
};

// ---------------------------------------------------------------------------------------------
// resize

class ResizeFn : public ComponentFn {
 public:
  ResizeFn(int64_t height, int64_t width) : height_(height), width_(width) {}

  std::string Describe() const override {
    return absl::StrCat("resize([", height_, ", ", width_, "])");
  }

  absl::StatusOr<ElementSpec> OutputSpec(const TensorSpec& input) const override {
    RETURN_IF_ERROR(CheckImageSpec(input));
    return ElementSpec(TensorSpec{DType::kFloat32, Shape({height_, width_, input.shape.dim(2)})});
  }

  absl::StatusOr<Element> Apply(const Tensor& input) const override {
    RETURN_IF_ERROR(CheckImageSpec(TensorSpec{input.dtype(), input.shape()}));
    const int64_t in_h = input.shape().dim(0), in_w = input.shape().dim(1);
    const int64_t c = input.shape().dim(2);
    if (in_h == 0 || in_w == 0) return Invalid("cannot resize an empty image");
    RETURN_IF_ERROR(CheckAllocation("the resized image", DType::kFloat32, {height_, width_, c}));
    if (input.dtype() == DType::kUInt8) {
      // Decoded images: the separable kernel (bilinear_resize.h), the same float operations.
      ASSIGN_OR_RETURN(Tensor out, TryAllocateUninitialized(
                                       DType::kFloat32, Shape({height_, width_, c}), "resize"));
      thread_local std::vector<BilinearTap> taps_y, taps_x;
      thread_local std::vector<float> scratch;
      taps_y.resize(static_cast<size_t>(height_));
      taps_x.resize(static_cast<size_t>(width_));
      scratch.resize(static_cast<size_t>(2 * width_ * c));
      ComputeBilinearTaps(height_, 0, in_h, 0.0f, static_cast<float>(in_h), taps_y.data());
      ComputeBilinearTaps(width_, 0, in_w, 0.0f, static_cast<float>(in_w), taps_x.data());
      ResizeBilinearU8(input.data<uint8_t>(), in_w * c, c, taps_y.data(), height_, taps_x.data(),
                       width_, out.mutable_data<float>(), scratch.data());
      return Element(std::move(out));
    }
    // TF's image_resizer_state: scale = in / out as float; half-pixel centers.
    const float y_scale = static_cast<float>(in_h) / static_cast<float>(height_);
    const float x_scale = static_cast<float>(in_w) / static_cast<float>(width_);
    struct Interp {
      int64_t lower, upper;
      float lerp;
    };
    auto interps = [](int64_t out_size, int64_t in_size, float scale) {
      std::vector<Interp> v(static_cast<size_t>(out_size));
      for (int64_t i = 0; i < out_size; ++i) {
        const float in = (static_cast<float>(i) + 0.5f) * scale - 0.5f;
        const float in_f = std::floor(in);
        v[i].lower = std::max(static_cast<int64_t>(in_f), int64_t{0});
        v[i].upper = std::min(static_cast<int64_t>(std::ceil(in)), in_size - 1);
        v[i].lerp = in - in_f;
      }
      return v;
    };
    const std::vector<Interp> ys = interps(height_, in_h, y_scale);
    const std::vector<Interp> xs = interps(width_, in_w, x_scale);
    ASSIGN_OR_RETURN(Tensor out,
                     Tensor::TryAllocate(DType::kFloat32, Shape({height_, width_, c}), "resize"));
    float* dst = out.mutable_data<float>();
    VisitNumericDType(input.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* src = input.data<T>();
      auto at = [&](int64_t y, int64_t x, int64_t k) {
        return ConvertNumber<float>(src[(y * in_w + x) * c + k]);
      };
      for (int64_t y = 0; y < height_; ++y) {
        const Interp& iy = ys[static_cast<size_t>(y)];
        for (int64_t x = 0; x < width_; ++x) {
          const Interp& ix = xs[static_cast<size_t>(x)];
          for (int64_t k = 0; k < c; ++k) {
            const float top_left = at(iy.lower, ix.lower, k);
            const float top_right = at(iy.lower, ix.upper, k);
            const float bottom_left = at(iy.upper, ix.lower, k);
            const float bottom_right = at(iy.upper, ix.upper, k);
            const float top = top_left + (top_right - top_left) * ix.lerp;
            const float bottom = bottom_left + (bottom_right - bottom_left) * ix.lerp;
            dst[(y * width_ + x) * c + k] = top + (bottom - top) * iy.lerp;
          }
        }
      }
    });
    return Element(std::move(out));
  }

 private:
  const int64_t height_, width_;
};

// ---------------------------------------------------------------------------------------------
// random_crop, random_flip_left_right, central_crop

class RandomCropFn : public ComponentFn {
 public:
  RandomCropFn(std::vector<int64_t> size, std::optional<int64_t> seed)
      : size_(std::move(size)), seed_(seed) {}

  std::string Describe() const override {
    return absl::StrCat("random_crop([", absl::StrJoin(size_, ", "), "]",
                        seed_.has_value() ? absl::StrCat(", seed=", *seed_) : "", ")");
  }

  absl::StatusOr<ElementSpec> OutputSpec(const TensorSpec& input) const override {
    RETURN_IF_ERROR(CheckImageSpec(input));
    const int64_t c = size_.size() == 3 ? size_[2] : input.shape.dim(2);
    for (int i = 0; i < 3; ++i) {
      const int64_t want = i < static_cast<int>(size_.size()) ? size_[i] : c;
      if (input.shape.dim(i) != kUnknownDim && input.shape.dim(i) < want) {
        return Invalid(absl::StrCat("the crop ", Describe(), " is larger than the image ",
                                    SpecString(input)));
      }
    }
    return ElementSpec(TensorSpec{input.dtype, Shape({size_[0], size_[1], c})});
  }
  bool DrawsPerElement() const override { return seed_.has_value(); }

  absl::StatusOr<Element> Apply(const Tensor& input) const override {
    RETURN_IF_ERROR(OutputSpec(TensorSpec{input.dtype(), input.shape()}).status());
    const int64_t h = input.shape().dim(0), w = input.shape().dim(1), c = input.shape().dim(2);
    const int64_t ch = size_.size() == 3 ? size_[2] : c;
    std::mt19937_64 gen = ElementGenerator(seed_, DrawingOp::kRandomCrop);
    const int64_t y0 = DrawUpTo(gen, h - size_[0]);
    const int64_t x0 = DrawUpTo(gen, w - size_[1]);
    const int64_t c0 = DrawUpTo(gen, c - ch);
    ASSIGN_OR_RETURN(Tensor out,
                     Window(input, y0, x0, c0, size_[0], size_[1], ch, "random_crop"));
    return Element(std::move(out));
  }

 private:
  const std::vector<int64_t> size_;
  const std::optional<int64_t> seed_;
};

class RandomFlipFn : public ComponentFn {
 public:
  explicit RandomFlipFn(std::optional<int64_t> seed) : seed_(seed) {}

  std::string Describe() const override {
    return absl::StrCat("random_flip_left_right(",
                        seed_.has_value() ? absl::StrCat("seed=", *seed_) : "", ")");
  }
  absl::StatusOr<ElementSpec> OutputSpec(const TensorSpec& input) const override {
    RETURN_IF_ERROR(CheckImageSpec(input));
    return ElementSpec(input);
  }
  bool DrawsPerElement() const override { return seed_.has_value(); }
  const PixelStep* AsPixelStep() const override { return &step_; }
  absl::StatusOr<Element> Apply(const Tensor& input) const override {
    RETURN_IF_ERROR(CheckImageSpec(TensorSpec{input.dtype(), input.shape()}));
    std::mt19937_64 gen = ElementGenerator(seed_, DrawingOp::kRandomFlipLeftRight);
    if (DrawUpTo(gen, 1) == 0) return Element(input);
    const int64_t h = input.shape().dim(0), w = input.shape().dim(1), c = input.shape().dim(2);
    ASSIGN_OR_RETURN(Tensor out, TryAllocateUninitialized(input.dtype(), input.shape(),
                                                          "random_flip_left_right"));
    MirrorRows(static_cast<const char*>(input.raw_data()),
               static_cast<char*>(out.mutable_raw_data()), h, w,
               static_cast<size_t>(c) * DTypeSize(input.dtype()));
    return Element(std::move(out));
  }

 private:
  const std::optional<int64_t> seed_;
  const PixelStep step_{PixelStep::Kind::kFlipLeftRight, seed_, {}, {}};
};

class CentralCropFn : public ComponentFn {
 public:
  explicit CentralCropFn(double fraction) : fraction_(fraction) {}

  std::string Describe() const override {
    return absl::StrCat("central_crop(", PythonFloat64Literal(fraction_), ")");
  }
  absl::StatusOr<ElementSpec> OutputSpec(const TensorSpec& input) const override {
    RETURN_IF_ERROR(CheckImageSpec(input));
    auto size = [this](int64_t d) { return d == kUnknownDim ? d : d - 2 * Start(d); };
    return ElementSpec(TensorSpec{
        input.dtype, Shape({size(input.shape.dim(0)), size(input.shape.dim(1)),
                            input.shape.dim(2)})});
  }
  absl::StatusOr<Element> Apply(const Tensor& input) const override {
    RETURN_IF_ERROR(CheckImageSpec(TensorSpec{input.dtype(), input.shape()}));
    if (fraction_ == 1.0) return Element(input);
    const int64_t h = input.shape().dim(0), w = input.shape().dim(1);
    const int64_t y0 = Start(h), x0 = Start(w);
    ASSIGN_OR_RETURN(Tensor out, Window(input, y0, x0, 0, h - 2 * y0, w - 2 * x0,
                                        input.shape().dim(2), "central_crop"));
    return Element(std::move(out));
  }

 private:
  // TF: int((dim - dim * fraction) / 2), in float64 as TF computes it for a static shape.
  int64_t Start(int64_t dim) const {
    const double d = static_cast<double>(dim);
    return static_cast<int64_t>((d - d * fraction_) / 2);
  }
  const double fraction_;
};

// ---------------------------------------------------------------------------------------------
// random_resized_crop, decode_and_crop_jpeg, extract_jpeg_shape

// Decoded pixels that cover a box: uint8 [rows, cols, c], pixel (0, 0) at (row0, col0) of the
// image scaled by 1 / denom (scaled_height x scaled_width).
struct PixelsAround {
  const uint8_t* data;
  int64_t cols, channels, row0, col0, scaled_height, scaled_width;
  int denom;
};

// The taps along one axis for a box [start, start + size) of the full-size image read from
// pixels scaled by 1 / denom whose first one is at `first` (scaled) with `limit` scaled pixels.
void AxisTaps(int64_t out_size, int64_t start, int64_t size, int denom, int64_t first,
              int64_t limit, BilinearTap* taps) {
  const int64_t lo = start / denom;
  const int64_t hi = std::min<int64_t>((start + size + denom - 1) / denom, limit);
  const float offset = static_cast<float>(start - lo * denom) / static_cast<float>(denom);
  const float extent_scaled = static_cast<float>(size) / static_cast<float>(denom);
  ComputeBilinearTaps(out_size, lo - first, hi - lo, offset, extent_scaled, taps);
}

// What random_resized_crop applies to the resized box besides the resize: steps it took over
// from the maps after it (map fusion, core/data/ops/map_fusion.h).
struct BoxEpilogue {
  bool mirror = false;            // random_flip_left_right drew a flip
  const std::vector<float>* mean = nullptr;  // normalize: one value or one per channel; null: none
  const std::vector<float>* std = nullptr;
};

// The box of `pixels` resized to float32 [out_h, out_w, c] (TF's bilinear), then mirrored and
// normalized as `epilogue` says, in one pass (bilinear_resize.h); the taps and the row scratch
// are the thread's, reused from image to image.
absl::StatusOr<Tensor> ResizeBox(const PixelsAround& p, const CropBox& box, int64_t out_h,
                                 int64_t out_w, absl::string_view op,
                                 const BoxEpilogue& epilogue = {}) {
  // The output first: the allocator refuses a size over the element limit, which then bounds
  // the taps and the scratch (smaller than the output). Under a batch that offers this
  // element's row (output_slot.h), the values go straight there.
  const Shape shape({out_h, out_w, p.channels});
  std::optional<Tensor> slot = TakeFnSlot(DType::kFloat32, shape);
  Tensor out;
  if (slot.has_value()) {
    out = *std::move(slot);
  } else {
    ASSIGN_OR_RETURN(out, TryAllocateUninitialized(DType::kFloat32, shape, op));
  }
  thread_local std::vector<BilinearTap> taps_y, taps_x;
  thread_local std::vector<float> scratch;
  taps_y.resize(static_cast<size_t>(out_h));
  taps_x.resize(static_cast<size_t>(out_w));
  scratch.resize(static_cast<size_t>(2 * out_w * p.channels));
  AxisTaps(out_h, box.y, box.height, p.denom, p.row0, p.scaled_height, taps_y.data());
  AxisTaps(out_w, box.x, box.width, p.denom, p.col0, p.scaled_width, taps_x.data());
  // Output column x of the mirrored image is column out_w - 1 - x of the unmirrored one.
  if (epilogue.mirror) std::reverse(taps_x.begin(), taps_x.end());
  RowNormalize normalize;
  if (epilogue.mean != nullptr) {
    thread_local std::vector<float> mean_row, std_row;
    const size_t n = static_cast<size_t>(out_w * p.channels);
    mean_row.resize(n);
    std_row.resize(n);
    const std::vector<float>& mean = *epilogue.mean;
    const std::vector<float>& std = *epilogue.std;
    for (size_t j = 0; j < n; ++j) {
      const size_t k = j % static_cast<size_t>(p.channels);
      mean_row[j] = mean.size() == 1 ? mean[0] : mean[k];
      std_row[j] = std.size() == 1 ? std[0] : std[k];
    }
    normalize = RowNormalize{mean_row.data(), std_row.data()};
  }
  ResizeBilinearU8(p.data, p.cols * p.channels, p.channels, taps_y.data(), out_h, taps_x.data(),
                   out_w, out.mutable_data<float>(), scratch.data(),
                   epilogue.mean != nullptr ? &normalize : nullptr);
  return out;
}

// The limits a JPEG header is checked against before anything is decoded (decode_image's).
absl::Status CheckJpegHeader(const JpegHeader& h, int64_t channels) {
  RETURN_IF_ERROR(CheckImageHeader("JPEG", h.width, h.height, channels));
  if (h.multi_scan) {
    RETURN_IF_ERROR(CheckAllocation("the JPEG's DCT coefficients (a multi-scan JPEG holds them "
                                    "all while decoding)",
                                    DType::kInt16, {h.height, h.width, h.components}));
  }
  return absl::OkStatus();
}

bool IsJpeg(const std::string& bytes) {
  return bytes.size() >= 3 && static_cast<unsigned char>(bytes[0]) == 0xFF &&
         static_cast<unsigned char>(bytes[1]) == 0xD8 &&
         static_cast<unsigned char>(bytes[2]) == 0xFF;
}

class RandomResizedCropFn : public ComponentFn {
 public:
  RandomResizedCropFn(int64_t height, int64_t width, const double scale[2], const double ratio[2],
                      std::optional<int64_t> seed, bool exact)
      : height_(height), width_(width), scale_{scale[0], scale[1]}, ratio_{ratio[0], ratio[1]},
        seed_(seed), exact_(exact) {}

  std::string Describe() const override {
    return absl::StrCat("random_resized_crop([", height_, ", ", width_, "], scale=(",
                        PythonFloat64Literal(scale_[0]), ", ", PythonFloat64Literal(scale_[1]),
                        "), ratio=(", PythonFloat64Literal(ratio_[0]), ", ",
                        PythonFloat64Literal(ratio_[1]), ")",
                        seed_.has_value() ? absl::StrCat(", seed=", *seed_) : "",
                        exact_ ? ", exact=True" : "", ")");
  }

  absl::StatusOr<ElementSpec> OutputSpec(const TensorSpec& input) const override {
    const bool bytes = input.dtype == DType::kString && input.shape.rank() == 0;
    if (!bytes && (input.dtype != DType::kUInt8 || input.shape.rank() != 3)) {
      return Invalid(absl::StrCat("needs JPEG or PNG bytes (a string scalar) or a uint8 image "
                                  "[height, width, channels], got ",
                                  SpecString(input)));
    }
    const int64_t c = bytes ? 3 : input.shape.dim(2);
    // A fused per-channel normalize needs the channels known to match (map fusion then happens
    // only where the unfused normalize could not fail).
    const size_t normalized = std::max(mean_.size(), std_.size());
    if (normalized > 1 && c != static_cast<int64_t>(normalized)) {
      return Invalid(absl::StrCat("a fused normalize has ", normalized,
                                  " values per channel for ", c, " channels"));
    }
    return ElementSpec(TensorSpec{DType::kFloat32, Shape({height_, width_, c})});
  }

  bool DrawsPerElement() const override { return seed_.has_value() || flip_seed_.has_value(); }

  // Takes over one random_flip_left_right and one normalize, in either order (they commute: a
  // flip moves values, normalize changes each in place by its channel).
  std::unique_ptr<ComponentFn> FuseWith(const ComponentFn& next) const override {
    const PixelStep* step = next.AsPixelStep();
    if (step == nullptr) return nullptr;
    auto fused = std::make_unique<RandomResizedCropFn>(*this);
    if (step->kind == PixelStep::Kind::kFlipLeftRight) {
      if (flip_) return nullptr;
      fused->flip_ = true;
      fused->flip_seed_ = step->seed;
    } else {
      if (!mean_.empty()) return nullptr;
      fused->mean_ = step->mean;
      fused->std_ = step->std;
    }
    return fused;
  }

  absl::StatusOr<Element> Apply(const Tensor& input) const override {
    RETURN_IF_ERROR(OutputSpec(TensorSpec{input.dtype(), input.shape()}).status());
    if (input.dtype() == DType::kString) {
      const std::string& bytes = input.string_at(0);
      // exact: the whole image decoded, as decode_image; else the box alone (jpeg_window_decoder.h:
      // TF's decode_and_crop_jpeg pixels, whose edge rows and columns may differ from a full
      // decode's by the upsampler's edge handling, then DCT scaling when the box allows it).
      if (IsJpeg(bytes) && !exact_) return FromJpeg(bytes);
      ASSIGN_OR_RETURN(Element decoded, DecodeImageFn(3).Apply(input));
      return FromImage(decoded.leaf());
    }
    return FromImage(input);
  }

 private:
  // The smallest DCT scale that keeps the box at least the output size.
  int Denominator(const CropBox& box) const {
    for (int d : {8, 4, 2}) {
      if (box.width >= width_ * d && box.height >= height_ * d) return d;
    }
    return 1;
  }

  absl::StatusOr<Element> FromJpeg(const std::string& bytes) const {
    CropBox box{};
    auto plan = [&](const JpegHeader& h) -> absl::StatusOr<JpegWindowPlan> {
      RETURN_IF_ERROR(CheckJpegHeader(h, 3));
      if (h.width < 1 || h.height < 1) return Invalid("the JPEG has no pixels");
      std::mt19937_64 gen = ElementGenerator(seed_, DrawingOp::kRandomResizedCrop);
      box = SampleResizedCrop(h.height, h.width, scale_, ratio_, gen);
      JpegWindowPlan p;
      p.y = box.y;
      p.x = box.x;
      p.height = box.height;
      p.width = box.width;
      p.scale_denom = Denominator(box);
      p.channels = 3;
      return p;
    };
    ASSIGN_OR_RETURN(DecodedJpegWindow w, DecodeJpegWindow(bytes, plan, "random_resized_crop"));
    const PixelsAround p{w.pixels.data<uint8_t>(), w.pixels.shape().dim(1), 3, w.row0, w.col0,
                         w.scaled_height, w.scaled_width, w.plan.scale_denom};
    ASSIGN_OR_RETURN(Tensor out,
                     ResizeBox(p, box, height_, width_, "random_resized_crop", Epilogue()));
    return Element(std::move(out));
  }

  absl::StatusOr<Element> FromImage(const Tensor& image) const {
    const int64_t h = image.shape().dim(0), w = image.shape().dim(1), c = image.shape().dim(2);
    if (h < 1 || w < 1 || c < 1) return Invalid("cannot crop an empty image");
    std::mt19937_64 gen = ElementGenerator(seed_, DrawingOp::kRandomResizedCrop);
    const CropBox box = SampleResizedCrop(h, w, scale_, ratio_, gen);
    const PixelsAround p{image.data<uint8_t>(), w, c, 0, 0, h, w, 1};
    ASSIGN_OR_RETURN(Tensor out,
                     ResizeBox(p, box, height_, width_, "random_resized_crop", Epilogue()));
    return Element(std::move(out));
  }

  // The fused steps for the calling thread's element: the flip's draw is random_flip_left_right's
  // (its seed and op under the same element key), so the fused map mirrors the same elements.
  BoxEpilogue Epilogue() const {
    BoxEpilogue e;
    if (flip_) {
      std::mt19937_64 gen = ElementGenerator(flip_seed_, DrawingOp::kRandomFlipLeftRight);
      e.mirror = DrawUpTo(gen, 1) != 0;
    }
    if (!mean_.empty()) {
      e.mean = &mean_;
      e.std = &std_;
    }
    return e;
  }

  const int64_t height_, width_;
  const double scale_[2], ratio_[2];
  const std::optional<int64_t> seed_;
  const bool exact_;
  // Taken over from the maps after it (FuseWith): a flip, and a normalize (mean_ not empty).
  bool flip_ = false;
  std::optional<int64_t> flip_seed_;
  std::vector<float> mean_, std_;
};

// A thread's libturbojpeg decompressor (a tjhandle is not thread-safe; one per image costs
// more than decoding a small one). Null when libturbojpeg could not make one. `renew` replaces
// it: after a failed call the handle keeps the failed data's state, and the next header read
// on it fails too ("Unsupported marker type", seen after random bytes).
tjhandle ThreadDecompressor(bool renew = false) {
  struct Handle {
    tjhandle h = tjInitDecompress();
    ~Handle() {
      if (h != nullptr) tjDestroy(h);
    }
  };
  thread_local Handle handle;
  if (renew) {
    if (handle.h != nullptr) tjDestroy(handle.h);
    handle.h = tjInitDecompress();
  }
  return handle.h;
}

// TF's extract_jpeg_shape: [height, width, components] from the header, without decoding.
absl::StatusOr<std::array<int32_t, 3>> ReadJpegShape(const std::string& bytes) {
  if (!IsJpeg(bytes)) return Invalid(absl::StrCat("the ", bytes.size(), " bytes are not a JPEG"));
  tjhandle h = ThreadDecompressor();
  if (h == nullptr) return absl::InternalError("tjInitDecompress failed");
  int width = 0, height = 0, subsamp = 0, colorspace = 0;
  if (tjDecompressHeader3(h, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(),
                          &width, &height, &subsamp, &colorspace) != 0) {
    const absl::Status error = Invalid(absl::StrCat("corrupt JPEG: ", tjGetErrorStr2(h)));
    ThreadDecompressor(/*renew=*/true);
    return error;
  }
  const int32_t components =
      colorspace == TJCS_GRAY ? 1 : (colorspace == TJCS_CMYK || colorspace == TJCS_YCCK ? 4 : 3);
  return std::array<int32_t, 3>{height, width, components};
}

class ExtractJpegShapeFn : public ComponentFn {
 public:
  std::string Describe() const override { return "extract_jpeg_shape()"; }
  absl::StatusOr<ElementSpec> OutputSpec(const TensorSpec& input) const override {
    if (input.dtype != DType::kString || input.shape.rank() != 0) {
      return Invalid(absl::StrCat("needs a string scalar of JPEG bytes, got ", SpecString(input)));
    }
    return ElementSpec(TensorSpec{DType::kInt32, Shape({3})});
  }
  absl::StatusOr<Element> Apply(const Tensor& input) const override {
    RETURN_IF_ERROR(OutputSpec(TensorSpec{input.dtype(), input.shape()}).status());
    ASSIGN_OR_RETURN(auto shape, ReadJpegShape(input.string_at(0)));
    return Element(Tensor::FromVector<int32_t>({shape[0], shape[1], shape[2]}, Shape({3})));
  }
};

// The window a (bytes, crop_window) tuple carries: int32 or int64 [y, x, height, width].
absl::StatusOr<CropBox> WindowOf(const Tensor& t) {
  if ((t.dtype() != DType::kInt32 && t.dtype() != DType::kInt64) || t.shape().rank() != 1 ||
      t.shape().dim(0) != 4) {
    return Invalid(absl::StrCat("crop_window must be int32 or int64 [4] ([y, x, height, width]), "
                                "got ", DTypeName(t.dtype()), " ", t.shape().ToString()));
  }
  int64_t v[4];
  for (int i = 0; i < 4; ++i) {
    v[i] = t.dtype() == DType::kInt32 ? t.data<int32_t>()[i] : t.data<int64_t>()[i];
  }
  if (v[0] < 0 || v[1] < 0 || v[2] < 1 || v[3] < 1) {
    return Invalid(absl::StrCat("crop_window must be [y, x, height, width] with y, x >= 0 and "
                                "height, width >= 1, got [", absl::StrJoin(v, ", "), "]"));
  }
  return CropBox{v[0], v[1], v[2], v[3]};
}

// decode_and_crop_jpeg with a fixed window (crop_window=[...]) or, without one, on a
// (bytes, crop_window) tuple: TF's op, whose window is a tensor.
class DecodeAndCropJpegFn : public ComponentFn {
 public:
  DecodeAndCropJpegFn(std::optional<CropBox> window, int64_t channels)
      : window_(window), channels_(channels) {}

  std::string Describe() const override {
    std::vector<std::string> args;
    if (window_.has_value()) {
      args.push_back(absl::StrCat("[", window_->y, ", ", window_->x, ", ", window_->height, ", ",
                                  window_->width, "]"));
    }
    if (channels_ != 0) args.push_back(absl::StrCat("channels=", channels_));
    return absl::StrCat("decode_and_crop_jpeg(", absl::StrJoin(args, ", "), ")");
  }
  absl::StatusOr<ElementSpec> OutputSpec(const TensorSpec& input) const override {
    if (!window_.has_value()) {
      return Invalid(absl::StrCat("without a crop_window needs a (bytes, crop_window) tuple "
                                  "(sample_distorted_bounding_box's output), got ",
                                  SpecString(input)));
    }
    RETURN_IF_ERROR(CheckBytes(input));
    return ElementSpec(TensorSpec{DType::kUInt8, Shape({window_->height, window_->width,
                                                        channels_ == 0 ? kUnknownDim : channels_})});
  }
  absl::StatusOr<Element> Apply(const Tensor& input) const override {
    RETURN_IF_ERROR(OutputSpec(TensorSpec{input.dtype(), input.shape()}).status());
    return Decode(input.string_at(0), *window_);
  }

  int TupleArity() const override { return window_.has_value() ? 0 : 2; }
  absl::StatusOr<ElementSpec> TupleOutputSpec(
      const std::vector<TensorSpec>& inputs) const override {
    RETURN_IF_ERROR(CheckBytes(inputs[0]));
    const TensorSpec& w = inputs[1];
    if ((w.dtype != DType::kInt32 && w.dtype != DType::kInt64) ||
        !w.shape.IsCompatibleWith(Shape({4}))) {
      return Invalid(absl::StrCat("crop_window must be int32 or int64 [4] ([y, x, height, "
                                  "width]), got ", SpecString(w)));
    }
    return ElementSpec(TensorSpec{DType::kUInt8, Shape({kUnknownDim, kUnknownDim,
                                                        channels_ == 0 ? kUnknownDim : channels_})});
  }
  absl::StatusOr<Element> ApplyTuple(const std::vector<Tensor>& inputs) const override {
    RETURN_IF_ERROR(TupleOutputSpec({TensorSpec{inputs[0].dtype(), inputs[0].shape()},
                                     TensorSpec{inputs[1].dtype(), inputs[1].shape()}})
                        .status());
    ASSIGN_OR_RETURN(CropBox window, WindowOf(inputs[1]));
    return Decode(inputs[0].string_at(0), window);
  }

 private:
  static absl::Status CheckBytes(const TensorSpec& input) {
    if (input.dtype != DType::kString || input.shape.rank() != 0) {
      return Invalid(absl::StrCat("needs a string scalar of JPEG bytes, got ", SpecString(input)));
    }
    return absl::OkStatus();
  }

  // TF's decode_and_crop_jpeg: the window decoded alone at full size, the same pixels as
  // decode_jpeg then a crop.
  absl::StatusOr<Element> Decode(const std::string& bytes, const CropBox& window) const {
    if (!IsJpeg(bytes)) return Invalid(absl::StrCat("the ", bytes.size(), " bytes are not a JPEG"));
    auto plan = [&](const JpegHeader& h) -> absl::StatusOr<JpegWindowPlan> {
      const int64_t c = channels_ == 0 ? (h.components == 1 ? 1 : 3) : channels_;
      RETURN_IF_ERROR(CheckJpegHeader(h, c));
      JpegWindowPlan p;
      p.y = window.y;
      p.x = window.x;
      p.height = window.height;
      p.width = window.width;
      p.channels = static_cast<int>(c);
      return p;
    };
    ASSIGN_OR_RETURN(DecodedJpegWindow w, DecodeJpegWindow(bytes, plan, "decode_and_crop_jpeg"));
    const int64_t c = w.plan.channels, cols = w.pixels.shape().dim(1);
    if (w.col0 == window.x && cols == window.width) return Element(std::move(w.pixels));
    ASSIGN_OR_RETURN(Tensor out,
                     TryAllocateUninitialized(DType::kUInt8, Shape({window.height, window.width, c}),
                                              "decode_and_crop_jpeg"));
    const size_t row = static_cast<size_t>(window.width * c);
    for (int64_t y = 0; y < window.height; ++y) {
      std::memcpy(out.mutable_data<uint8_t>() + y * static_cast<int64_t>(row),
                  w.pixels.data<uint8_t>() + (y * cols + window.x - w.col0) * c, row);
    }
    return Element(std::move(out));
  }

  const std::optional<CropBox> window_;
  const int64_t channels_;
};

// sample_distorted_bounding_box: TF's box sampling (distorted_box_sampling.h) with per-element
// draws. On an image_size [3] (int32 or int64): TF's (begin, size, bboxes). On JPEG bytes:
// (bytes, crop_window int32 [y, x, height, width]), the size read from the header (TF's
// extract_jpeg_shape), for decode_and_crop_jpeg() to decode.
class SampleDistortedBoundingBoxFn : public ComponentFn {
 public:
  SampleDistortedBoundingBoxFn(DistortedBoxOptions options, std::optional<int64_t> seed)
      : options_(std::move(options)), seed_(seed) {}

  std::string Describe() const override {
    std::vector<std::string> boxes;
    for (size_t i = 0; i + 4 <= options_.bounding_boxes.size(); i += 4) {
      std::vector<std::string> v;
      for (size_t k = 0; k < 4; ++k) v.push_back(PythonFloat32Literal(options_.bounding_boxes[i + k]));
      boxes.push_back(absl::StrCat("[", absl::StrJoin(v, ", "), "]"));
    }
    // The arguments that differ from TF's defaults (the parser drops those equal to them, so
    // that the expression reads back to the same proto).
    const DistortedBoxOptions defaults;
    std::vector<std::string> args;
    if (!boxes.empty()) args.push_back(absl::StrCat("[[", absl::StrJoin(boxes, ", "), "]]"));
    if (seed_.has_value()) args.push_back(absl::StrCat("seed=", *seed_));
    if (options_.min_object_covered != defaults.min_object_covered) {
      args.push_back(absl::StrCat("min_object_covered=",
                                  PythonFloat32Literal(options_.min_object_covered)));
    }
    for (auto [name, range, fallback] :
         {std::tuple("aspect_ratio_range", options_.aspect_ratio_range, defaults.aspect_ratio_range),
          std::tuple("area_range", options_.area_range, defaults.area_range)}) {
      if (range[0] == fallback[0] && range[1] == fallback[1]) continue;
      args.push_back(absl::StrCat(name, "=(", PythonFloat32Literal(range[0]), ", ",
                                  PythonFloat32Literal(range[1]), ")"));
    }
    if (options_.max_attempts != defaults.max_attempts) {
      args.push_back(absl::StrCat("max_attempts=", options_.max_attempts));
    }
    if (!options_.use_image_if_no_bounding_boxes) {
      args.push_back("use_image_if_no_bounding_boxes=False");
    }
    return absl::StrCat("sample_distorted_bounding_box(", absl::StrJoin(args, ", "), ")");
  }

  absl::StatusOr<ElementSpec> OutputSpec(const TensorSpec& input) const override {
    if (input.dtype == DType::kString && input.shape.rank() == 0) {
      return ElementSpec::Tuple({ElementSpec(input),
                                 ElementSpec(TensorSpec{DType::kInt32, Shape({4})})});
    }
    if ((input.dtype == DType::kInt32 || input.dtype == DType::kInt64) &&
        input.shape.IsCompatibleWith(Shape({3}))) {
      const TensorSpec three{input.dtype, Shape({3})};
      return ElementSpec::Tuple({ElementSpec(three), ElementSpec(three),
                                 ElementSpec(TensorSpec{DType::kFloat32, Shape({1, 1, 4})})});
    }
    return Invalid(absl::StrCat("needs JPEG bytes (a string scalar) or an image_size of 3 ints "
                                "(int32 or int64 [height, width, channels]), got ",
                                SpecString(input)));
  }

  bool DrawsPerElement() const override { return seed_.has_value(); }

  absl::StatusOr<Element> Apply(const Tensor& input) const override {
    RETURN_IF_ERROR(OutputSpec(TensorSpec{input.dtype(), input.shape()}).status());
    if (input.dtype() == DType::kString) {
      ASSIGN_OR_RETURN(auto shape, ReadJpegShape(input.string_at(0)));
      if (shape[0] < 1 || shape[1] < 1) return Invalid("the JPEG has no pixels");
      const CropBox box = Sample(shape[0], shape[1]);
      return Element::Tuple({Element(input), Element(Tensor::FromVector<int32_t>(
                                                 {static_cast<int32_t>(box.y),
                                                  static_cast<int32_t>(box.x),
                                                  static_cast<int32_t>(box.height),
                                                  static_cast<int32_t>(box.width)},
                                                 Shape({4})))});
    }
    const bool i32 = input.dtype() == DType::kInt32;
    auto at = [&](int i) { return i32 ? int64_t{input.data<int32_t>()[i]} : input.data<int64_t>()[i]; };
    const int64_t height = at(0), width = at(1);
    if (height < 1 || width < 1 || height > INT32_MAX || width > INT32_MAX) {
      return Invalid(absl::StrCat("image_size [", at(0), ", ", at(1), ", ", at(2),
                                  "]: height and width must be in [1, 2^31)"));
    }
    const CropBox box = Sample(height, width);
    const float fh = static_cast<float>(height), fw = static_cast<float>(width);
    Tensor bboxes = Tensor::FromVector<float>(
        {static_cast<float>(box.y) / fh, static_cast<float>(box.x) / fw,
         static_cast<float>(box.y + box.height) / fh, static_cast<float>(box.x + box.width) / fw},
        Shape({1, 1, 4}));
    auto triple = [&](int64_t a, int64_t b, int64_t c) {
      return i32 ? Tensor::FromVector<int32_t>({static_cast<int32_t>(a), static_cast<int32_t>(b),
                                                static_cast<int32_t>(c)}, Shape({3}))
                 : Tensor::FromVector<int64_t>({a, b, c}, Shape({3}));
    };
    return Element::Tuple({Element(triple(box.y, box.x, 0)),
                           Element(triple(box.height, box.width, -1)), Element(std::move(bboxes))});
  }

 private:
  CropBox Sample(int64_t height, int64_t width) const {
    std::mt19937_64 gen = ElementGenerator(seed_, DrawingOp::kSampleDistortedBoundingBox);
    return SampleDistortedBox(height, width, options_, gen);
  }

  const DistortedBoxOptions options_;
  const std::optional<int64_t> seed_;
};

std::optional<int64_t> SeedOf(bool has, int64_t seed) {
  return has ? std::optional<int64_t>(seed) : std::nullopt;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ComponentFn>> MakeImageComponentFn(const proto::ImageFn& fn) {
  switch (fn.op_case()) {
    case proto::ImageFn::kDecode: {
      const int64_t c = fn.decode().channels();
      if (c != 0 && c != 1 && c != 3 && c != 4) {
        return Invalid(absl::StrCat("decode_image: channels must be 0, 1, 3 or 4, got ", c));
      }
      return std::unique_ptr<ComponentFn>(new DecodeImageFn(c));
    }
    case proto::ImageFn::kResize: {
      const proto::ImageFn::Resize& r = fn.resize();
      if (r.height() < 1 || r.width() < 1) {
        return Invalid(absl::StrCat("resize: size must be positive, got [", r.height(), ", ",
                                    r.width(), "]"));
      }
      RETURN_IF_ERROR(CheckedNumElements({r.height(), r.width()}, "resize").status());
      return std::unique_ptr<ComponentFn>(new ResizeFn(r.height(), r.width()));
    }
    case proto::ImageFn::kRandomCrop: {
      const proto::ImageFn::RandomCrop& r = fn.random_crop();
      std::vector<int64_t> size(r.size().begin(), r.size().end());
      if (size.size() != 2 && size.size() != 3) {
        return Invalid("random_crop: size must be [height, width] or [height, width, channels]");
      }
      for (int64_t d : size) {
        if (d < 1) return Invalid(absl::StrCat("random_crop: sizes must be positive, got ", d));
      }
      return std::unique_ptr<ComponentFn>(
          new RandomCropFn(std::move(size), SeedOf(r.has_seed(), r.seed())));
    }
    case proto::ImageFn::kRandomFlipLeftRight: {
      const proto::ImageFn::RandomFlipLeftRight& r = fn.random_flip_left_right();
      return std::unique_ptr<ComponentFn>(new RandomFlipFn(SeedOf(r.has_seed(), r.seed())));
    }
    case proto::ImageFn::kCentralCrop: {
      const double f = fn.central_crop().central_fraction();
      if (!(f > 0.0 && f <= 1.0)) {
        return Invalid(absl::StrCat("central_crop: central_fraction must be in (0, 1], got ", f));
      }
      return std::unique_ptr<ComponentFn>(new CentralCropFn(f));
    }
    case proto::ImageFn::kRandomResizedCrop: {
      const proto::ImageFn::RandomResizedCrop& r = fn.random_resized_crop();
      if (r.height() < 1 || r.width() < 1) {
        return Invalid(absl::StrCat("random_resized_crop: size must be positive, got [",
                                    r.height(), ", ", r.width(), "]"));
      }
      RETURN_IF_ERROR(CheckedNumElements({r.height(), r.width(), 4}, "random_resized_crop")
                          .status());
      double scale[2] = {0.08, 1.0}, ratio[2] = {3.0 / 4.0, 4.0 / 3.0};
      for (auto [name, given, range] :
           {std::tuple("scale", &r.scale(), scale), std::tuple("ratio", &r.ratio(), ratio)}) {
        if (given->empty()) continue;
        if (given->size() != 2 || !((*given)[0] > 0.0) || !((*given)[0] <= (*given)[1]) ||
            !std::isfinite((*given)[1])) {
          return Invalid(absl::StrCat("random_resized_crop: ", name,
                                      " must be (low, high) with 0 < low <= high, got (",
                                      absl::StrJoin(*given, ", "), ")"));
        }
        range[0] = (*given)[0];
        range[1] = (*given)[1];
      }
      return std::unique_ptr<ComponentFn>(new RandomResizedCropFn(
          r.height(), r.width(), scale, ratio, SeedOf(r.has_seed(), r.seed()), r.exact()));
    }
    case proto::ImageFn::kDecodeAndCropJpeg: {
      const proto::ImageFn::DecodeAndCropJpeg& d = fn.decode_and_crop_jpeg();
      if (d.channels() != 0 && d.channels() != 1 && d.channels() != 3) {
        return Invalid(absl::StrCat("decode_and_crop_jpeg: channels must be 0, 1 or 3, got ",
                                    d.channels()));
      }
      if (d.crop_window_size() == 0) {  // the window comes with the bytes, as a tuple
        return std::unique_ptr<ComponentFn>(new DecodeAndCropJpegFn(std::nullopt, d.channels()));
      }
      if (d.crop_window_size() != 4 || d.crop_window(0) < 0 || d.crop_window(1) < 0 ||
          d.crop_window(2) < 1 || d.crop_window(3) < 1) {
        return Invalid("decode_and_crop_jpeg: crop_window must be [y, x, height, width] with "
                       "y, x >= 0 and height, width >= 1");
      }
      RETURN_IF_ERROR(
          CheckedNumElements({d.crop_window(2), d.crop_window(3), 3}, "decode_and_crop_jpeg")
              .status());
      return std::unique_ptr<ComponentFn>(new DecodeAndCropJpegFn(
          CropBox{d.crop_window(0), d.crop_window(1), d.crop_window(2), d.crop_window(3)},
          d.channels()));
    }
    case proto::ImageFn::kSampleDistortedBoundingBox: {
      const proto::ImageFn::SampleDistortedBoundingBox& b = fn.sample_distorted_bounding_box();
      DistortedBoxOptions o;
      o.bounding_boxes.assign(b.bounding_boxes().begin(), b.bounding_boxes().end());
      if (b.has_min_object_covered()) o.min_object_covered = b.min_object_covered();
      for (auto [name, given, range] :
           {std::tuple("aspect_ratio_range", &b.aspect_ratio_range(), o.aspect_ratio_range),
            std::tuple("area_range", &b.area_range(), o.area_range)}) {
        if (given->empty()) continue;
        if (given->size() != 2) {
          return Invalid(absl::StrCat("sample_distorted_bounding_box: ", name,
                                      " must be (low, high), got ", given->size(), " values"));
        }
        range[0] = (*given)[0];
        range[1] = (*given)[1];
      }
      if (b.has_max_attempts()) o.max_attempts = b.max_attempts();
      if (b.has_use_image_if_no_bounding_boxes()) {
        o.use_image_if_no_bounding_boxes = b.use_image_if_no_bounding_boxes();
      }
      absl::Status checked = CheckDistortedBoxOptions(o);
      if (!checked.ok()) {
        return Invalid(absl::StrCat("sample_distorted_bounding_box: ", checked.message()));
      }
      return std::unique_ptr<ComponentFn>(
          new SampleDistortedBoundingBoxFn(std::move(o), SeedOf(b.has_seed(), b.seed())));
    }
    case proto::ImageFn::kExtractJpegShape:
      return std::unique_ptr<ComponentFn>(new ExtractJpegShapeFn());
    case proto::ImageFn::OP_NOT_SET: break;
  }
  return Invalid("map: image function not set (written by a newer build?)");
}

std::string ImageFnName(const proto::ImageFn& fn) {
  switch (fn.op_case()) {
    case proto::ImageFn::kDecode: return "decode_image";
    case proto::ImageFn::kResize: return "resize";
    case proto::ImageFn::kRandomCrop: return "random_crop";
    case proto::ImageFn::kRandomFlipLeftRight: return "random_flip_left_right";
    case proto::ImageFn::kCentralCrop: return "central_crop";
    case proto::ImageFn::kRandomResizedCrop: return "random_resized_crop";
    case proto::ImageFn::kDecodeAndCropJpeg: return "decode_and_crop_jpeg";
    case proto::ImageFn::kExtractJpegShape: return "extract_jpeg_shape";
    case proto::ImageFn::kSampleDistortedBoundingBox: return "sample_distorted_bounding_box";
    case proto::ImageFn::OP_NOT_SET: break;
  }
  return "unset";
}

std::string ImageFnExpression(const proto::ImageFn& fn) {
  absl::StatusOr<std::unique_ptr<ComponentFn>> made = MakeImageComponentFn(fn);
  if (made.ok()) return (*made)->Describe();
  return absl::StrCat(ImageFnName(fn), "()");
}

}  // namespace sluice
