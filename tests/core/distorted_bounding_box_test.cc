// sample_distorted_bounding_box (issue 27) and the tuple form of decode_and_crop_jpeg that TF's
// Inception preprocessing needs (shape = extract_jpeg_shape(bytes); begin, size, _ =
// sample_distorted_bounding_box(shape, boxes); decode_and_crop_jpeg(bytes, window)):
//  - the boxes keep TF's constraints (inside the image, area and aspect ratio in range, the
//    object covered, the whole image after max_attempts) and their statistics match TF 2.15.1's
//    (tests/testdata/images/distorted_boxes_golden.json, tools/golden/gen_distorted_box_goldens.py);
//  - equal (seed, epoch, position) give equal boxes, other positions and epochs other boxes, and
//    a RANGES epoch gives the same boxes however it is cut into ranges;
//  - map(sample_distorted_bounding_box(...), key='jpg').map(decode_and_crop_jpeg(...), key='jpg')
//    decodes each element's own box, with TF's pixels for that window (decode_and_crop_jpeg's
//    goldens, random_resized_crop_test.cc);
//  - bad windows, bad boxes, bad image sizes and bad bytes are errors naming the op; random
//    bytes and truncated JPEGs are element errors that ignore_errors() skips.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data/distribute/global_order.h"
#include "core/data/element_draws.h"
#include "core/data/map_fns.h"
#include "core/data/op_iterator.h"
#include "core/data/ops/distorted_box_sampling.h"
#include "core/util/json_value.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/dataset.pb.h"
#include "sluice/dataset.h"
#include "tests/core/iterator_test_util.h"
#include "tests/core/record_test_util.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;
using record_test::ReadWholeFile;
using testing_util::RunDataset;

const std::string kDir = "tests/testdata/images/";

// The fn of `.map(<fn>)` parsed after `from_tensors(<source>)`.
std::unique_ptr<ComponentFn> FnOf(const std::string& fn, const std::string& source = "'x'") {
  absl::StatusOr<Dataset> ds =
      Dataset::Parse(absl::StrCat("from_tensors(", source, ").map(", fn, ")"));
  EXPECT_TRUE(ds.ok()) << fn << ": " << ds.status();
  if (!ds.ok()) return nullptr;
  absl::StatusOr<std::unique_ptr<ComponentFn>> made = MakeComponentFn(ds->def().ops(0).map());
  EXPECT_TRUE(made.ok()) << fn << ": " << made.status();
  return made.ok() ? *std::move(made) : nullptr;
}

Tensor ImageSize(int32_t h, int32_t w) { return Tensor::FromVector<int32_t>({h, w, 3}, Shape({3})); }

// The box TF's form gives for an image_size: {y, x, h, w}, checked for TF's output layout.
std::vector<int64_t> BoxOf(const ComponentFn& fn, const Tensor& size, ElementDrawKey key) {
  ScopedElementDrawKey scope(key);
  absl::StatusOr<Element> out = fn.Apply(size);
  EXPECT_TRUE(out.ok()) << out.status();
  if (!out.ok()) return {};
  EXPECT_EQ(out->children().size(), 3u);
  const Tensor& begin = out->children()[0].leaf();
  const Tensor& extent = out->children()[1].leaf();
  const Tensor& bboxes = out->children()[2].leaf();
  EXPECT_EQ(begin.data<int32_t>()[2], 0);
  EXPECT_EQ(extent.data<int32_t>()[2], -1);
  EXPECT_EQ(bboxes.shape(), Shape({1, 1, 4}));
  const std::vector<int64_t> box = {begin.data<int32_t>()[0], begin.data<int32_t>()[1],
                                    extent.data<int32_t>()[0], extent.data<int32_t>()[1]};
  const float h = static_cast<float>(size.data<int32_t>()[0]);
  const float w = static_cast<float>(size.data<int32_t>()[1]);
  EXPECT_FLOAT_EQ(bboxes.data<float>()[0], static_cast<float>(box[0]) / h);
  EXPECT_FLOAT_EQ(bboxes.data<float>()[3], static_cast<float>(box[1] + box[3]) / w);
  return box;
}

std::string Spelled(const JsonValue& c) {
  std::vector<std::string> boxes;
  for (const JsonValue& b : c["boxes"].items()) {
    std::vector<std::string> v;
    for (const JsonValue& x : b.items()) v.push_back(absl::StrCat(x.number()));
    boxes.push_back(absl::StrCat("[", absl::StrJoin(v, ", "), "]"));
  }
  return absl::StrCat("sample_distorted_bounding_box([[", absl::StrJoin(boxes, ", "),
                      "]], seed=11, min_object_covered=", c["min_cov"].number(),
                      ", aspect_ratio_range=(", c["aspect"][0].number(), ", ",
                      c["aspect"][1].number(), "), area_range=(",
                      c["area"][0].number(), ", ", c["area"][1].number(),
                      "), max_attempts=", *c["attempts"].int_value(), ")");
}

// Every box keeps TF's constraints, and over many elements the boxes' mean area, height and width
// shares and how often the whole image comes back match TF's own op on the same options.
TEST(SampleDistortedBoundingBoxTest, BoxesKeepTfConstraintsAndMatchTfStatistics) {
  absl::StatusOr<JsonValue> golden =
      ParseJson(ReadWholeFile(kDir + "distorted_boxes_golden.json"));
  ASSERT_TRUE(golden.ok()) << golden.status();
  ASSERT_GE(golden->size(), 4u);
  for (const JsonValue& g : golden->items()) {
    const JsonValue& c = g["case"];
    const std::string spelled = Spelled(c);
    std::unique_ptr<ComponentFn> fn = FnOf(spelled);
    ASSERT_NE(fn, nullptr);
    const int32_t H = static_cast<int32_t>(*c["size"][0].int_value());
    const int32_t W = static_cast<int32_t>(*c["size"][1].int_value());
    const double area_lo = c["area"][0].number(), area_hi = c["area"][1].number();
    const double asp_lo = c["aspect"][0].number(), asp_hi = c["aspect"][1].number();
    const double min_cov = c["min_cov"].number();
    const int n = static_cast<int>(*g["n"].int_value());
    double sum_area = 0, sum_h = 0, sum_w = 0;
    int whole = 0;
    for (int i = 0; i < n; ++i) {
      const std::vector<int64_t> b = BoxOf(*fn, ImageSize(H, W), {0, i});
      ASSERT_EQ(b.size(), 4u);
      const int64_t y = b[0], x = b[1], h = b[2], w = b[3];
      ASSERT_TRUE(y >= 0 && x >= 0 && h >= 1 && w >= 1 && y + h <= H && x + w <= W)
          << spelled << " position " << i << ": [" << y << ", " << x << ", " << h << ", " << w
          << "] is not inside " << H << " x " << W;
      const double share = static_cast<double>(h * w) / (static_cast<double>(H) * W);
      sum_area += share;
      sum_h += static_cast<double>(h) / H;
      sum_w += static_cast<double>(w) / W;
      if (h == H && w == W) {
        ++whole;
        continue;  // the fallback after max_attempts (or a draw of the whole image)
      }
      EXPECT_GE(share, area_lo - 1e-6) << spelled << " position " << i;
      EXPECT_LE(share, area_hi + 1e-6) << spelled << " position " << i;
      // width = round(height * aspect): the ratio is within half a pixel of the range.
      const double ratio = static_cast<double>(w) / static_cast<double>(h);
      EXPECT_GE(ratio, asp_lo - 0.5 / static_cast<double>(h) - 1e-6) << spelled << " " << i;
      EXPECT_LE(ratio, asp_hi + 0.5 / static_cast<double>(h) + 1e-6) << spelled << " " << i;
      // Some object (a box of at least a pixel, truncated to pixels as TF does) is covered.
      bool covered = false;
      std::vector<std::vector<double>> objects;
      for (const JsonValue& o : c["boxes"].items()) {
        objects.push_back({o[0].number(), o[1].number(), o[2].number(),
                           o[3].number()});
      }
      if (objects.empty()) objects.push_back({0, 0, 1, 1});
      for (const std::vector<double>& o : objects) {
        const int64_t oy0 = static_cast<int64_t>(static_cast<float>(o[0]) * H);
        const int64_t ox0 = static_cast<int64_t>(static_cast<float>(o[1]) * W);
        const int64_t oy1 = static_cast<int64_t>(static_cast<float>(o[2]) * H);
        const int64_t ox1 = static_cast<int64_t>(static_cast<float>(o[3]) * W);
        const int64_t area = (oy1 - oy0) * (ox1 - ox0);
        if (area < 1) continue;
        const int64_t iy = std::max<int64_t>(0, std::min(oy1, y + h) - std::max(oy0, y));
        const int64_t ix = std::max<int64_t>(0, std::min(ox1, x + w) - std::max(ox0, x));
        covered |= static_cast<double>(iy * ix) / static_cast<double>(area) >= min_cov - 1e-6;
      }
      EXPECT_TRUE(covered) << spelled << " position " << i;
    }
    // TF's figures over its own n draws: 4 standard errors of the difference of two means
    // (sd of the area share <= 0.5) is under 0.03 for n = 4000.
    const double tol = 4 * 0.5 * std::sqrt(2.0 / n);
    EXPECT_NEAR(sum_area / n, g["mean_area_share"].number(), tol) << spelled;
    EXPECT_NEAR(sum_h / n, g["mean_height_share"].number(), tol) << spelled;
    EXPECT_NEAR(sum_w / n, g["mean_width_share"].number(), tol) << spelled;
    EXPECT_NEAR(static_cast<double>(whole) / n, g["whole_image_share"].number(), tol)
        << spelled;
  }
}

// Options no box can meet give the whole image, as TF's after max_attempts.
TEST(SampleDistortedBoundingBoxTest, WholeImageAfterMaxAttempts) {
  std::unique_ptr<ComponentFn> fn = FnOf(
      "sample_distorted_bounding_box(seed=3, aspect_ratio_range=(3.0, 4.0), "
      "area_range=(0.9, 1.0), max_attempts=5)");
  ASSERT_NE(fn, nullptr);
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(BoxOf(*fn, ImageSize(100, 100), {0, i}), (std::vector<int64_t>{0, 0, 100, 100}));
  }
  // An object the box must cover wholly but lies outside every box the area allows.
  fn = FnOf("sample_distorted_bounding_box([[[0.0, 0.0, 1.0, 1.0]]], seed=3, "
            "min_object_covered=1.0, area_range=(0.1, 0.5))");
  ASSERT_NE(fn, nullptr);
  EXPECT_EQ(BoxOf(*fn, ImageSize(60, 80), {0, 1}), (std::vector<int64_t>{0, 0, 60, 80}));
}

TEST(SampleDistortedBoundingBoxTest, DrawsDependOnSeedEpochAndPositionOnly) {
  const std::string spelled = "sample_distorted_bounding_box(seed=5, area_range=(0.08, 1.0))";
  std::unique_ptr<ComponentFn> a = FnOf(spelled), b = FnOf(spelled);
  std::unique_ptr<ComponentFn> other = FnOf(
      "sample_distorted_bounding_box(seed=6, area_range=(0.08, 1.0))");
  ASSERT_TRUE(a && b && other);
  std::set<std::vector<int64_t>> distinct;
  int same_epoch = 0, same_seed = 0;
  for (int i = 0; i < 64; ++i) {
    const std::vector<int64_t> box = BoxOf(*a, ImageSize(375, 500), {2, i});
    EXPECT_EQ(BoxOf(*b, ImageSize(375, 500), {2, i}), box) << "position " << i;
    same_epoch += BoxOf(*a, ImageSize(375, 500), {3, i}) == box;
    same_seed += BoxOf(*other, ImageSize(375, 500), {2, i}) == box;
    distinct.insert(box);
  }
  EXPECT_GT(distinct.size(), 50u) << "positions must draw different boxes";
  EXPECT_LT(same_epoch, 4) << "another epoch must draw other boxes";
  EXPECT_LT(same_seed, 4) << "another seed must draw other boxes";
  // Unseeded: fresh draws every time.
  std::unique_ptr<ComponentFn> unseeded = FnOf("sample_distorted_bounding_box(area_range=(0.08, 1.0))");
  ASSERT_NE(unseeded, nullptr);
  std::set<std::vector<int64_t>> fresh;
  for (int i = 0; i < 16; ++i) fresh.insert(BoxOf(*unseeded, ImageSize(375, 500), {0, 0}));
  EXPECT_GT(fresh.size(), 8u);
}

// In a pipeline, the boxes of a RANGES epoch do not depend on how the epoch is cut into ranges
// (as 1, 2 or 3 workers would run it), and another epoch draws other boxes.
TEST(SampleDistortedBoundingBoxTest, RangesCutsAgreeAndEpochsDiffer) {
  absl::StatusOr<Dataset> ds = Dataset::Parse(
      "from_tensor_slices([[375, 500, 3], [500, 375, 3], [240, 320, 3], [1500, 2000, 3], "
      "[375, 500, 3], [64, 64, 1], [480, 640, 3], [375, 500, 3]])"
      ".map(sample_distorted_bounding_box(seed=4, "
      "area_range=(0.08, 1.0))).batch(2)");
  ASSERT_TRUE(ds.ok()) << ds.status();
  absl::StatusOr<GlobalOrderPlan> plan = PlanGlobalOrder(*ds);
  ASSERT_TRUE(plan.ok()) << plan.status();
  GlobalOrderOptions options;
  options.shuffle = proto::SHUFFLE_NONE;  // the same order every epoch: only the draws differ
  // The begin and size of every element of the ranges of steps cut at `cuts`, in order.
  auto boxes = [&](int64_t epoch, const std::vector<int64_t>& cuts) {
    std::vector<std::vector<int32_t>> out;
    for (size_t k = 0; k + 1 < cuts.size(); ++k) {
      absl::StatusOr<Dataset> range =
          GlobalOrderRange(*ds, *plan, options, epoch, cuts[k], cuts[k + 1]);
      EXPECT_TRUE(range.ok()) << range.status();
      if (!range.ok()) return out;
      absl::StatusOr<std::vector<Element>> got = RunDataset(*range);
      EXPECT_TRUE(got.ok()) << got.status();
      if (!got.ok()) return out;
      for (const Element& e : *got) {  // batches of 2: begin and size are [2, 3]
        const int32_t* b = e.children()[0].leaf().data<int32_t>();
        const int32_t* z = e.children()[1].leaf().data<int32_t>();
        for (int r = 0; r < 2; ++r) out.push_back({b[r * 3], b[r * 3 + 1], z[r * 3], z[r * 3 + 1]});
      }
    }
    return out;
  };
  const std::vector<std::vector<int32_t>> whole = boxes(0, {0, 4});
  ASSERT_EQ(whole.size(), 8u);
  EXPECT_EQ(boxes(0, {0, 2, 4}), whole);
  EXPECT_EQ(boxes(0, {0, 1, 3, 4}), whole);
  EXPECT_NE(boxes(1, {0, 4}), whole);
}

// A string tensor of `files` for from_tensor_slices.
Dataset FilesDataset(const std::vector<std::string>& files, const std::string& then) {
  absl::StatusOr<Tensor> strings = Tensor::TryFromStrings(
      files, Shape({static_cast<int64_t>(files.size())}), "test");
  EXPECT_TRUE(strings.ok());
  Dataset src = Dataset::FromTensorSlices(Element::Dict({{"jpg", Element(*strings)}}));
  absl::StatusOr<Dataset> ops = Dataset::Parse(absl::StrCat("from_tensors({'jpg': 'x'})", then));
  EXPECT_TRUE(ops.ok()) << then << ": " << ops.status();
  if (!ops.ok()) return src;
  proto::DatasetDef def = src.def();
  for (const proto::OpDef& op : ops->def().ops()) *def.add_ops() = op;
  absl::StatusOr<Dataset> out = Dataset::FromDef(std::move(def));
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : src;
}

const char kInception[] =
    ".map(sample_distorted_bounding_box([[[0.1, 0.1, 0.9, 0.8]]], seed=9, area_range=(0.08, 1.0),"
    " aspect_ratio_range=(0.75, 1.333), max_attempts=10), key='jpg')"
    ".map(decode_and_crop_jpeg(channels=3), key='jpg')";

// The Inception form end to end: each element's box decoded with TF's pixels for that window.
TEST(SampleDistortedBoundingBoxTest, InceptionPreprocessingDecodesEachElementsBox) {
  const std::vector<std::string> names = {"photo.jpg", "rgb.jpg", "progressive.jpg", "rgb444.jpg"};
  std::vector<std::string> files;
  for (int i = 0; i < 12; ++i) files.push_back(ReadWholeFile(kDir + names[i % names.size()]));
  const Dataset ds = FilesDataset(files, kInception);
  absl::StatusOr<ElementSpec> spec = ds.element_spec();
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->children()[0].leaf().dtype, DType::kUInt8);
  EXPECT_EQ(spec->children()[0].leaf().shape, Shape({-1, -1, 3}));
  absl::StatusOr<Dataset> again = Dataset::Parse(ds.ToExpression());
  ASSERT_TRUE(again.ok()) << ds.ToExpression() << ": " << again.status();
  EXPECT_EQ(again->Fingerprint(), ds.Fingerprint());

  // The boxes alone (the first map), then the decoded windows (both maps).
  const Dataset boxes_only = FilesDataset(files, std::string(kInception).substr(
                                                     0, std::string(kInception).find(".map(decode")));
  absl::StatusOr<std::vector<Element>> boxes = RunDataset(boxes_only);
  absl::StatusOr<std::vector<Element>> images = RunDataset(ds);
  ASSERT_TRUE(boxes.ok()) << boxes.status();
  ASSERT_TRUE(images.ok()) << images.status();
  ASSERT_EQ(boxes->size(), files.size());
  ASSERT_EQ(images->size(), files.size());
  std::set<std::vector<int32_t>> windows;
  for (size_t i = 0; i < files.size(); ++i) {
    const Element& pair = (*boxes)[i].children()[0];
    ASSERT_EQ(pair.children().size(), 2u);
    EXPECT_EQ(pair.children()[0].leaf().string_at(0), files[i]) << "the bytes pass through";
    const int32_t* w = pair.children()[1].leaf().data<int32_t>();
    windows.insert({w[0], w[1], w[2], w[3]});
    // The same window as a fixed crop_window: TF's pixels (random_resized_crop_test.cc's goldens).
    std::unique_ptr<ComponentFn> fixed = FnOf(absl::StrCat(
        "decode_and_crop_jpeg([", w[0], ", ", w[1], ", ", w[2], ", ", w[3], "], channels=3)"));
    ASSERT_NE(fixed, nullptr);
    absl::StatusOr<Element> want = fixed->Apply(Tensor::StringScalar(files[i]));
    ASSERT_TRUE(want.ok()) << want.status();
    const Tensor& got = (*images)[i].children()[0].leaf();
    ASSERT_EQ(got.shape(), want->leaf().shape()) << "element " << i;
    EXPECT_EQ(0, std::memcmp(got.raw_data(), want->leaf().raw_data(), got.byte_size()))
        << "element " << i;
  }
  EXPECT_GT(windows.size(), 8u) << "each element draws its own box";
}

// Errors name the op and what is wrong; in a pipeline they are element errors ignore_errors()
// skips, and random bytes or truncated JPEGs never crash either op.
TEST(SampleDistortedBoundingBoxTest, BadInputsAreErrorsNamingTheOp) {
  // Arguments, when the pipeline is built.
  for (const std::string& bad : {
           std::string("sample_distorted_bounding_box([[[0.1, 0.2, 0.3]]])"),
           std::string("sample_distorted_bounding_box([[[0.1, 0.2, 1.5, 0.3]]])"),
           std::string("sample_distorted_bounding_box([[[0.5, 0.2, 0.1, 0.3]]])"),
           std::string("sample_distorted_bounding_box(area_range=(0.5, 0.1))"),
           std::string("sample_distorted_bounding_box(area_range=(0.5, 1.5))"),
           std::string("sample_distorted_bounding_box(aspect_ratio_range=(0.0, 1.0))"),
           std::string("sample_distorted_bounding_box(max_attempts=0)"),
           std::string("sample_distorted_bounding_box(min_object_covered=-1)"),
           std::string("sample_distorted_bounding_box(use_image_if_no_bounding_boxes=False)")}) {
    absl::StatusOr<Dataset> d = Dataset::Parse(absl::StrCat("from_tensors('x').map(", bad, ")"));
    absl::Status s = d.ok() ? d->element_spec().status() : d.status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad << ": " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("sample_distorted_bounding_box")) << bad;
  }
  // Inputs whose spec does not fit, when the pipeline is built.
  for (const std::string& pipeline : {
           std::string("from_tensors([1, 2]).map(sample_distorted_bounding_box())"),
           std::string("from_tensors([1.0, 2.0, 3.0]).map(sample_distorted_bounding_box())"),
           std::string("from_tensors('x').map(decode_and_crop_jpeg())"),
           std::string("from_tensors(('x', [1.0, 2.0, 3.0, 4.0])).map(decode_and_crop_jpeg())"),
           std::string("from_tensors(('x', [1, 2, 3])).map(decode_and_crop_jpeg())")}) {
    absl::StatusOr<Dataset> d = Dataset::Parse(pipeline);
    absl::Status s = d.ok() ? d->element_spec().status() : d.status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << pipeline << ": " << s;
    const std::string op = absl::StrContains(pipeline, "decode_and_crop") ? "decode_and_crop_jpeg"
                                                                          : "sample_distorted";
    EXPECT_THAT(std::string(s.message()), HasSubstr(op)) << pipeline << ": " << s;
  }
  // Values, per element.
  std::unique_ptr<ComponentFn> sample = FnOf("sample_distorted_bounding_box(seed=1)");
  ASSERT_NE(sample, nullptr);
  absl::StatusOr<Element> out = sample->Apply(Tensor::FromVector<int32_t>({0, 10, 3}, Shape({3})));
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("height and width must be"));
  const std::string jpeg = ReadWholeFile(kDir + "rgb.jpg");  // 37 x 53
  std::unique_ptr<ComponentFn> decode = FnOf("decode_and_crop_jpeg(channels=3)", "('x', [0, 0, 1, 1])");
  ASSERT_NE(decode, nullptr);
  struct WindowCase {
    std::vector<int32_t> window;
    std::string message;
  };
  for (const WindowCase& c : std::vector<WindowCase>{
           {{30, 0, 10, 10}, "does not fit the 37 x 53 image"},
           {{0, 50, 10, 10}, "does not fit the 37 x 53 image"},
           {{-1, 0, 10, 10}, "crop_window must be"},
           {{0, 0, 0, 10}, "crop_window must be"},
           {{2147483647, 2147483647, 2147483647, 2147483647}, "does not fit"}}) {
    out = decode->ApplyTuple({Tensor::StringScalar(jpeg),
                              Tensor::FromVector<int32_t>(c.window, Shape({4}))});
    ASSERT_FALSE(out.ok()) << c.message;
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << out.status();
    EXPECT_THAT(std::string(out.status().message()), HasSubstr(c.message)) << out.status();
  }

  // A pipeline over good, truncated, corrupt and random bytes: element errors naming the op that
  // failed; ignore_errors() keeps the good images.
  std::mt19937_64 rng(20261205);
  std::printf("seed 20261205\n");
  std::vector<std::string> files;
  for (int i = 0; i < 40; ++i) {
    std::string f = jpeg;
    switch (i % 4) {
      case 0: break;                                          // intact
      case 1: f = jpeg.substr(0, rng() % jpeg.size()); break;  // truncated anywhere
      case 2:                                                 // random bytes
        f.resize(16 + rng() % 2000);
        for (char& ch : f) ch = static_cast<char>(rng());
        if (i % 8 == 2) f[0] = '\xFF', f[1] = '\xD8', f[2] = '\xFF';  // a JPEG's start, then noise
        break;
      case 3: f = jpeg.substr(0, jpeg.size() - 1 - rng() % 200); break;  // truncated near the end
    }
    files.push_back(f);
  }
  const Dataset ds = FilesDataset(files, kInception);
  absl::StatusOr<std::unique_ptr<Iterator>> it = MakeIterator(ds);
  ASSERT_TRUE(it.ok());
  int good = 0;
  for (size_t i = 0; i <= files.size(); ++i) {  // a sequential map: element i is file i
    Element e;
    bool end = false;
    absl::Status s = (*it)->GetNext(&e, &end);
    if (end) {
      EXPECT_EQ(i, files.size());
      break;
    }
    if (i % 4 == 0) {
      EXPECT_TRUE(s.ok()) << "intact file " << i << ": " << s;
    }
    if (i % 4 == 2) {
      EXPECT_FALSE(s.ok()) << "random bytes " << i << " decoded";
    }
    if (s.ok()) {
      ++good;
      continue;
    }
    EXPECT_TRUE(IsElementError(s)) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "sample_distorted_bounding_box") ||
                absl::StrContains(s.message(), "decode_and_crop_jpeg"))
        << s;
  }
  absl::StatusOr<Dataset> ignoring = Dataset::Parse("from_tensors('x').ignore_errors()");
  ASSERT_TRUE(ignoring.ok());
  proto::DatasetDef def = ds.def();
  *def.add_ops() = ignoring->def().ops(0);
  absl::StatusOr<Dataset> skipping = Dataset::FromDef(def);
  ASSERT_TRUE(skipping.ok());
  absl::StatusOr<std::vector<Element>> kept = RunDataset(*skipping);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(static_cast<int>(kept->size()), good);
}

// The thread's header reader recovers from corrupt data: a good JPEG after bytes that start like
// a JPEG and go on as noise reads its own shape (it read "Unsupported marker type" left over from
// the noise before the fix).
TEST(SampleDistortedBoundingBoxTest, HeaderReadsRecoverAfterCorruptData) {
  std::unique_ptr<ComponentFn> shape = FnOf("extract_jpeg_shape()");
  ASSERT_NE(shape, nullptr);
  const Tensor good = Tensor::StringScalar(ReadWholeFile(kDir + "photo.jpg"));
  std::mt19937_64 rng(7);
  std::printf("seed 7\n");
  for (int i = 0; i < 20; ++i) {
    std::string noise(16 + rng() % 2000, '\0');
    for (char& ch : noise) ch = static_cast<char>(rng());
    noise[0] = '\xFF', noise[1] = '\xD8', noise[2] = '\xFF';
    (void)shape->Apply(Tensor::StringScalar(noise));
    absl::StatusOr<Element> out = shape->Apply(good);
    ASSERT_TRUE(out.ok()) << "after noise " << i << ": " << out.status();
    EXPECT_EQ(out->leaf().data<int32_t>()[0], 240);
    EXPECT_EQ(out->leaf().data<int32_t>()[1], 320);
  }
}

}  // namespace
}  // namespace sluice
