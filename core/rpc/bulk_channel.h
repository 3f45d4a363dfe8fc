// The bulk data channel (docs/SERVICE.md "Bulk data channel"): a TCP socket per StreamSteps
// call, outside gRPC, that carries the frames' numeric tensor bytes so that the consumer
// receives them with one recv() straight into its pooled frame buffer (one kernel copy, as raw
// TCP), instead of out of gRPC's 64 KiB read slices and a second copy for every tensor that
// straddles them. The consumer's credits, acknowledgements and answers, and the call's status,
// stay on the gRPC stream. With in-band headers (BulkOffer/BulkAccept.inband_headers, the
// default on both ends) every frame of the call goes on the socket once it is up, as
// [4-byte little-endian length N][N bytes: the frame as it would be on gRPC][its BulkPayload
// bytes, if its header has one], so that no gRPC thread runs per frame; the consumer refuses a
// length above its channels' receive limit before allocating, and checks the header (sizes,
// credit) before it receives or allocates the payload. Without them the headers stay on gRPC
// and the socket carries only the frames' numeric bytes, in frame order, with no framing of
// its own (the header, StepFrameHeader.bulk_payload, says how many follow there).
//
// Protocol (proto/worker.proto BulkOffer / BulkAccept / BulkPayload / CreditGrant.bulk_ready):
//
//   consumer                                   worker
//   StreamRequest{bulk_offer}          ──gRPC──►
//                                      ◄─gRPC── frame 0 {bulk_accept{port, token}} (+ its steps)
//   connect(worker host, port)         ──TCP───► BulkListener: accept
//   "SLB1" + token (36 bytes)          ──TCP───► token known and unclaimed: socket kept
//                                      ◄─TCP─── 0x01
//   CreditGrant{bulk_ready: true}      ──gRPC──► the stream's BulkSender takes the socket
//                                      ◄─gRPC── frame 1 {steps.., bulk_payload{bytes: 262144}}
//                                      ◄─TCP─── 262144 bytes (each tensor at a 64-byte aligned
//                                               offset, zero padding between), by writev
//   with inband_headers (offered and accepted), frame 1 and every later frame instead:
//                                      ◄─TCP─── [N][frame 1 {.., bulk_payload{262144}}][262144]
//   ... the end of the task (or an error) is a frame on the socket; the consumer half-closes
//   after it, and the worker finishes the call. The socket ending between frames is the
//   worker's end of the call (its status explains), within a frame a broken call.
//
// The token is 32 random bytes that only the authenticated gRPC stream saw; the listener keeps
// a connection only when its first 36 bytes are the magic and a token offered and not yet
// claimed, within handshake_timeout (a peer that sends less, other bytes, or nothing is closed
// then), and holds at most max_handshakes connections in their handshake (more are closed at
// accept). Tokens not claimed expire after offer_ttl.
//
// Failure: a socket that breaks (a write fails, a read times out or ends early) ends the
// StreamSteps call, and the consumer calls again as after any broken call (the credit and
// acknowledgement protocol resends exactly the steps it did not queue), offering a new socket.
// A consumer that cannot reach the port answers bulk_ready false and stays on gRPC.
//
// Threads: the consumer receives a frame's socket bytes on a BulkReceiveThread of the stream's
// own, never on one of gRPC's callback threads (which every stream of the process shares): the
// gRPC reactor only hands the frame's header over. A worker stopped between a header and its
// bytes (SIGSTOP, a stalled host) holds that one thread until bulk_receive_timeout fails the
// frame (or the call is cancelled, which aborts the socket); every other stream goes on.
//
// Thread safety: BulkListener is thread-safe; BulkSender's Take and bytes_sent may be called from
// any thread; BulkReceiver is used by one reader at a time, Abort from any thread;
// BulkReceiveThread is thread-safe.
#ifndef SLUICE_CORE_RPC_BULK_CHANNEL_H_
#define SLUICE_CORE_RPC_BULK_CHANNEL_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/rpc/shm_segment.h"  // UniqueFd
#include "core/rpc/step_frame.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "sluice/tensor.h"

namespace sluice {

inline constexpr char kBulkMagic[] = "SLB1";  // 4 bytes on the wire, no NUL
inline constexpr size_t kBulkTokenBytes = 32;
inline constexpr size_t kBulkHandshakeBytes = 4 + kBulkTokenBytes;

struct BulkListenerOptions {
  // Where to listen: the worker's --host (an IP address; empty or a host name: every address)
  // and --data_port (0: any free port, see port()).
  std::string host;
  int port = 0;
  // What a connection gets to send its magic and token.
  absl::Duration handshake_timeout = absl::Seconds(5);
  // Connections in their handshake at once; a connection beyond this is closed at accept.
  size_t max_handshakes = 64;
  // Offers waiting at once (the oldest is dropped beyond this), and how long one waits.
  size_t max_offers = 4096;
  absl::Duration offer_ttl = absl::Seconds(60);
  // The TCP congestion control of the accepted sockets (the sending end decides; "cubic",
  // "reno", "bbr", ...); empty: the host's default (net.ipv4.tcp_congestion_control). Why
  // one might choose: docs/SERVICE.md "Bulk data channel", congestion control.
  std::string congestion_control;
};

// OK when `name` is empty or a congestion control this process may set on a socket;
// INVALID_ARGUMENT naming it otherwise (not built into the kernel, or not in
// net.ipv4.tcp_allowed_congestion_control for an unprivileged process).
absl::Status CheckBulkCongestionControl(const std::string& name);

// The worker's listening socket and its handshakes, on a thread of its own.
class BulkListener {
 public:
  // Binds and listens; INTERNAL naming the call and address that failed (a port in use, say),
  // INVALID_ARGUMENT for a port outside [0, 65535] or a congestion control that cannot be set
  // (CheckBulkCongestionControl), RESOURCE_EXHAUSTED when its thread cannot start.
  static absl::StatusOr<std::unique_ptr<BulkListener>> Create(BulkListenerOptions options);
  ~BulkListener();  // stops the thread; sockets not taken are closed

  int port() const { return port_; }
  // A fresh token for one connection.
  std::string Offer() ABSL_LOCKS_EXCLUDED(mu_);
  // The socket that presented `token` (blocking, with its handshake done), and the offer is
  // gone; NOT_FOUND when no connection claimed it (yet), or it is unknown or expired.
  absl::StatusOr<UniqueFd> Take(const std::string& token) ABSL_LOCKS_EXCLUDED(mu_);
  // Drops an offer (its stream ended); no-op for an unknown token.
  void Withdraw(const std::string& token) ABSL_LOCKS_EXCLUDED(mu_);

  // What the handshakes came to (tests, metrics).
  struct Stats {
    uint64_t accepted = 0;    // connections that presented an offered token
    uint64_t refused = 0;     // wrong magic or token, a claimed token, or closed early
    uint64_t timed_out = 0;   // sent too little within handshake_timeout
    uint64_t overloaded = 0;  // closed at accept: max_handshakes were in progress
  };
  Stats stats() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Offered {
    UniqueFd socket;  // set once claimed
    absl::Time expires;
  };
  struct Handshake {
    UniqueFd socket;
    absl::Time deadline;
    std::string bytes;  // received so far (at most kBulkHandshakeBytes)
  };

  BulkListener(BulkListenerOptions options, UniqueFd listener, int port, UniqueFd wake_read,
               UniqueFd wake_write);
  void Loop();
  void AcceptAll(std::vector<Handshake>* handshakes);
  // Reads what `h` has sent; true when it is done (claimed, refused or gone).
  bool Advance(Handshake* h);
  void Expire(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const BulkListenerOptions options_;
  const UniqueFd listener_;
  const int port_;
  const UniqueFd wake_read_;  // the destructor writes wake_write_ to stop Loop()
  const UniqueFd wake_write_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Offered> offers_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> order_ ABSL_GUARDED_BY(mu_);  // oldest first (may hold gone ones)
  Stats stats_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

// Where a StepFrameEncoder puts a frame's numeric tensor bytes instead of its payload
// (step_frame.h set_bulk_payload).
class BulkPayloadSink {
 public:
  virtual ~BulkPayloadSink() = default;
  // Takes the frame's numeric tensors (`tensors`, in header order, at the offsets `at` of the
  // decoder's layout, `extent` bytes in all) to send in frame order, keeping them alive until
  // sent; false leaves the frame's bytes inline (a frame too small to be worth a socket
  // write, or a channel that failed).
  virtual bool Take(absl::Span<const Tensor* const> tensors, absl::Span<const size_t> at,
                    size_t extent) = 0;
};

// Where a StepFrameDecoder receives the numeric bytes of a frame whose header has a
// BulkPayload (step_frame.h set_bulk_payload).
class BulkPayloadSource {
 public:
  virtual ~BulkPayloadSource() = default;
  // `bytes` (> 0) bytes in a buffer from `allocator`; RESOURCE_EXHAUSTED when it refuses,
  // UNAVAILABLE when the socket ends, fails or times out first.
  virtual absl::StatusOr<std::shared_ptr<TensorBuffer>> Receive(
      size_t bytes, const TensorAllocator& allocator) = 0;
};

// Faults a test plants in a BulkSender (0: none).
struct BulkSenderFaults {
  // The socket is shut down once this many bytes are written, in the middle of a frame, as a
  // network fault would cut it.
  uint64_t cut_after_bytes = 0;
  // The sender writes this many bytes and then nothing more, keeping the socket open, until it
  // is destroyed: a worker stopped between a frame's header and its bytes (SIGSTOP). Counted in
  // BulkChannelCounts::senders_stalled while it lasts.
  uint64_t stall_after_bytes = 0;
};

// The worker's side of one stream's socket: a thread that writes each frame's tensors with
// writev, from the tensors' own buffers (no contiguous copy), in the order taken.
class BulkSender final : public BulkPayloadSink {
 public:
  // `on_error` runs once, on the sender's thread, when a write fails (the socket is then
  // useless: later frames stay inline and the stream should end): CANCELLED when the consumer
  // closed its end (it left), UNAVAILABLE otherwise. A write that makes no progress for
  // `write_timeout` fails. Frames under `min_bytes` stay inline. RESOURCE_EXHAUSTED naming
  // `what` (the stream) when the sender's thread cannot start.
  // Fault tests only (`faults`): see BulkSenderFaults.
  // `inband_headers` (BulkAccept.inband_headers): the stream writes every frame here
  // (SendFrame), none on gRPC; Take then holds the payload for the SendFrame that follows.
  static absl::StatusOr<std::unique_ptr<BulkSender>> Create(
      absl::string_view what, UniqueFd socket, std::function<void(const absl::Status&)> on_error,
      absl::Duration write_timeout = absl::Seconds(60), size_t min_bytes = 64 << 10,
      BulkSenderFaults faults = {}, bool inband_headers = false);
  ~BulkSender() override;  // shuts the socket down (unblocking a write) and joins

  bool Take(absl::Span<const Tensor* const> tensors, absl::Span<const size_t> at,
            size_t extent) override ABSL_LOCKS_EXCLUDED(mu_);
  // In-band headers only: queues `frame` (the frame as it would go on gRPC, its header's
  // BulkPayload taken by the Take since the last SendFrame, if any) after the frames queued
  // before, to be written as [4-byte little-endian length][frame][payload]. False when the
  // sender failed or is stopping (the frame is not sent; the stream should end).
  bool SendFrame(const grpc::ByteBuffer& frame) ABSL_LOCKS_EXCLUDED(mu_);
  // Opportunistic coalescing (docs/SERVICE.md "Bulk data channel"): false when no frame
  // waits behind the one being written (a frame taken now would be written at once);
  // otherwise true, and `ready` runs once, on the sender's thread without its lock, when the
  // sender starts writing the last waiting frame (or fails, so that a waiter never hangs; not
  // when it is destroyed). A later call replaces a `ready` not yet run. So a stream that cuts
  // no frame while one waits here adds no latency (the socket could not take the frame
  // sooner) and sends the steps produced meanwhile in one frame.
  bool NotifyWhenNoneWaiting(std::function<void()> ready) ABSL_LOCKS_EXCLUDED(mu_);
  // Whether a frame waits behind the one being written (only Take adds one, so a caller that
  // takes none meanwhile sees NotifyWhenNoneWaiting return what this said, or false).
  bool has_waiting_frames() const ABSL_LOCKS_EXCLUDED(mu_);
  // Bytes written so far (metrics, tests).
  uint64_t bytes_sent() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Frame {
    std::vector<Tensor> tensors;
    std::vector<size_t> at;
    size_t extent = 0;
    // In-band headers: the frame's length (little-endian) and bytes, written first.
    char length[4] = {};
    std::vector<grpc::Slice> header;
  };
  BulkSender(UniqueFd socket, std::function<void(const absl::Status&)> on_error,
             absl::Duration write_timeout, size_t min_bytes, BulkSenderFaults faults,
             bool inband_headers);
  void Loop();
  absl::Status Write(const Frame& frame);
  // Fault tests: holds the thread, writing nothing, until the sender is destroyed.
  void Stall() ABSL_LOCKS_EXCLUDED(mu_);

  const UniqueFd socket_;
  const std::function<void(const absl::Status&)> on_error_;
  const size_t min_bytes_;
  const uint64_t cut_after_bytes_;
  const uint64_t stall_after_bytes_;
  const bool inband_headers_;
  mutable absl::Mutex mu_;
  std::deque<Frame> queue_ ABSL_GUARDED_BY(mu_);
  Frame taken_ ABSL_GUARDED_BY(mu_);  // in-band headers: Take's payload for SendFrame
  std::function<void()> on_none_waiting_ ABSL_GUARDED_BY(mu_);  // NotifyWhenNoneWaiting
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool failed_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t bytes_sent_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

// The consumer's side: connects, authenticates, and receives each frame's bytes into the
// decoder's allocator's buffers.
class BulkReceiver final : public BulkPayloadSource {
 public:
  // Connects to `worker_address`'s host ("host:port", "[v6]:port", "ipv4:host:port") at
  // `port` and presents `token`, within `connect_timeout`. UNAVAILABLE naming the address when
  // the port cannot be reached, ABORTED when the worker does not accept the token;
  // INVALID_ARGUMENT for a bad address, port or token. A later Receive that waits
  // `receive_timeout` with no byte arriving fails; one that got part of its bytes fails within
  // twice that after the last byte (a receive waits for the whole frame, MSG_WAITALL, and the
  // socket's timeout bounds each such wait).
  static absl::StatusOr<std::unique_ptr<BulkReceiver>> Connect(
      const std::string& worker_address, uint32_t port, const std::string& token,
      absl::Duration connect_timeout, absl::Duration receive_timeout);

  absl::StatusOr<std::shared_ptr<TensorBuffer>> Receive(
      size_t bytes, const TensorAllocator& allocator) override;
  // In-band headers (BulkAccept.inband_headers): the next frame's length-prefixed bytes into
  // `out` (its BulkPayload bytes, if any, follow: Receive). OUT_OF_RANGE when the socket ends
  // cleanly before a frame's first byte (the worker's end of the call); DATA_LOSS naming the
  // length for one of 0 or above `max_bytes`, before allocating it; UNAVAILABLE when the socket
  // ends, fails or gets no byte for the receive timeout within a frame. Between frames the
  // wait has no bound of its own (a pipeline may be slow): each receive timeout that passes
  // with no byte asks `give_up` (the gRPC call has ended, say), and UNAVAILABLE when true.
  absl::Status ReceiveFrame(size_t max_bytes, const std::function<bool()>& give_up,
                            grpc::ByteBuffer* out);
  // Shuts the socket down: a Receive in progress or later fails at once (UNAVAILABLE).
  void Abort();
  uint64_t bytes_received() const { return bytes_received_; }  // in-band headers included

 private:
  BulkReceiver(UniqueFd socket, std::string where)
      : socket_(std::move(socket)), where_(std::move(where)) {}
  // Receives `bytes` bytes into `to` from *got on (counted there); UNAVAILABLE naming `what`
  // when the socket ends, fails or times out first.
  absl::Status ReceiveExactly(char* to, size_t bytes, absl::string_view what, size_t* got);
  const UniqueFd socket_;
  const std::string where_;  // "host:port", for errors
  // Bytes received, in-band frames' lengths and headers included; whether frames came with
  // their headers (each then counted as a frame once, with its header).
  uint64_t bytes_received_ = 0;
  bool inband_ = false;
};

// A thread of one stream's own that runs the consumer's handling of its frames (receive the
// socket bytes, decode, queue the steps, start the next gRPC read) in the order given, so that
// a receive that waits holds no thread another stream needs. Thread-safe.
class BulkReceiveThread {
 public:
  // RESOURCE_EXHAUSTED naming `what` (the stream) when the thread cannot start.
  static absl::StatusOr<std::unique_ptr<BulkReceiveThread>> Create(absl::string_view what);
  // Runs what was given, then joins. Must not run on this thread (a task must not destroy
  // its own BulkReceiveThread).
  ~BulkReceiveThread() ABSL_LOCKS_EXCLUDED(mu_);
  BulkReceiveThread(const BulkReceiveThread&) = delete;
  BulkReceiveThread& operator=(const BulkReceiveThread&) = delete;

  // Runs `task` on the thread after the tasks given before it.
  void Run(std::function<void()> task) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  BulkReceiveThread() = default;
  void Loop();

  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// What the process's bulk channels did, both ends (tests, benchmarks): frames and bytes sent
// and received on bulk sockets (with in-band headers: every frame, its length and header
// bytes included; without: the frames with numeric bytes there, those bytes), senders alive now, senders a test stalled, and the CPU time
// of their threads.
struct BulkChannelCounts {
  int64_t frames_sent = 0;
  int64_t bytes_sent = 0;
  int64_t frames_received = 0;
  int64_t bytes_received = 0;
  int64_t senders_alive = 0;
  int64_t senders_stalled = 0;  // BulkSenderFaults::stall_after_bytes: stalled now (tests)
  // CPU time of the senders' and the receive threads that have ended (benchmarks: the send
  // copy and its syscalls; the receive copy and the consumer's handling of each frame).
  int64_t sender_cpu_ns = 0;
  int64_t receiver_cpu_ns = 0;
  // Where those threads waited (benchmarks: the chain's stalls), of the ones that have ended:
  // their lifetime, and the part of it they waited with nothing to do (a sender for a frame
  // to write, a receive thread for a frame's header). Lifetime - CPU - idle is the time spent
  // blocked in the socket (a full send buffer, an empty receive buffer) or waiting for a core.
  int64_t sender_wall_ns = 0;
  int64_t sender_idle_ns = 0;
  int64_t receiver_wall_ns = 0;
  int64_t receiver_idle_ns = 0;
  // Frames whose headers came on the socket (BulkAccept.inband_headers), received so far.
  int64_t inband_frames_received = 0;
  // Context switches (voluntary and not) of the senders' and receive threads that have ended
  // (benchmarks: the wake-ups per frame of each end's data thread).
  int64_t sender_switches = 0;
  int64_t receiver_switches = 0;
};
BulkChannelCounts ProcessBulkChannelCounts();

// sluice-worker's and sluicectl's --bulk_data default: true unless the environment sets
// SLUICE_BULK_DATA=0 (a deployment that firewalls data ports turns it off without a flag).
bool BulkDataDefaultFromEnvironment();
// Whether consumers ask for in-band headers (BulkOffer.inband_headers): true unless the
// environment sets SLUICE_BULK_INBAND=0 (the protocol before them: headers on gRPC; for
// comparisons and tests).
bool BulkInbandHeadersFromEnvironment();

// The host part of a gRPC target as the client dials workers ("host:port", "[v6]:port", with
// an optional "ipv4:" / "ipv6:" / "dns:///" scheme); INVALID_ARGUMENT when there is none.
absl::StatusOr<std::string> BulkHostOf(const std::string& worker_address);

}  // namespace sluice

#endif  // SLUICE_CORE_RPC_BULK_CHANNEL_H_
