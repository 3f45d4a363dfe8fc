// The real binaries with mutual TLS, a token and data roots: sluice-coordinator and two
// sluice-worker processes on loopback; `sluicectl run` with the client certificate and token
// reads the job and prints what local mode prints; without the token, or without a client
// certificate, it is refused; a pipeline naming a file outside the data roots is
// PERMISSION_DENIED; every process exits 0 on SIGTERM. Per-role tokens: each binary's flags
// and the role each call needs.
#include <signal.h>
#include <sys/stat.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "tests/ci_environment.h"
#include "tests/examples/subprocess.h"
#include "tests/examples/test_paths.h"
#include "tests/security/test_certs.h"

namespace sluice {
namespace {

// Polls `path` until it holds a port (bounded: 300 x 100 ms).
absl::StatusOr<int> WaitForPort(const std::string& path, Subprocess* process) {
  for (int i = 0; i < 300; ++i) {
    absl::StatusOr<std::string> text = ReadFileToString(path);
    int port = 0;
    if (text.ok() && absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &port) && port > 0) {
      return port;
    }
    if (!process->running()) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return absl::DeadlineExceededError(absl::StrCat("no port in ", path, "; stderr:\n",
                                                  process->stderr_text()));
}

class SecurityProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveOpenssl()) {
      // scripts/test.sh installs openssl: under CI=true its absence fails, not skips.
      if (InCi()) FAIL() << "the openssl command is not installed; CI=true requires it";
      GTEST_SKIP() << "the openssl command is not installed (apt-get install openssl)";
    }
    dir_ = MakeTempDir("sluice-secproc-");
    ASSERT_FALSE(dir_.empty());
    auto certs = MakeTestCerts(dir_);
    ASSERT_TRUE(certs.ok()) << certs.status();
    certs_ = *certs;
    token_file_ = dir_ + "/token";
    ASSERT_TRUE(WriteFile(token_file_, "process-test-token-42\n"));
    ASSERT_TRUE(WriteFile(dir_ + "/wrong-token", "nope\n"));
    data_ = dir_ + "/data";
    ASSERT_EQ(mkdir(data_.c_str(), 0755), 0);
    ASSERT_TRUE(WriteFile(data_ + "/lines.txt", "a\nb\nc\nd\n"));
    ASSERT_TRUE(WriteFile(dir_ + "/outside.txt", "x\ny\n"));

    const std::vector<std::string> security = {
        "--tls_cert=" + certs_.server_cert, "--tls_key=" + certs_.server_key,
        "--tls_ca=" + certs_.ca, "--tls_client_auth", "--token_file=" + token_file_,
        "--data_root=" + data_};
    std::vector<std::string> argv = {BuildPath("bin/sluice-coordinator"), "--port=0",
                                     "--port_file=" + dir_ + "/coordinator.port"};
    argv.insert(argv.end(), security.begin(), security.end());
    auto coordinator = Subprocess::Start(argv);
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    coordinator_ = *std::move(coordinator);
    auto port = WaitForPort(dir_ + "/coordinator.port", coordinator_.get());
    ASSERT_TRUE(port.ok()) << port.status();
    address_ = absl::StrCat("127.0.0.1:", *port);
    for (int i = 0; i < 2; ++i) {
      std::vector<std::string> w = {BuildPath("bin/sluice-worker"), "--coordinator=" + address_,
                                    "--port=0", "--heartbeat_interval=100ms"};
      w.insert(w.end(), security.begin(), security.end());
      auto worker = Subprocess::Start(w);
      ASSERT_TRUE(worker.ok()) << worker.status();
      workers_.push_back(*std::move(worker));
    }
    for (auto& w : workers_) {
      auto line = w->WaitForOutput(SubprocessStream::kStderr, "registered with coordinator",
                                   absl::Seconds(60));
      ASSERT_TRUE(line.ok()) << line.status() << "\ncoordinator:\n"
                             << coordinator_->stderr_text();
    }
  }

  void TearDown() override {
    std::vector<Subprocess*> all;
    for (auto& w : workers_) all.push_back(w.get());
    if (coordinator_ != nullptr) all.push_back(coordinator_.get());
    for (Subprocess* p : all) (void)p->Signal(SIGTERM);
    for (Subprocess* p : all) {
      auto r = p->Wait(absl::Seconds(60));
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->exit_code, 0) << r->Describe() << "\n" << r->stderr_text;
    }
    RemoveTree(dir_);
  }

  SubprocessResult Sluicectl(std::vector<std::string> args) {
    args.insert(args.begin(), BuildPath("bin/sluicectl"));
    auto r = RunSubprocess(args, Timeout(absl::Seconds(120)));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : SubprocessResult();
  }

  std::vector<std::string> ClientFlags() const {
    return {"--coordinator=" + address_, "--tls_ca=" + certs_.ca,
            "--tls_cert=" + certs_.client_cert, "--tls_key=" + certs_.client_key,
            "--token_file=" + token_file_};
  }

  std::string dir_, token_file_, data_, address_;
  TestCerts certs_;
  std::unique_ptr<Subprocess> coordinator_;
  std::vector<std::unique_ptr<Subprocess>> workers_;
};

TEST_F(SecurityProcessTest, TlsTokenAndDataRootsEndToEnd) {
  // Authorized: prints what local mode prints.
  const std::vector<std::string> run = {"run", "--pipeline=range(16).batch(4)",
                                        "--devices=CPU:0,CPU:1", "--format=json",
                                        "--sharding_policy=DATA"};
  SubprocessResult local = Sluicectl({"run", "--pipeline=range(16).batch(4)",
                                      "--devices=CPU:0,CPU:1", "--format=json"});
  ASSERT_EQ(local.exit_code, 0) << local.stderr_text;
  std::vector<std::string> remote_args = run;
  for (const std::string& f : ClientFlags()) remote_args.push_back(f);
  remote_args.push_back("--job=secure");
  SubprocessResult remote = Sluicectl(remote_args);
  ASSERT_EQ(remote.exit_code, 0) << remote.Describe() << "\n" << remote.stderr_text;
  EXPECT_EQ(remote.stdout_text, local.stdout_text);

  // A file under the data roots is read; one outside is PERMISSION_DENIED naming it.
  std::vector<std::string> inside = {"run", "--pipeline=text_line_dataset(['" + data_ +
                                                "/lines.txt']).batch(2)",
                                     "--devices=CPU:0", "--format=json", "--job=inside",
                                     "--sharding_policy=OFF"};
  for (const std::string& f : ClientFlags()) inside.push_back(f);
  SubprocessResult in = Sluicectl(inside);
  EXPECT_EQ(in.exit_code, 0) << in.stderr_text;
  std::vector<std::string> outside = {"run", "--pipeline=text_line_dataset(['" + dir_ +
                                                 "/outside.txt']).batch(2)",
                                      "--devices=CPU:0", "--job=outside"};
  for (const std::string& f : ClientFlags()) outside.push_back(f);
  SubprocessResult out = Sluicectl(outside);
  EXPECT_NE(out.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(out.stderr_text, dir_ + "/outside.txt")) << out.stderr_text;
  EXPECT_TRUE(absl::StrContains(out.stderr_text, "outside the data roots")) << out.stderr_text;

  // Status with everything works; without the token, with a wrong one, or without a client
  // certificate, it is refused.
  std::vector<std::string> status = {"status", "--retry_deadline=2s"};
  for (const std::string& f : ClientFlags()) status.push_back(f);
  SubprocessResult ok = Sluicectl(status);
  EXPECT_EQ(ok.exit_code, 0) << ok.stderr_text;
  SubprocessResult no_token = Sluicectl({"status", "--retry_deadline=2s",
                                         "--coordinator=" + address_, "--tls_ca=" + certs_.ca,
                                         "--tls_cert=" + certs_.client_cert,
                                         "--tls_key=" + certs_.client_key});
  EXPECT_NE(no_token.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(no_token.stderr_text, "missing or invalid token"))
      << no_token.stderr_text;
  SubprocessResult wrong_token = Sluicectl(
      {"status", "--retry_deadline=2s", "--coordinator=" + address_, "--tls_ca=" + certs_.ca,
       "--tls_cert=" + certs_.client_cert, "--tls_key=" + certs_.client_key,
       "--token_file=" + dir_ + "/wrong-token"});
  EXPECT_NE(wrong_token.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(wrong_token.stderr_text, "missing or invalid token"));
  SubprocessResult no_cert =
      Sluicectl({"status", "--retry_deadline=2s", "--coordinator=" + address_,
                 "--tls_ca=" + certs_.ca, "--token_file=" + token_file_});
  EXPECT_NE(no_cert.exit_code, 0) << no_cert.stdout_text;
  SubprocessResult plaintext = Sluicectl({"status", "--retry_deadline=2s",
                                          "--coordinator=" + address_,
                                          "--token_file=" + token_file_});
  EXPECT_NE(plaintext.exit_code, 0) << plaintext.stdout_text;
}

TEST(SecurityFlagsTest, BadSecurityFlagsStopTheServersAtStartUp) {
  const std::string dir = MakeTempDir("sluice-secflags-");
  for (const std::string binary : {"bin/sluice-coordinator", "bin/sluice-worker"}) {
    for (const std::vector<std::string>& flags :
         {std::vector<std::string>{"--tls_cert=" + dir + "/missing.pem",
                                   "--tls_key=" + dir + "/missing.key"},
          std::vector<std::string>{"--token_file=" + dir + "/missing-token"},
          std::vector<std::string>{"--data_root=" + dir + "/no-such-dir"}}) {
      std::vector<std::string> argv = {BuildPath(binary), "--port=0",
                                       "--coordinator=127.0.0.1:1"};
      if (binary == "bin/sluice-coordinator") argv.pop_back();
      argv.insert(argv.end(), flags.begin(), flags.end());
      auto r = RunSubprocess(argv, Timeout(absl::Seconds(60)));
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->exit_code, 2) << binary << " " << absl::StrJoin(flags, " ") << ": "
                                 << r->Describe() << "\n" << r->stderr_text;
      EXPECT_TRUE(absl::StrContains(r->stderr_text, dir)) << r->stderr_text;
    }
  }
  RemoveTree(dir);
}

// Per-role tokens with the real binaries (plaintext on loopback, no openssl needed): the
// coordinator takes --worker/--trainer/--admin_token_file, a worker --worker_token_file (to the
// coordinator) and --trainer_token_file (of its consumers); `sluicectl run` with the trainer
// token reads the job, `sluicectl status` needs the admin token, and a worker given the
// trainer token as its worker token never registers.
TEST(RoleTokensProcessTest, EachBinaryUsesItsRolesToken) {
  const std::string dir = MakeTempDir("sluice-roles-");
  ASSERT_FALSE(dir.empty());
  for (const char* role : {"worker", "trainer", "admin"}) {
    ASSERT_TRUE(WriteFile(absl::StrCat(dir, "/", role, ".token"),
                          absl::StrCat(role, "-process-token-0123456789\n")));
  }
  auto token = [&](const char* role) { return absl::StrCat(dir, "/", role, ".token"); };
  auto coordinator = Subprocess::Start(
      {BuildPath("bin/sluice-coordinator"), "--port=0", "--port_file=" + dir + "/coord.port",
       "--worker_token_file=" + token("worker"), "--trainer_token_file=" + token("trainer"),
       "--admin_token_file=" + token("admin")});
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  auto port = WaitForPort(dir + "/coord.port", coordinator->get());
  ASSERT_TRUE(port.ok()) << port.status();
  const std::string address = absl::StrCat("127.0.0.1:", *port);
  auto start_worker = [&](const char* worker_token) {
    return Subprocess::Start({BuildPath("bin/sluice-worker"), "--coordinator=" + address,
                              "--port=0", "--heartbeat_interval=100ms",
                              "--worker_token_file=" + token(worker_token),
                              "--trainer_token_file=" + token("trainer")});
  };
  auto worker = start_worker("worker");
  ASSERT_TRUE(worker.ok()) << worker.status();
  auto registered = (*worker)->WaitForOutput(SubprocessStream::kStderr,
                                             "registered with coordinator", absl::Seconds(60));
  ASSERT_TRUE(registered.ok()) << registered.status() << "\n" << (*coordinator)->stderr_text();
  // A worker holding the trainer's token is refused (PERMISSION_DENIED naming the role).
  auto impostor = start_worker("trainer");
  ASSERT_TRUE(impostor.ok()) << impostor.status();
  auto refused = (*impostor)->WaitForOutput(SubprocessStream::kStderr, "needs the worker role",
                                            absl::Seconds(60));
  EXPECT_TRUE(refused.ok()) << refused.status() << "\n" << (*impostor)->stderr_text();

  auto sluicectl = [&](std::vector<std::string> args) {
    args.insert(args.begin(), BuildPath("bin/sluicectl"));
    auto r = RunSubprocess(args, Timeout(absl::Seconds(120)));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : SubprocessResult();
  };
  SubprocessResult run = sluicectl({"run", "--coordinator=" + address,
                                    "--token_file=" + token("trainer"),
                                    "--pipeline=range(16).batch(4)", "--devices=CPU:0",
                                    "--format=json", "--job=roles"});
  EXPECT_EQ(run.exit_code, 0) << run.Describe() << "\n" << run.stderr_text;
  EXPECT_FALSE(run.stdout_text.empty());
  SubprocessResult status = sluicectl(
      {"status", "--coordinator=" + address, "--token_file=" + token("admin")});
  EXPECT_EQ(status.exit_code, 0) << status.Describe() << "\n" << status.stderr_text;
  SubprocessResult denied = sluicectl(
      {"status", "--coordinator=" + address, "--token_file=" + token("trainer")});
  EXPECT_NE(denied.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(denied.stderr_text, "needs the admin role")) << denied.stderr_text;

  for (Subprocess* p : {impostor->get(), worker->get(), coordinator->get()}) {
    (void)p->Signal(SIGTERM);
    auto r = p->Wait(absl::Seconds(60));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->exit_code, 0) << r->Describe() << "\n" << r->stderr_text;
  }
  RemoveTree(dir);
}

}  // namespace
}  // namespace sluice
