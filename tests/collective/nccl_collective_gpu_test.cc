// The NCCL Collective with the ranks one machine allows here: a single rank per process on
// device 0 (NCCL refuses two ranks of one communicator on the same GPU). Skips without NCCL in
// the build or without a CUDA device; linking it is the check that the NCCL code links.
#include "client/nccl_collective.h"

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "client/cpu_collective.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

TEST(NcclCollectiveGpuTest, SingleRankOpsOnDevice) {
  auto bootstrap = CpuCollective::Create(CpuCollectiveOptions{});
  ASSERT_TRUE(bootstrap.ok()) << bootstrap.status();
  auto nccl = CreateNcclCollective(bootstrap->get(), NcclCollectiveOptions{});
  if (!NcclCollectiveAvailable()) {
    EXPECT_EQ(nccl.status().code(), absl::StatusCode::kUnimplemented);
    GTEST_SKIP() << "no NCCL in this build";
  }
  if (nccl.status().code() == absl::StatusCode::kFailedPrecondition) {
    GTEST_SKIP() << nccl.status();
  }
  ASSERT_TRUE(nccl.ok()) << nccl.status();
  Collective* c = nccl->get();
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->size(), 1);
  std::vector<int64_t> v = {1, -2, int64_t{1} << 50};
  ASSERT_TRUE(c->AllReduceSum(std::span<int64_t>(v)).ok());
  EXPECT_EQ(v, (std::vector<int64_t>{1, -2, int64_t{1} << 50}));
  std::string bytes(100000, 'z');
  ASSERT_TRUE(c->Broadcast(0, &bytes).ok());
  EXPECT_EQ(bytes, std::string(100000, 'z'));
  std::string empty;
  ASSERT_TRUE(c->Broadcast(0, &empty).ok());
  EXPECT_TRUE(empty.empty());
  EXPECT_TRUE(c->Barrier().ok());
  EXPECT_EQ(c->Broadcast(1, &bytes).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice
