// ShmSegment (core/rpc/shm_segment.h) costs nothing per byte until the bytes are used: a
// stream's segment (up to 256 MiB) is created and mapped on the way to its first frame, and
// populating it there (zeroing every page) was what held a warm cluster's first step at
// ~100 ms instead of a few (bench/RESULTS.md, issue 28). Residency is read with mincore(2),
// which reports the memory file's pages whether or not this mapping touched them: no timing.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/rpc/shm_fd_passing.h"
#include "core/rpc/shm_segment.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

// Pages of `segment` whose memory exists (in the memfd's page cache).
size_t ResidentPages(const ShmSegment& segment) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in_core((segment.size() + page - 1) / page);
  EXPECT_EQ(mincore(segment.data(), segment.size(), in_core.data()), 0) << std::strerror(errno);
  size_t n = 0;
  for (unsigned char c : in_core) n += c & 1;
  return n;
}

TEST(ShmSegmentTest, CreatingAndMappingALargeSegmentAllocatesNoPageUntilWritten) {
  constexpr size_t kBytes = size_t{64} << 20;  // 16,384 pages of 4 KiB
  auto segment = ShmSegment::Create(kBytes);
  ASSERT_TRUE(segment.ok()) << segment.status();
  EXPECT_EQ(ResidentPages(**segment), 0u) << "Create populated the segment";

  auto server = ShmFdServer::Create();
  ASSERT_TRUE(server.ok()) << server.status();
  auto fd = ReceiveShmFd((*server)->name(), (*server)->Offer(*segment), absl::Seconds(30));
  ASSERT_TRUE(fd.ok()) << fd.status();
  auto mapped = ShmSegment::Map(*std::move(fd), (*segment)->size());
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  EXPECT_EQ(ResidentPages(**mapped), 0u) << "Map populated the segment";

  // The writer's first bytes bring in their pages only, and the reader sees them.
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::memset((*segment)->data(), 7, 2 * page);
  EXPECT_EQ(ResidentPages(**segment), 2u);
  EXPECT_EQ((*mapped)->data()[2 * page - 1], 7);
  EXPECT_EQ(ResidentPages(**mapped), 2u);
}

}  // namespace
}  // namespace sluice
