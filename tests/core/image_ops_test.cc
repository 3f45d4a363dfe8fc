// Image ops against TensorFlow: tools/golden/gen_image_goldens.py wrote JPEG and PNG fixtures
// and TF 2's results (tests/testdata/images/golden.json): decode_image must give TF's pixels
// bit for bit (sha256 of the uint8 tensor), resize TF's bilinear values within 1e-3 (the golden
// holds them rounded to 4 decimals; float32 arithmetic in the same order as TF's kernel),
// central_crop TF's window exactly. random_crop / random_flip_left_right: windows of the input,
// a function of (seed, element key) only, different across seeds; pipeline syntax, specs and
// errors. Per-epoch draws: tests/core/random_resized_crop_test.cc.
#include "core/data/ops/image_ops.h"

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/io/aws_sigv4.h"
#include "proto/dataset.pb.h"
#include "sluice/dataset.h"
#include "core/util/json_value.h"
#include "core/data/map_fns.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/iterator_test_util.h"
#include "tests/core/record_test_util.h"

namespace sluice {
namespace {

using record_test::ReadWholeFile;

const std::string kDir = "tests/testdata/images/";

const JsonValue& Golden() {
  static const JsonValue* golden = [] {
    absl::StatusOr<JsonValue> v = ParseJson(ReadWholeFile(kDir + "golden.json"));
    EXPECT_TRUE(v.ok()) << v.status();
    return new JsonValue(v.ok() ? *std::move(v) : JsonValue());
  }();
  return *golden;
}

// Parses `fn` in a pipeline whose spec fits it (bytes for decode_image, an image for the
// others) and applies it to `input`.
absl::StatusOr<Tensor> ApplyFn(const std::string& fn, const Tensor& input) {
  const bool decode = absl::StartsWith(fn, "decode");
  absl::StatusOr<Dataset> ds = Dataset::Parse(absl::StrCat(
      "from_tensors('x')", decode ? "" : ".map(decode_image())", ".map(", fn, ")"));
  if (!ds.ok()) return ds.status();
  const proto::MapOp& map = ds->def().ops(decode ? 0 : 1).map();
  absl::StatusOr<std::unique_ptr<ComponentFn>> made = MakeComponentFn(map);
  if (!made.ok()) return made.status();
  absl::StatusOr<Element> out = (*made)->Apply(input);
  if (!out.ok()) return out.status();
  return out->leaf();
}

Tensor FileBytes(const std::string& name) {
  return Tensor::StringScalar(ReadWholeFile(kDir + name));
}

std::string Sha(const Tensor& t) {
  return Sha256Hex(absl::string_view(static_cast<const char*>(t.raw_data()), t.byte_size()));
}

std::vector<int64_t> Dims(const Tensor& t) {
  std::vector<int64_t> d;
  for (int i = 0; i < t.shape().rank(); ++i) d.push_back(t.shape().dim(i));
  return d;
}
std::vector<int64_t> Dims(const JsonValue& list) {
  std::vector<int64_t> d;
  for (const JsonValue& v : list.items()) d.push_back(*v.int_value());
  return d;
}

TEST(ImageOpsTest, DecodeGivesTensorFlowsPixels) {
  const JsonValue& cases = Golden()["decode"];
  ASSERT_GE(cases.size(), 15u);
  for (const JsonValue& c : cases.items()) {
    const std::string file = c["file"].string_value();
    const int64_t channels = *c["channels"].int_value();
    absl::StatusOr<Tensor> img =
        ApplyFn(absl::StrCat("decode_image(channels=", channels, ")"), FileBytes(file));
    ASSERT_TRUE(img.ok()) << file << " channels=" << channels << ": " << img.status();
    EXPECT_EQ(img->dtype(), DType::kUInt8);
    EXPECT_EQ(Dims(*img), Dims(c["shape"])) << file << " channels=" << channels;
    EXPECT_EQ(Sha(*img), c["sha256"].string_value()) << file << " channels=" << channels;
  }
}

TEST(ImageOpsTest, ResizeIsTensorFlowsBilinear) {
  for (const JsonValue& c : Golden()["resize"].items()) {
    const std::string file = c["file"].string_value();
    absl::StatusOr<Tensor> img = ApplyFn("decode_image()", FileBytes(file));
    ASSERT_TRUE(img.ok()) << img.status();
    const std::vector<int64_t> size = Dims(c["size"]);
    absl::StatusOr<Tensor> out =
        ApplyFn(absl::StrCat("resize([", size[0], ", ", size[1], "])"), *img);
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(Dims(*out), Dims(c["shape"])) << file;
    const JsonValue& want = c["values"];
    ASSERT_EQ(static_cast<int64_t>(want.size()), out->num_elements());
    double worst = 0;
    for (int64_t i = 0; i < out->num_elements(); ++i) {
      const double diff = out->data<float>()[i] - want[static_cast<size_t>(i)].number();
      worst = std::max(worst, std::abs(diff));
    }
    EXPECT_LE(worst, 1e-3) << file << " resized to " << size[0] << "x" << size[1];
  }
}

TEST(ImageOpsTest, CentralCropIsTensorFlows) {
  for (const JsonValue& c : Golden()["central_crop"].items()) {
    const std::string file = c["file"].string_value();
    absl::StatusOr<Tensor> img = ApplyFn("decode_image()", FileBytes(file));
    ASSERT_TRUE(img.ok()) << img.status();
    absl::StatusOr<Tensor> out =
        ApplyFn(absl::StrCat("central_crop(", c["fraction"].number(), ")"), *img);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(Dims(*out), Dims(c["shape"])) << file << " " << c["fraction"].number();
    EXPECT_EQ(Sha(*out), c["sha256"].string_value()) << file;
  }
}

// Whether `crop` is the window of `img` at some offset.
bool IsWindowOf(const Tensor& crop, const Tensor& img) {
  const int64_t h = crop.shape().dim(0), w = crop.shape().dim(1), c = crop.shape().dim(2);
  const int64_t W = img.shape().dim(1), C = img.shape().dim(2);
  for (int64_t y0 = 0; y0 + h <= img.shape().dim(0); ++y0) {
    for (int64_t x0 = 0; x0 + w <= W; ++x0) {
      bool same = true;
      for (int64_t y = 0; y < h && same; ++y) {
        for (int64_t x = 0; x < w && same; ++x) {
          for (int64_t k = 0; k < c && same; ++k) {
            same = crop.data<uint8_t>()[(y * w + x) * c + k] ==
                   img.data<uint8_t>()[((y0 + y) * W + x0 + x) * C + k];
          }
        }
      }
      if (same) return true;
    }
  }
  return false;
}

TEST(ImageOpsTest, RandomCropAndFlipAreFunctionsOfSeedAndElement) {
  absl::StatusOr<Tensor> img = ApplyFn("decode_image()", FileBytes("rgb.jpg"));
  ASSERT_TRUE(img.ok()) << img.status();
  std::set<std::string> crops;
  for (int seed = 0; seed < 8; ++seed) {
    const std::string fn = absl::StrCat("random_crop([20, 30, 3], seed=", seed, ")");
    absl::StatusOr<Tensor> a = ApplyFn(fn, *img);
    absl::StatusOr<Tensor> b = ApplyFn(fn, *img);
    ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
    EXPECT_EQ(Dims(*a), (std::vector<int64_t>{20, 30, 3}));
    EXPECT_EQ(Sha(*a), Sha(*b)) << "seed " << seed;
    EXPECT_TRUE(IsWindowOf(*a, *img)) << "seed " << seed;
    crops.insert(Sha(*a));
  }
  EXPECT_GT(crops.size(), 4u) << "eight seeds gave nearly the same window";

  int flipped = 0;
  for (int seed = 0; seed < 16; ++seed) {
    const std::string fn = absl::StrCat("random_flip_left_right(seed=", seed, ")");
    absl::StatusOr<Tensor> a = ApplyFn(fn, *img);
    absl::StatusOr<Tensor> b = ApplyFn(fn, *img);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(Sha(*a), Sha(*b));
    if (Sha(*a) != Sha(*img)) {
      ++flipped;
      const int64_t w = img->shape().dim(1);
      EXPECT_EQ(a->data<uint8_t>()[0], img->data<uint8_t>()[(w - 1) * 3]);
    }
  }
  EXPECT_GT(flipped, 2);
  EXPECT_LT(flipped, 14);
}

// Seeded draws are a function of (seed, op, epoch, element position) only (core/data/
// element_draws.h), the same in every process and on every machine: these values, for position 0
// of epoch 0 (a fn applied outside a map), are pinned. They were a per-process salted hash's
// once, and two workers cropped and flipped the same image differently.
TEST(ImageOpsTest, SeededDrawsArePinnedValuesOfSeedAndElement) {
  // 10 x 20 RGB, channel 0 of pixel (y, x) = y * 20 + x: a crop's first byte names its corner.
  Tensor img = Tensor::Allocate(DType::kUInt8, Shape({10, 20, 3}));
  for (int64_t i = 0; i < 10 * 20 * 3; ++i) {
    img.mutable_data<uint8_t>()[i] = static_cast<uint8_t>(i % 3 == 0 ? i / 3 : 7 * i);
  }
  std::vector<int> corners;
  for (int seed = 0; seed < 8; ++seed) {
    absl::StatusOr<Tensor> a =
        ApplyFn(absl::StrCat("random_crop([4, 5, 3], seed=", seed, ")"), img);
    ASSERT_TRUE(a.ok()) << a.status();
    corners.push_back(a->data<uint8_t>()[0]);
  }
  std::string flips;
  for (int seed = 0; seed < 16; ++seed) {
    absl::StatusOr<Tensor> a =
        ApplyFn(absl::StrCat("random_flip_left_right(seed=", seed, ")"), img);
    ASSERT_TRUE(a.ok()) << a.status();
    flips += a->data<uint8_t>()[0] == 0 ? '.' : 'f';
  }
  EXPECT_THAT(corners, ::testing::ElementsAre(27, 94, 13, 25, 94, 123, 123, 124));
  EXPECT_EQ(flips, "..fff.ff.ffff..f");
}

TEST(ImageOpsTest, PipelineSpecsAndRoundTrip) {
  absl::StatusOr<Dataset> ds = Dataset::Parse(absl::StrCat(
      "from_tensors({'jpg': ", "'x'", "}).map(tf.io.decode_image(channels=3), key='jpg')"
      ".map(random_crop([24, 24, 3], seed=1), key='jpg').map(random_flip_left_right(seed=2), "
      "key='jpg').map(resize([16, 16]), key='jpg').map(central_crop(0.5), key='jpg')"
      ".map(normalize(mean=[0.5, 0.5, 0.5], std=[0.2, 0.2, 0.2]), key='jpg').batch(2)"));
  ASSERT_TRUE(ds.ok()) << ds.status();
  absl::StatusOr<ElementSpec> spec = ds->element_spec();
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->children()[0].leaf().shape, Shape({-1, 8, 8, 3}));
  absl::StatusOr<Dataset> again = Dataset::Parse(ds->ToExpression());
  ASSERT_TRUE(again.ok()) << ds->ToExpression() << ": " << again.status();
  EXPECT_EQ(again->Fingerprint(), ds->Fingerprint());
}

TEST(ImageOpsTest, ErrorsNameTheFn) {
  absl::StatusOr<Tensor> bad = ApplyFn("decode_image()", Tensor::StringScalar("GIF89a..."));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "neither JPEG nor PNG")) << bad.status();
  std::string jpeg = ReadWholeFile(kDir + "rgb.jpg");
  absl::StatusOr<Tensor> cut =
      ApplyFn("decode_image()", Tensor::StringScalar(jpeg.substr(0, jpeg.size() / 2)));
  ASSERT_FALSE(cut.ok());
  EXPECT_TRUE(absl::StrContains(cut.status().message(), "corrupt JPEG")) << cut.status();
  absl::StatusOr<Tensor> img = ApplyFn("decode_image()", FileBytes("rgb.jpg"));
  ASSERT_TRUE(img.ok());
  absl::StatusOr<Tensor> big = ApplyFn("random_crop([100, 10])", *img);
  ASSERT_FALSE(big.ok());
  EXPECT_TRUE(absl::StrContains(big.status().message(), "larger than the image")) << big.status();
  for (const std::string& fn : {std::string("decode_image(channels=2)"),
                                std::string("central_crop(1.5)"), std::string("resize([0, 3])")}) {
    absl::StatusOr<Dataset> ds = Dataset::Parse(absl::StrCat(
        "from_tensors('x').map(decode_image()).map(", fn, ")"));
    absl::Status s = ds.ok() ? ds->element_spec().status() : ds.status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << fn << ": " << s;
  }
}

}  // namespace
}  // namespace sluice
