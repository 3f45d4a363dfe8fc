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

// Fastbins off: small blocks freed beyond what the thread's tcache holds are not parked in
// fastbins (whose consolidation, on every free into a large free chunk, cost a 1 KiB-step
// worker 6% of its CPU).
TEST(MallocRetentionTest, SmallBlocksFreedAreNotKeptInFastbins) {
#if !defined(__GLIBC__)
  GTEST_SKIP() << "not glibc's malloc";
#else
  if (std::getenv("GLIBC_TUNABLES") != nullptr) GTEST_SKIP() << "GLIBC_TUNABLES is set";
  if (std::getenv("SLUICE_MALLOC_RETENTION") != nullptr) {
    GTEST_SKIP() << "SLUICE_MALLOC_RETENTION is set";
  }
  ASSERT_TRUE(RetainFreedMemory());
  // 64-byte blocks: fastbin-sized under glibc's default (up to 128 bytes); 1000 of them, far
  // more than a tcache bin's 7. Every other one freed, so that none merges with its neighbour.
  std::vector<void*> blocks(1000);
  for (void*& b : blocks) b = std::malloc(64);
  for (size_t i = 0; i < blocks.size(); i += 2) std::free(blocks[i]);
  EXPECT_EQ(mallinfo2().fsmblks, 0u);
  for (size_t i = 1; i < blocks.size(); i += 2) std::free(blocks[i]);
#endif
}

TEST(MallocRetentionTest, TunablesThatSetFastbinsAreRecognised) {
  EXPECT_TRUE(TunablesSetMallocFastbins("glibc.malloc.mxfast=0"));
  EXPECT_TRUE(TunablesSetMallocFastbins("glibc.malloc.arena_max=2:glibc.malloc.mxfast=64"));
  EXPECT_FALSE(TunablesSetMallocFastbins("glibc.malloc.trim_threshold=1048576"));
  EXPECT_FALSE(TunablesSetMallocFastbins(""));
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
