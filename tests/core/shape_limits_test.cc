// Limits where TF has them (issue 25): every shape a client or a file chooses is checked before
// anything of that size is allocated. Impossible shapes (negative, overflowing int64) are
// INVALID_ARGUMENT, shapes over the element limit RESOURCE_EXHAUSTED, each naming the op and
// the size; images whose header claims more than kMaxImagePixels are INVALID_ARGUMENT naming
// both dimensions, before a byte is decoded. Each case here allocated (and aborted the
// process with std::bad_alloc) before the checks.
#include "core/data/shape_limits.h"

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/data/executor.h"
#include "core/data/memory_budget.h"
#include "core/data/ops/image_ops.h"
#include "core/util/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/scoped_process_limits.h"
#include "sluice/dataset.h"
#include "tests/core/crafted_images.h"
#include "tests/core/record_test_util.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// Runs `pipeline` in-process (the executor) to its end or first error, at most 1000 elements.
absl::Status RunPipeline(const std::string& pipeline) {
  absl::StatusOr<Dataset> d = Dataset::Parse(pipeline);
  if (!d.ok()) return d.status();
  absl::StatusOr<std::unique_ptr<Iterator>> it = MakeIterator(*d);
  if (!it.ok()) return it.status();
  for (int i = 0; i < 1000; ++i) {
    Element e;
    bool end = false;
    RETURN_IF_ERROR((*it)->GetNext(&e, &end));
    if (end) return absl::OkStatus();
  }
  return absl::OkStatus();
}

TEST(CheckedNumElementsTest, ProductsOverflowChecked) {
  EXPECT_EQ(*CheckedNumElements({}, "x"), 1);
  EXPECT_EQ(*CheckedNumElements({3, 4, 5}, "x"), 60);
  EXPECT_EQ(*CheckedNumElements({int64_t{1} << 31, int64_t{1} << 31}, "x"), int64_t{1} << 62);
  EXPECT_EQ(*CheckedNumElements({7, 0}, "x"), 0);
  absl::StatusOr<int64_t> over = CheckedNumElements({int64_t{1} << 32, int64_t{1} << 32}, "op");
  EXPECT_EQ(over.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(over.status().message(),
            "op: shape [4294967296, 4294967296] has more elements than fit in int64");
  // Even beside a 0: code multiplying in order would overflow before it reached it.
  EXPECT_EQ(CheckedNumElements({kMax, 2, 0}, "x").status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<int64_t> negative = CheckedNumElements({2, -3}, "op");
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(negative.status().message()), HasSubstr("negative dimension"));
}

TEST(CheckAllocationTest, OverTheElementLimitIsResourceExhaustedNamingOpShapeAndBytes) {
  MemoryBudget budget({.process_bytes = 1 << 30, .element_bytes = 1 << 20});
  EXPECT_TRUE(CheckAllocation("op", DType::kFloat32, {256, 256}, budget).ok());
  absl::Status s = CheckAllocation("resize", DType::kFloat32, {1024, 1024, 3}, budget);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("resize: a float32 tensor of shape [1024, 1024, 3] ("));
  EXPECT_THAT(std::string(s.message()), HasSubstr("memory limit of one element, 1048576 bytes"));
  // Elements that fit in int64 but whose bytes do not: impossible, not merely too big.
  EXPECT_EQ(CheckAllocation("op", DType::kFloat64, {int64_t{1} << 61}, budget).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ClientShapesTest, ResizeOneHotPaddedBatchAndParseExampleAreCheckedBeforeAllocating) {
  ScopedProcessLimits limits({.process_bytes = int64_t{256} << 20, .element_bytes = 4 << 20});
  struct Case {
    std::string pipeline;
    absl::StatusCode code;
    std::vector<std::string> parts;  // of the message
  };
  const Case cases[] = {
      // Aborted both workers of a service (issue 25).
      {"from_tensors([[[1, 2, 3]]]).map(resize([200000, 200000]))",
       absl::StatusCode::kResourceExhausted,
       {"resize([200000, 200000])",
        "the resized image: a float32 tensor of shape [200000, 200000, 3] (480000000256 bytes)"}},
      {"from_tensors([[[1, 2, 3]]]).map(resize([4611686018427387904, 4]))",
       absl::StatusCode::kInvalidArgument,
       {"resize: shape [4611686018427387904, 4] has more"}},
      {"range(4).map(one_hot(100000000000))",
       absl::StatusCode::kResourceExhausted,
       {"one_hot(100000000000) (int64 []): the one-hot output: a float32 tensor of shape "
        "[100000000000]"}},
      {"from_tensors([1, 2]).map(one_hot(4611686018427387904))",
       absl::StatusCode::kInvalidArgument,
       {"one_hot(4611686018427387904)", "has more elements than fit in int64"}},
      {"from_tensor_slices([[1], [2]]).padded_batch(2, padded_shapes=[4611686018427387904])",
       absl::StatusCode::kInvalidArgument,
       {"padded_batch",
        "component 0 padded to [4611686018427387904] for 2 elements: shape [2, "
        "4611686018427387904] has more elements than fit in int64"}},
      {"from_tensors(b'').map(parse_example({'x': FixedLenFeature([1048576, 1048576], "
       "tf.float32)}))",
       absl::StatusCode::kResourceExhausted,
       {"parse_example: feature 'x': a float32 tensor of shape [1, 1048576, 1048576]"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.pipeline);
    absl::Status s = RunPipeline(c.pipeline);
    EXPECT_EQ(s.code(), c.code) << s;
    for (const std::string& part : c.parts) EXPECT_THAT(std::string(s.message()), HasSubstr(part));
    EXPECT_EQ(ProcessMemoryBudget().in_use(), 0);
  }
  // Within the limits the same ops run.
  EXPECT_TRUE(RunPipeline("from_tensors([[[1, 2, 3]]]).map(resize([64, 64]))").ok());
  EXPECT_TRUE(RunPipeline("range(4).map(one_hot(1000))").ok());
}

TEST(ClientShapesTest, AReshapeWhoseProductWrapsIsInvalidNotAnEmptyTensor) {
  // 2^62 x 4 wraps to 0 in int64: it used to match an empty input and give a tensor whose shape
  // claims 2^64 values.
  absl::Status s = RunPipeline("from_tensors([1]).take(0).map(reshape([4611686018427387904, 4]))");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("reshape: shape [4611686018427387904, 4]"));
  s = RunPipeline("from_tensors([1]).take(0).map(reshape([4611686018427387904, 4, 0]))");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(RunPipeline("from_tensors([1, 2, 3, 4]).map(reshape([2, -1]))").ok());
}

TEST(ClientShapesTest, ReaderBufferSizesAreCheckedAgainstTheElementLimit) {
  ScopedProcessLimits limits({.process_bytes = int64_t{256} << 20, .element_bytes = 4 << 20});
  record_test::TempDir dir;
  record_test::WriteWholeFile(dir.File("r.bin"), std::string(64, 'x'));
  absl::Status s = RunPipeline(
      absl::StrCat("fixed_length_record_dataset('", dir.File("r.bin"), "', 1000000000000)"));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("record_bytes=1000000000000"));
  s = RunPipeline(
      absl::StrCat("tf_record_dataset('", dir.File("r.bin"), "', buffer_size=1000000000000)"));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("buffer_size=1000000000000"));
  EXPECT_TRUE(
      RunPipeline(absl::StrCat("fixed_length_record_dataset('", dir.File("r.bin"), "', 8)")).ok());
}

// An .npy header's shape is the file's word: one whose byte count wraps in int64 used to pass
// the file-size check (rows x row bytes wrapped to a small number).
TEST(ClientShapesTest, AnNpyHeaderWhoseByteCountOverflowsIsInvalid) {
  record_test::TempDir dir;
  std::string header =
      "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }";
  header += std::string(63 - (10 + header.size()) % 64, ' ') + "\n";
  const std::string bytes = std::string("\x93NUMPY\x01\x00", 8) +
                            static_cast<char>(header.size() & 0xFF) +
                            static_cast<char>(header.size() >> 8) + header + std::string(64, '\0');
  record_test::WriteWholeFile(dir.File("a.npy"), bytes);
  absl::Status s = RunPipeline(absl::StrCat("npy_dataset('", dir.File("a.npy"), "')"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("the header's shape: shape [4611686018427387904, 4, 4] has more elements"));
}

// The header's pixel count is refused before decoding, for every spelling of the op.
TEST(ImageLimitsTest, AHeaderClaimingMoreThanThePixelLimitIsInvalidArgumentBeforeDecoding) {
  struct Case {
    std::string format;
    std::string bytes;
  };
  const Case cases[] = {{"PNG", crafted::CraftedPng(60000, 60000)},
                        {"PNG", crafted::CraftedPng(1000000, 300, /*color_type=*/6)},
                        {"JPEG", crafted::CraftedJpeg(60000, 60000)}};
  for (const Case& c : cases) {
    for (const char* op : {"decode_image()", "decode_jpeg()", "decode_png(channels=3)"}) {
      const std::string pipeline =
          absl::StrCat("from_tensors(", crafted::PythonBytesLiteral(c.bytes), ").map(", op, ")");
      SCOPED_TRACE(absl::StrCat(c.format, " ", op));
      absl::Status s = RunPipeline(pipeline);
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      EXPECT_THAT(std::string(s.message()), HasSubstr("decode_image("));
      EXPECT_THAT(std::string(s.message()),
                  HasSubstr(absl::StrCat("the ", c.format, " header claims ")));
      EXPECT_THAT(std::string(s.message()),
                  HasSubstr(absl::StrCat("more than the limit of ", kMaxImagePixels)));
    }
  }
  absl::Status s = RunPipeline(
      absl::StrCat("from_tensors(", crafted::PythonBytesLiteral(crafted::CraftedPng(60000, 60000)),
                   ").map(decode_image())"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("60000 x 60000 pixels"));
}

TEST(ImageLimitsTest, AnImageUnderThePixelLimitButOverTheElementLimitIsResourceExhausted) {
  ScopedProcessLimits limits({.process_bytes = int64_t{256} << 20, .element_bytes = 4 << 20});
  for (const std::string& bytes :
       {crafted::CraftedPng(8000, 8000), crafted::CraftedJpeg(8000, 8000)}) {
    absl::Status s = RunPipeline(
        absl::StrCat("from_tensors(", crafted::PythonBytesLiteral(bytes), ").map(decode_image())"));
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("a uint8 tensor of shape [8000, 8000, 3]"));
  }
  // Small claims get as far as the data: which is missing, so the decoder's own error.
  absl::Status s = RunPipeline(
      absl::StrCat("from_tensors(", crafted::PythonBytesLiteral(crafted::CraftedPng(16, 16)),
                   ").map(decode_image())"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("corrupt PNG"));
}

// A progressive JPEG holds every DCT coefficient while decoding, 2 bytes a pixel and component
// beside the output: checked too.
TEST(ImageLimitsTest, AProgressiveJpegsCoefficientsAreCheckedAgainstTheElementLimit) {
  ScopedProcessLimits limits({.process_bytes = int64_t{1} << 30, .element_bytes = 64 << 20});
  absl::Status s = RunPipeline(absl::StrCat(
      "from_tensors(", crafted::PythonBytesLiteral(crafted::CraftedJpeg(4000, 4000, true)),
      ").map(decode_image())"));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("the JPEG's DCT coefficients (a multi-scan JPEG holds them all while "
                        "decoding): a int16 tensor of shape [4000, 4000, 3]"));
  // The same image baseline decodes row by row: its 48 MB output fits (what libjpeg makes of
  // the missing data is its own affair).
  s = RunPipeline(absl::StrCat("from_tensors(",
                               crafted::PythonBytesLiteral(crafted::CraftedJpeg(4000, 4000)),
                               ").map(decode_image())"));
  EXPECT_NE(s.code(), absl::StatusCode::kResourceExhausted) << s;
}

}  // namespace
}  // namespace sluice
