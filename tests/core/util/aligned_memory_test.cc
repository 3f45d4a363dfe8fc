// core/util/aligned_memory.h: blocks are aligned and writable, and a thread that builds a run of
// same-sized large blocks (a pipeline's 16 MiB steps), freeing the oldest as it goes, reuses the
// memory it freed instead of faulting in fresh pages for every block (what std::aligned_alloc
// did: ~4,000 faults per 16 MiB step on the worker).
#include "core/util/aligned_memory.h"

#include <sys/resource.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "core/util/malloc_retention.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

TEST(AlignedMemoryTest, BlocksAreAlignedWritableAndFreed) {
  for (size_t alignment : {size_t{8}, size_t{16}, size_t{64}, size_t{4096}}) {
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{100000}}) {
      void* block = AllocateAligned(alignment, bytes);
      ASSERT_NE(block, nullptr) << alignment << " " << bytes;
      EXPECT_EQ(reinterpret_cast<uintptr_t>(block) % alignment, 0u) << alignment << " " << bytes;
      std::memset(block, 0xab, bytes);
      FreeAligned(block);
    }
  }
  FreeAligned(nullptr);
}

TEST(AlignedMemoryTest, RefusesBadAlignmentsAndOverflowingSizes) {
  EXPECT_EQ(AllocateAligned(0, 64), nullptr);
  EXPECT_EQ(AllocateAligned(48, 64), nullptr);
  EXPECT_EQ(AllocateAligned(64, SIZE_MAX), nullptr);
  EXPECT_EQ(AllocateAligned(64, SIZE_MAX - 64), nullptr);
}

long MinorFaults() {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// As a worker's producer thread: each step a 16 MiB block, written in full, and a small block
// allocated right after it (the make_shared of the buffer that owns it), kDepth steps in flight,
// the oldest freed as each new one is built. The faults of the last half of the steps.
long FaultsOfSteadySteps() {
  constexpr size_t kStep = size_t{16} << 20;
  constexpr int kSteps = 32;
  constexpr size_t kDepth = 4;
  long faults = 0;
  std::thread producer([&] {
    struct Step {
      void* block;
      void* owner;
    };
    std::deque<Step> in_flight;
    long before = 0;
    for (int i = 0; i < kSteps; ++i) {
      if (i == kSteps / 2) before = MinorFaults();
      Step step{AllocateAligned(64, kStep), std::malloc(56)};
      ASSERT_NE(step.block, nullptr);
      ASSERT_NE(step.owner, nullptr);
      std::memset(step.block, i, kStep);
      in_flight.push_back(step);
      if (in_flight.size() == kDepth) {
        FreeAligned(in_flight.front().block);
        std::free(in_flight.front().owner);
        in_flight.pop_front();
      }
    }
    faults = MinorFaults() - before;
    for (const Step& s : in_flight) {
      FreeAligned(s.block);
      std::free(s.owner);
    }
  });
  producer.join();
  return faults;
}

TEST(AlignedMemoryTest, SameSizedLargeBlocksReuseTheMemoryFreed) {
#if !defined(__GLIBC__)
  GTEST_SKIP() << "not glibc's malloc";
#else
  if (std::getenv("GLIBC_TUNABLES") != nullptr || std::getenv("SLUICE_MALLOC_RETENTION") != nullptr) {
    GTEST_SKIP() << "the environment sets malloc's behaviour";
  }
  ASSERT_TRUE(RetainFreedMemory());  // as the worker's main() does
  // 16 steps of 16 MiB are 65,536 pages: faulted in afresh, each would fault. Reused, none
  // does, but for a few from elsewhere (gtest, the thread's start).
  EXPECT_LT(FaultsOfSteadySteps(), 256);
#endif
}

}  // namespace
}  // namespace sluice
