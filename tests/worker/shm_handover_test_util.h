// The consumer's side of a shared-memory segment handed over (core/rpc/shm_fd_passing.h), for
// tests: take the descriptor with the token and map it, expecting both to succeed.
#ifndef SLUICE_TESTS_WORKER_SHM_HANDOVER_TEST_UTIL_H_
#define SLUICE_TESTS_WORKER_SHM_HANDOVER_TEST_UTIL_H_

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "core/rpc/shm_fd_passing.h"
#include "core/rpc/shm_segment.h"
#include "gtest/gtest.h"

namespace sluice {

// The segment of `bytes` handed over on `socket_name` for `token`, mapped; null (and a test
// failure) when either step fails.
inline std::shared_ptr<ShmSegment> TakeHandedSegment(const std::string& socket_name,
                                                     const std::string& token, size_t bytes,
                                                     absl::Duration timeout = absl::Seconds(30)) {
  absl::StatusOr<UniqueFd> fd = ReceiveShmFd(socket_name, token, timeout);
  EXPECT_TRUE(fd.ok()) << fd.status();
  if (!fd.ok()) return nullptr;
  absl::StatusOr<std::shared_ptr<ShmSegment>> mapped = ShmSegment::Map(*std::move(fd), bytes);
  EXPECT_TRUE(mapped.ok()) << mapped.status();
  return mapped.ok() ? *std::move(mapped) : nullptr;
}

}  // namespace sluice

#endif  // SLUICE_TESTS_WORKER_SHM_HANDOVER_TEST_UTIL_H_
