#include "tests/integration/process_cluster.h"

#include <signal.h>
#include <stdlib.h>

#include <filesystem>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "proto/coordinator.grpc.pb.h"
#include "tests/examples/test_paths.h"

namespace sluice {
namespace {

std::string Tail(const std::string& text, size_t max = 3000) {
  return text.size() <= max ? text : absl::StrCat("...", text.substr(text.size() - max));
}

std::string DurationFlag(absl::Duration d) {
  return absl::StrCat(absl::ToInt64Milliseconds(d), "ms");
}

// Waits until `path` holds a port (the servers write it atomically, newline-terminated) while
// `process` runs.
absl::StatusOr<int> WaitForPortFile(const std::string& path, Subprocess& process,
                                    const std::string& name, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    absl::StatusOr<std::string> text = ReadFileToString(path);
    int port = 0;
    if (text.ok() && absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &port) && port > 0) {
      return port;
    }
    if (!process.running()) {
      absl::StatusOr<SubprocessResult> r = process.Wait(absl::Seconds(5));
      return absl::FailedPreconditionError(
          absl::StrCat(name, " exited (", r.ok() ? r->Describe() : "?",
                       ") before writing ", path, "; stderr:\n", Tail(process.stderr_text())));
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(name, " wrote no port to ", path, " within ",
                       absl::FormatDuration(timeout), "; stderr:\n", Tail(process.stderr_text())));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<ProcessCluster>> ProcessCluster::Start(
    ProcessClusterOptions options) {
  std::unique_ptr<ProcessCluster> cluster(new ProcessCluster());
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = absl::StrCat(tmp != nullptr && tmp[0] != '\0' ? tmp : "/tmp",
                                   "/sluice-integration-XXXXXX");
  if (mkdtemp(templ.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp ", templ, " failed"));
  }
  cluster->dir_ = templ;

  const std::string coordinator_port_file = cluster->dir_ + "/coordinator.port";
  absl::StatusOr<std::unique_ptr<Subprocess>> coordinator = Subprocess::Start(
      {BuildPath("bin/sluice-coordinator"), "--port=0",
       absl::StrCat("--port_file=", coordinator_port_file),
       absl::StrCat("--worker_timeout=", DurationFlag(options.worker_timeout))});
  if (!coordinator.ok()) return coordinator.status();
  cluster->coordinator_process_ = *std::move(coordinator);
  absl::StatusOr<int> port = WaitForPortFile(coordinator_port_file, *cluster->coordinator_process_,
                                             "sluice-coordinator", options.start_timeout);
  if (!port.ok()) return port.status();
  cluster->coordinator_ = absl::StrCat("127.0.0.1:", *port);

  for (int i = 0; i < options.num_workers; ++i) {
    absl::StatusOr<std::unique_ptr<Subprocess>> worker = Subprocess::Start(
        {BuildPath("bin/sluice-worker"), absl::StrCat("--coordinator=", cluster->coordinator_),
         "--port=0", absl::StrCat("--port_file=", cluster->dir_, "/worker-", i, ".port"),
         absl::StrCat("--heartbeat_interval=", DurationFlag(options.heartbeat_interval)),
         absl::StrCat("--buffer_bytes=", options.worker_buffer_bytes), "--drain_timeout=5s"});
    if (!worker.ok()) return worker.status();
    cluster->workers_.push_back(*std::move(worker));
    cluster->killed_.push_back(false);
  }
  for (int i = 0; i < options.num_workers; ++i) {
    absl::StatusOr<int> worker_port =
        WaitForPortFile(absl::StrCat(cluster->dir_, "/worker-", i, ".port"),
                        *cluster->workers_[i], absl::StrCat("sluice-worker ", i),
                        options.start_timeout);
    if (!worker_port.ok()) return worker_port.status();
    cluster->worker_addresses_.push_back(absl::StrCat("127.0.0.1:", *worker_port));
  }

  // Every worker registered and alive before the test makes a job.
  const absl::Time deadline = absl::Now() + options.start_timeout;
  while (true) {
    absl::StatusOr<proto::GetStatusResponse> status = cluster->Status();
    int alive = 0;
    if (status.ok()) {
      for (const proto::WorkerStatus& w : status->workers()) alive += w.alive() ? 1 : 0;
    }
    if (alive == options.num_workers) break;
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(alive, " of ", options.num_workers, " workers registered within ",
                       absl::FormatDuration(options.start_timeout), " (last status: ",
                       status.status().ToString(), ")\n", cluster->Logs()));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return cluster;
}

ProcessCluster::~ProcessCluster() {
  // Subprocess destructors SIGKILL and reap whatever still runs.
  workers_.clear();
  coordinator_process_.reset();
  if (!dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
}

absl::StatusOr<proto::GetStatusResponse> ProcessCluster::Status() const {
  auto stub = proto::CoordinatorService::NewStub(
      grpc::CreateChannel(coordinator_, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  proto::GetStatusResponse response;
  grpc::Status s = stub->GetStatus(&context, proto::GetStatusRequest(), &response);
  if (!s.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        absl::StrCat("GetStatus on ", coordinator_, ": ", s.error_message()));
  }
  return response;
}

absl::Status ProcessCluster::KillWorker(int i) {
  if (i < 0 || i >= num_workers()) return absl::InvalidArgumentError("no such worker");
  absl::Status s = workers_[i]->Signal(SIGKILL);
  if (!s.ok()) return s;
  killed_[i] = true;
  absl::StatusOr<SubprocessResult> r = workers_[i]->Wait(absl::Seconds(30));
  return r.ok() ? absl::OkStatus() : r.status();
}

absl::Status ProcessCluster::StopAll(absl::Duration timeout) {
  std::string failures;
  auto stop = [&](Subprocess& p, const std::string& name) {
    absl::Status s = p.Signal(SIGTERM);
    absl::StatusOr<SubprocessResult> r = p.Wait(timeout);
    if (!s.ok() || !r.ok() || r->exit_code != 0) {
      absl::StrAppend(&failures, name, ": ",
                      r.ok() ? r->Describe() : r.status().ToString(), "; stderr:\n",
                      Tail(p.stderr_text(), 1500), "\n");
    }
  };
  for (int i = 0; i < num_workers(); ++i) {
    if (!killed_[i]) stop(*workers_[i], absl::StrCat("sluice-worker ", i));
  }
  if (coordinator_process_ != nullptr) stop(*coordinator_process_, "sluice-coordinator");
  if (!failures.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("processes that did not exit 0 on SIGTERM:\n", failures));
  }
  return absl::OkStatus();
}

std::string ProcessCluster::Logs() {
  std::string out;
  if (coordinator_process_ != nullptr) {
    absl::StrAppend(&out, "--- sluice-coordinator stderr:\n",
                    Tail(coordinator_process_->stderr_text()), "\n");
  }
  for (int i = 0; i < num_workers(); ++i) {
    absl::StrAppend(&out, "--- sluice-worker ", i, " stderr:\n", Tail(workers_[i]->stderr_text()),
                    "\n");
  }
  return out;
}

absl::StatusOr<SubprocessResult> RunSluicectl(const std::vector<std::string>& args,
                                              absl::Duration timeout) {
  std::vector<std::string> argv = {BuildPath("bin/sluicectl")};
  argv.insert(argv.end(), args.begin(), args.end());
  SubprocessOptions options;
  options.timeout = timeout;
  return RunSubprocess(argv, options);
}

absl::StatusOr<std::unique_ptr<Subprocess>> StartSluicectl(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {BuildPath("bin/sluicectl")};
  argv.insert(argv.end(), args.begin(), args.end());
  return Subprocess::Start(argv);
}

}  // namespace sluice
