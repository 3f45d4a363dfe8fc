// Map fusion (core/data/ops/map_fusion.h): random_resized_crop -> random_flip_left_right ->
// normalize run as one map, and what the pipeline gives stays what the unfused maps give:
//  - fused == unfused bit for bit, over many random JPEGs (sizes, chroma subsamplings, boxes
//    that take the DCT-scaled and the full-scale window decode), PNGs and uint8 images, seeds,
//    epochs, both orders of flip and normalize, sequential and parallel maps, with batch()
//    right above (its output slots: core/data/ops/output_slot.h) or behind shuffle / prefetch;
//  - the same element errors (bad and truncated JPEGs, random bytes), and ignore_errors() keeps
//    the same elements;
//  - only maps with the same component and settings fuse; fusion is really taken.
// Seeds are fixed and printed in failure messages.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data/executor.h"
#include "core/data/op_iterator.h"
#include "core/data/ops/map_fusion.h"
#include "core/data/spec_inference.h"
#include "gtest/gtest.h"
#include "sluice/dataset.h"
#include "tests/core/pipeline_outcomes.h"
#include "tests/core/record_test_util.h"
#include "tests/seeded_rng.h"

namespace sluice {
namespace {

using pipeline_outcomes::Outcomes;
using pipeline_outcomes::Pipeline;
using pipeline_outcomes::RandomJpeg;
using pipeline_outcomes::Strings;
using record_test::ReadWholeFile;

// How many ops after op 0 fuse into it.
int Fused(const Dataset& ds, int op) {
  absl::StatusOr<std::vector<ElementSpec>> specs = InferElementSpecs(ds.def());
  EXPECT_TRUE(specs.ok()) << specs.status();
  return specs.ok() ? FusableMaps(ds.def(), op, (*specs)[op]) : -1;
}

TEST(MapFusionTest, FusedEqualsUnfusedBitForBitOnRandomJpegs) {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    SeededRng rng(seed);
    std::vector<std::string> images;
    for (int i = 0; i < 24; ++i) images.push_back(RandomJpeg(rng));
    images.push_back(ReadWholeFile("tests/testdata/images/rgb.png"));
    images.push_back(ReadWholeFile("tests/testdata/images/photo.jpg"));
    const Dataset source = Dataset::FromTensorSlices(Element(Strings(images)));
    // Small sizes take the DCT-scaled decode more often; [128, 96] (147 KB of float32) is large
    // enough for batch's output slots (core/data/ops/output_slot.h).
    const std::string size =
        rng.Pick(std::vector<std::string>{"[24, 32]", "[128, 96]", "[128, 96]", "[7, 9]"});
    const std::string rrc = absl::StrCat("random_resized_crop(", size, ", seed=", seed,
                                         rng.Chance(30) ? ", exact=True" : "", ")");
    const std::string flip = absl::StrCat("random_flip_left_right(seed=", seed + 100, ")");
    const std::string normalize = rng.Chance(50)
                                      ? "normalize(mean=[123.7, 116.3, 103.5], std=[58.4, 57.1, 57.4])"
                                      : "normalize(mean=[127.5], std=[3.0])";
    for (const std::vector<std::string>& fns :
         {std::vector<std::string>{rrc, flip, normalize}, {rrc, normalize, flip}, {rrc, flip},
          {rrc, normalize}}) {
      for (const std::string& args : {std::string(""), std::string(", num_parallel_calls=2")}) {
        // batch right above the maps (output slots), above a repeat, and with ops between that
        // hold elements back (an element written for one row must not land in another).
        const std::string tail = rng.Pick(std::vector<std::string>{
            ".batch(5).repeat(2)", ".batch(5).repeat(2)", ".repeat(2).batch(5)",
            ".shuffle(7, seed=3).batch(5)", ".prefetch(3).batch(5)"});
        const Dataset ds = Pipeline(source, fns, args, tail);
        const std::string what = absl::StrCat("seed ", seed, ": ", absl::StrJoin(fns, " -> "),
                                              args, tail);
        ASSERT_EQ(Fused(ds, 0), static_cast<int>(fns.size()) - 1) << what;
        const std::vector<std::string> fused = Outcomes(ds, true);
        ASSERT_GE(fused.size(), 6u) << what;  // 26 images in batches of 5, once or twice
        EXPECT_TRUE(fused == Outcomes(ds, false)) << what;
      }
    }
  }
}

TEST(MapFusionTest, FusedEqualsUnfusedOnDecodedImages) {
  for (uint64_t seed = 11; seed <= 16; ++seed) {
    SeededRng rng(seed);
    const int64_t h = rng.In(1, 90), w = rng.In(1, 90), c = rng.Pick(std::vector<int64_t>{1, 3});
    std::vector<uint8_t> pixels(static_cast<size_t>(8 * h * w * c));
    for (uint8_t& p : pixels) p = static_cast<uint8_t>(rng.In(0, 255));
    const Dataset source = Dataset::FromTensorSlices(
        Element(Tensor::FromVector<uint8_t>(pixels, Shape({8, h, w, c}))));
    const std::string normalize =
        c == 3 ? "normalize(mean=[1.5, 2.5, 3.5], std=[0.5, 2.0, 7.0])" : "normalize(mean=[9.0], std=[4.0])";
    const Dataset ds = Pipeline(source,
                                {absl::StrCat("random_resized_crop([13, 17], seed=", seed, ")"),
                                 absl::StrCat("random_flip_left_right(seed=", seed, ")"), normalize},
                                "", ".repeat(3)");
    const std::string what = absl::StrCat("seed ", seed, ": ", h, " x ", w, " x ", c);
    ASSERT_EQ(Fused(ds, 0), 2) << what;
    const std::vector<std::string> fused = Outcomes(ds, true);
    ASSERT_EQ(fused.size(), 24u) << what;
    EXPECT_TRUE(fused == Outcomes(ds, false)) << what;
  }
}

// Bad, truncated and random bytes: the same element errors in the same places, fused or not,
// and ignore_errors() keeps the same images.
TEST(MapFusionTest, BadImagesGiveTheSameErrorsAndIgnoreErrorsSkipsThem) {
  SeededRng rng(21);
  std::vector<std::string> images;
  for (int i = 0; i < 40; ++i) {
    std::string jpeg = RandomJpeg(rng);
    switch (i % 4) {
      case 0: break;
      case 1: jpeg.resize(static_cast<size_t>(rng.In(0, static_cast<int64_t>(jpeg.size()) - 1)));
        break;
      case 2: {  // random bytes flipped in the scan data
        for (int k = 0; k < 8; ++k) {
          jpeg[static_cast<size_t>(rng.In(2, static_cast<int64_t>(jpeg.size()) - 1))] =
              static_cast<char>(rng.In(0, 255));
        }
        break;
      }
      default: {  // random bytes behind a JPEG signature
        std::string random = "\xFF\xD8\xFF";
        for (int k = 0; k < 200; ++k) random.push_back(static_cast<char>(rng.In(0, 255)));
        jpeg = random;
      }
    }
    images.push_back(std::move(jpeg));
  }
  const Dataset source = Dataset::FromTensorSlices(Element(Strings(images)));
  const std::vector<std::string> fns = {
      "random_resized_crop([16, 16], seed=3)", "random_flip_left_right(seed=4)",
      "normalize(mean=[0.5], std=[2.0])"};
  const Dataset ds = Pipeline(source, fns, "", "");
  ASSERT_EQ(Fused(ds, 0), 2);
  const std::vector<std::string> fused = Outcomes(ds, true);
  ASSERT_EQ(fused.size(), images.size());
  const std::vector<std::string> unfused = Outcomes(ds, false);
  int errors = 0;
  for (size_t i = 0; i < fused.size(); ++i) {
    EXPECT_TRUE(fused[i] == unfused[i]) << "image " << i << ": " << fused[i].substr(0, 200)
                                        << " vs " << unfused[i].substr(0, 200);
    if (fused[i].find("random_resized_crop") != std::string::npos) ++errors;
  }
  EXPECT_GE(errors, 10) << "the bad images were not errors";
  const Dataset ignoring = Pipeline(source, fns, "", ".ignore_errors().batch(1)");
  EXPECT_EQ(Outcomes(ignoring, true), Outcomes(ignoring, false));
  EXPECT_EQ(Outcomes(ignoring, true).size(), images.size() - errors);
}

TEST(MapFusionTest, OnlyMapsOfTheSameComponentAndSettingsFuse) {
  const Dataset bytes = Dataset::FromTensorSlices(Element(Strings({"x"})));
  const std::string rrc = "random_resized_crop([8, 8], seed=1)";
  const std::string flip = "random_flip_left_right(seed=2)";
  const std::string norm = "normalize(mean=[0.0], std=[1.0])";
  EXPECT_EQ(Fused(Pipeline(bytes, {rrc, flip, norm}, "", ""), 0), 2);
  // A second flip or normalize is not taken over; what comes after it is its own map.
  EXPECT_EQ(Fused(Pipeline(bytes, {rrc, flip, flip, norm}, "", ""), 0), 1);
  EXPECT_EQ(Fused(Pipeline(bytes, {rrc, norm, norm}, "", ""), 0), 1);
  // Other fns, and maps that do not start with random_resized_crop, do not fuse.
  EXPECT_EQ(Fused(Pipeline(bytes, {rrc, "cast(tf.float64)", flip}, "", ""), 0), 0);
  EXPECT_EQ(Fused(Pipeline(bytes, {"decode_image(channels=3)", flip, norm}, "", ""), 0), 0);
  // A later map fuses when it is sequential or as parallel as the first; the fused map runs
  // with the first's settings.
  absl::StatusOr<Dataset> more_parallel = Dataset::Parse(absl::StrCat(
      "from_tensor_slices({'a': ['x'], 'b': ['y']}).map(", rrc, ", key='a').map(", flip,
      ", key='a', num_parallel_calls=2).map(", norm, ", key='a')"));
  ASSERT_TRUE(more_parallel.ok()) << more_parallel.status();
  EXPECT_EQ(Fused(*more_parallel, 0), 0);
  absl::StatusOr<Dataset> autotuned = Dataset::Parse(absl::StrCat(
      "from_tensor_slices(['x']).map(", rrc, ", num_parallel_calls=-1).map(", flip, ").map(",
      norm, ", num_parallel_calls=-1)"));
  ASSERT_TRUE(autotuned.ok()) << autotuned.status();
  EXPECT_EQ(Fused(*autotuned, 0), 2);
  absl::StatusOr<Dataset> other_count = Dataset::Parse(absl::StrCat(
      "from_tensor_slices(['x']).map(", rrc, ", num_parallel_calls=2).map(", flip,
      ", num_parallel_calls=3)"));
  ASSERT_TRUE(other_count.ok()) << other_count.status();
  EXPECT_EQ(Fused(*other_count, 0), 0);
  // Another component.
  absl::StatusOr<Dataset> keys = Dataset::Parse(absl::StrCat(
      "from_tensor_slices({'a': ['x'], 'b': ['y']}).map(", rrc, ", key='a').map(", flip,
      ", key='a').map(", rrc, ", key='b')"));
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(Fused(*keys, 0), 1);
  // A per-channel normalize fuses only where the channels are known to match.
  const std::string norm3 = "normalize(mean=[1.0, 2.0, 3.0], std=[1.0, 1.0, 1.0])";
  EXPECT_EQ(Fused(Pipeline(bytes, {"decode_image(channels=3)", rrc, norm3}, "", ""), 1), 1);
  EXPECT_EQ(Fused(Pipeline(bytes, {"decode_image()", rrc, norm3}, "", ""), 1), 0);
}

}  // namespace
}  // namespace sluice
