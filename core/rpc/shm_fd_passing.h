// Handing a shared-memory segment's file descriptor from a worker to a consumer on the same
// host: an abstract Unix socket (no file to leave behind; it goes with the process) on which
// the worker's ShmFdServer answers a peer that writes a registered 16-byte token with that
// token's descriptor (SCM_RIGHTS), once. The token travels on the authenticated gRPC stream
// (proto/worker.proto ShmAccept), so only that stream's consumer can ask for the segment.
//
//   worker:   ASSIGN_OR_RETURN(auto server, ShmFdServer::Create());
//             std::string token = server->Offer(segment);   // -> ShmAccept{name(), token}
//   consumer: ASSIGN_OR_RETURN(UniqueFd fd, ReceiveShmFd(accept.socket_name(), accept.token(),
//                                                        absl::Seconds(5)));
//
// Hostile peers: a connection that sends nothing is dropped after io_timeout; an unknown token
// gets no descriptor; the receiver takes exactly one descriptor (extra ones are closed) and
// connects only to names of this protocol (kShmSocketPrefix).
// Thread-safe.
#ifndef SLUICE_CORE_RPC_SHM_FD_PASSING_H_
#define SLUICE_CORE_RPC_SHM_FD_PASSING_H_

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/rpc/shm_segment.h"

namespace sluice {

inline constexpr char kShmSocketPrefix[] = "sluice-shm-";
inline constexpr size_t kShmTokenBytes = 16;

class ShmFdServer {
 public:
  // Binds a fresh abstract socket "sluice-shm-<pid>-<random>" and starts its thread.
  // INTERNAL naming the call that failed, RESOURCE_EXHAUSTED when its thread cannot start.
  // At most `max_offers` offers wait at once (the
  // oldest is dropped beyond that); a connection gets `io_timeout` to send its token.
  static absl::StatusOr<std::unique_ptr<ShmFdServer>> Create(
      size_t max_offers = 4096, absl::Duration io_timeout = absl::Seconds(2));
  ~ShmFdServer();  // stops the thread; offers not taken are dropped

  // The socket's abstract name (without the leading NUL).
  const std::string& name() const { return name_; }
  // Registers `segment` for one hand-over; returns its token (kShmTokenBytes random bytes).
  // `on_taken`, if set, runs on the server's thread after the hand-over with the taker's pid
  // as this process sees it (SO_PEERCRED; 0 when unknown, another pid namespace say).
  std::string Offer(std::shared_ptr<ShmSegment> segment,
                    std::function<void(int pid)> on_taken = nullptr);
  // Drops an offer not taken (its stream ended); no-op for an unknown token.
  void Withdraw(const std::string& token);
  // Offers waiting (tests).
  size_t pending() const;

 private:
  ShmFdServer(UniqueFd listener, UniqueFd wake_read, UniqueFd wake_write, std::string name,
              size_t max_offers, absl::Duration io_timeout);
  void Loop();
  void Serve(int connection);

  const UniqueFd listener_;
  const UniqueFd wake_read_;   // the destructor writes wake_write_ to stop Loop()
  const UniqueFd wake_write_;
  const std::string name_;
  const size_t max_offers_;
  const absl::Duration io_timeout_;
  mutable absl::Mutex mu_;
  struct Pending {
    std::shared_ptr<ShmSegment> segment;
    std::function<void(int pid)> on_taken;
  };
  absl::flat_hash_map<std::string, Pending> offers_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> order_ ABSL_GUARDED_BY(mu_);  // oldest first (may hold taken ones)
  std::thread thread_;
};

// Connects to `socket_name` (must start with kShmSocketPrefix), writes `token` and returns the
// one descriptor the server answers with. UNAVAILABLE when the socket cannot be reached (another
// host or network namespace, a worker gone) or the server sends none within `timeout`;
// INVALID_ARGUMENT for a bad name or token; DATA_LOSS when the answer carries not exactly one
// descriptor.
absl::StatusOr<UniqueFd> ReceiveShmFd(const std::string& socket_name, const std::string& token,
                                      absl::Duration timeout);

}  // namespace sluice

#endif  // SLUICE_CORE_RPC_SHM_FD_PASSING_H_
