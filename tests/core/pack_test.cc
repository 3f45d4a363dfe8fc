// pack(sequence_length, ...): every input token appears exactly once, in order, inside its
// example's segment; segment ids and positions are seqio's; rows are emitted first-fit with at
// most max_open_rows open; long examples are truncated; the output is deterministic.
#include <cstdint>
#include <iostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/data/ops/pack_iterator.h"
#include "gtest/gtest.h"
#include "iterator_test_util.h"
#include "packed_rows_check.h"
#include "sluice/dataset.h"

namespace sluice {
namespace {

using testing_util::Drain;
using testing_util::VectorIterator;

// Example i of `lengths` holds tokens 1000 * (i + 1) + 0, 1, ...: each token says where it came from.
std::vector<Element> Examples(const std::vector<int64_t>& lengths) {
  std::vector<Element> out;
  for (size_t i = 0; i < lengths.size(); ++i) {
    std::vector<int32_t> tokens;
    for (int64_t j = 0; j < lengths[i]; ++j) tokens.push_back(static_cast<int32_t>(1000 * (i + 1) + j));
    out.push_back(Element::Dict({{"text", Element(Tensor::FromVector(tokens))}}));
  }
  return out;
}

std::vector<int32_t> Ints(const Element& e, const std::string& key) {
  const Tensor& t = testing_util::DictLeaf(e, key);
  return std::vector<int32_t>(t.data<int32_t>(), t.data<int32_t>() + t.num_elements());
}

absl::StatusOr<std::vector<Element>> Pack(const std::vector<int64_t>& lengths, int64_t length,
                                          int64_t max_open_rows = 0) {
  proto::PackOp op;
  op.set_sequence_length(length);
  op.set_max_open_rows(max_open_rows);
  auto it = NewPackIterator("op 1 (pack)", std::make_unique<VectorIterator>(Examples(lengths)), op);
  return Drain(it.get());
}

void CheckPacking(const std::vector<int64_t>& lengths, int64_t L,
                  const std::vector<Element>& elements) {
  std::vector<testing_util::PackedRow> rows;
  for (const Element& e : elements) {
    rows.push_back({Ints(e, "text"), Ints(e, "text_segment_ids"), Ints(e, "text_positions")});
  }
  testing_util::CheckPackedRows(lengths, L, rows, [](int32_t token) {
    return std::pair<int64_t, int64_t>(token / 1000 - 1, token % 1000);
  });
}

TEST(PackTest, SeqioExampleFromTheHeader) {
  auto rows = Pack({3, 2, 1}, 4);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 2u);
  // [5 6 7] and [4] share row 0 (first fit); [8 9] opened row 1.
  EXPECT_EQ(Ints((*rows)[0], "text"), (std::vector<int32_t>{1000, 1001, 1002, 3000}));
  EXPECT_EQ(Ints((*rows)[0], "text_segment_ids"), (std::vector<int32_t>{1, 1, 1, 2}));
  EXPECT_EQ(Ints((*rows)[0], "text_positions"), (std::vector<int32_t>{0, 1, 2, 0}));
  EXPECT_EQ(Ints((*rows)[1], "text"), (std::vector<int32_t>{2000, 2001, 0, 0}));
  EXPECT_EQ(Ints((*rows)[1], "text_segment_ids"), (std::vector<int32_t>{1, 1, 0, 0}));
  EXPECT_EQ((*rows)[0].keys(),
            (std::vector<std::string>{"text", "text_segment_ids", "text_positions"}));
}

TEST(PackTest, RandomLengthsEveryTokenOnceInOrder) {
  const uint32_t seed = 3131;
  std::cout << "seed " << seed << "\n";
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t L = 1 + static_cast<int64_t>(rng() % 64);
    const int64_t open = 1 + static_cast<int64_t>(rng() % 6);
    std::vector<int64_t> lengths;
    const int n = static_cast<int>(rng() % 200);
    for (int i = 0; i < n; ++i) lengths.push_back(static_cast<int64_t>(rng() % (L + L / 2 + 2)));
    SCOPED_TRACE(absl::StrCat("trial ", trial, " L=", L, " max_open_rows=", open));
    auto rows = Pack(lengths, L, open);
    ASSERT_TRUE(rows.ok()) << rows.status();
    CheckPacking(lengths, L, *rows);
    auto again = Pack(lengths, L, open);
    ASSERT_TRUE(again.ok());
    ASSERT_EQ(again->size(), rows->size());
    for (size_t r = 0; r < rows->size(); ++r) {  // deterministic
      EXPECT_EQ(Ints((*again)[r], "text"), Ints((*rows)[r], "text"));
    }
  }
}

TEST(PackTest, LongExamplesAreTruncatedAndFullRowsLeaveAtOnce) {
  auto rows = Pack({7, 2, 2}, 4, 1);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ(Ints((*rows)[0], "text"), (std::vector<int32_t>{1000, 1001, 1002, 1003}));
  EXPECT_EQ(Ints((*rows)[1], "text"), (std::vector<int32_t>{2000, 2001, 3000, 3001}));
  EXPECT_EQ(Ints((*rows)[1], "text_segment_ids"), (std::vector<int32_t>{1, 1, 2, 2}));
}

TEST(PackTest, OneOpenRowEmitsTheOldestWhenNothingFits) {
  // With one open row, [3] then [3] cannot share a row of 4: the first leaves alone.
  auto rows = Pack({3, 3, 1}, 4, 1);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ(Ints((*rows)[0], "text_segment_ids"), (std::vector<int32_t>{1, 1, 1, 0}));
  EXPECT_EQ(Ints((*rows)[1], "text"), (std::vector<int32_t>{2000, 2001, 2002, 3000}));
  // With two, [1] goes back to the first row.
  rows = Pack({3, 3, 1}, 4, 2);
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ(Ints((*rows)[0], "text"), (std::vector<int32_t>{1000, 1001, 1002, 3000}));
}

TEST(PackTest, PipelineExpressionSpecAndRoundTrip) {
  auto ds = Dataset::Parse(
      "from_tensors({'a': [1, 2, 3], 'b': [7], 'c': 5}).repeat(3).pack(4, keys=['a', 'b'])");
  ASSERT_TRUE(ds.ok()) << ds.status();
  auto spec = ds->element_spec();
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->keys(), (std::vector<std::string>{"a", "a_segment_ids", "a_positions", "b",
                                                    "b_segment_ids", "b_positions"}));
  EXPECT_EQ(spec->children()[0].leaf().shape, Shape({4}));
  auto reparsed = Dataset::Parse(ds->ToExpression());
  ASSERT_TRUE(reparsed.ok()) << ds->ToExpression() << ": " << reparsed.status();
  EXPECT_EQ(reparsed->ToExpression(), ds->ToExpression());
  auto rows = testing_util::RunDataset(*ds);
  ASSERT_TRUE(rows.ok()) << rows.status();
  // 'a' rows fill first: one example per row; b's rows are then [7 0 0 0].
  ASSERT_EQ(rows->size(), 3u);
  EXPECT_EQ(testing_util::Values((*rows)[0].children()[3].leaf()),
            (std::vector<int64_t>{7, 0, 0, 0}));
}

TEST(PackTest, BadArgumentsAreInvalidArgument) {
  for (const char* expr : {"from_tensors({'a': [1]}).pack(0)",
                           "from_tensors([1, 2]).pack(4)",
                           "from_tensors({'a': 'text'}).pack(4)",
                           "from_tensors({'a': [[1]]}).pack(4)",
                           "from_tensors({'a': [1]}).pack(4, keys=['b'])",
                           "from_tensors({'a': [1], 'a_positions': [2]}).pack(4)",
                           "from_tensors({'a': [1]}).pack(4, max_open_rows=0)"}) {
    auto ds = Dataset::Parse(expr);
    absl::Status s = ds.ok() ? ds->element_spec().status() : ds.status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << expr << ": " << s;
  }
}

}  // namespace
}  // namespace sluice
