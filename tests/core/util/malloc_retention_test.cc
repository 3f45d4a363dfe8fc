// core/util/malloc_retention.h: a process that frees a batch's worth of blocks keeps the
// memory, and building the next batch makes no page faults (what the pipeline's x10 bench lost
// 1 CPU-s in the kernel to); GLIBC_TUNABLES, when it names the thresholds, wins.
#include "core/util/malloc_retention.h"

#include <sys/resource.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace sluice {
namespace {

constexpr size_t kBlock = 3072;   // a string of the TFRecord parse pipeline's batches
constexpr size_t kBlocks = 4096;  // 12 MiB: far above glibc's default trim threshold

long MinorFaults() {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// Allocates and touches kBlocks blocks, then frees them newest first (into the heap's top).
void OneBatch() {
  std::vector<char*> blocks(kBlocks);
  for (char*& b : blocks) {
    b = static_cast<char*>(std::malloc(kBlock));
    ASSERT_NE(b, nullptr);
    std::memset(b, 1, kBlock);
  }
  for (size_t i = kBlocks; i > 0; --i) std::free(blocks[i - 1]);
}

TEST(MallocRetentionTest, TheNextBatchReusesTheFreedMemoryWithoutPageFaults) {
#if !defined(__GLIBC__)
  GTEST_SKIP() << "not glibc's malloc";
#else
  if (std::getenv("GLIBC_TUNABLES") != nullptr &&
      TunablesSetMallocThresholds(std::getenv("GLIBC_TUNABLES"))) {
    GTEST_SKIP() << "GLIBC_TUNABLES sets malloc's thresholds";
  }
  if (std::getenv("SLUICE_MALLOC_RETENTION") != nullptr) {
    GTEST_SKIP() << "SLUICE_MALLOC_RETENTION is set";
  }
  ASSERT_TRUE(RetainFreedMemory());
  OneBatch();
  // The freed 12 MiB stays at the top of the heap, for the next batch.
  EXPECT_GE(mallinfo2().keepcost, kBlocks * kBlock);
  const long before = MinorFaults();
  OneBatch();
  // 12 MiB is 3,072 pages: with the memory handed back, each would fault in again. A few
  // faults may come from elsewhere (gtest's own allocations).
  EXPECT_LT(MinorFaults() - before, 64);
#endif
}

TEST(MallocRetentionTest, TunablesThatSetTheThresholdsAreRecognised) {
  EXPECT_TRUE(TunablesSetMallocThresholds("glibc.malloc.trim_threshold=1048576"));
  EXPECT_TRUE(TunablesSetMallocThresholds(
      "glibc.malloc.arena_max=2:glibc.malloc.mmap_threshold=65536"));
  EXPECT_FALSE(TunablesSetMallocThresholds("glibc.malloc.arena_max=2"));
  EXPECT_FALSE(TunablesSetMallocThresholds(""));
  EXPECT_FALSE(TunablesSetMallocThresholds("glibc.malloc.trim_threshold_x=1"));
}

}  // namespace
}  // namespace sluice
