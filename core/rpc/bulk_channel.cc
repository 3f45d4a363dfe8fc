#include "core/rpc/bulk_channel.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/util/environment_switch.h"
#include "core/util/start_thread.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

absl::Status Errno(absl::string_view what) {
  return absl::InternalError(absl::StrCat("bulk channel: ", what, ": ", std::strerror(errno)));
}

std::string RandomToken() {
  thread_local absl::BitGen gen;
  std::string out(kBulkTokenBytes, '\0');
  for (char& c : out) c = static_cast<char>(absl::Uniform<uint8_t>(gen));
  return out;
}

void SetTimeout(int fd, int option, absl::Duration timeout) {
  timeval tv = absl::ToTimeval(std::max(timeout, absl::Milliseconds(1)));
  setsockopt(fd, SOL_SOCKET, option, &tv, sizeof(tv));
}

void SetBlocking(int fd, bool blocking) {
  const int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, blocking ? (flags & ~O_NONBLOCK) : (flags | O_NONBLOCK));
}

// No Nagle delay: a frame's last segment, or a small frame's only one, leaves at once. The
// socket's buffers are the kernel's autotuned ones, as raw TCP's (setting SO_SNDBUF/SO_RCVBUF
// would turn autotuning off).
void TuneSocket(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// Sets `fd`'s congestion control to `name` (empty: leaves the host's default).
absl::Status SetCongestionControl(int fd, const std::string& name) {
  if (name.empty()) return absl::OkStatus();
  if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name.data(),
                 static_cast<socklen_t>(name.size())) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bulk channel: congestion control \"", name, "\" is not available on this host (",
        std::strerror(errno), "; see net.ipv4.tcp_allowed_congestion_control)"));
  }
  return absl::OkStatus();
}

struct Counts {
  std::atomic<int64_t> frames_sent{0};
  std::atomic<int64_t> bytes_sent{0};
  std::atomic<int64_t> frames_received{0};
  std::atomic<int64_t> bytes_received{0};
  std::atomic<int64_t> senders_alive{0};
  std::atomic<int64_t> senders_stalled{0};
  std::atomic<int64_t> sender_cpu_ns{0};
  std::atomic<int64_t> receiver_cpu_ns{0};
  std::atomic<int64_t> sender_wall_ns{0};
  std::atomic<int64_t> sender_idle_ns{0};
  std::atomic<int64_t> receiver_wall_ns{0};
  std::atomic<int64_t> receiver_idle_ns{0};
  std::atomic<int64_t> inband_frames_received{0};
  std::atomic<int64_t> sender_switches{0};
  std::atomic<int64_t> receiver_switches{0};
};
Counts& ProcessCounts() {
  static Counts* const counts = new Counts;
  return *counts;
}

int64_t ClockNs(clockid_t clock) {
  timespec t{};
  clock_gettime(clock, &t);
  return int64_t{t.tv_sec} * 1000000000 + t.tv_nsec;
}

// A thread running `body`, named so that a profile tells it from gRPC's (a thread otherwise
// inherits the name of the gRPC thread that made it); its CPU time and its lifetime are added
// to `cpu_ns` and `wall_ns`, and its context switches (voluntary and not) to `switches`, when
// it ends. StartThread's error, naming `what`, when it cannot start.
absl::StatusOr<std::thread> NamedThread(const char* name, absl::string_view what,
                                        std::atomic<int64_t>* cpu_ns,
                                        std::atomic<int64_t>* wall_ns,
                                        std::atomic<int64_t>* switches,
                                        std::function<void()> body) {
  return StartThread(what, [name, cpu_ns, wall_ns, switches, body = std::move(body)] {
    pthread_setname_np(pthread_self(), name);
    const int64_t start = ClockNs(CLOCK_MONOTONIC);
    body();
    cpu_ns->fetch_add(ClockNs(CLOCK_THREAD_CPUTIME_ID));
    wall_ns->fetch_add(ClockNs(CLOCK_MONOTONIC) - start);
    rusage u{};
    if (getrusage(RUSAGE_THREAD, &u) == 0) switches->fetch_add(u.ru_nvcsw + u.ru_nivcsw);
  });
}

// Runs `wait` and adds the time it took to `idle_ns` (the benchmarks' account of a thread
// that had nothing to do).
template <typename Wait>
void TimedWait(std::atomic<int64_t>* idle_ns, Wait wait) {
  const int64_t start = ClockNs(CLOCK_MONOTONIC);
  wait();
  idle_ns->fetch_add(ClockNs(CLOCK_MONOTONIC) - start, std::memory_order_relaxed);
}

// Padding between tensors comes from here (a tensor's offset is 64-byte aligned).
const char kZeros[64] = {};

}  // namespace

BulkChannelCounts ProcessBulkChannelCounts() {
  const Counts& c = ProcessCounts();
  return {c.frames_sent.load(),     c.bytes_sent.load(),      c.frames_received.load(),
          c.bytes_received.load(),  c.senders_alive.load(),   c.senders_stalled.load(),
          c.sender_cpu_ns.load(),   c.receiver_cpu_ns.load(), c.sender_wall_ns.load(),
          c.sender_idle_ns.load(),  c.receiver_wall_ns.load(), c.receiver_idle_ns.load(),
          c.inband_frames_received.load(), c.sender_switches.load(),
          c.receiver_switches.load()};
}

absl::Status CheckBulkCongestionControl(const std::string& name) {
  if (name.empty()) return absl::OkStatus();
  UniqueFd probe(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (probe.get() < 0) return Errno("socket");
  return SetCongestionControl(probe.get(), name);
}

bool BulkDataDefaultFromEnvironment() { return EnvironmentSwitchOn("SLUICE_BULK_DATA"); }

bool BulkInbandHeadersFromEnvironment() { return EnvironmentSwitchOn("SLUICE_BULK_INBAND"); }

absl::StatusOr<std::string> BulkHostOf(const std::string& worker_address) {
  absl::string_view a = worker_address;
  for (absl::string_view scheme : {"ipv4:", "ipv6:", "dns:///", "dns:"}) {
    if (absl::StartsWith(a, scheme)) {
      a.remove_prefix(scheme.size());
      break;
    }
  }
  std::string host;
  if (absl::StartsWith(a, "[")) {
    const size_t close = a.find(']');
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("bulk channel: bad address ", worker_address));
    }
    host = std::string(a.substr(1, close - 1));
  } else {
    const size_t colon = a.rfind(':');
    host = std::string(colon == absl::string_view::npos ? a : a.substr(0, colon));
  }
  if (host.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("bulk channel: no host in the worker address ", worker_address));
  }
  return host;
}

// ---------------------------------------------------------------------------------------------
// BulkListener

absl::StatusOr<std::unique_ptr<BulkListener>> BulkListener::Create(BulkListenerOptions options) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("bulk channel: data port ", options.port, " is not in [0, 65535]"));
  }
  std::string host = options.host;
  if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty()) host = "::";  // every address, both families
  if (host == "localhost") host = "127.0.0.1";
  sockaddr_storage addr{};
  socklen_t len = 0;
  int family = AF_INET;
  auto* a4 = reinterpret_cast<sockaddr_in*>(&addr);
  auto* a6 = reinterpret_cast<sockaddr_in6*>(&addr);
  if (inet_pton(AF_INET, host.c_str(), &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
    a4->sin_port = htons(static_cast<uint16_t>(options.port));
    len = sizeof(*a4);
  } else if (inet_pton(AF_INET6, host.c_str(), &a6->sin6_addr) == 1) {
    family = AF_INET6;
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons(static_cast<uint16_t>(options.port));
    len = sizeof(*a6);
  } else {  // a name (what consumers dial, resolved on their side): every address
    family = AF_INET6;
    a6->sin6_family = AF_INET6;
    a6->sin6_addr = in6addr_any;
    a6->sin6_port = htons(static_cast<uint16_t>(options.port));
    len = sizeof(*a6);
  }
  UniqueFd listener(socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (listener.get() < 0) return Errno("socket");
  const int one = 1;
  setsockopt(listener.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  // Accepted sockets inherit it: the worker's end is the one that sends.
  if (absl::Status s = SetCongestionControl(listener.get(), options.congestion_control);
      !s.ok()) {
    return s;
  }
  if (family == AF_INET6) {
    const int zero = 0;  // both families on "every address"
    setsockopt(listener.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
  }
  if (bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    return Errno(absl::StrCat("bind ", options.host.empty() ? "*" : options.host, ":",
                              options.port));
  }
  if (listen(listener.get(), 128) != 0) return Errno("listen");
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof(bound);
  if (getsockname(listener.get(), reinterpret_cast<sockaddr*>(&bound), &bound_len) != 0) {
    return Errno("getsockname");
  }
  const int port = ntohs(bound.ss_family == AF_INET
                             ? reinterpret_cast<sockaddr_in*>(&bound)->sin_port
                             : reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) return Errno("pipe2");
  std::unique_ptr<BulkListener> l(new BulkListener(std::move(options), std::move(listener), port,
                                                   UniqueFd(pipe_fds[0]), UniqueFd(pipe_fds[1])));
  BulkListener* raw = l.get();
  ASSIGN_OR_RETURN(l->thread_,
                   StartThread(absl::StrCat("the bulk data channel's listener on port ", port),
                               [raw] { raw->Loop(); }));
  return l;
}

BulkListener::BulkListener(BulkListenerOptions options, UniqueFd listener, int port,
                           UniqueFd wake_read, UniqueFd wake_write)
    : options_(std::move(options)), listener_(std::move(listener)), port_(port),
      wake_read_(std::move(wake_read)), wake_write_(std::move(wake_write)) {}

BulkListener::~BulkListener() {
  if (!thread_.joinable()) return;  // Create failed
  const char stop = 1;
  while (write(wake_write_.get(), &stop, 1) < 0 && errno == EINTR) {
  }
  thread_.join();
}

std::string BulkListener::Offer() {
  std::string token = RandomToken();
  absl::MutexLock lock(&mu_);
  while (offers_.size() >= std::max<size_t>(options_.max_offers, 1) && !order_.empty()) {
    offers_.erase(order_.front());
    order_.pop_front();
  }
  offers_[token].expires = absl::Now() + options_.offer_ttl;
  order_.push_back(token);
  return token;
}

absl::StatusOr<UniqueFd> BulkListener::Take(const std::string& token) {
  absl::MutexLock lock(&mu_);
  auto it = offers_.find(token);
  if (it == offers_.end() || it->second.socket.get() < 0) {
    return absl::NotFoundError("bulk channel: no connection presented the stream's token");
  }
  UniqueFd socket = std::move(it->second.socket);
  offers_.erase(it);
  return socket;
}

void BulkListener::Withdraw(const std::string& token) {
  absl::MutexLock lock(&mu_);
  offers_.erase(token);
}

BulkListener::Stats BulkListener::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void BulkListener::Expire(absl::Time now) {
  while (!order_.empty()) {
    auto it = offers_.find(order_.front());
    if (it != offers_.end() && it->second.expires > now) break;
    if (it != offers_.end()) offers_.erase(it);
    order_.pop_front();
  }
}

void BulkListener::AcceptAll(std::vector<Handshake>* handshakes) {
  for (;;) {
    UniqueFd c(accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (c.get() < 0) return;  // EAGAIN (drained) or a transient error: poll again
    if (handshakes->size() >= options_.max_handshakes) {
      absl::MutexLock lock(&mu_);
      ++stats_.overloaded;
      continue;  // closed
    }
    handshakes->push_back(
        Handshake{std::move(c), absl::Now() + options_.handshake_timeout, std::string()});
  }
}

bool BulkListener::Advance(Handshake* h) {
  char buf[kBulkHandshakeBytes];
  const size_t want = kBulkHandshakeBytes - h->bytes.size();
  const ssize_t n = recv(h->socket.get(), buf, want, 0);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
  absl::MutexLock lock(&mu_);
  if (n <= 0) {  // closed or failed before the token
    ++stats_.refused;
    return true;
  }
  h->bytes.append(buf, static_cast<size_t>(n));
  const size_t magic = std::min<size_t>(h->bytes.size(), 4);
  if (absl::string_view(h->bytes).substr(0, magic) !=
      absl::string_view(kBulkMagic, 4).substr(0, magic)) {
    ++stats_.refused;  // not this protocol: no need to wait for the rest
    return true;
  }
  if (h->bytes.size() < kBulkHandshakeBytes) return false;
  auto it = offers_.find(h->bytes.substr(4));
  if (it == offers_.end() || it->second.socket.get() >= 0) {
    ++stats_.refused;
    return true;
  }
  const char accepted = 1;
  if (send(h->socket.get(), &accepted, 1, MSG_NOSIGNAL) != 1) {
    ++stats_.refused;
    return true;
  }
  SetBlocking(h->socket.get(), true);
  TuneSocket(h->socket.get());
  it->second.socket = std::move(h->socket);
  ++stats_.accepted;
  return true;
}

void BulkListener::Loop() {
  std::vector<Handshake> handshakes;
  std::vector<pollfd> fds;
  for (;;) {
    fds.clear();
    fds.push_back({wake_read_.get(), POLLIN, 0});
    fds.push_back({listener_.get(), POLLIN, 0});
    absl::Time next = absl::Now() + absl::Seconds(1);  // offers expire at this pace at least
    for (const Handshake& h : handshakes) {
      fds.push_back({h.socket.get(), POLLIN, 0});
      next = std::min(next, h.deadline);
    }
    const int wait_ms = static_cast<int>(
        std::clamp<int64_t>(absl::ToInt64Milliseconds(next - absl::Now()) + 1, 0, 1000));
    if (poll(fds.data(), fds.size(), wait_ms) < 0 && errno != EINTR) {
      absl::SleepFor(absl::Milliseconds(10));  // never spin on a persistent error
      continue;
    }
    if (fds[0].revents != 0) return;  // the destructor
    const absl::Time now = absl::Now();
    std::vector<Handshake> still;
    for (size_t i = 0; i < handshakes.size(); ++i) {
      Handshake& h = handshakes[i];
      if (fds[i + 2].revents != 0 && Advance(&h)) continue;
      if (now >= h.deadline) {
        absl::MutexLock lock(&mu_);
        ++stats_.timed_out;  // a slow or silent peer: closed
        continue;
      }
      still.push_back(std::move(h));
    }
    handshakes = std::move(still);
    if (fds[1].revents != 0) AcceptAll(&handshakes);
    absl::MutexLock lock(&mu_);
    Expire(now);
  }
}

// ---------------------------------------------------------------------------------------------
// BulkSender

absl::StatusOr<std::unique_ptr<BulkSender>> BulkSender::Create(
    absl::string_view what, UniqueFd socket, std::function<void(const absl::Status&)> on_error,
    absl::Duration write_timeout, size_t min_bytes, BulkSenderFaults faults,
    bool inband_headers) {
  std::unique_ptr<BulkSender> sender(new BulkSender(std::move(socket), std::move(on_error),
                                                    write_timeout, min_bytes, faults,
                                                    inband_headers));
  BulkSender* raw = sender.get();
  ASSIGN_OR_RETURN(sender->thread_,
                   NamedThread("sluice-bulk-tx", absl::StrCat("the bulk sender of ", what),
                               &ProcessCounts().sender_cpu_ns, &ProcessCounts().sender_wall_ns,
                               &ProcessCounts().sender_switches, [raw] { raw->Loop(); }));
  return sender;
}

BulkSender::BulkSender(UniqueFd socket, std::function<void(const absl::Status&)> on_error,
                       absl::Duration write_timeout, size_t min_bytes,
                       BulkSenderFaults faults, bool inband_headers)
    : socket_(std::move(socket)), on_error_(std::move(on_error)), min_bytes_(min_bytes),
      cut_after_bytes_(faults.cut_after_bytes), stall_after_bytes_(faults.stall_after_bytes),
      inband_headers_(inband_headers) {
  ProcessCounts().senders_alive.fetch_add(1);
  SetTimeout(socket_.get(), SO_SNDTIMEO, write_timeout);
}

BulkSender::~BulkSender() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  shutdown(socket_.get(), SHUT_RDWR);  // a write in progress returns
  if (thread_.joinable()) thread_.join();  // not when Create failed
  ProcessCounts().senders_alive.fetch_sub(1);
}

bool BulkSender::Take(absl::Span<const Tensor* const> tensors, absl::Span<const size_t> at,
                      size_t extent) {
  if (extent < min_bytes_) return false;
  Frame frame;
  frame.tensors.reserve(tensors.size());
  for (const Tensor* t : tensors) frame.tensors.push_back(*t);  // a reference to its buffer
  frame.at.assign(at.begin(), at.end());
  frame.extent = extent;
  absl::MutexLock lock(&mu_);
  if (failed_ || stopping_) return false;
  if (inband_headers_) {
    taken_ = std::move(frame);  // written with its header (SendFrame)
  } else {
    queue_.push_back(std::move(frame));
  }
  return true;
}

bool BulkSender::SendFrame(const grpc::ByteBuffer& bytes) {
  const size_t n = bytes.Length();
  absl::MutexLock lock(&mu_);
  Frame frame = std::move(taken_);
  taken_ = Frame();
  if (!inband_headers_ || failed_ || stopping_ || n == 0 || n > UINT32_MAX) return false;
  for (int i = 0; i < 4; ++i) frame.length[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  if (!bytes.Dump(&frame.header).ok()) return false;
  queue_.push_back(std::move(frame));
  return true;
}

bool BulkSender::NotifyWhenNoneWaiting(std::function<void()> ready) {
  absl::MutexLock lock(&mu_);
  if (queue_.empty() || failed_ || stopping_) return false;
  on_none_waiting_ = std::move(ready);
  return true;
}

bool BulkSender::has_waiting_frames() const {
  absl::MutexLock lock(&mu_);
  return !queue_.empty() && !failed_ && !stopping_;
}

uint64_t BulkSender::bytes_sent() const {
  absl::MutexLock lock(&mu_);
  return bytes_sent_;
}

absl::Status BulkSender::Write(const Frame& frame) {
  // Up to IOV_MAX pieces a call: padding from kZeros, then each tensor from its own buffer.
  std::vector<iovec> iov;
  iov.reserve(2 * frame.tensors.size() + 1 + frame.header.size());
  if (!frame.header.empty()) {  // in-band headers: the length and the frame first
    iov.push_back({const_cast<char*>(frame.length), sizeof(frame.length)});
    for (const grpc::Slice& slice : frame.header) {
      iov.push_back({const_cast<uint8_t*>(slice.begin()), slice.size()});
    }
  }
  size_t end = 0;
  for (size_t i = 0; i < frame.tensors.size(); ++i) {
    const size_t pad = frame.at[i] - end;
    if (pad > 0) iov.push_back({const_cast<char*>(kZeros), pad});
    const Tensor& t = frame.tensors[i];
    iov.push_back({const_cast<void*>(t.raw_data()), t.byte_size()});
    end = frame.at[i] + t.byte_size();
  }
  size_t first = 0;
  while (first < iov.size()) {
    msghdr msg{};
    msg.msg_iov = iov.data() + first;
    msg.msg_iovlen = std::min<size_t>(iov.size() - first, IOV_MAX);
    std::vector<iovec> cut;  // fault tests: the pieces up to the fault, the last one trimmed
    const uint64_t fault_at = cut_after_bytes_ > 0 ? cut_after_bytes_ : stall_after_bytes_;
    if (fault_at > 0) {
      uint64_t sent = 0;
      {
        absl::MutexLock lock(&mu_);
        sent = bytes_sent_;
      }
      if (sent >= fault_at && cut_after_bytes_ > 0) {
        shutdown(socket_.get(), SHUT_RDWR);  // the fault, in the middle of a frame
      } else if (sent >= fault_at) {
        Stall();  // until destroyed
        return absl::CancelledError("bulk channel: the sender stopped (stalled by a test)");
      } else {
        size_t room = fault_at - sent;
        for (size_t k = 0; k < msg.msg_iovlen && room > 0; ++k) {
          cut.push_back(msg.msg_iov[k]);
          cut.back().iov_len = std::min(room, cut.back().iov_len);
          room -= cut.back().iov_len;
        }
        msg.msg_iov = cut.data();
        msg.msg_iovlen = cut.size();
      }
    }
    const ssize_t n = sendmsg(socket_.get(), &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return absl::UnavailableError(
            "bulk channel: the consumer read nothing within the write timeout");
      }
      if (errno == EPIPE || errno == ECONNRESET) {
        // The consumer closed its end: it left, or its call ended (a step count reached, a
        // cancel, a crash). Its call ends too; nothing is lost (exactly once as any broken call).
        return absl::CancelledError(absl::StrCat("bulk channel: the consumer closed its socket (",
                                                 std::strerror(errno), ")"));
      }
      return absl::UnavailableError(
          absl::StrCat("bulk channel: writing to the consumer: ", std::strerror(errno)));
    }
    size_t left = static_cast<size_t>(n);
    {
      absl::MutexLock lock(&mu_);
      bytes_sent_ += left;
    }
    ProcessCounts().bytes_sent.fetch_add(static_cast<int64_t>(left));
    while (left > 0 && first < iov.size()) {
      if (left >= iov[first].iov_len) {
        left -= iov[first].iov_len;
        ++first;
      } else {
        iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
        iov[first].iov_len -= left;
        left = 0;
      }
    }
  }
  ProcessCounts().frames_sent.fetch_add(1);
  return absl::OkStatus();
}

void BulkSender::Stall() {
  ProcessCounts().senders_stalled.fetch_add(1);
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](BulkSender* s) ABSL_NO_THREAD_SAFETY_ANALYSIS { return s->stopping_; }, this));
  ProcessCounts().senders_stalled.fetch_sub(1);
}

void BulkSender::Loop() {
  for (;;) {
    Frame frame;
    std::function<void()> ready;
    {
      absl::MutexLock lock(&mu_);
      TimedWait(&ProcessCounts().sender_idle_ns, [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        mu_.Await(absl::Condition(
            +[](BulkSender* s) ABSL_NO_THREAD_SAFETY_ANALYSIS {
              return s->stopping_ || !s->queue_.empty();
            },
            this));
      });
      if (stopping_) return;
      frame = std::move(queue_.front());
      queue_.pop_front();
      if (queue_.empty()) ready.swap(on_none_waiting_);
    }
    if (ready) ready();  // the stream may cut its next frame now, while this one is written
    absl::Status s = Write(frame);
    if (!s.ok()) {
      std::function<void()> waiter;
      {
        absl::MutexLock lock(&mu_);
        failed_ = true;
        queue_.clear();
        waiter.swap(on_none_waiting_);
        if (stopping_) return;
      }
      if (waiter) waiter();
      if (on_error_) on_error_(s);
      return;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// BulkReceiver

absl::StatusOr<std::unique_ptr<BulkReceiver>> BulkReceiver::Connect(
    const std::string& worker_address, uint32_t port, const std::string& token,
    absl::Duration connect_timeout, absl::Duration receive_timeout) {
  if (port == 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("bulk channel: bad data port ", port));
  }
  if (token.size() != kBulkTokenBytes) {
    return absl::InvalidArgumentError(absl::StrCat("bulk channel: a token of ", token.size(),
                                                   " bytes, not ", kBulkTokenBytes));
  }
  absl::StatusOr<std::string> host = BulkHostOf(worker_address);
  if (!host.ok()) return host.status();
  const std::string where = absl::StrCat(*host, ":", port);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host->c_str(), std::to_string(port).c_str(), &hints, &found) != 0 ||
      found == nullptr) {
    return absl::UnavailableError(absl::StrCat("bulk channel: cannot resolve ", where));
  }
  const absl::Time deadline = absl::Now() + connect_timeout;
  absl::Status last = absl::UnavailableError(absl::StrCat("bulk channel: cannot reach ", where));
  UniqueFd socket;
  for (addrinfo* ai = found; ai != nullptr && socket.get() < 0; ai = ai->ai_next) {
    UniqueFd s(::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (s.get() < 0) continue;
    if (connect(s.get(), ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
      last = absl::UnavailableError(
          absl::StrCat("bulk channel: connecting to ", where, ": ", std::strerror(errno)));
      continue;
    }
    pollfd p{s.get(), POLLOUT, 0};
    const int ms = static_cast<int>(
        std::max<int64_t>(absl::ToInt64Milliseconds(deadline - absl::Now()), 0));
    int error = 0;
    socklen_t len = sizeof(error);
    if (poll(&p, 1, ms) != 1 ||
        getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &error, &len) != 0 || error != 0) {
      last = absl::UnavailableError(absl::StrCat(
          "bulk channel: connecting to ", where, ": ",
          error != 0 ? std::strerror(error) : "no answer within the connect timeout"));
      continue;
    }
    socket = std::move(s);
  }
  freeaddrinfo(found);
  if (socket.get() < 0) return last;
  SetBlocking(socket.get(), true);
  TuneSocket(socket.get());
  const absl::Duration left = std::max(deadline - absl::Now(), absl::Milliseconds(1));
  SetTimeout(socket.get(), SO_SNDTIMEO, left);
  SetTimeout(socket.get(), SO_RCVTIMEO, left);
  const std::string hello = absl::StrCat(absl::string_view(kBulkMagic, 4), token);
  char answer = 0;
  if (send(socket.get(), hello.data(), hello.size(), MSG_NOSIGNAL) !=
          static_cast<ssize_t>(hello.size()) ||
      recv(socket.get(), &answer, 1, MSG_WAITALL) != 1 || answer != 1) {
    // Reached, but refused (a stream that ended meanwhile withdrew its token): ABORTED, not
    // a port that cannot be reached.
    return absl::AbortedError(
        absl::StrCat("bulk channel: the worker at ", where, " did not accept the token"));
  }
  SetTimeout(socket.get(), SO_RCVTIMEO, receive_timeout);
  return std::unique_ptr<BulkReceiver>(new BulkReceiver(std::move(socket), where));
}

absl::Status BulkReceiver::ReceiveExactly(char* to, size_t bytes, absl::string_view what,
                                          size_t* got) {
  while (*got < bytes) {
    const ssize_t n = recv(socket_.get(), to + *got, bytes - *got, MSG_WAITALL);
    if (n > 0) {
      *got += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return absl::UnavailableError(absl::StrCat(
        "bulk channel from ", where_, ": ",
        n == 0 ? "the socket ended"
               : (errno == EAGAIN || errno == EWOULDBLOCK ? "no byte within the receive timeout"
                                                          : std::strerror(errno)),
        " after ", *got, " of ", what, " ", bytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<TensorBuffer>> BulkReceiver::Receive(
    size_t bytes, const TensorAllocator& allocator) {
  std::shared_ptr<TensorBuffer> buffer =
      allocator ? allocator(bytes) : AllocateUninitializedHost(bytes);
  if (buffer == nullptr || buffer->data() == nullptr || buffer->size() < bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("bulk channel: cannot allocate ", bytes, " bytes"));
  }
  size_t got = 0;
  RETURN_IF_ERROR(
      ReceiveExactly(static_cast<char*>(buffer->data()), bytes, "a frame's", &got));
  bytes_received_ += bytes;
  if (!inband_) ProcessCounts().frames_received.fetch_add(1);  // else counted with its header
  ProcessCounts().bytes_received.fetch_add(static_cast<int64_t>(bytes));
  return buffer;
}

absl::Status BulkReceiver::ReceiveFrame(size_t max_bytes, const std::function<bool()>& give_up,
                                        grpc::ByteBuffer* out) {
  // The first byte: between frames, with no bound of its own but give_up.
  unsigned char length[4];
  for (;;) {
    const ssize_t n = recv(socket_.get(), length, 1, 0);
    if (n == 1) break;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && !give_up()) continue;
    if (n == 0) {
      return absl::OutOfRangeError(
          absl::StrCat("bulk channel from ", where_, ": the socket ended"));
    }
    return absl::UnavailableError(absl::StrCat(
        "bulk channel from ", where_, ": ",
        n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)
            ? "no frame within the receive timeout, and the call has ended"
            : std::strerror(errno)));
  }
  size_t got = 1;
  RETURN_IF_ERROR(ReceiveExactly(reinterpret_cast<char*>(length), sizeof(length),
                                 "a frame length's", &got));
  const size_t bytes = size_t{length[0]} | size_t{length[1]} << 8 | size_t{length[2]} << 16 |
                       size_t{length[3]} << 24;
  if (bytes == 0 || bytes > max_bytes) {
    return absl::DataLossError(absl::StrCat("bulk channel from ", where_, ": a frame of ", bytes,
                                            " bytes (at most ", max_bytes, ")"));
  }
  // Written through `owned` itself: a small slice holds its bytes inline, in the object.
  grpc::Slice owned(grpc_slice_malloc(bytes), grpc::Slice::STEAL_REF);
  got = 0;
  RETURN_IF_ERROR(ReceiveExactly(reinterpret_cast<char*>(const_cast<uint8_t*>(owned.begin())),
                                 bytes, "a frame header's", &got));
  *out = grpc::ByteBuffer(&owned, 1);
  inband_ = true;
  bytes_received_ += sizeof(length) + bytes;
  ProcessCounts().frames_received.fetch_add(1);
  ProcessCounts().inband_frames_received.fetch_add(1);
  ProcessCounts().bytes_received.fetch_add(static_cast<int64_t>(sizeof(length) + bytes));
  return absl::OkStatus();
}

void BulkReceiver::Abort() { shutdown(socket_.get(), SHUT_RDWR); }

// ---------------------------------------------------------------------------------------------
// BulkReceiveThread

absl::StatusOr<std::unique_ptr<BulkReceiveThread>> BulkReceiveThread::Create(
    absl::string_view what) {
  std::unique_ptr<BulkReceiveThread> t(new BulkReceiveThread());
  BulkReceiveThread* raw = t.get();
  ASSIGN_OR_RETURN(t->thread_,
                   NamedThread("sluice-bulk-rx", absl::StrCat("the bulk receiver of ", what),
                               &ProcessCounts().receiver_cpu_ns,
                               &ProcessCounts().receiver_wall_ns,
                               &ProcessCounts().receiver_switches, [raw] { raw->Loop(); }));
  return t;
}

BulkReceiveThread::~BulkReceiveThread() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();  // not when Create failed
}

void BulkReceiveThread::Run(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  tasks_.push_back(std::move(task));
}

void BulkReceiveThread::Loop() {
  for (;;) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      TimedWait(&ProcessCounts().receiver_idle_ns, [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        mu_.Await(absl::Condition(
            +[](BulkReceiveThread* t) ABSL_NO_THREAD_SAFETY_ANALYSIS {
              return t->stopping_ || !t->tasks_.empty();
            },
            this));
      });
      if (tasks_.empty()) return;  // stopping, and nothing left to run
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace sluice
