// Remote reads are opt-in, through the real sluicectl binary and libcurl: a pipeline run in
// process that names an HTTP server on loopback fails with PERMISSION_DENIED and the server sees
// no connection at all; the same pipeline with `--data_root=http://127.0.0.1:PORT/` reads it.
// The only server is this test's, on 127.0.0.1; nothing else is contacted.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/examples/subprocess.h"
#include "tests/examples/test_paths.h"

namespace sluice {
namespace {

// A one-file HTTP server on 127.0.0.1 that counts the connections it accepts. Answers HEAD and
// GET (ignoring Range: the whole body, status 200) and closes each connection.
class TinyHttpServer {
 public:
  explicit TinyHttpServer(std::string body) : body_(std::move(body)) {
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
  ~TinyHttpServer() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) ::close(fd_);
  }
  int port() const { return port_; }
  int connections() const { return connections_; }

 private:
  void Serve() {
    // Bounded: at most 10000 polls of 50 ms and 64 connections.
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
      std::string response = absl::StrCat("HTTP/1.1 200 OK\r\nContent-Length: ", body_.size(),
                                           "\r\nConnection: close\r\n\r\n");
      if (!absl::StartsWith(request, "HEAD ")) response += body_;
      (void)!::write(c, response.data(), response.size());
      ::close(c);
    }
  }

  const std::string body_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::thread thread_;
};

SubprocessResult Sluicectl(std::vector<std::string> args) {
  args.insert(args.begin(), BuildPath("bin/sluicectl"));
  absl::StatusOr<SubprocessResult> r = RunSubprocess(args, {.timeout = absl::Seconds(120)});
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : SubprocessResult();
}

TEST(RemoteReadsProcessTest, LoopbackHttpIsRefusedBeforeConnectingUnlessARootNamesIt) {
  TinyHttpServer server("alpha\nbeta\n");
  ASSERT_NE(server.port(), 0);
  const std::string url = absl::StrCat("http://127.0.0.1:", server.port(), "/lines.txt");
  const std::string pipeline = absl::StrCat("--pipeline=text_line_dataset(['", url, "'])");

  SubprocessResult refused = Sluicectl({"run", pipeline, "--devices=CPU:0", "--format=json"});
  EXPECT_NE(refused.exit_code, 0) << refused.stdout_text;
  EXPECT_TRUE(absl::StrContains(refused.stderr_text, "PERMISSION_DENIED") ||
              absl::StrContains(refused.stderr_text, "refused"))
      << refused.stderr_text;
  EXPECT_TRUE(absl::StrContains(refused.stderr_text, "loopback")) << refused.stderr_text;
  EXPECT_TRUE(absl::StrContains(
      refused.stderr_text, absl::StrCat("--data_root=http://127.0.0.1:", server.port(), "/")))
      << refused.stderr_text;
  // The numeric spelling of the same address is refused the same way.
  SubprocessResult numeric = Sluicectl(
      {"run", absl::StrCat("--pipeline=text_line_dataset(['http://2130706433:", server.port(),
                           "/lines.txt'])"),
       "--devices=CPU:0", "--format=json"});
  EXPECT_NE(numeric.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(numeric.stderr_text, "loopback")) << numeric.stderr_text;
  EXPECT_EQ(server.connections(), 0) << "a refused URL reached the server";

  SubprocessResult allowed =
      Sluicectl({"run", pipeline, "--devices=CPU:0", "--format=json",
                 absl::StrCat("--data_root=http://127.0.0.1:", server.port(), "/")});
  ASSERT_EQ(allowed.exit_code, 0) << allowed.Describe() << "\n" << allowed.stderr_text;
  EXPECT_TRUE(absl::StrContains(allowed.stdout_text, "alpha")) << allowed.stdout_text;
  EXPECT_TRUE(absl::StrContains(allowed.stdout_text, "beta")) << allowed.stdout_text;
  EXPECT_GT(server.connections(), 0);
}

}  // namespace
}  // namespace sluice
