// CpuCollective: the Collective between trainer processes over TCP, for CPU-only trainers, for
// tests, and to bootstrap NCCL (nccl_collective.h).
//
// Topology: a star. Rank 0 listens on `address` (port 0 picks a free port, reported through
// on_listening); every other rank connects to it, retrying refused connections until
// connect_timeout, and introduces itself with its rank and the group size. Create() returns
// when the whole group is connected.
//
// Wire protocol (all integers little-endian, one TCP connection per non-zero rank):
//   hello  (rank r -> 0): [u32 magic 'SLCC'][u32 rank][u32 size]
//   ack    (0 -> rank r): [u32 magic][u32 0 = accepted, else a length L][L bytes: why not]
//   frame  (both ways)  : [u32 magic][u32 op][u64 sequence number][u64 length][length bytes]
// op is 1 AllReduceSum (payload: int64 values), 2 Broadcast (payload: the bytes), 3 Barrier
// (empty), 4 Abort (payload: the error). Every operation has the next sequence number.
//   AllReduceSum: each rank r > 0 sends its values to 0; rank 0 adds them in rank order and
//     sends the sums back to every rank.
//   Broadcast(root): a root r > 0 sends its bytes to 0; rank 0 sends them to every rank other
//     than itself and the root.
//   Barrier: an AllReduceSum of nothing.
// Example, 3 ranks, AllReduceSum({1}) on rank 1 and ({0}) on 2 and ({1}) on 0, first
// operation: 1 -> 0 [SLCC][1][0][8][01 00 .. 00], 2 -> 0 [SLCC][1][0][8][00 .. 00], then
// 0 -> 1 and 0 -> 2 [SLCC][1][0][8][02 00 .. 00]; every rank now holds {2}.
//
// Failures: a closed or reset connection is UNAVAILABLE naming the peer's rank and address; no
// answer within op_timeout is DEADLINE_EXCEEDED naming it. When rank 0 sees a failure it sends
// Abort (the error text) to the other ranks and closes, so they fail at once with UNAVAILABLE
// naming the rank that failed instead of waiting for their timeout. A rank that fails closes
// its connection, which rank 0 sees. Errors are sticky (collective.h).
//
// Not thread-safe (collective.h). The destructor closes the connections.
#ifndef SLUICE_CLIENT_CPU_COLLECTIVE_H_
#define SLUICE_CLIENT_CPU_COLLECTIVE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/collective.h"

namespace sluice {

struct CpuCollectiveOptions {
  // This process, 0 <= rank < size.
  int rank = 0;
  int size = 1;
  // "host:port". Rank 0 listens there ("0.0.0.0:0", "127.0.0.1:0", "[::]:5555", ...); the
  // other ranks connect to rank 0 there (a real port). Required when size > 1.
  std::string address;
  // Rank 0 only: called once with the bound port, before waiting for the other ranks (so a
  // launcher can hand the port to them).
  std::function<void(int port)> on_listening;
  // How long Create() waits for the group to assemble (rank 0: every other rank connected;
  // others: rank 0 accepting them).
  absl::Duration connect_timeout = absl::Seconds(60);
  // Bound on each operation, waiting for the slowest rank included.
  absl::Duration op_timeout = absl::Minutes(10);
};

class CpuCollective : public Collective {
 public:
  // Connects the group. INVALID_ARGUMENT for bad options; UNAVAILABLE when the address cannot
  // be bound or rank 0 cannot be reached by connect_timeout; DEADLINE_EXCEEDED when not every
  // rank connected by then (naming the missing ranks); FAILED_PRECONDITION when rank 0 rejects
  // this rank (a duplicate rank or a different size).
  static absl::StatusOr<std::unique_ptr<CpuCollective>> Create(CpuCollectiveOptions options);
  ~CpuCollective() override;

  CpuCollective(const CpuCollective&) = delete;
  CpuCollective& operator=(const CpuCollective&) = delete;

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }
  absl::Status AllReduceSum(std::span<int64_t> values) override;
  absl::Status Broadcast(int root, std::string* bytes) override;
  absl::Status Barrier() override;

 private:
  struct Peer {
    int fd = -1;
    std::string name;  // "rank 2 (127.0.0.1:43122)"
  };

  explicit CpuCollective(CpuCollectiveOptions options);
  absl::Status ConnectAsRoot();
  absl::Status ConnectToRoot();
  // Rank 0: receive each rank's contribution of `op`, reduce, send the result (AllReduceSum
  // and Barrier share it).
  absl::Status Reduce(uint32_t op, std::span<int64_t> values);
  // Records the first error; rank 0 tells the others (Abort) and every connection is closed.
  absl::Status Fail(absl::Status status);

  CpuCollectiveOptions options_;
  std::vector<Peer> peers_;  // rank 0: indexed by rank (peers_[0] unused); others: {rank 0}
  uint64_t sequence_ = 0;
  absl::Status broken_;
};

}  // namespace sluice

#endif  // SLUICE_CLIENT_CPU_COLLECTIVE_H_
