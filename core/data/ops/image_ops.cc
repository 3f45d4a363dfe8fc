#include "core/data/ops/image_ops.h"

#include <png.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data/shape_limits.h"
#include "core/tensor/dtype_dispatch.h"
#include "core/format/python_literal.h"
#include "core/util/crc32c.h"
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

// The generator for one element of a seeded op: a function of the seed and the element's
// bytes and shape only, the same in every process and on every machine (absl::HashOf is salted
// per process, so it cannot serve: two workers cropped the same image differently). The CRC,
// std::seed_seq and mt19937_64 are each specified exactly.
std::mt19937_64 ElementGenerator(const std::optional<int64_t>& seed, const Tensor& t) {
  if (!seed.has_value()) {
    thread_local absl::BitGen bits;
    return std::mt19937_64(absl::Uniform<uint64_t>(bits));
  }
  const auto s = static_cast<uint64_t>(*seed);
  const absl::string_view bytes(static_cast<const char*>(t.raw_data()), t.byte_size());
  std::seed_seq seq{static_cast<uint32_t>(s), static_cast<uint32_t>(s >> 32),
                    crc32c::Value(bytes), static_cast<uint32_t>(t.shape().dim(0)),
                    static_cast<uint32_t>(t.shape().dim(1))};
  return std::mt19937_64(seq);
}

// A draw in [0, n] that every standard library computes alike (uniform_int_distribution's
// algorithm is each library's own); the modulo bias is below 2^-40 for any image size.
int64_t DrawUpTo(std::mt19937_64& gen, int64_t n) {
  return static_cast<int64_t>(gen() % (static_cast<uint64_t>(n) + 1));
}

// Copies rows [y0, y0 + h) x columns [x0, x0 + w) x channels [c0, c0 + c) of `in`, into a
// tensor from the allocator (RESOURCE_EXHAUSTED naming `op` when refused).
absl::StatusOr<Tensor> Window(const Tensor& in, int64_t y0, int64_t x0, int64_t c0, int64_t h,
                              int64_t w, int64_t c, absl::string_view op) {
  ASSIGN_OR_RETURN(Tensor out, Tensor::TryAllocate(in.dtype(), Shape({h, w, c}), op));
  const size_t e = DTypeSize(in.dtype());
  const int64_t in_w = in.shape().dim(1), in_c = in.shape().dim(2);
  const char* src = static_cast<const char*>(in.raw_data());
  char* dst = static_cast<char*>(out.mutable_raw_data());
  for (int64_t y = 0; y < h; ++y) {
    for (int64_t x = 0; x < w; ++x) {
      std::memcpy(dst + ((y * w + x) * c) * e, src + (((y0 + y) * in_w + x0 + x) * in_c + c0) * e,
                  static_cast<size_t>(c) * e);
    }
  }
  return out;
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
    ASSIGN_OR_RETURN(Tensor out,
                     Tensor::TryAllocate(DType::kUInt8, Shape({height, width, c}), "decode_jpeg"));
    if (tjDecompress2(handle.h, src, bytes.size(), out.mutable_data<uint8_t>(), width, 0, height,
                      c == 1 ? TJPF_GRAY : TJPF_RGB, TJFLAG_FASTDCT) != 0) {
      // Fatal errors and truncated data fail, as TF's decode_jpeg does (try_recover_truncated
      // is off); other warnings (extraneous bytes) do not.
      const std::string why = tjGetErrorStr2(handle.h);
      if (tjGetErrorCode(handle.h) == TJERR_FATAL ||
          why.find("Premature end") != std::string::npos) {
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

  absl::StatusOr<Element> Apply(const Tensor& input) const override {
    RETURN_IF_ERROR(OutputSpec(TensorSpec{input.dtype(), input.shape()}).status());
    const int64_t h = input.shape().dim(0), w = input.shape().dim(1), c = input.shape().dim(2);
    const int64_t ch = size_.size() == 3 ? size_[2] : c;
    std::mt19937_64 gen = ElementGenerator(seed_, input);
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
  absl::StatusOr<Element> Apply(const Tensor& input) const override {
    RETURN_IF_ERROR(CheckImageSpec(TensorSpec{input.dtype(), input.shape()}));
    std::mt19937_64 gen = ElementGenerator(seed_, input);
    if (DrawUpTo(gen, 1) == 0) return Element(input);
    const int64_t h = input.shape().dim(0), w = input.shape().dim(1), c = input.shape().dim(2);
    ASSIGN_OR_RETURN(Tensor out,
                     Tensor::TryAllocate(input.dtype(), input.shape(), "random_flip_left_right"));
    const size_t px = static_cast<size_t>(c) * DTypeSize(input.dtype());
    const char* src = static_cast<const char*>(input.raw_data());
    char* dst = static_cast<char*>(out.mutable_raw_data());
    for (int64_t y = 0; y < h; ++y) {
      for (int64_t x = 0; x < w; ++x) {
        std::memcpy(dst + (y * w + x) * px, src + (y * w + (w - 1 - x)) * px, px);
      }
    }
    return Element(std::move(out));
  }

 private:
  const std::optional<int64_t> seed_;
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
