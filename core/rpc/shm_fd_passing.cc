#include "core/rpc/shm_fd_passing.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/util/start_thread.h"

namespace sluice {
namespace {

absl::Status Errno(const char* call) {
  return absl::InternalError(absl::StrCat("shared memory socket: ", call, ": ",
                                          std::strerror(errno)));
}

// The abstract address of `name`: a leading NUL, then the name (no terminator).
bool AbstractAddress(const std::string& name, sockaddr_un* addr, socklen_t* len) {
  std::memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  if (name.empty() || name.size() + 1 > sizeof(addr->sun_path)) return false;
  std::memcpy(addr->sun_path + 1, name.data(), name.size());
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return true;
}

void SetTimeouts(int fd, absl::Duration timeout) {
  timeval tv = absl::ToTimeval(std::max(timeout, absl::Milliseconds(1)));
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

std::string RandomBytes(size_t n) {
  thread_local absl::BitGen gen;
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(absl::Uniform<uint8_t>(gen));
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShmFdServer>> ShmFdServer::Create(size_t max_offers,
                                                                 absl::Duration io_timeout) {
  UniqueFd listener(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (listener.get() < 0) return Errno("socket");
  const std::string name = absl::StrCat(kShmSocketPrefix, getpid(), "-",
                                        absl::BytesToHexString(RandomBytes(8)));
  sockaddr_un addr;
  socklen_t len = 0;
  AbstractAddress(name, &addr, &len);
  if (bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) return Errno("bind");
  if (listen(listener.get(), 64) != 0) return Errno("listen");
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return Errno("pipe2");
  std::unique_ptr<ShmFdServer> server(new ShmFdServer(std::move(listener), UniqueFd(pipe_fds[0]),
                                                      UniqueFd(pipe_fds[1]), name,
                                                      std::max<size_t>(max_offers, 1),
                                                      io_timeout));
  ShmFdServer* raw = server.get();
  absl::StatusOr<std::thread> thread =
      StartThread("the shared-memory descriptor server", [raw] { raw->Loop(); });
  if (!thread.ok()) return thread.status();
  server->thread_ = *std::move(thread);
  return server;
}

ShmFdServer::ShmFdServer(UniqueFd listener, UniqueFd wake_read, UniqueFd wake_write,
                         std::string name, size_t max_offers, absl::Duration io_timeout)
    : listener_(std::move(listener)), wake_read_(std::move(wake_read)),
      wake_write_(std::move(wake_write)), name_(std::move(name)), max_offers_(max_offers),
      io_timeout_(io_timeout) {}

ShmFdServer::~ShmFdServer() {
  if (!thread_.joinable()) return;  // Create failed
  char b = 0;
  while (write(wake_write_.get(), &b, 1) < 0 && errno == EINTR) {
  }
  thread_.join();
}

std::string ShmFdServer::Offer(std::shared_ptr<ShmSegment> segment,
                               std::function<void(int pid)> on_taken) {
  std::string token = RandomBytes(kShmTokenBytes);
  absl::MutexLock lock(&mu_);
  while (offers_.size() >= max_offers_ && !order_.empty()) {
    offers_.erase(order_.front());
    order_.pop_front();
  }
  offers_[token] = Pending{std::move(segment), std::move(on_taken)};
  order_.push_back(token);
  // Taken and withdrawn tokens stay in order_ until popped: keep it bounded too.
  while (order_.size() > 2 * max_offers_) {
    offers_.erase(order_.front());
    order_.pop_front();
  }
  return token;
}

void ShmFdServer::Withdraw(const std::string& token) {
  absl::MutexLock lock(&mu_);
  offers_.erase(token);
}

size_t ShmFdServer::pending() const {
  absl::MutexLock lock(&mu_);
  return offers_.size();
}

void ShmFdServer::Loop() {
  pollfd fds[2] = {{listener_.get(), POLLIN, 0}, {wake_read_.get(), POLLIN, 0}};
  while (true) {
    int n = poll(fds, 2, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    if (fds[0].revents == 0) continue;
    int c = accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    Serve(c);
    close(c);
  }
}

void ShmFdServer::Serve(int connection) {
  SetTimeouts(connection, io_timeout_);
  std::string token(kShmTokenBytes, '\0');
  size_t got = 0;
  while (got < token.size()) {
    ssize_t r = read(connection, token.data() + got, token.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return;  // closed early or timed out: no descriptor
    got += static_cast<size_t>(r);
  }
  Pending taken;
  {
    absl::MutexLock lock(&mu_);
    auto it = offers_.find(token);
    if (it == offers_.end()) return;
    taken = std::move(it->second);
    offers_.erase(it);  // one hand-over per token
  }
  const std::shared_ptr<ShmSegment>& segment = taken.segment;
  char byte = 'S';
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* cm = CMSG_FIRSTHDR(&msg);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  const int fd = segment->fd();
  std::memcpy(CMSG_DATA(cm), &fd, sizeof(int));
  ssize_t sent;
  do {
    sent = sendmsg(connection, &msg, MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  if (sent > 0 && taken.on_taken) {
    ucred peer{};
    socklen_t len = sizeof(peer);
    const bool known =
        getsockopt(connection, SOL_SOCKET, SO_PEERCRED, &peer, &len) == 0 && len == sizeof(peer);
    taken.on_taken(known ? static_cast<int>(peer.pid) : 0);
  }
}

absl::StatusOr<UniqueFd> ReceiveShmFd(const std::string& socket_name, const std::string& token,
                                      absl::Duration timeout) {
  sockaddr_un addr;
  socklen_t len = 0;
  if (!absl::StartsWith(socket_name, kShmSocketPrefix) ||
      !AbstractAddress(socket_name, &addr, &len)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory: not a segment socket name: \"",
                     absl::CEscape(socket_name.substr(0, 64)), "\""));
  }
  if (token.size() != kShmTokenBytes) {
    return absl::InvalidArgumentError(absl::StrCat("shared memory: a token of ", token.size(),
                                                   " bytes (", kShmTokenBytes, " expected)"));
  }
  UniqueFd s(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (s.get() < 0) return Errno("socket");
  SetTimeouts(s.get(), timeout);
  if (connect(s.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    return absl::UnavailableError(absl::StrCat("shared memory: cannot reach socket ",
                                               socket_name, ": ", std::strerror(errno)));
  }
  if (send(s.get(), token.data(), token.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(token.size())) {
    return absl::UnavailableError(absl::StrCat("shared memory: cannot write the token to ",
                                               socket_name, ": ", std::strerror(errno)));
  }
  char byte;
  iovec iov{&byte, 1};
  // Room for more than one descriptor, so that extra ones are received (and closed), not left
  // to truncate the message silently.
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t r;
  do {
    r = recvmsg(s.get(), &msg, MSG_CMSG_CLOEXEC);
  } while (r < 0 && errno == EINTR);
  if (r <= 0) {
    return absl::UnavailableError(absl::StrCat("shared memory: no segment from ", socket_name,
                                               r < 0 ? absl::StrCat(": ", std::strerror(errno))
                                                     : std::string(" (closed)")));
  }
  std::vector<UniqueFd> received;
  for (cmsghdr* cm = CMSG_FIRSTHDR(&msg); cm != nullptr; cm = CMSG_NXTHDR(&msg, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
    const size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < n; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
      received.emplace_back(fd);
    }
  }
  if ((msg.msg_flags & MSG_CTRUNC) != 0 || received.size() != 1) {
    return absl::DataLossError(absl::StrCat("shared memory: ", socket_name, " answered with ",
                                            received.size(), " descriptor(s), not one"));
  }
  return std::move(received[0]);
}

}  // namespace sluice
