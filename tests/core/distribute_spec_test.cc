#include "core/data/distribute/distribute_spec.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;

Dataset Parse(const std::string& expression) {
  absl::StatusOr<Dataset> ds = Dataset::Parse(expression);
  EXPECT_TRUE(ds.ok()) << expression << ": " << ds.status();
  return ds.ok() ? *ds : Dataset::Range(0);
}

std::string SpecString(const ElementSpec& spec) {
  std::string out;
  for (const TensorSpec& s : spec.Flatten()) out += s.ToString() + ";";
  return out;
}

TEST(GlobalBatchSizeTest, FindsTheBatchSizeAsTfDoes) {
  EXPECT_EQ(*GlobalBatchSize(Dataset::Range(10).Batch(4)), 4);
  EXPECT_EQ(*GlobalBatchSize(Dataset::Range(10).Batch(4, true)), 4);
  // Through ops that keep the batch size.
  EXPECT_EQ(*GlobalBatchSize(Parse("range(10).batch(4).repeat(2).take(3).skip(1).shuffle(3, "
                                   "seed=1).shard(2, 0).prefetch(2)")),
            4);
  // The batch nearest the end counts.
  EXPECT_EQ(*GlobalBatchSize(Parse("range(10).batch(4).unbatch().batch(3)")), 3);
  // A static dimension 0 without a batch op is taken as the batch size (TF: B = 4).
  EXPECT_EQ(*GlobalBatchSize(Parse("from_tensors([1., 2., 3., 4.]).repeat(3)")), 4);
  // Unknown after a rebatch: TF falls back to the legacy rebatch (-1).
  EXPECT_EQ(*GlobalBatchSize(Parse("range(10).batch(4).rebatch(3)")), -1);
  // Different static sizes: -1 too.
  EXPECT_EQ(*GlobalBatchSize(Parse("from_tensors(([1, 2], [1, 2, 3]))")), -1);
}

TEST(GlobalBatchSizeTest, UnbatchedDatasetGivesTfsValueError) {
  for (const char* expr : {"range(10)", "range(10).batch(4).unbatch()",
                           "from_tensor_slices([1, 2, 3]).repeat()"}) {
    absl::StatusOr<int64_t> b = GlobalBatchSize(Parse(expr), 2);
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument) << expr;
    EXPECT_THAT(b.status().message(),
                HasSubstr("Call the `batch` method on the input Dataset in order to be able to "
                          "split your input across 2 replicas."))
        << expr;
  }
}

TEST(DistributedPerReplicaSpecTest, SeedElementSpec) {
  // The seed: from_tensors(([1.],[2])).repeat(100).batch(16) on 2 replicas: (None, 1) both.
  absl::StatusOr<ElementSpec> spec =
      DistributedPerReplicaSpec(Parse("from_tensors(([1.], [2])).repeat(100).batch(16)"), 1, 2);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(SpecString(*spec),
            "TensorSpec(shape=(None, 1), dtype=tf.float32, name=None);"
            "TensorSpec(shape=(None, 1), dtype=tf.int32, name=None);");
}

TEST(DistributedPerReplicaSpecTest, StaticOnlyWhenDividedEvenlyWithoutPartialBatches) {
  auto spec = [](const std::string& expr, int64_t w, int64_t r) {
    absl::StatusOr<ElementSpec> s = DistributedPerReplicaSpec(Parse(expr), w, r);
    EXPECT_TRUE(s.ok()) << expr << ": " << s.status();
    return s.ok() ? s->Flatten()[0].shape.ToString() : std::string("error");
  };
  EXPECT_EQ(spec("range(16).batch(8, drop_remainder=True)", 1, 4), "(2,)");
  EXPECT_EQ(spec("range(16).batch(8)", 1, 4), "(None,)");  // partial batches can form
  EXPECT_EQ(spec("range(16).batch(9, drop_remainder=True)", 1, 4), "(None,)");  // 9 % 4
  EXPECT_EQ(spec("range(16).batch(3, drop_remainder=True)", 1, 4), "(None,)");  // B < N
  // One replica in sync: the dataset's own spec, batched or not.
  EXPECT_EQ(spec("range(16).batch(8)", 1, 1), "(None,)");
  EXPECT_EQ(spec("range(16)", 1, 1), "()");
  // Legacy (B unknown): per component, d / N when static and divisible.
  absl::StatusOr<ElementSpec> legacy = DistributedPerReplicaSpec(
      Parse("from_tensors(([1, 2, 3, 4], [1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3]))"), 1, 2);
  ASSERT_TRUE(legacy.ok()) << legacy.status();
  EXPECT_EQ(SpecString(*legacy),
            "TensorSpec(shape=(2,), dtype=tf.int32, name=None);"
            "TensorSpec(shape=(4,), dtype=tf.int32, name=None);"
            "TensorSpec(shape=(None,), dtype=tf.int32, name=None);");
  // Multi-worker with a finite dataset: always None (partial-batch handling).
  EXPECT_EQ(spec("range(16).batch(8, drop_remainder=True)", 2, 2), "(None,)");
  // ... but static for an infinite one.
  EXPECT_EQ(spec("range(16).repeat().batch(8, drop_remainder=True)", 2, 2), "(2,)");
}

TEST(DistributedPerReplicaSpecTest, KeepsStructureAndInnerDimensions) {
  absl::StatusOr<ElementSpec> spec = DistributedPerReplicaSpec(
      Parse("from_tensor_slices({'a': [[1, 2], [3, 4]], 'b': [1., 2.]}).batch(2, "
            "drop_remainder=True)"),
      1, 2);
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->kind(), NestKind::kDict);
  EXPECT_EQ(SpecString(*spec),
            "TensorSpec(shape=(1, 2), dtype=tf.int32, name=None);"
            "TensorSpec(shape=(1,), dtype=tf.float32, name=None);");
}

TEST(DistributedPerReplicaSpecTest, Errors) {
  EXPECT_EQ(DistributedPerReplicaSpec(Parse("range(3)"), 1, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DistributedPerReplicaSpec(Parse("range(3).batch(2)"), 0, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DynamicBatchDimensionTest, MakesDimensionZeroUnknownExceptForScalars) {
  ElementSpec spec = ElementSpec::Tuple({TensorSpec{DType::kFloat32, Shape({2, 3})},
                                         TensorSpec{DType::kInt64, Shape()}});
  ElementSpec dynamic = DynamicBatchDimension(spec);
  EXPECT_EQ(SpecString(dynamic),
            "TensorSpec(shape=(None, 3), dtype=tf.float32, name=None);"
            "TensorSpec(shape=(), dtype=tf.int64, name=None);");
}

}  // namespace
}  // namespace sluice
