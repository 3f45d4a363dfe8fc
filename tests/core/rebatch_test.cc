// TF's rebatch arithmetic (BatchSizesForWorker, CoordinatedPieceSizes) and the rebatch
// iterators, checked against goldens generated from tensorflow-cpu 2.15
// (tools/golden/gen_rebatch_golden.py) and against unbatch().batch(k) as a reference model.
#include "core/data/distribute/rebatch.h"

#include <cstdint>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "sluice/dataset.h"
#include "core/data/ops/rebatch_iterator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/iterator_test_util.h"

namespace sluice {
namespace {

using ::sluice::testing_util::Drain;
using ::sluice::testing_util::Iota;
using ::sluice::testing_util::Rows;
using ::sluice::testing_util::RunDataset;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

using Sizes = std::vector<int64_t>;

std::vector<std::string> ReadGoldenLines(const std::string& name) {
  std::ifstream f("tests/testdata/rebatch/" + name);
  EXPECT_TRUE(f.good()) << "missing golden " << name << " (run from the repo root)";
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(f, line)) {
    if (!line.empty() && line[0] != '#') lines.push_back(line);
  }
  return lines;
}

std::vector<int64_t> ParseInts(absl::string_view text) {
  std::vector<int64_t> out;
  for (absl::string_view tok : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    int64_t v;
    EXPECT_TRUE(absl::SimpleAtoi(tok, &v)) << tok;
    out.push_back(v);
  }
  return out;
}

// "[0 1] [] [2]" as printed by the golden generator.
std::string Show(const std::vector<std::vector<int64_t>>& pieces) {
  std::vector<std::string> parts;
  for (const auto& p : pieces) parts.push_back("[" + absl::StrJoin(p, " ") + "]");
  return absl::StrJoin(parts, " ");
}

// ---- BatchSizesForWorker ----

TEST(BatchSizesForWorkerTest, TfExamples) {
  EXPECT_EQ(*BatchSizesForWorker(7, 2, 2, 0), (Sizes{2, 2, 2, 1}));
  EXPECT_EQ(*BatchSizesForWorker(7, 2, 2, 1), (Sizes{2, 1, 2, 2}));
  EXPECT_EQ(*BatchSizesForWorker(4, 1, 5, 0), (Sizes{1, 1, 1, 1, 0}));
  EXPECT_EQ(*BatchSizesForWorker(8, 1, 2, 0), (Sizes{4, 4}));
}

TEST(BatchSizesForWorkerTest, MatchesTensorFlowGolden) {
  std::vector<std::string> lines = ReadGoldenLines("batch_sizes_for_worker.txt");
  ASSERT_GT(lines.size(), 100u);
  for (const std::string& line : lines) {
    std::vector<std::string> halves = absl::StrSplit(line, ':');
    ASSERT_EQ(halves.size(), 2u) << line;
    std::vector<int64_t> args = ParseInts(halves[0]);
    ASSERT_EQ(args.size(), 4u) << line;
    auto sizes = BatchSizesForWorker(args[0], args[1], args[2], args[3]);
    ASSERT_TRUE(sizes.ok()) << line << ": " << sizes.status();
    EXPECT_EQ(*sizes, ParseInts(halves[1])) << line;
  }
}

TEST(BatchSizesForWorkerTest, BadArgumentsAreInvalid) {
  EXPECT_EQ(BatchSizesForWorker(-1, 1, 1, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BatchSizesForWorker(4, 0, 1, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BatchSizesForWorker(4, 1, 0, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BatchSizesForWorker(4, 2, 1, 2).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BatchSizesForWorker(4, 2, 1, -1).status().code(), absl::StatusCode::kInvalidArgument);
}

// ---- CoordinatedPieceSizes ----

TEST(CoordinatedPieceSizesTest, EachConsumerGetsWhatTfGivesItsWorkerStepByStep) {
  for (int64_t b : {0, 1, 2, 3, 4, 5, 7, 8, 9, 12, 16, 17, 31, 64, 100}) {
    for (int64_t c : {1, 2, 3, 4, 5}) {
      for (int64_t r : {1, 2, 3, 4}) {
        const int64_t n = c * r;
        auto period = CoordinatedPieceSizes(b, c, r);
        ASSERT_TRUE(period.ok()) << period.status();
        ASSERT_FALSE(period->empty());
        ASSERT_EQ(period->size() % n, 0u) << "the period must be whole steps";
        std::vector<Sizes> worker(c);
        for (int64_t w = 0; w < c; ++w) worker[w] = *BatchSizesForWorker(b, c, r, w);
        const int64_t len = static_cast<int64_t>(period->size());
        for (int64_t s = 0; s < 3 * c + 2; ++s) {
          int64_t sum = 0;
          for (int64_t k = 0; k < n; ++k) {
            const int64_t size = (*period)[(s * n + k) % len];
            sum += size;
            const int64_t consumer = k / r;
            const int64_t replica = k % r;
            EXPECT_EQ(size, worker[consumer][(s * r + replica) % n])
                << "B=" << b << " C=" << c << " R=" << r << " step " << s << " piece " << k;
          }
          EXPECT_EQ(sum, b) << "B=" << b << " C=" << c << " R=" << r << " step " << s;
        }
      }
    }
  }
}

TEST(CoordinatedPieceSizesTest, UniformSizesHaveAOneStepPeriod) {
  EXPECT_EQ(*CoordinatedPieceSizes(8, 2, 2), (Sizes{2, 2, 2, 2}));
  EXPECT_EQ(*CoordinatedPieceSizes(7, 2, 2), (Sizes{2, 2, 2, 1, 2, 1, 2, 2}));
  EXPECT_EQ(CoordinatedPieceSizes(4, 0, 1).status().code(), absl::StatusCode::kInvalidArgument);
}

// ---- rebatch(sizes) ----

TEST(RebatchIteratorTest, SeedExampleSplitsEachGlobalBatch) {
  Element e(Tensor::FromVector<int32_t>({1, 2, 3, 4}));
  auto it = MakeIterator(Dataset::FromTensorSlices(e).Repeat().Batch(4).Rebatch({2, 2}));
  ASSERT_TRUE(it.ok()) << it.status();
  for (int i = 0; i < 6; ++i) {
    Element piece;
    bool end = true;
    ASSERT_TRUE((*it)->GetNext(&piece, &end).ok());
    ASSERT_FALSE(end);
    EXPECT_TRUE(piece.leaf().Equals(i % 2 == 0 ? Tensor::FromVector<int32_t>({1, 2})
                                               : Tensor::FromVector<int32_t>({3, 4})));
  }
}

TEST(RebatchIteratorTest, MatchesTensorFlowGolden) {
  std::vector<std::string> lines = ReadGoldenLines("rebatch.txt");
  ASSERT_GT(lines.size(), 10u);
  for (const std::string& line : lines) {
    // "n b drop | sizes : pieces"
    std::vector<std::string> a = absl::StrSplit(line, '|');
    std::vector<std::string> b = absl::StrSplit(a[1], ':');
    std::vector<int64_t> head = ParseInts(a[0]);
    std::vector<int64_t> sizes = ParseInts(b[0]);
    std::string expected(absl::StripAsciiWhitespace(b[1]));
    // The static spec of range(n).batch(b): int64 (None,); TF builds size-0 pieces from it.
    auto input = MakeIterator(Dataset::Range(head[0]).Batch(head[1]));
    ASSERT_TRUE(input.ok());
    auto it = NewRebatchIterator("op 3 (rebatch)", *std::move(input), sizes, head[2] != 0,
                                 ElementSpec(TensorSpec{DType::kInt64, Shape({kUnknownDim})}));
    ASSERT_TRUE(it.ok()) << it.status();
    auto pieces = Drain(it->get(), 1000);
    ASSERT_TRUE(pieces.ok()) << line << ": " << pieces.status();
    EXPECT_EQ(Show(Rows(*pieces)), expected) << line;
  }
}

TEST(RebatchIteratorTest, ThroughTheExecutorMatchesTensorFlowGolden) {
  // The executor passes the static spec, so size-0 pieces before any input match TF too.
  std::vector<std::string> lines = ReadGoldenLines("rebatch.txt");
  for (const std::string& line : lines) {
    std::vector<std::string> a = absl::StrSplit(line, '|');
    std::vector<std::string> b = absl::StrSplit(a[1], ':');
    std::vector<int64_t> head = ParseInts(a[0]);
    std::vector<int64_t> sizes = ParseInts(b[0]);
    auto out = RunDataset(Dataset::Range(head[0]).Batch(head[1]).Rebatch(sizes, head[2] != 0));
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(Show(Rows(*out)), std::string(absl::StripAsciiWhitespace(b[1]))) << line;
  }
}

TEST(RebatchIteratorTest, PiecesInsideOneBatchAreZeroCopy) {
  auto out = RunDataset(Dataset::Range(8).Batch(8).Rebatch({3, 5}));
  ASSERT_TRUE(out.ok());
  ASSERT_EQ(out->size(), 2u);
  const Tensor& p0 = (*out)[0].leaf();
  const Tensor& p1 = (*out)[1].leaf();
  EXPECT_EQ(p0.buffer(), p1.buffer());
  EXPECT_EQ(static_cast<const char*>(p1.raw_data()) - static_cast<const char*>(p0.raw_data()),
            static_cast<std::ptrdiff_t>(3 * sizeof(int64_t)));
}

TEST(RebatchIteratorTest, PiecesCrossingBatchesAreJoined) {
  auto out = RunDataset(Dataset::Range(10).Batch(3).Rebatch({4}));
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(Rows(*out), (std::vector<Sizes>{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}}));
}

// The reference: unbatch().batch(k) with k cycling through sizes, with TF's end rule: a size-0
// entry yields an empty piece until a piece has run into the end of the input.
std::vector<Sizes> ReferenceRebatch(int64_t n, const Sizes& sizes, bool drop_remainder) {
  std::vector<Sizes> out;
  int64_t next = 0;
  for (size_t i = 0;; i = (i + 1) % sizes.size()) {
    if (sizes[i] > 0 && next >= n) break;
    Sizes piece;
    for (int64_t j = 0; j < sizes[i] && next < n; ++j) piece.push_back(next++);
    const bool short_piece = static_cast<int64_t>(piece.size()) < sizes[i];
    if (short_piece && drop_remainder) break;
    out.push_back(piece);
    if (short_piece) break;
  }
  return out;
}

TEST(RebatchIteratorTest, EveryElementExactlyOnceInReferenceOrder) {
  const std::vector<Sizes> size_lists = {{1}, {2, 2}, {3, 1}, {2, 1, 2, 1}, {4, 0, 4},
                                         {5}, {1, 1, 1, 1, 0}, {7, 2}, {0, 3}};
  for (int64_t n : {1, 2, 5, 8, 13, 32, 50}) {
    for (int64_t b : {1, 2, 3, 4, 7, 16}) {
      for (const Sizes& sizes : size_lists) {
        for (bool drop : {false, true}) {
          auto out = RunDataset(Dataset::Range(n).Batch(b).Rebatch(sizes, drop), 10000);
          ASSERT_TRUE(out.ok()) << out.status();
          std::vector<Sizes> got = Rows(*out);
          EXPECT_EQ(got, ReferenceRebatch(n, sizes, drop))
              << "n=" << n << " b=" << b << " sizes=" << absl::StrJoin(sizes, ",")
              << " drop=" << drop;
          if (!drop) {
            Sizes all;
            for (const Sizes& p : got) all.insert(all.end(), p.begin(), p.end());
            EXPECT_EQ(all, Iota(n));
          }
        }
      }
    }
  }
}

TEST(RebatchIteratorTest, NestedStructuresAndStringsAcrossBatches) {
  std::vector<std::string> words = {"a", "b", "c", "d", "e"};
  Element e = Element::Dict(
      {{"w", Element(Tensor::FromStrings(words, Shape({5})))},
       {"v", Element::Tuple({Element(Tensor::FromVector<float>(
                 {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, Shape({5, 2})))})}});
  auto out = RunDataset(Dataset::FromTensorSlices(e).Batch(2).Rebatch({3}));
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 2u);
  const Element& p0 = (*out)[0];
  EXPECT_EQ(p0.keys(), (std::vector<std::string>{"w", "v"}));
  EXPECT_TRUE(p0.children()[0].leaf().Equals(Tensor::FromStrings({"a", "b", "c"}, Shape({3}))));
  EXPECT_TRUE(p0.children()[1].children()[0].leaf().Equals(
      Tensor::FromVector<float>({0, 1, 2, 3, 4, 5}, Shape({3, 2}))));
  const Element& p1 = (*out)[1];
  EXPECT_TRUE(p1.children()[0].leaf().Equals(Tensor::FromStrings({"d", "e"}, Shape({2}))));
  EXPECT_EQ(p1.children()[1].children()[0].leaf().shape(), Shape({2, 2}));
}

TEST(RebatchIteratorTest, EmptyPiecesKeepTheInnerDimensionsAndDtype) {
  Element e(Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, Shape({3, 2})));
  auto out = RunDataset(Dataset::FromTensorSlices(e).Batch(3).Rebatch({3, 0}));
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 2u);
  EXPECT_EQ((*out)[1].leaf().shape(), Shape({0, 2}));
  EXPECT_EQ((*out)[1].leaf().dtype(), DType::kFloat32);
  // Without a spec (the iterator used on its own) the dimensions come from the data.
  auto input = MakeIterator(Dataset::FromTensorSlices(e).Batch(3));
  ASSERT_TRUE(input.ok());
  auto it = NewRebatchIterator("op 3 (rebatch)", *std::move(input), {0, 3}, false);
  ASSERT_TRUE(it.ok());
  auto pieces = Drain(it->get());
  ASSERT_TRUE(pieces.ok());
  // [], [3 rows], [] (the input's end is only seen by the next positive entry), end.
  ASSERT_EQ(pieces->size(), 3u);
  EXPECT_EQ((*pieces)[0].leaf().shape(), Shape({0, 2}));
  EXPECT_EQ((*pieces)[1].leaf().shape(), Shape({3, 2}));
  EXPECT_EQ((*pieces)[2].leaf().shape(), Shape({0, 2}));
}

TEST(RebatchIteratorTest, SizeZeroPieceBeforeAnyInputUsesTheSpec) {
  auto input = MakeIterator(Dataset::Range(0).Batch(2));
  ASSERT_TRUE(input.ok());
  ElementSpec spec = ElementSpec::Tuple(
      {ElementSpec(TensorSpec{DType::kFloat32, Shape({kUnknownDim, 3, kUnknownDim})})});
  auto it = NewRebatchIterator("op 2 (rebatch)", *std::move(input), {0, 2}, false, spec);
  ASSERT_TRUE(it.ok());
  auto out = Drain(it->get());
  ASSERT_TRUE(out.ok());
  ASSERT_EQ(out->size(), 1u);
  EXPECT_EQ((*out)[0].children()[0].leaf().shape(), Shape({0, 3, 0}));
}

TEST(RebatchIteratorTest, UnbatchedInputOrBadSizesAreInvalidNamingTheOp) {
  auto out = RunDataset(Dataset::Range(5).Rebatch({2}));
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("op 1 (rebatch)"));
  for (const Sizes& bad : {Sizes{}, Sizes{0, 0}, Sizes{2, -1}}) {
    auto it = MakeIterator(Dataset::Range(5).Batch(2).Rebatch(bad));
    ASSERT_FALSE(it.ok());
    EXPECT_EQ(it.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(it.status().message(), HasSubstr("op 2 (rebatch)"));
  }
}

// ---- legacy rebatch(N) ----

TEST(LegacyRebatchIteratorTest, MatchesTensorFlowGolden) {
  std::vector<std::string> lines = ReadGoldenLines("legacy_rebatch.txt");
  ASSERT_GE(lines.size(), 5u);
  for (const std::string& line : lines) {
    std::vector<std::string> a = absl::StrSplit(line, ':');
    std::vector<int64_t> head = ParseInts(a[0]);
    auto out = RunDataset(Dataset::Range(head[0]).Batch(head[1]).LegacyRebatch(head[2]));
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(Show(Rows(*out)), std::string(absl::StripAsciiWhitespace(a[1]))) << line;
  }
}

TEST(LegacyRebatchIteratorTest, SplitsEachBatchOnItsOwn) {
  auto out = RunDataset(Dataset::Range(8).Batch(4).LegacyRebatch(3));
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(Rows(*out), (std::vector<Sizes>{{0, 1}, {2, 3}, {}, {4, 5}, {6, 7}, {}}));
  EXPECT_EQ((*out)[2].leaf().shape(), Shape({0}));
}

TEST(LegacyRebatchIteratorTest, ScalarsAndNonPositiveReplicasAreInvalid) {
  auto out = RunDataset(Dataset::Range(3).LegacyRebatch(2));
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("op 1 (legacy_rebatch)"));
  EXPECT_FALSE(MakeIterator(Dataset::Range(3).Batch(2).LegacyRebatch(-1)).ok());
}

}  // namespace
}  // namespace sluice
