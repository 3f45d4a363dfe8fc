#include "client/cpu_collective.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/util/backoff.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

constexpr uint32_t kMagic = 0x43434c53;  // "SLCC" little-endian
constexpr uint32_t kOpAllReduce = 1;
constexpr uint32_t kOpBroadcast = 2;
constexpr uint32_t kOpBarrier = 3;
constexpr uint32_t kOpAbort = 4;
// Larger frames are taken as garbage (a stray connection, a bug) rather than allocated.
constexpr uint64_t kMaxFrameBytes = uint64_t{1} << 40;

const char* OpName(uint32_t op) {
  switch (op) {
    case kOpAllReduce: return "AllReduceSum";
    case kOpBroadcast: return "Broadcast";
    case kOpBarrier: return "Barrier";
    case kOpAbort: return "Abort";
  }
  return "unknown op";
}

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t GetU32(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t GetU64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

int RemainingMs(absl::Time deadline) {
  absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  int64_t ms = absl::ToInt64Milliseconds(left) + 1;
  return static_cast<int>(std::min<int64_t>(ms, 1 << 30));
}

absl::Status SetNonBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    return absl::InternalError(absl::StrCat("fcntl(O_NONBLOCK): ", strerror(errno)));
  }
  return absl::OkStatus();
}

void SetNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

absl::Status PeerGone(const std::string& peer, const std::string& why) {
  return absl::UnavailableError(absl::StrCat("collective peer ", peer, " is gone: ", why));
}

absl::Status SendAll(int fd, const char* data, size_t n, absl::Time deadline,
                     const std::string& peer) {
  while (n > 0) {
    ssize_t w = send(fd, data, n, MSG_NOSIGNAL);
    if (w > 0) {
      data += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      return PeerGone(peer, absl::StrCat("send: ", strerror(errno)));
    }
    pollfd p{fd, POLLOUT, 0};
    int r = poll(&p, 1, RemainingMs(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) {
      return absl::DeadlineExceededError(
          absl::StrCat("collective peer ", peer, " did not take our data before the deadline"));
    }
  }
  return absl::OkStatus();
}

absl::Status RecvAll(int fd, char* data, size_t n, absl::Time deadline, const std::string& peer) {
  while (n > 0) {
    ssize_t r = recv(fd, data, n, 0);
    if (r > 0) {
      data += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    if (r == 0) return PeerGone(peer, "connection closed");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return PeerGone(peer, absl::StrCat("recv: ", strerror(errno)));
    }
    pollfd p{fd, POLLIN, 0};
    int pr = poll(&p, 1, RemainingMs(deadline));
    if (pr < 0 && errno == EINTR) continue;
    if (pr == 0) {
      return absl::DeadlineExceededError(
          absl::StrCat("collective peer ", peer, " did not answer before the deadline"));
    }
  }
  return absl::OkStatus();
}

absl::Status SendFrame(int fd, uint32_t op, uint64_t seq, const char* payload, size_t n,
                       absl::Time deadline, const std::string& peer) {
  std::string header;
  PutU32(&header, kMagic);
  PutU32(&header, op);
  PutU64(&header, seq);
  PutU64(&header, n);
  RETURN_IF_ERROR(SendAll(fd, header.data(), header.size(), deadline, peer));
  return SendAll(fd, payload, n, deadline, peer);
}

// Receives one frame of `op` number `seq` into *payload. An Abort frame from rank 0 becomes
// UNAVAILABLE with its text.
absl::Status RecvFrame(int fd, uint32_t op, uint64_t seq, std::string* payload,
                       absl::Time deadline, const std::string& peer) {
  unsigned char header[24];
  RETURN_IF_ERROR(RecvAll(fd, reinterpret_cast<char*>(header), sizeof(header), deadline, peer));
  uint32_t magic = GetU32(header);
  uint32_t got_op = GetU32(header + 4);
  uint64_t got_seq = GetU64(header + 8);
  uint64_t len = GetU64(header + 16);
  if (magic != kMagic || len > kMaxFrameBytes) {
    return absl::DataLossError(absl::StrCat("collective peer ", peer, " sent a malformed frame"));
  }
  payload->resize(len);
  RETURN_IF_ERROR(RecvAll(fd, payload->data(), len, deadline, peer));
  if (got_op == kOpAbort) {
    return absl::UnavailableError(absl::StrCat("collective aborted by ", peer, ": ", *payload));
  }
  if (got_op != op || got_seq != seq) {
    return absl::FailedPreconditionError(absl::StrCat(
        "collective ranks disagree: this rank is in ", OpName(op), " #", seq, " but ", peer,
        " sent ", OpName(got_op), " #", got_seq));
  }
  return absl::OkStatus();
}

struct HostPort {
  std::string host;
  std::string port;
};

absl::StatusOr<HostPort> SplitAddress(const std::string& address) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 == address.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("collective address \"", address, "\" is not host:port"));
  }
  HostPort hp{address.substr(0, colon), address.substr(colon + 1)};
  if (hp.host.size() >= 2 && hp.host.front() == '[' && hp.host.back() == ']') {
    hp.host = hp.host.substr(1, hp.host.size() - 2);
  }
  int port = 0;
  if (!absl::SimpleAtoi(hp.port, &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("collective address \"", address, "\" has a bad port"));
  }
  return hp;
}

std::string SockAddrString(const sockaddr_storage& ss) {
  char host[NI_MAXHOST];
  char port[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&ss), sizeof(ss), host, sizeof(host), port,
                  sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "?";
  }
  return absl::StrCat(host, ":", port);
}

}  // namespace

CpuCollective::CpuCollective(CpuCollectiveOptions options) : options_(std::move(options)) {}

CpuCollective::~CpuCollective() {
  for (Peer& p : peers_) {
    if (p.fd >= 0) close(p.fd);
  }
}

absl::StatusOr<std::unique_ptr<CpuCollective>> CpuCollective::Create(
    CpuCollectiveOptions options) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(absl::StrCat("collective rank ", options.rank,
                                                   " is not in a group of size ", options.size));
  }
  if (options.size > 1 && options.address.empty()) {
    return absl::InvalidArgumentError("collective address is required when size > 1");
  }
  std::unique_ptr<CpuCollective> c(new CpuCollective(std::move(options)));
  if (c->options_.size == 1) {
    if (c->options_.rank == 0 && c->options_.on_listening) c->options_.on_listening(0);
    return c;
  }
  if (c->options_.rank == 0) {
    RETURN_IF_ERROR(c->ConnectAsRoot());
  } else {
    RETURN_IF_ERROR(c->ConnectToRoot());
  }
  return c;
}

absl::Status CpuCollective::ConnectAsRoot() {
  ASSIGN_OR_RETURN(HostPort hp, SplitAddress(options_.address));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  int gai = getaddrinfo(hp.host.empty() ? nullptr : hp.host.c_str(), hp.port.c_str(), &hints,
                        &res);
  if (gai != 0) {
    return absl::UnavailableError(absl::StrCat("collective rank 0 cannot resolve \"",
                                               options_.address, "\": ", gai_strerror(gai)));
  }
  int listen_fd = -1;
  std::string last_error = "no address";
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 128) == 0) {
      listen_fd = fd;
      break;
    }
    last_error = strerror(errno);
    close(fd);
  }
  freeaddrinfo(res);
  if (listen_fd < 0) {
    return absl::UnavailableError(absl::StrCat("collective rank 0 cannot listen on \"",
                                               options_.address, "\": ", last_error));
  }
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof(bound);
  getsockname(listen_fd, reinterpret_cast<sockaddr*>(&bound), &bound_len);
  int port = bound.ss_family == AF_INET6
                 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                 : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  if (options_.on_listening) options_.on_listening(port);

  peers_.assign(options_.size, Peer{});
  int connected = 1;
  absl::Time deadline = absl::Now() + options_.connect_timeout;
  absl::Status status;
  while (connected < options_.size) {
    pollfd p{listen_fd, POLLIN, 0};
    int r = poll(&p, 1, RemainingMs(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) {
      std::vector<int> missing;
      for (int i = 1; i < options_.size; ++i) {
        if (peers_[i].fd < 0) missing.push_back(i);
      }
      status = absl::DeadlineExceededError(
          absl::StrCat("collective rank 0 on port ", port, ": ranks ",
                       absl::StrJoin(missing, ", "), " did not connect within ",
                       absl::FormatDuration(options_.connect_timeout)));
      break;
    }
    sockaddr_storage from{};
    socklen_t from_len = sizeof(from);
    int fd = accept4(listen_fd, reinterpret_cast<sockaddr*>(&from), &from_len, SOCK_CLOEXEC);
    if (fd < 0) continue;
    SetNoDelay(fd);
    if (!SetNonBlocking(fd).ok()) {
      close(fd);
      continue;
    }
    std::string who = absl::StrCat("connection from ", SockAddrString(from));
    unsigned char hello[12];
    // A connection that never introduces itself must not hold up the group for long.
    absl::Time hello_deadline = std::min(deadline, absl::Now() + absl::Seconds(10));
    if (!RecvAll(fd, reinterpret_cast<char*>(hello), sizeof(hello), hello_deadline, who).ok() ||
        GetU32(hello) != kMagic) {
      close(fd);
      continue;
    }
    int rank = static_cast<int>(GetU32(hello + 4));
    int size = static_cast<int>(GetU32(hello + 8));
    std::string reject;
    if (size != options_.size) {
      reject = absl::StrCat("rank ", rank, " says the group has ", size,
                            " ranks; rank 0 says ", options_.size);
    } else if (rank < 1 || rank >= options_.size) {
      reject = absl::StrCat("rank ", rank, " is not in a group of size ", options_.size);
    } else if (peers_[rank].fd >= 0) {
      reject = absl::StrCat("rank ", rank, " is already connected (from ", peers_[rank].name,
                            ")");
    }
    std::string ack;
    PutU32(&ack, kMagic);
    PutU32(&ack, static_cast<uint32_t>(reject.size()));
    ack += reject;
    std::string name = absl::StrCat("rank ", rank, " (", SockAddrString(from), ")");
    absl::Status sent = SendAll(fd, ack.data(), ack.size(), hello_deadline, name);
    if (!reject.empty() || !sent.ok()) {
      close(fd);
      continue;
    }
    peers_[rank] = Peer{fd, name};
    ++connected;
  }
  close(listen_fd);
  if (!status.ok()) return Fail(status);
  return absl::OkStatus();
}

absl::Status CpuCollective::ConnectToRoot() {
  ASSIGN_OR_RETURN(HostPort hp, SplitAddress(options_.address));
  std::string name = absl::StrCat("rank 0 (", options_.address, ")");
  absl::Time deadline = absl::Now() + options_.connect_timeout;
  Backoff backoff(absl::Milliseconds(20), absl::Milliseconds(500));
  std::string last_error;
  while (true) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    int gai = getaddrinfo(hp.host.c_str(), hp.port.c_str(), &hints, &res);
    int fd = -1;
    if (gai != 0) {
      last_error = gai_strerror(gai);
    } else {
      for (addrinfo* ai = res; ai != nullptr && fd < 0; ai = ai->ai_next) {
        int s = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (s < 0) continue;
        if (connect(s, ai->ai_addr, ai->ai_addrlen) == 0) {
          fd = s;
        } else {
          last_error = strerror(errno);
          close(s);
        }
      }
      freeaddrinfo(res);
    }
    if (fd >= 0) {
      SetNoDelay(fd);
      RETURN_IF_ERROR(SetNonBlocking(fd));
      std::string hello;
      PutU32(&hello, kMagic);
      PutU32(&hello, static_cast<uint32_t>(options_.rank));
      PutU32(&hello, static_cast<uint32_t>(options_.size));
      absl::Status s = SendAll(fd, hello.data(), hello.size(), deadline, name);
      unsigned char ack[8];
      if (s.ok()) s = RecvAll(fd, reinterpret_cast<char*>(ack), sizeof(ack), deadline, name);
      if (s.ok() && GetU32(ack) != kMagic) {
        s = absl::DataLossError(absl::StrCat(name, " is not a Sluice collective"));
      }
      if (s.ok() && GetU32(ack + 4) != 0) {
        std::string why(std::min<uint32_t>(GetU32(ack + 4), 1 << 16), '\0');
        RecvAll(fd, why.data(), why.size(), deadline, name).IgnoreError();
        close(fd);
        return absl::FailedPreconditionError(
            absl::StrCat("collective ", name, " rejected rank ", options_.rank, ": ", why));
      }
      if (!s.ok()) {
        close(fd);
        return s;
      }
      peers_.push_back(Peer{fd, name});
      return absl::OkStatus();
    }
    const absl::Duration wait = backoff.Next();
    if (absl::Now() + wait >= deadline) {
      return absl::UnavailableError(absl::StrCat("collective rank ", options_.rank,
                                                 " could not reach ", name, " within ",
                                                 absl::FormatDuration(options_.connect_timeout),
                                                 ": ", last_error));
    }
    absl::SleepFor(wait);
  }
}

absl::Status CpuCollective::Fail(absl::Status status) {
  if (broken_.ok()) broken_ = status;
  if (options_.rank == 0) {
    std::string text(status.message());
    absl::Time deadline = absl::Now() + absl::Seconds(1);
    for (size_t r = 1; r < peers_.size(); ++r) {
      if (peers_[r].fd < 0) continue;
      SendFrame(peers_[r].fd, kOpAbort, sequence_, text.data(), text.size(), deadline,
                peers_[r].name)
          .IgnoreError();
    }
  }
  for (Peer& p : peers_) {
    if (p.fd >= 0) close(p.fd);
    p.fd = -1;
  }
  return broken_;
}

absl::Status CpuCollective::Reduce(uint32_t op, std::span<int64_t> values) {
  const uint64_t seq = sequence_++;
  const size_t bytes = values.size() * sizeof(int64_t);
  absl::Time deadline = absl::Now() + options_.op_timeout;
  std::string payload;
  if (options_.rank != 0) {
    std::string out(bytes, '\0');
    for (size_t i = 0; i < values.size(); ++i) {
      uint64_t v = static_cast<uint64_t>(values[i]);
      for (int b = 0; b < 8; ++b) out[8 * i + b] = static_cast<char>((v >> (8 * b)) & 0xff);
    }
    const Peer& root = peers_[0];
    absl::Status s = SendFrame(root.fd, op, seq, out.data(), out.size(), deadline, root.name);
    if (s.ok()) s = RecvFrame(root.fd, op, seq, &payload, deadline, root.name);
    if (s.ok() && payload.size() != bytes) {
      s = absl::FailedPreconditionError(absl::StrCat("collective ", OpName(op), ": ", root.name,
                                                     " sent ", payload.size() / 8,
                                                     " values, this rank has ", values.size()));
    }
    if (!s.ok()) return Fail(s);
    for (size_t i = 0; i < values.size(); ++i) {
      values[i] = static_cast<int64_t>(
          GetU64(reinterpret_cast<const unsigned char*>(payload.data()) + 8 * i));
    }
    return absl::OkStatus();
  }
  for (int r = 1; r < options_.size; ++r) {
    const Peer& peer = peers_[r];
    absl::Status s = RecvFrame(peer.fd, op, seq, &payload, deadline, peer.name);
    if (s.ok() && payload.size() != bytes) {
      s = absl::FailedPreconditionError(absl::StrCat(
          "collective ", OpName(op), ": ", peer.name, " sent ", payload.size() / 8,
          " values, rank 0 has ", values.size()));
    }
    if (!s.ok()) return Fail(s);
    for (size_t i = 0; i < values.size(); ++i) {
      values[i] += static_cast<int64_t>(
          GetU64(reinterpret_cast<const unsigned char*>(payload.data()) + 8 * i));
    }
  }
  std::string out(bytes, '\0');
  for (size_t i = 0; i < values.size(); ++i) {
    uint64_t v = static_cast<uint64_t>(values[i]);
    for (int b = 0; b < 8; ++b) out[8 * i + b] = static_cast<char>((v >> (8 * b)) & 0xff);
  }
  for (int r = 1; r < options_.size; ++r) {
    absl::Status s =
        SendFrame(peers_[r].fd, op, seq, out.data(), out.size(), deadline, peers_[r].name);
    if (!s.ok()) return Fail(s);
  }
  return absl::OkStatus();
}

absl::Status CpuCollective::AllReduceSum(std::span<int64_t> values) {
  RETURN_IF_ERROR(broken_);
  if (options_.size == 1) return absl::OkStatus();
  return Reduce(kOpAllReduce, values);
}

absl::Status CpuCollective::Barrier() {
  RETURN_IF_ERROR(broken_);
  if (options_.size == 1) return absl::OkStatus();
  return Reduce(kOpBarrier, {});
}

absl::Status CpuCollective::Broadcast(int root, std::string* bytes) {
  RETURN_IF_ERROR(broken_);
  if (root < 0 || root >= options_.size) {
    return absl::InvalidArgumentError(absl::StrCat("collective Broadcast root ", root,
                                                   " is not in a group of size ", options_.size));
  }
  if (options_.size == 1) return absl::OkStatus();
  const uint64_t seq = sequence_++;
  absl::Time deadline = absl::Now() + options_.op_timeout;
  absl::Status s;
  if (options_.rank != 0) {
    const Peer& p = peers_[0];
    if (options_.rank == root) {
      s = SendFrame(p.fd, kOpBroadcast, seq, bytes->data(), bytes->size(), deadline, p.name);
    } else {
      s = RecvFrame(p.fd, kOpBroadcast, seq, bytes, deadline, p.name);
    }
    return s.ok() ? s : Fail(s);
  }
  if (root != 0) {
    s = RecvFrame(peers_[root].fd, kOpBroadcast, seq, bytes, deadline, peers_[root].name);
    if (!s.ok()) return Fail(s);
  }
  for (int r = 1; r < options_.size; ++r) {
    if (r == root) continue;
    s = SendFrame(peers_[r].fd, kOpBroadcast, seq, bytes->data(), bytes->size(), deadline,
                  peers_[r].name);
    if (!s.ok()) return Fail(s);
  }
  return absl::OkStatus();
}

}  // namespace sluice
