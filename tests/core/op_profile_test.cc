// Per-op profiling (core/data/op_profile.h): elements and calls per op of a pipeline.
#include "core/data/op_profile.h"

#include <memory>

#include "core/data/executor.h"
#include "gtest/gtest.h"
#include "sluice/dataset.h"
#include "tests/core/iterator_test_util.h"

namespace sluice {
namespace {

TEST(OpProfileTest, CountsElementsAndCallsPerOp) {
  absl::StatusOr<Dataset> ds = Dataset::Parse("range(100).filter(less(50)).batch(10)");
  ASSERT_TRUE(ds.ok()) << ds.status();
  ExecutorOptions options;
  options.profile = std::make_shared<OpProfile>();
  auto out = testing_util::RunDataset(*ds, 1000, options);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 5u);
  const std::vector<OpProfile::OpStats> ops = options.profile->Snapshot();
  ASSERT_EQ(ops.size(), 3u);
  EXPECT_EQ(ops[0].label, "source (range)");
  EXPECT_EQ(ops[0].elements, 100);
  EXPECT_EQ(ops[0].calls, 101);  // the last call saw the end
  EXPECT_EQ(ops[1].label, "op 1 (filter)");
  EXPECT_EQ(ops[1].elements, 50);
  EXPECT_EQ(ops[2].label, "op 2 (batch)");
  EXPECT_EQ(ops[2].elements, 5);
  EXPECT_EQ(ops[2].calls, 6);
  for (const auto& op : ops) {
    EXPECT_GE(op.total_ns, op.self_ns);
    EXPECT_GE(op.self_ns, 0);
  }
  EXPECT_GE(ops[2].total_ns, ops[1].total_ns);
  const std::string table = options.profile->ToTable();
  EXPECT_NE(table.find("| op 2 (batch) | 5 | 6 |"), std::string::npos) << table;
}

TEST(OpProfileTest, BlocksCountTheirElements) {
  absl::StatusOr<Dataset> ds = Dataset::Parse("range(1000).map(cast(tf.float32)).batch(256)");
  ASSERT_TRUE(ds.ok()) << ds.status();
  ExecutorOptions options;
  options.profile = std::make_shared<OpProfile>();
  auto out = testing_util::RunDataset(*ds, 1000, options);
  ASSERT_TRUE(out.ok()) << out.status();
  const std::vector<OpProfile::OpStats> ops = options.profile->Snapshot();
  ASSERT_EQ(ops.size(), 3u);
  EXPECT_EQ(ops[0].elements, 1000);
  EXPECT_EQ(ops[1].elements, 1000);
  EXPECT_EQ(ops[2].elements, 4);
  EXPECT_EQ(ops[0].calls, 5);  // 4 blocks (one per batch) and the end
}

}  // namespace
}  // namespace sluice
