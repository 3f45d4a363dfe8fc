// LoopbackHttpServer: a tiny HTTP server on 127.0.0.1 (port 0) for tests of the real curl
// transport, counting the connections it accepts. It answers every request with one canned
// response: by default 200 with `body` (HEAD without it, Range ignored), or `raw_response` as
// given (a redirect, say). Serving is bounded (64 connections, 10000 polls of 50 ms).
//
// Thread safety: port() and connections() may be called from any thread.
#ifndef SLUICE_TESTS_CORE_LOOPBACK_HTTP_SERVER_H_
#define SLUICE_TESTS_CORE_LOOPBACK_HTTP_SERVER_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace sluice {
namespace testing_util {

class LoopbackHttpServer {
 public:
  explicit LoopbackHttpServer(std::string body, std::string raw_response = "")
      : body_(std::move(body)), raw_response_(std::move(raw_response)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), len) != 0 ||
        ::listen(fd_, 16) != 0 || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ADD_FAILURE() << "cannot listen on 127.0.0.1";
      return;
    }
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~LoopbackHttpServer() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) ::close(fd_);
  }
  LoopbackHttpServer(const LoopbackHttpServer&) = delete;
  LoopbackHttpServer& operator=(const LoopbackHttpServer&) = delete;

  int port() const { return port_; }
  int connections() const { return connections_; }

 private:
  void Serve() {
    for (int i = 0; i < 10000 && !stop_ && connections_ < 64; ++i) {
      pollfd p = {fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) != 1) continue;
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      ++connections_;
      std::string request;
      char buf[4096];
      for (int reads = 0; reads < 100 && request.find("\r\n\r\n") == std::string::npos;
           ++reads) {
        pollfd q = {c, POLLIN, 0};
        if (::poll(&q, 1, 1000) != 1) break;
        const ssize_t n = ::read(c, buf, sizeof(buf));
        if (n <= 0) break;
        request.append(buf, static_cast<size_t>(n));
      }
      std::string response = raw_response_;
      if (response.empty()) {
        response = absl::StrCat("HTTP/1.1 200 OK\r\nContent-Length: ", body_.size(),
                                "\r\nConnection: close\r\n\r\n");
        if (!absl::StartsWith(request, "HEAD ")) response += body_;
      }
      (void)!::write(c, response.data(), response.size());
      ::close(c);
    }
  }

  const std::string body_;
  const std::string raw_response_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::thread thread_;
};

}  // namespace testing_util
}  // namespace sluice

#endif  // SLUICE_TESTS_CORE_LOOPBACK_HTTP_SERVER_H_
