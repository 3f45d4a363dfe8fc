// random_resized_crop, decode_and_crop_jpeg and extract_jpeg_shape (issue 27), and the per-element
// draw keys of seeded random image ops (core/data/element_draws.h):
//  - decode_and_crop_jpeg and extract_jpeg_shape give TF's values (tests/testdata/images/
//    golden.json from tools/golden/gen_image_goldens.py, TF 2.15.1);
//  - random_resized_crop's exact path equals full decode + crop + resize, its window-decoded
//    (DCT-scaled) path stays within a few levels of it, a full-image box gives TF's bilinear
//    resize, and its boxes follow torchvision's sampling;
//  - seeded draws depend on (seed, epoch, position): the same on every run and for any cut of a
//    RANGES epoch into ranges, different in every epoch; unseeded, different on every run;
//  - bad images are element errors naming the op, which ignore_errors() skips.
#include <cmath>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/data/distribute/global_order.h"
#include "core/data/element_draws.h"
#include "core/data/executor.h"
#include "core/data/op_iterator.h"
#include "core/data/map_fns.h"
#include "core/data/ops/image_ops.h"
#include "core/data/ops/resized_crop_sampling.h"
#include "core/io/aws_sigv4.h"
#include "core/util/json_value.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/dataset.pb.h"
#include "sluice/dataset.h"
#include "tests/core/crafted_images.h"
#include "tests/core/iterator_test_util.h"
#include "tests/core/record_test_util.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;
using record_test::ReadWholeFile;
using testing_util::RunDataset;

const std::string kDir = "tests/testdata/images/";

const JsonValue& Golden() {
  static const JsonValue* golden = [] {
    absl::StatusOr<JsonValue> v = ParseJson(ReadWholeFile(kDir + "golden.json"));
    EXPECT_TRUE(v.ok()) << v.status();
    return new JsonValue(v.ok() ? *std::move(v) : JsonValue());
  }();
  return *golden;
}

// The map op of `fn` (pipeline syntax), parsed on bytes (decode_*, extract_*,
// random_resized_crop) or on a decoded image (the others).
proto::OpDef MapOpOf(const std::string& fn) {
  const bool bytes = absl::StrContains(fn, "decode_") || absl::StrContains(fn, "extract_") ||
                     absl::StartsWith(fn, "random_resized_crop");
  absl::StatusOr<Dataset> ds = Dataset::Parse(absl::StrCat(
      "from_tensors('x')", bytes ? "" : ".map(decode_image(channels=3))", ".map(", fn, ")"));
  EXPECT_TRUE(ds.ok()) << fn << ": " << ds.status();
  return ds.ok() ? ds->def().ops(bytes ? 0 : 1) : proto::OpDef();
}

// Applies `fn` to `input` as the element at `key` (direct Apply, as a map would).
absl::StatusOr<Tensor> ApplyFn(const std::string& fn, const Tensor& input,
                               ElementDrawKey key = {}) {
  absl::StatusOr<std::unique_ptr<ComponentFn>> made = MakeComponentFn(MapOpOf(fn).map());
  if (!made.ok()) return made.status();
  ScopedElementDrawKey scope(key);
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

TEST(RandomResizedCropTest, DecodeAndCropJpegIsTensorFlows) {
  const JsonValue& cases = Golden()["decode_and_crop"];
  ASSERT_GE(cases.size(), 7u);
  for (const JsonValue& c : cases.items()) {
    std::vector<int64_t> w;
    for (const JsonValue& v : c["window"].items()) w.push_back(*v.int_value());
    const std::string fn = absl::StrCat("tf.image.decode_and_crop_jpeg([", w[0], ", ", w[1], ", ",
                                        w[2], ", ", w[3], "], channels=",
                                        *c["channels"].int_value(), ")");
    absl::StatusOr<Tensor> got = ApplyFn(fn, FileBytes(c["file"].string_value()));
    ASSERT_TRUE(got.ok()) << fn << ": " << got.status();
    std::vector<int64_t> want_shape;
    for (const JsonValue& v : c["shape"].items()) want_shape.push_back(*v.int_value());
    EXPECT_EQ(Dims(*got), want_shape) << c["file"].string_value() << " " << fn;
    EXPECT_EQ(Sha(*got), c["sha256"].string_value()) << c["file"].string_value() << " " << fn;
  }
}

TEST(RandomResizedCropTest, ExtractJpegShapeIsTensorFlows) {
  for (const JsonValue& c : Golden()["jpeg_shape"].items()) {
    absl::StatusOr<Tensor> got = ApplyFn("extract_jpeg_shape()", FileBytes(c["file"].string_value()));
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->dtype(), DType::kInt32);
    std::vector<int64_t> want, have;
    for (const JsonValue& v : c["shape"].items()) want.push_back(*v.int_value());
    for (int i = 0; i < 3; ++i) have.push_back(got->data<int32_t>()[i]);
    EXPECT_EQ(have, want) << c["file"].string_value();
  }
}

// A box covering the whole image (scale 1, the image's own ratio) is a plain resize: TF's
// bilinear values, through the separable kernel.
TEST(RandomResizedCropTest, WholeImageBoxIsTensorFlowsResize) {
  for (const JsonValue& c : Golden()["resize"].items()) {
    if (c["file"].string_value() != "rgb.jpg") continue;
    absl::StatusOr<Tensor> img = ApplyFn("decode_image()", FileBytes("rgb.jpg"));
    ASSERT_TRUE(img.ok());
    const int64_t h = *c["size"].items()[0].int_value(), w = *c["size"].items()[1].int_value();
    // 53 / 37: the image's ratio, so the first attempt is the whole image.
    const std::string fn = absl::StrCat("random_resized_crop([", h, ", ", w,
                                        "], scale=(1.0, 1.0), ratio=(1.4324324, 1.4324324), "
                                        "seed=3)");
    for (const Tensor& input : {*img, FileBytes("rgb.jpg")}) {
      absl::StatusOr<Tensor> got = ApplyFn(fn, input);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_EQ(Dims(*got), (std::vector<int64_t>{h, w, 3}));
      const auto& want = c["values"].items();
      ASSERT_EQ(static_cast<int64_t>(want.size()), got->num_elements());
      double worst = 0;
      for (int64_t i = 0; i < got->num_elements(); ++i) {
        worst = std::max(worst, std::abs(got->data<float>()[i] - want[static_cast<size_t>(i)].number()));
      }
      EXPECT_LT(worst, 1e-3) << (input.dtype() == DType::kString ? "bytes" : "image");
    }
  }
}

// exact=True gives the values of decode_image, then the box cropped and resized, for every box
// and every kind of JPEG.
TEST(RandomResizedCropTest, ExactIsFullDecodeCropResize) {
  for (const std::string file : {"photo.jpg", "progressive.jpg", "rgb.jpg", "rgb444.jpg",
                                 "gray.jpg"}) {
    absl::StatusOr<Tensor> img = ApplyFn("decode_image(channels=3)", FileBytes(file));
    ASSERT_TRUE(img.ok()) << img.status();
    for (int64_t position = 0; position < 12; ++position) {
      const std::string fn = "random_resized_crop([20, 24], seed=11, exact=True)";
      absl::StatusOr<Tensor> window = ApplyFn(fn, FileBytes(file), {0, position});
      absl::StatusOr<Tensor> full = ApplyFn(fn, *img, {0, position});
      ASSERT_TRUE(window.ok() && full.ok()) << window.status() << full.status();
      EXPECT_EQ(Sha(*window), Sha(*full)) << file << " position " << position;
    }
  }
}

// Without exact, a box at least twice the output is decoded at 1/2, 1/4 or 1/8 scale: a different
// downsampling (the reduced inverse DCT), close to the exact values but not equal to them.
TEST(RandomResizedCropTest, DctScaledDecodeStaysCloseToExact) {
  int scaled = 0;
  for (const std::string file : {"photo.jpg", "progressive.jpg"}) {
    for (int64_t position = 0; position < 16; ++position) {
      const std::string size = "[24, 32]";
      absl::StatusOr<Tensor> fast =
          ApplyFn(absl::StrCat("random_resized_crop(", size, ", seed=5)"), FileBytes(file),
                  {0, position});
      absl::StatusOr<Tensor> exact =
          ApplyFn(absl::StrCat("random_resized_crop(", size, ", seed=5, exact=True)"),
                  FileBytes(file), {0, position});
      ASSERT_TRUE(fast.ok() && exact.ok()) << fast.status() << exact.status();
      double sum = 0;
      for (int64_t i = 0; i < fast->num_elements(); ++i) {
        sum += std::abs(fast->data<float>()[i] - exact->data<float>()[i]);
      }
      const double mean = sum / static_cast<double>(fast->num_elements());
      if (mean > 0) ++scaled;
      // A noisy photo (sigma 12 levels) shrunk by block means instead of bilinear samples.
      EXPECT_LT(mean, 12.0) << file << " position " << position;
    }
  }
  EXPECT_GT(scaled, 8) << "few boxes took the DCT-scaled path";
}

TEST(RandomResizedCropTest, BoxesFollowTorchvisionSampling) {
  const double scale[2] = {0.08, 1.0}, ratio[2] = {3.0 / 4.0, 4.0 / 3.0};
  std::mt19937_64 gen(27);  // fixed seed
  int full = 0;
  for (int i = 0; i < 2000; ++i) {
    const CropBox b = SampleResizedCrop(375, 500, scale, ratio, gen);
    ASSERT_GE(b.y, 0);
    ASSERT_GE(b.x, 0);
    ASSERT_LE(b.y + b.height, 375);
    ASSERT_LE(b.x + b.width, 500);
    const double share = static_cast<double>(b.height * b.width) / (375.0 * 500.0);
    const double aspect = static_cast<double>(b.width) / static_cast<double>(b.height);
    // Rounding w and h to integers moves share and aspect a little.
    EXPECT_GT(share, 0.07);
    EXPECT_LT(share, 1.01);
    EXPECT_GT(aspect, 0.7);
    EXPECT_LT(aspect, 1.4);
    if (b.height == 375 && b.width == 500) ++full;
  }
  EXPECT_EQ(full, 0) << "500 / 375 is inside the ratio range: no fallback expected";
  // No attempt can fit a 1000 x 10 strip: the central crop, ratio clamped to 4/3: w = 13.
  const CropBox c = SampleResizedCrop(10, 1000, scale, ratio, gen);
  EXPECT_EQ(c.height, 10);
  EXPECT_EQ(c.width, 13);
  EXPECT_EQ(c.y, 0);
  EXPECT_EQ(c.x, (1000 - 13) / 2);
}

// ---------------------------------------------------------------------------------------------
// Draw keys in pipelines.

// N small distinct RGB images, uint8 [N, 12, 16, 3].
Tensor Images(int64_t n) {
  Tensor t = Tensor::Allocate(DType::kUInt8, Shape({n, 12, 16, 3}));
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    t.mutable_data<uint8_t>()[i] = static_cast<uint8_t>((i * 37 + i / 576 * 11) % 251);
  }
  return t;
}

std::vector<std::string> Shas(const std::vector<Element>& elements) {
  std::vector<std::string> out;
  for (const Element& e : elements) out.push_back(Sha(e.leaf()));
  return out;
}

const std::vector<std::string> kRandomFns = {
    "random_resized_crop([8, 8], seed=7)", "random_crop([5, 6, 3], seed=7)",
    "random_flip_left_right(seed=7)"};

// `ds` followed by `op`.
Dataset With(const Dataset& ds, const proto::OpDef& op) {
  proto::DatasetDef def = ds.def();
  *def.add_ops() = op;
  absl::StatusOr<Dataset> out = Dataset::FromDef(std::move(def));
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : ds;
}

std::vector<std::string> RunShas(const Dataset& ds) {
  absl::StatusOr<std::vector<Element>> got = RunDataset(ds);
  EXPECT_TRUE(got.ok()) << got.status();
  return got.ok() ? Shas(*got) : std::vector<std::string>();
}

TEST(ElementDrawsTest, SeededOpsDrawAnewEachEpochAndRepeatExactly) {
  constexpr int64_t kN = 8;
  for (const std::string& fn : kRandomFns) {
    for (bool map_first : {false, true}) {  // repeat() above or below the map
      const Dataset src = Dataset::FromTensorSlices(Element(Images(kN)));
      const Dataset ds = map_first ? With(src, MapOpOf(fn)).Repeat(3)
                                   : With(src.Repeat(3), MapOpOf(fn));
      const std::vector<std::string> a = RunShas(ds), b = RunShas(ds);
      ASSERT_EQ(a.size(), 3u * kN) << fn;
      EXPECT_EQ(a, b) << fn << ": a seeded pipeline must repeat exactly";
      int same = 0;
      for (int64_t i = 0; i < kN; ++i) same += a[i] == a[kN + i] && a[kN + i] == a[2 * kN + i];
      // A flip has two outcomes: an element keeps its draw over 3 epochs with probability 1/4.
      EXPECT_LT(same, fn.find("flip") != std::string::npos ? 6 : 2)
          << fn << (map_first ? " (map, repeat)" : " (repeat, map)")
          << ": the epochs drew the same augmentations";
    }
  }
}

TEST(ElementDrawsTest, UnseededOpsDrawAnewEachRun) {
  const Dataset ds =
      With(Dataset::FromTensorSlices(Element(Images(8))), MapOpOf("random_resized_crop([8, 8])"));
  EXPECT_NE(RunShas(ds), RunShas(ds));
}

// A RANGES epoch cut into ranges in different ways (as 1, 2 or 3 workers would run it) gives
// the same augmented elements; another epoch gives other ones.
TEST(ElementDrawsTest, RangesCutsAgreeAndEpochsDiffer) {
  constexpr int64_t kN = 12;
  for (const std::string& fn : kRandomFns) {
    const Dataset ds = With(Dataset::FromTensorSlices(Element(Images(kN))), MapOpOf(fn)).Batch(2);
    absl::StatusOr<GlobalOrderPlan> plan = PlanGlobalOrder(ds);
    ASSERT_TRUE(plan.ok()) << plan.status();
    GlobalOrderOptions options;
    options.shuffle = proto::SHUFFLE_FULL;
    options.seed = 99;
    auto run = [&](int64_t epoch, const std::vector<int64_t>& cuts) {
      std::vector<std::string> out;
      for (size_t k = 0; k + 1 < cuts.size(); ++k) {
        absl::StatusOr<Dataset> range =
            GlobalOrderRange(ds, *plan, options, epoch, cuts[k], cuts[k + 1]);
        EXPECT_TRUE(range.ok()) << range.status();
        if (!range.ok()) return out;
        for (const std::string& s : RunShas(*range)) out.push_back(s);
      }
      return out;
    };
    const std::vector<std::string> one = run(0, {0, 6});
    ASSERT_EQ(one.size(), 6u);
    EXPECT_EQ(run(0, {0, 3, 6}), one) << fn;
    EXPECT_EQ(run(0, {0, 1, 2, 5, 6}), one) << fn;
    EXPECT_NE(run(1, {0, 6}), one) << fn;
  }
}

// ---------------------------------------------------------------------------------------------
// Bad images.

TEST(RandomResizedCropTest, BadImagesAreElementErrorsNamingTheOp) {
  const std::string jpeg = ReadWholeFile(kDir + "photo.jpg");
  const std::string fn = "random_resized_crop([16, 16], seed=1)";
  struct Case {
    std::string name, bytes, message;
  };
  const std::vector<Case> cases = {
      {"truncated", jpeg.substr(0, jpeg.size() / 2), "corrupt JPEG"},
      {"truncated near the end", jpeg.substr(0, jpeg.size() - 40), "corrupt JPEG"},
      {"no scan data", crafted::CraftedJpeg(16, 16), "corrupt JPEG"},
      {"corrupt", std::string("\xFF\xD8\xFF\xE0garbage", 11), "corrupt JPEG"},
      {"unsupported", "GIF89a......", "neither JPEG nor PNG"},
      {"over the pixel limit", crafted::CraftedJpeg(60000, 60000), "more than the limit"},
  };
  for (const Case& c : cases) {
    for (const std::string& op : {fn, std::string("decode_image()")}) {
      if (c.name == "truncated near the end" && op != fn) continue;
      absl::StatusOr<Tensor> got = ApplyFn(op, Tensor::StringScalar(c.bytes));
      ASSERT_FALSE(got.ok()) << c.name << " via " << op << " decoded to "
                             << got->shape().ToString();
      EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
      EXPECT_THAT(std::string(got.status().message()), HasSubstr(c.message))
          << c.name << " via " << op;
    }
  }
  // In a pipeline: element errors naming the fn; ignore_errors() keeps the good images.
  std::vector<std::string> files = {jpeg};
  for (const Case& c : cases) {
    files.push_back(c.bytes);
    files.push_back(jpeg);
  }
  absl::StatusOr<Tensor> strings = Tensor::TryFromStrings(
      files, Shape({static_cast<int64_t>(files.size())}), "test");
  ASSERT_TRUE(strings.ok());
  const Dataset ds = With(Dataset::FromTensorSlices(Element(*strings)), MapOpOf(fn));
  absl::StatusOr<std::unique_ptr<Iterator>> it = MakeIterator(ds);
  ASSERT_TRUE(it.ok());
  int errors = 0, good = 0;
  for (size_t i = 0; i < files.size() + 1; ++i) {
    Element e;
    bool end = false;
    absl::Status s = (*it)->GetNext(&e, &end);
    if (end) break;
    if (s.ok()) {
      ++good;
      continue;
    }
    ++errors;
    EXPECT_TRUE(IsElementError(s)) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("random_resized_crop")) << s;
  }
  EXPECT_EQ(errors, static_cast<int>(cases.size()));
  EXPECT_EQ(good, static_cast<int>(cases.size()) + 1);
  absl::StatusOr<Dataset> ignoring = Dataset::Parse("from_tensors('x').ignore_errors()");
  ASSERT_TRUE(ignoring.ok()) << ignoring.status();
  absl::StatusOr<std::vector<Element>> kept = RunDataset(With(ds, ignoring->def().ops(0)));
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->size(), cases.size() + 1);
}

TEST(RandomResizedCropTest, PipelineSpecsRoundTripAndArgumentErrors) {
  absl::StatusOr<Dataset> ds = Dataset::Parse(
      "from_tensors({'jpg': 'x'}).map(random_resized_crop([224, 192], scale=(0.25, 1.0), "
      "ratio=(0.5, 2.0), seed=4), key='jpg').map(random_flip_left_right(seed=4), key='jpg')"
      ".map(normalize(mean=[0.5, 0.5, 0.5], std=[0.2, 0.2, 0.2]), key='jpg').batch(2)");
  ASSERT_TRUE(ds.ok()) << ds.status();
  absl::StatusOr<ElementSpec> spec = ds->element_spec();
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->children()[0].leaf().shape, Shape({-1, 224, 192, 3}));
  EXPECT_EQ(spec->children()[0].leaf().dtype, DType::kFloat32);
  absl::StatusOr<Dataset> again = Dataset::Parse(ds->ToExpression());
  ASSERT_TRUE(again.ok()) << ds->ToExpression() << ": " << again.status();
  EXPECT_EQ(again->Fingerprint(), ds->Fingerprint());
  EXPECT_THAT(ds->ToExpression(), HasSubstr("random_resized_crop([224, 192], scale=(0.25, 1.0)"));
  for (const std::string& bad :
       {std::string("random_resized_crop([0, 3])"), std::string("random_resized_crop([4])"),
        std::string("random_resized_crop([4, 4], scale=(0.5, 0.1))"),
        std::string("random_resized_crop([4, 4], ratio=(0.0, 1.0))"),
        std::string("decode_and_crop_jpeg([0, 0, 0, 4])"),
        std::string("decode_and_crop_jpeg([0, 0, 4, 4], channels=4)")}) {
    absl::StatusOr<Dataset> d = Dataset::Parse(absl::StrCat("from_tensors('x').map(", bad, ")"));
    absl::Status s = d.ok() ? d->element_spec().status() : d.status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad << ": " << s;
  }
  // An output over the element limit is refused by the allocator, naming the op.
  absl::StatusOr<Tensor> huge =
      ApplyFn("random_resized_crop([1000000, 1000000], seed=1)", FileBytes("rgb.jpg"));
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
  EXPECT_THAT(std::string(huge.status().message()), HasSubstr("random_resized_crop"));
  // A crop window outside the image is an error naming it.
  absl::StatusOr<Tensor> out =
      ApplyFn("decode_and_crop_jpeg([30, 0, 10, 10])", FileBytes("rgb.jpg"));
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("does not fit the 37 x 53 image"));
  out = ApplyFn("decode_and_crop_jpeg([9223372036854775000, 0, 10, 10])", FileBytes("rgb.jpg"));
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("does not fit the 37 x 53 image"));
}

}  // namespace
}  // namespace sluice
