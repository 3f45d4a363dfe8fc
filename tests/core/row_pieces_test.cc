// Row pieces (core/tensor/row_pieces.h): cutting a SparseTensor or RaggedTensor into pieces of
// rows at random points and joining the pieces gives the value back exactly, each piece holds
// exactly its rows (re-based), and empty pieces and specs follow TF's shapes.
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/data/spec_inference.h"
#include "core/format/tensor_format.h"
#include "core/tensor/composite_rows.h"
#include "core/tensor/row_pieces.h"
#include "gtest/gtest.h"
#include "tests/seeded_rng.h"

namespace sluice {
namespace {

uint64_t Seed() {
  uint64_t seed = 31;
  if (const char* v = std::getenv("SLUICE_TEST_SEED")) seed = std::strtoull(v, nullptr, 10);
  std::cout << "SLUICE_TEST_SEED=" << seed << std::endl;
  return seed;
}

// A random RaggedTensor of ragged rank 1 or 2 with `rows` rows (some empty).
Element RandomRagged(SeededRng& rng, int64_t rows) {
  const int levels = static_cast<int>(rng.In(1, 2));
  std::vector<Tensor> nested;
  int64_t count = rows;
  for (int level = 0; level < levels; ++level) {
    std::vector<int64_t> splits = {0};
    for (int64_t r = 0; r < count; ++r) splits.push_back(splits.back() + rng.In(0, 3));
    nested.push_back(Tensor::FromVector(splits));
    count = splits.back();
  }
  std::vector<int32_t> values(static_cast<size_t>(count));
  for (int32_t& v : values) v = static_cast<int32_t>(rng.In(-100, 100));
  absl::StatusOr<Element> e = MakeRaggedTensor(Tensor::FromVector(values), std::move(nested));
  EXPECT_TRUE(e.ok()) << e.status();
  return *e;
}

// A random SparseTensor [rows, 5], entries ordered by row.
Element RandomSparse(SeededRng& rng, int64_t rows) {
  std::vector<int64_t> indices;
  std::vector<float> values;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < 5; ++c) {
      if (rng.In(0, 2) != 0) continue;
      indices.push_back(r);
      indices.push_back(c);
      values.push_back(static_cast<float>(rng.In(0, 1000)));
    }
  }
  const int64_t n = static_cast<int64_t>(values.size());
  absl::StatusOr<Element> e =
      MakeSparseTensor(Tensor::FromVector(indices, Shape({n, 2})), Tensor::FromVector(values),
                       Tensor::FromVector(std::vector<int64_t>{rows, 5}));
  EXPECT_TRUE(e.ok()) << e.status();
  return *e;
}

bool SameValue(const Element& a, const Element& b) {
  const std::vector<Tensor> la = a.Flatten(), lb = b.Flatten();
  if (a.kind() != b.kind() || la.size() != lb.size()) return false;
  for (size_t i = 0; i < la.size(); ++i) {
    if (!la[i].Equals(lb[i])) return false;
  }
  return a.composite_dims() == b.composite_dims();
}

TEST(RowPiecesTest, RandomCutsJoinBackAndEachPieceIsItsRows) {
  SeededRng rng(Seed());
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t rows = rng.In(0, 9);
    const Element value = trial % 2 == 0 ? RandomRagged(rng, rows) : RandomSparse(rng, rows);
    ASSERT_EQ(RowCount(value), rows);
    absl::StatusOr<std::vector<Element>> whole_rows = UnstackRows(value, "test");
    ASSERT_TRUE(whole_rows.ok()) << whole_rows.status();
    std::vector<Element> pieces;
    for (int64_t begin = 0; begin <= rows;) {
      const int64_t end = std::min(rows, begin + rng.In(0, 4));
      absl::StatusOr<Element> piece = SliceRows(value, begin, end, "test");
      ASSERT_TRUE(piece.ok()) << piece.status();
      ASSERT_TRUE(CheckComposites(*piece, "piece").ok());
      ASSERT_EQ(RowCount(*piece), end - begin);
      // The piece's rows are the value's rows begin..end.
      absl::StatusOr<std::vector<Element>> piece_rows = UnstackRows(*piece, "test");
      ASSERT_TRUE(piece_rows.ok()) << piece_rows.status();
      for (int64_t r = begin; r < end; ++r) {
        EXPECT_TRUE(SameValue((*piece_rows)[r - begin], (*whole_rows)[r]))
            << "trial " << trial << " row " << r;
      }
      pieces.push_back(*std::move(piece));
      if (end == rows) break;
      begin = end;
    }
    absl::StatusOr<Element> joined = ConcatRows(pieces, "test");
    ASSERT_TRUE(joined.ok()) << joined.status();
    EXPECT_TRUE(SameValue(*joined, value)) << "trial " << trial;
  }
}

// Joining blocks moves their nodes out (TakeRowNodes) and packs the joined ones back into the
// first block's structure: what is taken is exactly RowNodes, and the rest still packs.
TEST(RowPiecesTest, TakenNodesAreTheRowNodesAndTheirStructurePacksThemBack) {
  SeededRng rng(Seed());
  const Element value = Element::Dict(
      {{"s", RandomSparse(rng, 4)},
       {"r", RandomRagged(rng, 4)},
       {"t", Element::Tuple({Element(Tensor::FromVector(std::vector<int32_t>{1, 2, 3, 4})),
                             RandomRagged(rng, 4)})}});
  Element taken_from = value;
  std::vector<Element> nodes = TakeRowNodes(&taken_from);
  const std::vector<const Element*> expected = RowNodes(value);
  ASSERT_EQ(nodes.size(), expected.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    EXPECT_TRUE(SameValue(nodes[i], *expected[i])) << "node " << i;
  }
  absl::StatusOr<Element> packed = PackRowNodes(taken_from, std::move(nodes));
  ASSERT_TRUE(packed.ok()) << packed.status();
  EXPECT_EQ(FormatElement(*packed), FormatElement(value));
  // All rows of a RaggedTensor are the tensor itself: its row_splits are not copied.
  const Element& ragged = *expected[0];  // flatten order: 'r' first
  ASSERT_EQ(ragged.kind(), NestKind::kRagged);
  absl::StatusOr<Element> whole = SliceRows(ragged, 0, RowCount(ragged), "test");
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->children()[1].leaf().data<int64_t>(),
            ragged.children()[1].leaf().data<int64_t>());
}

TEST(RowPiecesTest, EmptyRowsAndBatchDimsFollowTheSpec) {
  const ElementSpec ragged = RaggedTensorSpecOf(DType::kFloat32, {kUnknownDim, kUnknownDim, 3}, 1);
  const ElementSpec sparse = SparseTensorSpecOf(DType::kInt64, {kUnknownDim, 5});
  const Element empty = EmptyRows(ElementSpec::Tuple({ragged, sparse}), /*zero_rows=*/true);
  EXPECT_EQ(ElementSpecToString(SpecOf(empty)),
            "(RaggedTensorSpec(TensorShape([0, None, 3]), tf.float32, 1, tf.int64), "
            "SparseTensorSpec(TensorShape([0, 5]), tf.int64))");
  EXPECT_TRUE(CheckComposites(empty, "empty").ok());
  const ElementSpec halved =
      MapBatchDim(BatchedSpec(sparse, 8), [](int64_t d) { return d / 2; });
  EXPECT_EQ(ElementSpecToString(halved), "SparseTensorSpec(TensorShape([4, None, 5]), tf.int64)");
  EXPECT_EQ(ElementSpecToString(MapBatchDim(BatchedSpec(ragged, 6), [](int64_t) { return 3; })),
            "RaggedTensorSpec(TensorShape([3, None, None, 3]), tf.float32, 2, tf.int64)");
}

TEST(RowPiecesTest, PiecesThatCannotJoinAreRefusedNamingThem) {
  SeededRng rng(7);
  const Element ragged = RandomRagged(rng, 3);
  const Element sparse = RandomSparse(rng, 3);
  std::vector<Element> mixed = {ragged, sparse};
  absl::Status s = ConcatRows(mixed, "op 3 (rebatch)").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("op 3 (rebatch)"), std::string::npos) << s;
  absl::Status rows = CheckSameRows(
      Element::Tuple({ragged, Element(Tensor::FromVector(std::vector<int64_t>{1, 2}))}), "piece");
  EXPECT_EQ(rows.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(rows.message().find("RaggedTensor component 0 has 3 rows but component 1 has 2"),
            std::string::npos)
      << rows;
}

}  // namespace
}  // namespace sluice
