// The local executor: every op's semantics (TF's), errors naming the op, sticky errors and end.
#include "core/data/executor.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <fstream>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "sluice/dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/iterator_test_util.h"

namespace sluice {
namespace {

using ::sluice::testing_util::Drain;
using ::sluice::testing_util::Iota;
using ::sluice::testing_util::Rows;
using ::sluice::testing_util::RunDataset;
using ::sluice::testing_util::Scalars;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::vector<int64_t> RunScalars(const Dataset& ds) {
  auto out = RunDataset(ds);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? Scalars(*out) : std::vector<int64_t>{};
}

std::vector<std::vector<int64_t>> RunRows(const Dataset& ds) {
  auto out = RunDataset(ds);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? Rows(*out) : std::vector<std::vector<int64_t>>{};
}

// ---- range ----

TEST(ExecutorRangeTest, CountsFromStartBeforeStop) {
  EXPECT_EQ(RunScalars(Dataset::Range(5)), Iota(5));
  EXPECT_EQ(RunScalars(Dataset::Range(2, 11, 3)), (std::vector<int64_t>{2, 5, 8}));
  EXPECT_THAT(RunScalars(Dataset::Range(0)), IsEmpty());
  EXPECT_THAT(RunScalars(Dataset::Range(5, 2)), IsEmpty());
}

TEST(ExecutorRangeTest, NegativeStepCountsDown) {
  EXPECT_EQ(RunScalars(Dataset::Range(5, 0, -2)), (std::vector<int64_t>{5, 3, 1}));
  EXPECT_THAT(RunScalars(Dataset::Range(0, 5, -1)), IsEmpty());
}

TEST(ExecutorRangeTest, ElementsAreInt64Scalars) {
  auto out = RunDataset(Dataset::Range(1));
  ASSERT_TRUE(out.ok());
  ASSERT_EQ(out->size(), 1u);
  EXPECT_EQ((*out)[0].leaf().dtype(), DType::kInt64);
  EXPECT_EQ((*out)[0].leaf().shape(), Shape());
}

TEST(ExecutorRangeTest, StopsAtTheEdgeOfInt64WithoutOverflow) {
  const int64_t max = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(RunScalars(Dataset::Range(max - 2, max, 1)), (std::vector<int64_t>{max - 2, max - 1}));
  EXPECT_EQ(RunScalars(Dataset::Range(max - 1, max, 5)), (std::vector<int64_t>{max - 1}));
}

TEST(ExecutorRangeTest, ZeroStepIsInvalidAndNamesTheOp) {
  auto it = MakeIterator(Dataset::Range(0, 5, 0));
  ASSERT_FALSE(it.ok());
  EXPECT_EQ(it.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(it.status().message(), HasSubstr("source (range)"));
}

// ---- from_tensors / from_tensor_slices ----

TEST(ExecutorFromTensorsTest, YieldsTheElementOnce) {
  Element e = Element::Tuple({Element(Tensor::FromVector<float>({1.f})),
                              Element(Tensor::FromVector<int32_t>({1}))});
  auto out = RunDataset(Dataset::FromTensors(e));
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 1u);
  ASSERT_EQ((*out)[0].kind(), NestKind::kTuple);
  EXPECT_TRUE((*out)[0].children()[0].leaf().Equals(Tensor::FromVector<float>({1.f})));
  EXPECT_TRUE((*out)[0].children()[1].leaf().Equals(Tensor::FromVector<int32_t>({1})));
}

TEST(ExecutorFromTensorSlicesTest, SlicesEveryLeafAlongDimensionZeroWithoutCopying) {
  Element e = Element::Dict(
      {{"b", Element(Tensor::FromVector<int64_t>({1, 2, 3, 4, 5, 6}, Shape({3, 2})))},
       {"a", Element(Tensor::FromStrings({"x", "y", "z"}, Shape({3})))}});
  auto out = RunDataset(Dataset::FromTensorSlices(e));
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const Element& row = (*out)[i];
    ASSERT_EQ(row.kind(), NestKind::kDict);
    EXPECT_EQ(row.keys(), (std::vector<std::string>{"b", "a"}));
    EXPECT_EQ(testing_util::Values(row.children()[0].leaf()),
              (std::vector<int64_t>{2 * i + 1, 2 * i + 2}));
    EXPECT_EQ(row.children()[1].leaf().shape(), Shape());
    EXPECT_EQ(row.children()[1].leaf().string_at(0), std::string(1, static_cast<char>('x' + i)));
  }
  // Rows are views of one buffer.
  const Tensor& r0 = (*out)[0].children()[0].leaf();
  const Tensor& r2 = (*out)[2].children()[0].leaf();
  EXPECT_EQ(r0.buffer(), r2.buffer());
  EXPECT_EQ(static_cast<const char*>(r2.raw_data()) - static_cast<const char*>(r0.raw_data()),
            static_cast<std::ptrdiff_t>(4 * sizeof(int64_t)));
}

TEST(ExecutorFromTensorSlicesTest, ZeroRowsYieldNothing) {
  EXPECT_THAT(RunScalars(Dataset::FromTensorSlices(
                  Element(Tensor::FromVector<int64_t>({}, Shape({0}))))),
              IsEmpty());
}

TEST(ExecutorFromTensorSlicesTest, MismatchedRowCountsAreInvalid) {
  Element e = Element::Tuple({Element(Tensor::FromVector<int64_t>({1, 2, 3})),
                              Element(Tensor::FromVector<int64_t>({1, 2}))});
  auto it = MakeIterator(Dataset::FromTensorSlices(e));
  ASSERT_FALSE(it.ok());
  EXPECT_EQ(it.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(it.status().message(), HasSubstr("source (from_tensor_slices)"));
}

TEST(ExecutorFromTensorSlicesTest, ScalarIsInvalid) {
  auto it = MakeIterator(Dataset::FromTensorSlices(Element(Tensor::Scalar<int64_t>(3))));
  ASSERT_FALSE(it.ok());
  EXPECT_EQ(it.status().code(), absl::StatusCode::kInvalidArgument);
}

// ---- text_line_dataset ----

class TextLineTest : public ::testing::Test {
 protected:
  std::string WriteFile(const std::string& name, const std::string& content) {
    std::string path = ::testing::TempDir() + "/sluice_text_line_" +
                       ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" +
                       name;
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(content.data(), static_cast<std::streamsize>(content.size()));
    f.close();
    EXPECT_TRUE(f.good()) << path;
    return path;
  }

  static std::vector<std::string> Lines(const std::vector<Element>& elements) {
    std::vector<std::string> out;
    for (const Element& e : elements) {
      EXPECT_EQ(e.leaf().dtype(), DType::kString);
      EXPECT_EQ(e.leaf().shape(), Shape());
      out.push_back(e.leaf().string_at(0));
    }
    return out;
  }

  std::vector<std::string> RunLines(const std::vector<std::string>& files) {
    auto out = RunDataset(Dataset::TextLine(files), 1000000);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? Lines(*out) : std::vector<std::string>{};
  }
};

// Expected values checked against tensorflow-cpu 2.15's TextLineDataset.
TEST_F(TextLineTest, SplitsLinesAndDropsCarriageReturns) {
  std::string f = WriteFile("a.txt", "alpha\nbeta\r\n\ngam\rma\r\nlast");
  EXPECT_THAT(RunLines({f}), ElementsAre("alpha", "beta", "", "gamma", "last"));
  EXPECT_THAT(RunLines({WriteFile("crlf.txt", "\r\n")}), ElementsAre(""));
}

TEST_F(TextLineTest, FinalNewlineDoesNotAddAnEmptyLine) {
  EXPECT_THAT(RunLines({WriteFile("a.txt", "x\ny\n")}), ElementsAre("x", "y"));
  EXPECT_THAT(RunLines({WriteFile("b.txt", "x\n\n")}), ElementsAre("x", ""));
  EXPECT_THAT(RunLines({WriteFile("c.txt", "x\r")}), ElementsAre("x"));
  // As TF: a last line that is only "\r" is nothing.
  EXPECT_THAT(RunLines({WriteFile("d.txt", "x\n\r")}), ElementsAre("x"));
}

TEST_F(TextLineTest, EmptyFilesYieldNothingAndFilesComeInOrder) {
  std::string empty = WriteFile("empty.txt", "");
  std::string one = WriteFile("one.txt", "1\n2");
  std::string two = WriteFile("two.txt", "3\r\n");
  EXPECT_THAT(RunLines({empty}), IsEmpty());
  EXPECT_THAT(RunLines({}), IsEmpty());
  EXPECT_THAT(RunLines({one, empty, two, one}), ElementsAre("1", "2", "3", "1", "2"));
}

TEST_F(TextLineTest, LinesCrossingTheReadBufferAreWhole) {
  // Several MiB so that lines straddle the 1 MiB read buffer, plus one line longer than it.
  std::string content;
  std::vector<std::string> expected;
  for (int i = 0; i < 200000; ++i) {
    std::string line = std::to_string(i) + std::string(static_cast<size_t>(i % 37), 'a' + i % 26);
    content += line + (i % 3 == 0 ? "\r\n" : "\n");
    expected.push_back(line);
  }
  std::string huge(3 << 20, 'h');
  content += huge;
  expected.push_back(huge);
  auto lines = RunLines({WriteFile("big.txt", content)});
  ASSERT_EQ(lines.size(), expected.size());
  EXPECT_TRUE(lines == expected);
}

TEST_F(TextLineTest, MissingFileIsNotFoundNamingItAfterTheLinesBefore) {
  std::string good = WriteFile("good.txt", "a\nb\n");
  std::string missing = ::testing::TempDir() + "/sluice_definitely_missing_file.txt";
  auto it = MakeIterator(Dataset::TextLine({good, missing}));
  ASSERT_TRUE(it.ok()) << it.status();
  Element e;
  bool end = false;
  ASSERT_TRUE((*it)->GetNext(&e, &end).ok());
  ASSERT_TRUE((*it)->GetNext(&e, &end).ok());
  EXPECT_EQ(e.leaf().string_at(0), "b");
  absl::Status s = (*it)->GetNext(&e, &end);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr(missing));
  EXPECT_THAT(s.message(), HasSubstr("source (text_line_dataset)"));
  EXPECT_EQ((*it)->GetNext(&e, &end), s);  // sticky
}

TEST_F(TextLineTest, DirectoryIsAnErrorNotACrash) {
  auto out = RunDataset(Dataset::TextLine({::testing::TempDir()}));
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr(::testing::TempDir()));
}

TEST_F(TextLineTest, StringsFlowThroughBatch) {
  std::string f = WriteFile("s.txt", "a\nbb\nccc\n");
  auto out = RunDataset(Dataset::TextLine({f}).Batch(2));
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 2u);
  const Tensor& b0 = (*out)[0].leaf();
  EXPECT_EQ(b0.dtype(), DType::kString);
  EXPECT_EQ(b0.shape(), Shape({2}));
  EXPECT_EQ(b0.string_at(0), "a");
  EXPECT_EQ(b0.string_at(1), "bb");
  EXPECT_EQ((*out)[1].leaf().shape(), Shape({1}));
  EXPECT_EQ((*out)[1].leaf().string_at(0), "ccc");
}

// ---- batch ----

TEST(ExecutorBatchTest, StacksConsecutiveElementsWithAShortLastBatch) {
  EXPECT_EQ(RunRows(Dataset::Range(10).Batch(4)),
            (std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}}));
}

TEST(ExecutorBatchTest, DropRemainderDropsTheShortBatch) {
  EXPECT_EQ(RunRows(Dataset::Range(10).Batch(4, true)),
            (std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_THAT(RunRows(Dataset::Range(3).Batch(4, true)), IsEmpty());
}

TEST(ExecutorBatchTest, EmptyInputYieldsNoBatch) {
  EXPECT_THAT(RunRows(Dataset::Range(0).Batch(4)), IsEmpty());
}

TEST(ExecutorBatchTest, BatchesNestedStructuresLeafByLeaf) {
  Element e = Element::Dict(
      {{"x", Element(Tensor::FromVector<float>({1, 2, 3, 4, 5, 6, 7, 8}, Shape({4, 2})))},
       {"y", Element::Tuple({Element(Tensor::FromVector<int32_t>({10, 20, 30, 40}))})}});
  auto out = RunDataset(Dataset::FromTensorSlices(e).Batch(3));
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 2u);
  const Element& b = (*out)[0];
  EXPECT_EQ(b.keys(), (std::vector<std::string>{"x", "y"}));
  EXPECT_TRUE(b.children()[0].leaf().Equals(
      Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, Shape({3, 2}))));
  ASSERT_EQ(b.children()[1].kind(), NestKind::kTuple);
  EXPECT_TRUE(b.children()[1].children()[0].leaf().Equals(
      Tensor::FromVector<int32_t>({10, 20, 30})));
  EXPECT_EQ((*out)[1].children()[0].leaf().shape(), Shape({1, 2}));
}

TEST(ExecutorBatchTest, DifferentShapesInABatchUseTfWording) {
  // range(5).batch(2) yields shapes [2], [2], [1]: batching those three fails.
  auto out = RunDataset(Dataset::Range(5).Batch(2).Batch(3));
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(out.status().message(),
            "op 2 (batch): Cannot batch tensors with different shapes in component 0. First "
            "element had shape [2] and element 2 had shape [1].");
}

TEST(ExecutorBatchTest, NonPositiveBatchSizeIsInvalid) {
  auto it = MakeIterator(Dataset::Range(5).Batch(0));
  ASSERT_FALSE(it.ok());
  EXPECT_EQ(it.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(it.status().message(), HasSubstr("op 1 (batch)"));
}

// ---- repeat ----

TEST(ExecutorRepeatTest, RepeatsCountTimes) {
  EXPECT_EQ(RunScalars(Dataset::Range(3).Repeat(2)), (std::vector<int64_t>{0, 1, 2, 0, 1, 2}));
  EXPECT_THAT(RunScalars(Dataset::Range(3).Repeat(0)), IsEmpty());
  EXPECT_EQ(RunScalars(Dataset::Range(3).Repeat(1)), Iota(3));
}

TEST(ExecutorRepeatTest, ForeverRunsUntilTake) {
  EXPECT_EQ(RunScalars(Dataset::Range(3).Repeat().Take(7)),
            (std::vector<int64_t>{0, 1, 2, 0, 1, 2, 0}));
}

TEST(ExecutorRepeatTest, RepeatOfAnEmptyDatasetTerminates) {
  EXPECT_THAT(RunScalars(Dataset::Range(0).Repeat()), IsEmpty());
  EXPECT_THAT(RunScalars(Dataset::Range(5).Take(0).Repeat()), IsEmpty());
  EXPECT_THAT(RunScalars(Dataset::Range(5).Skip(9).Repeat().Repeat()), IsEmpty());
}

TEST(ExecutorRepeatTest, NestedRepeatsMultiply) {
  EXPECT_EQ(RunScalars(Dataset::Range(2).Repeat(2).Repeat(3)).size(), 12u);
}

TEST(ExecutorRepeatTest, SeedExampleRepeatThenBatch) {
  Element e = Element(Tensor::FromVector<int32_t>({1, 2, 3, 4}));
  auto it = MakeIterator(Dataset::FromTensorSlices(e).Repeat().Batch(4));
  ASSERT_TRUE(it.ok());
  for (int i = 0; i < 3; ++i) {
    Element b;
    bool end = true;
    ASSERT_TRUE((*it)->GetNext(&b, &end).ok());
    ASSERT_FALSE(end);
    EXPECT_TRUE(b.leaf().Equals(Tensor::FromVector<int32_t>({1, 2, 3, 4})));
  }
}

// ---- take / skip ----

TEST(ExecutorTakeSkipTest, TakeAndSkip) {
  EXPECT_EQ(RunScalars(Dataset::Range(10).Take(3)), Iota(3));
  EXPECT_EQ(RunScalars(Dataset::Range(10).Take(-1)), Iota(10));
  EXPECT_EQ(RunScalars(Dataset::Range(5).Take(100)), Iota(5));
  EXPECT_THAT(RunScalars(Dataset::Range(10).Take(0)), IsEmpty());
  EXPECT_EQ(RunScalars(Dataset::Range(10).Skip(7)), (std::vector<int64_t>{7, 8, 9}));
  EXPECT_EQ(RunScalars(Dataset::Range(10).Skip(0)), Iota(10));
  EXPECT_THAT(RunScalars(Dataset::Range(10).Skip(10)), IsEmpty());
  EXPECT_THAT(RunScalars(Dataset::Range(10).Skip(25)), IsEmpty());
  EXPECT_THAT(RunScalars(Dataset::Range(10).Skip(-1)), IsEmpty());
  EXPECT_EQ(RunScalars(Dataset::Range(10).Skip(2).Take(3)), (std::vector<int64_t>{2, 3, 4}));
}

TEST(ExecutorTakeSkipTest, TakeZeroNeverReadsItsInput) {
  // The file is missing: reading it would fail.
  auto out = RunDataset(Dataset::TextLine({"/nonexistent/sluice/file.txt"}).Take(0));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(*out, IsEmpty());
}

// ---- shard ----

TEST(ExecutorShardTest, EveryNumShardsThElementFromIndex) {
  EXPECT_EQ(RunScalars(Dataset::Range(10).Shard(3, 0)), (std::vector<int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(RunScalars(Dataset::Range(10).Shard(3, 1)), (std::vector<int64_t>{1, 4, 7}));
  EXPECT_EQ(RunScalars(Dataset::Range(10).Shard(3, 2)), (std::vector<int64_t>{2, 5, 8}));
  EXPECT_EQ(RunScalars(Dataset::Range(10).Shard(1, 0)), Iota(10));
  EXPECT_THAT(RunScalars(Dataset::Range(2).Shard(4, 3)), IsEmpty());
}

TEST(ExecutorShardTest, ShardsPartitionTheInput) {
  for (int64_t n : {0, 1, 7, 24, 101}) {
    for (int64_t shards : {1, 2, 3, 8}) {
      std::multiset<int64_t> all;
      for (int64_t i = 0; i < shards; ++i) {
        for (int64_t v : RunScalars(Dataset::Range(n).Shard(shards, i))) all.insert(v);
      }
      EXPECT_EQ(std::vector<int64_t>(all.begin(), all.end()), Iota(n))
          << "n=" << n << " shards=" << shards;
    }
  }
}

TEST(ExecutorShardTest, BadIndexOrHintIsInvalidNamingTheOp) {
  for (const Dataset& ds : {Dataset::Range(5).Shard(2, 2), Dataset::Range(5).Shard(0, 0),
                            Dataset::Range(5).Shard(2, -1), Dataset::Range(5).ShardHint()}) {
    auto it = MakeIterator(ds);
    ASSERT_FALSE(it.ok());
    EXPECT_EQ(it.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(it.status().message(), HasSubstr("op 1 (shard)"));
  }
}

// ---- unbatch ----

TEST(ExecutorUnbatchTest, InvertsBatch) {
  EXPECT_EQ(RunScalars(Dataset::Range(10).Batch(3).Unbatch()), Iota(10));
}

TEST(ExecutorUnbatchTest, UnbatchesNestedStructuresAndSkipsEmptyElements) {
  Element e = Element::Tuple(
      {Element(Tensor::FromVector<int64_t>({1, 2, 3, 4}, Shape({2, 2}))),
       Element::Dict({{"s", Element(Tensor::FromStrings({"p", "q"}, Shape({2})))}})});
  auto out = RunDataset(Dataset::FromTensors(e).Repeat(2).Unbatch());
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 4u);
  EXPECT_EQ(testing_util::Values((*out)[1].children()[0].leaf()), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ((*out)[3].children()[1].children()[0].leaf().string_at(0), "q");
  EXPECT_THAT(RunScalars(Dataset::FromTensors(Element(Tensor::FromVector<int64_t>({}, Shape({0}))))
                             .Repeat(3)
                             .Unbatch()),
              IsEmpty());
}

TEST(ExecutorUnbatchTest, MismatchedBatchSizesOrScalarsAreInvalid) {
  Element e = Element::Tuple({Element(Tensor::FromVector<int64_t>({1, 2, 3})),
                              Element(Tensor::FromVector<int64_t>({1, 2}))});
  auto out = RunDataset(Dataset::FromTensors(e).Unbatch());
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("op 1 (unbatch)"));
  EXPECT_THAT(out.status().message(), HasSubstr("Component 0 had size 3 but component 1 had size 2"));
  auto scalar = RunDataset(Dataset::Range(3).Unbatch());
  ASSERT_FALSE(scalar.ok());
  EXPECT_EQ(scalar.status().code(), absl::StatusCode::kInvalidArgument);
}

// ---- shuffle ----

std::vector<int64_t> Sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST(ExecutorShuffleTest, IsAPermutationAndDeterministicForASeed) {
  Dataset ds = Dataset::Range(100).Shuffle(10, 42);
  std::vector<int64_t> a = RunScalars(ds);
  EXPECT_EQ(Sorted(a), Iota(100));
  EXPECT_NE(a, Iota(100));
  EXPECT_EQ(RunScalars(ds), a);
  EXPECT_NE(RunScalars(Dataset::Range(100).Shuffle(10, 43)), a);
}

TEST(ExecutorShuffleTest, BufferBoundsHowFarAnElementMovesAhead) {
  // With a buffer of k, the element emitted at position p was among the first p + k inputs.
  const int64_t k = 5;
  std::vector<int64_t> out = RunScalars(Dataset::Range(200).Shuffle(k, 7));
  ASSERT_EQ(out.size(), 200u);
  for (size_t p = 0; p < out.size(); ++p) EXPECT_LT(out[p], static_cast<int64_t>(p) + k);
  EXPECT_EQ(RunScalars(Dataset::Range(50).Shuffle(1, 7)), Iota(50));
}

TEST(ExecutorShuffleTest, ReshuffleEachIterationChangesTheOrderPerEpoch) {
  auto out = RunScalars(Dataset::Range(50).Shuffle(50, 1, true).Repeat(3));
  ASSERT_EQ(out.size(), 150u);
  std::vector<int64_t> e0(out.begin(), out.begin() + 50), e1(out.begin() + 50, out.begin() + 100),
      e2(out.begin() + 100, out.end());
  EXPECT_EQ(Sorted(e0), Iota(50));
  EXPECT_EQ(Sorted(e1), Iota(50));
  EXPECT_NE(e0, e1);
  EXPECT_NE(e1, e2);
  // The whole multi-epoch sequence is deterministic.
  EXPECT_EQ(RunScalars(Dataset::Range(50).Shuffle(50, 1, true).Repeat(3)), out);
}

TEST(ExecutorShuffleTest, WithoutReshuffleEveryEpochHasTheSameOrder) {
  for (std::optional<int64_t> seed : {std::optional<int64_t>(3), std::optional<int64_t>()}) {
    auto out = RunScalars(Dataset::Range(50).Shuffle(50, seed, false).Repeat(2));
    ASSERT_EQ(out.size(), 100u);
    EXPECT_EQ(std::vector<int64_t>(out.begin(), out.begin() + 50),
              std::vector<int64_t>(out.begin() + 50, out.end()));
    EXPECT_NE(std::vector<int64_t>(out.begin(), out.begin() + 50), Iota(50));
  }
}

TEST(ExecutorShuffleTest, WithoutASeedOrdersDiffer) {
  // Two unseeded runs of 100 elements agree with probability about 1/100!.
  Dataset ds = Dataset::Range(100).Shuffle(100);
  std::vector<int64_t> a = RunScalars(ds);
  EXPECT_EQ(Sorted(a), Iota(100));
  EXPECT_NE(RunScalars(ds), a);
}

TEST(ExecutorShuffleTest, NonPositiveBufferIsInvalid) {
  auto it = MakeIterator(Dataset::Range(5).Shuffle(0, 1));
  ASSERT_FALSE(it.ok());
  EXPECT_THAT(it.status().message(), HasSubstr("op 1 (shuffle)"));
}

// ---- errors ----

TEST(ExecutorErrorTest, ErrorsAndEndAreSticky) {
  auto it = MakeIterator(Dataset::Range(5).Batch(2).Batch(3));
  ASSERT_TRUE(it.ok());
  Element e;
  bool end = false;
  absl::Status first = (*it)->GetNext(&e, &end);
  ASSERT_FALSE(first.ok());
  EXPECT_EQ((*it)->GetNext(&e, &end), first);
  EXPECT_EQ((*it)->GetNext(&e, &end), first);

  auto done = MakeIterator(Dataset::Range(1));
  ASSERT_TRUE(done.ok());
  ASSERT_TRUE((*done)->GetNext(&e, &end).ok());
  for (int i = 0; i < 3; ++i) {
    end = false;
    ASSERT_TRUE((*done)->GetNext(&e, &end).ok());
    EXPECT_TRUE(end);
  }
}

TEST(ExecutorErrorTest, AnErrorUnderRepeatIsNotRetriedAsANewEpoch) {
  auto it = MakeIterator(Dataset::Range(5).Batch(2).Batch(3).Repeat());
  ASSERT_TRUE(it.ok());
  auto out = Drain(it->get(), 100);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("op 2 (batch)"));
}

}  // namespace
}  // namespace sluice
