// budget_bench: one consumer's memory against its receive budget (docs/SERVICE.md, "Flow
// control") with 1 and with 64 workers, and its steps/s.
//
//   build/bench/budget_bench [--workers=1,64] [--budget=4194304] [--step_bytes=262144]
//                            [--steps=512] [--hold_ms=300] [--buffer_bytes=4194304]
//
// Per worker count N: a child process (this binary with --serve=N) runs a coordinator and N
// workers in process on port 0 and prints the coordinator's address; this process is the
// consumer alone, so its RSS is the consumer's. It runs a DATA job of `steps` steps of one
// `step_bytes` uint8 tensor (FromTensors(t).Repeat(steps): the workers produce without copying)
// with one task per worker, and reads it through ServiceStepSource with `budget` bytes of
// receive budget: first it reads nothing for `hold_ms` (the workers send what the credit
// allows and stop), then it reads every step as fast as it can. Reports, per N: each stream's
// window, what the consumer held after the hold, the peak of held + outstanding credit bytes
// (FlowStats, StepCreditBytes) and its ratio to the budget, the largest held bytes seen after
// any step, the consumer process's RSS growth (VmHWM after the run, the high-water mark reset
// at its start, less VmRSS at its start) and steps/s of the reading phase. The child exits when
// this process closes its stdin. Buffers of 64 KiB and more are mapped and unmapped one by one
// (M_MMAP_THRESHOLD), so that freed steps leave the RSS.
#include <malloc.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_flags.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/service_step_source.h"
#include "core/tensor/proto_convert.h"
#include "grpcpp/grpcpp.h"
#include "proto/coordinator.grpc.pb.h"
#include "server/grpc_coordinator_service.h"
#include "sluice/dataset.h"
#include "worker/worker_server.h"

extern char** environ;

namespace sluice {
namespace {

void Quiet(absl::string_view) {}

// --serve=N: the cluster side. Prints the coordinator's address once every worker has
// registered (bounded wait), then serves until stdin closes.
int Serve(int workers, size_t buffer_bytes) {
  CoordinatorServerOptions c;
  c.coordinator.log = Quiet;
  auto coordinator = CoordinatorServer::Start(c);
  if (!coordinator.ok()) {
    std::fprintf(stderr, "coordinator: %s\n", coordinator.status().ToString().c_str());
    return 1;
  }
  std::vector<std::unique_ptr<WorkerServer>> servers;
  for (int i = 0; i < workers; ++i) {
    WorkerServerOptions w;
    w.coordinator_address = (*coordinator)->address();
    w.heartbeat_interval = absl::Milliseconds(100);
    w.buffer_bytes = buffer_bytes;
    w.log = Quiet;
    auto worker = WorkerServer::Start(w);
    if (!worker.ok()) {
      std::fprintf(stderr, "worker %d: %s\n", i, worker.status().ToString().c_str());
      return 1;
    }
    servers.push_back(*std::move(worker));
  }
  for (int i = 0; i < 6000; ++i) {  // at most 30 s
    if (std::all_of(servers.begin(), servers.end(),
                    [](const auto& w) { return w->registered(); })) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  std::printf("%s\n", (*coordinator)->address().c_str());
  std::fflush(stdout);
  char buf[64];
  while (read(STDIN_FILENO, buf, sizeof(buf)) > 0) {
  }
  servers.clear();
  return 0;
}

// A --serve child: its pid, the write end of its stdin, its coordinator's address.
struct Child {
  pid_t pid = -1;
  int stdin_fd = -1;
  std::string address;
};

bool SpawnCluster(const char* self, int workers, size_t buffer_bytes, Child* child) {
  int in[2], out[2];
  if (pipe(in) != 0 || pipe(out) != 0) return false;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, in[1]);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  const std::string serve = absl::StrCat("--serve=", workers);
  const std::string buffer = absl::StrCat("--buffer_bytes=", buffer_bytes);
  char* args[] = {const_cast<char*>(self), const_cast<char*>(serve.c_str()),
                  const_cast<char*>(buffer.c_str()), nullptr};
  const int rc = posix_spawn(&child->pid, self, &actions, nullptr, args, environ);
  posix_spawn_file_actions_destroy(&actions);
  close(in[0]);
  close(out[1]);
  child->stdin_fd = in[1];
  if (rc != 0) {
    close(out[0]);
    return false;
  }
  char c;
  while (read(out[0], &c, 1) == 1 && c != '\n') child->address.push_back(c);
  close(out[0]);
  return !child->address.empty();
}

void StopCluster(Child* child) {
  if (child->stdin_fd >= 0) close(child->stdin_fd);
  if (child->pid > 0) {
    int status = 0;
    waitpid(child->pid, &status, 0);
  }
}

// A field of /proc/self/status in KiB (VmRSS, VmHWM).
int64_t StatusKiB(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      int64_t v = 0;
      std::vector<std::string> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (parts.size() >= 2 && absl::SimpleAtoi(parts[1], &v)) return v;
    }
  }
  return -1;
}

// Resets VmHWM to the current RSS (Linux: "5" to clear_refs).
void ResetPeakRss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
}

// Registers the dataset and makes a one-consumer DATA job; returns its options for the source,
// or an error.
absl::StatusOr<ServiceStepSourceOptions> MakeJob(const std::string& address, int64_t step_bytes,
                                                 int64_t steps, int64_t budget) {
  auto stub = proto::CoordinatorService::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  Tensor t = Tensor::Allocate(DType::kUInt8, Shape({step_bytes}));
  std::memset(t.mutable_raw_data(), 7, static_cast<size_t>(step_bytes));
  const Dataset ds = Dataset::FromTensors(Element(t)).Repeat(steps);
  proto::RegisterDatasetRequest reg;
  reg.set_wire_version(proto::WIRE_VERSION_1);
  *reg.mutable_dataset() = ds.def();
  proto::RegisterDatasetResponse reg_resp;
  {
    grpc::ClientContext c;
    grpc::Status s = stub->RegisterDataset(&c, reg, &reg_resp);
    if (!s.ok()) return absl::InternalError("RegisterDataset: " + s.error_message());
  }
  proto::GetOrCreateJobRequest job;
  job.set_wire_version(proto::WIRE_VERSION_1);
  job.mutable_options()->set_dataset_id(reg_resp.dataset_id());
  job.mutable_options()->set_num_consumers(1);
  job.mutable_options()->set_replicas_per_consumer(1);
  job.mutable_options()->set_sharding_policy(proto::SHARDING_DATA);
  proto::GetOrCreateJobResponse job_resp;
  {
    grpc::ClientContext c;
    grpc::Status s = stub->GetOrCreateJob(&c, job, &job_resp);
    if (!s.ok()) return absl::InternalError("GetOrCreateJob: " + s.error_message());
  }
  proto::GetElementSpecRequest spec_req;
  spec_req.set_job_id(job_resp.job_id());
  proto::GetElementSpecResponse spec_resp;
  {
    grpc::ClientContext c;
    grpc::Status s = stub->GetElementSpec(&c, spec_req, &spec_resp);
    if (!s.ok()) return absl::InternalError("GetElementSpec: " + s.error_message());
  }
  absl::StatusOr<ElementSpec> spec = ElementSpecFromProto(spec_resp.per_replica_spec());
  if (!spec.ok()) return spec.status();
  ServiceStepSourceOptions o;
  o.coordinator_address = address;
  o.job_id = job_resp.job_id();
  o.per_replica_spec = *spec;
  o.receive_budget_bytes = budget;
  return o;
}

struct Row {
  int workers = 0;
  ServiceStepSource::FlowStats after_hold;
  ServiceStepSource::FlowStats end;
  int64_t max_held = 0;
  int64_t steps = 0;
  double seconds = 0;
  int64_t rss_growth_kib = 0;
  std::string error;
};

Row RunOne(const char* self, int workers, int64_t budget, int64_t step_bytes, int64_t steps,
           absl::Duration hold, size_t buffer_bytes) {
  Row row;
  row.workers = workers;
  Child child;
  if (!SpawnCluster(self, workers, buffer_bytes, &child)) {
    row.error = "could not start the cluster";
    StopCluster(&child);
    return row;
  }
  const int64_t rss_before = StatusKiB("VmRSS");
  ResetPeakRss();
  {
    absl::StatusOr<ServiceStepSourceOptions> o = MakeJob(child.address, step_bytes, steps, budget);
    absl::StatusOr<std::unique_ptr<ServiceStepSource>> source =
        o.ok() ? ServiceStepSource::Create(*o) : o.status();
    if (!source.ok()) {
      row.error = source.status().ToString();
    } else {
      absl::SleepFor(hold);
      row.after_hold = (*source)->flow_stats();
      row.max_held = row.after_hold.held_bytes;
      const absl::Time start = absl::Now();
      std::vector<Element> replicas;
      bool end = false;
      for (int64_t i = 0; i <= steps; ++i) {
        absl::Status s = (*source)->GetNextStep(&replicas, &end);
        if (!s.ok()) {
          row.error = s.ToString();
          break;
        }
        if (end) break;
        ++row.steps;
        row.max_held = std::max(row.max_held, (*source)->flow_stats().held_bytes);
      }
      row.seconds = absl::ToDoubleSeconds(absl::Now() - start);
      row.end = (*source)->flow_stats();
    }
  }
  row.rss_growth_kib = StatusKiB("VmHWM") - rss_before;
  StopCluster(&child);
  return row;
}

int Main(int argc, char** argv) {
  // Not the production allocator (RetainFreedMemory, core/util/malloc_retention.h), on purpose:
  // this bench measures the memory the consumer holds through its RSS, and retention would
  // keep freed step buffers resident (up to 64 MiB of heap), hiding what the budget bounds.
  // Buffers of 64 KiB and more are mapped on their own and unmapped when freed (a fixed
  // threshold: glibc's adaptive one would keep freed step buffers in the heap's arenas), so
  // that the RSS follows the step buffers the consumer holds.
  mallopt(M_MMAP_THRESHOLD, 64 << 10);
  int64_t budget = 0, step_bytes = 0, steps = 0, hold_ms = 0, buffer = 0, serve = 0;
  if (!absl::SimpleAtoi(Flag(argc, argv, "budget", "4194304"), &budget) ||
      !absl::SimpleAtoi(Flag(argc, argv, "step_bytes", "262144"), &step_bytes) ||
      !absl::SimpleAtoi(Flag(argc, argv, "steps", "512"), &steps) ||
      !absl::SimpleAtoi(Flag(argc, argv, "hold_ms", "300"), &hold_ms) ||
      !absl::SimpleAtoi(Flag(argc, argv, "buffer_bytes", "4194304"), &buffer) ||
      !absl::SimpleAtoi(Flag(argc, argv, "serve", "0"), &serve) || budget < 1 ||
      step_bytes < 1 || steps < 1 || hold_ms < 0 || buffer < 1 || serve < 0) {
    std::fprintf(stderr, "bad flags\n");
    return 2;
  }
  if (serve > 0) return Serve(static_cast<int>(serve), static_cast<size_t>(buffer));
  std::vector<int> workers;
  for (absl::string_view s : absl::StrSplit(Flag(argc, argv, "workers", "1,64"), ',')) {
    int v = 0;
    if (absl::SimpleAtoi(s, &v) && v > 0) workers.push_back(v);
  }
  signal(SIGPIPE, SIG_IGN);
  const int64_t cost = step_bytes + static_cast<int64_t>(kStepCreditOverheadBytes);
  std::printf("budget %lld B, steps of %lld B (cost %lld B), %lld steps, hold %lld ms\n\n",
              static_cast<long long>(budget), static_cast<long long>(step_bytes),
              static_cast<long long>(cost), static_cast<long long>(steps),
              static_cast<long long>(hold_ms));
  std::printf("| workers | window B | held after hold B | peak held+outstanding B | peak/budget | "
              "max held B | raises | RSS growth MiB | steps/s | GB/s |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  int rc = 0;
  for (int n : workers) {
    const Row r = RunOne("/proc/self/exe", n, budget, step_bytes, steps,
                         absl::Milliseconds(hold_ms), static_cast<size_t>(buffer));
    if (!r.error.empty() || r.steps != steps) {
      std::fprintf(stderr, "%d workers: %lld of %lld steps: %s\n", n,
                   static_cast<long long>(r.steps), static_cast<long long>(steps),
                   r.error.c_str());
      rc = 1;
    }
    std::printf("| %d | %lld | %lld | %lld | %.2f | %lld | %lld | %.1f | %.0f | %.3f |\n", n,
                static_cast<long long>(r.end.window_bytes),
                static_cast<long long>(r.after_hold.held_bytes),
                static_cast<long long>(r.end.peak_bytes),
                static_cast<double>(r.end.peak_bytes) / static_cast<double>(budget),
                static_cast<long long>(r.max_held), static_cast<long long>(r.end.credit_raises),
                static_cast<double>(r.rss_growth_kib) / 1024.0,
                r.seconds > 0 ? static_cast<double>(r.steps) / r.seconds : 0.0,
                r.seconds > 0 ? static_cast<double>(r.steps * step_bytes) / r.seconds / 1e9 : 0.0);
    std::fflush(stdout);
  }
  return rc;
}

}  // namespace
}  // namespace sluice

int main(int argc, char** argv) { return sluice::Main(argc, argv); }
