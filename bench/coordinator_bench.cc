// coordinator_bench: the control plane under a simulated fleet (issue 15, "Scale of the
// control plane"). Starts the real sluice-coordinator binary on a loopback port, registers
// --workers simulated workers (WorkerHeartbeat) and --jobs coordinated jobs of
// --consumers/--jobs consumers each, then drives heartbeats over gRPC from --threads client
// threads, each cycling through its share of the workers and consumers as fast as the
// coordinator answers. Each heartbeat is one unary RPC with the real request and answer
// messages; a thread keeps --inflight of them in flight (async API, its own completion queue)
// over --channels connections, never two of the same worker or consumer at once, as a fleet
// of independent callers does (closed loop per caller). A real fleet has one connection per
// process (11,000 here), the bench 16 by default: the coordinator runs the same handler per
// call, but calls that arrive together on one connection can share the kernel's reads and
// writes, which 11,000 connections would not.
// --threads=4 --inflight=1 --channels=1 is the earlier model (4 calls in flight in all). Every
// simulated worker reports the tasks it holds, with their progress, as a real one does; every
// consumer sends its job and index.
//
// With --empty the same load goes to a gRPC server (this binary, in a child process) whose
// WorkerHeartbeat and ClientHeartbeat are callback methods that answer OK with an empty message
// at once: no coordinator, no interceptors. What each heartbeat costs it is the floor gRPC and
// the kernel set on this machine; the coordinator's CPU per heartbeat minus it is what the
// coordinator itself adds. (Workers hold one made-up task each and consumers name made-up
// jobs, so that the requests are as large as against the coordinator; nothing is checked.)
//
// With --lean_generator (the default) the load generator spends less of the shared cores per
// heartbeat without changing a byte the coordinator receives or sends: each simulated worker's
// and consumer's request is serialized once and resent as bytes until its content changes (a
// new version or task). Answers are still parsed and applied (workers' tasks, everyone's
// version) and each call's status is checked. Its channels keep gRPC's client retry machinery
// on, as real workers' and consumers' channels do: --client_retries=false turns it off, which
// saves the generator 4-7 us a heartbeat but also lowers the server's CPU by 1-3 us (measured,
// cause not found), so it does not measure what production clients cost the coordinator.
// --lean_generator=false is the earlier generator (typed stubs: every request serialized per
// call, retries on as by default).
//
// With --versioned (the default) every simulated worker and consumer sends back the version of
// the last answer it applied, as real ones do, so that answers carry only changes.
//
// Prints: heartbeats/s (worker and consumer, and both), the CPU each heartbeat cost the
// coordinator and the load generator (on a shared machine steadier than the rate; the two
// share the cores, so 2 cores / their sum bounds the rate on 2 cores), the coordinator's RSS
// sampled every second (first, max, last, and at the end of each tenth of the run), and false deaths:
// workers the coordinator declared dead although they heartbeated at least every --max_gap
// (asserted by the bench: it tracks each worker's largest gap between heartbeats and prints
// it).
//
// With --restart_storm (issue 32, "Storms and locks") the coordinator journals to a work
// dir, the jobs are SHARDING_RANGES (--tasks_per_job ranges each), and --storm_after seconds
// into the run the coordinator is killed (SIGKILL) and started again on the same port and
// work dir, while every simulated worker and consumer keeps calling (waiting for the
// connection, as real ones retry). Prints how long the restarted coordinator took to serve,
// and the time to steady state: until every worker and every consumer has had an answer from
// it. False deaths are counted as above, at the end of the run.
//
// With --scaling_decision (issue 30, docs/AUTOSCALING.md) no process is started: an in-process
// Coordinator gets --workers workers and --jobs jobs of --consumers consumers in all, every
// heartbeat carrying a load report (wait, steps, interval; CPU and per-task rates), and the
// bench measures, in this thread's CPU time, one heartbeat with its report and one autoscaling
// decision (CheckWorkerLiveness when the decision interval has passed, less one when it has
// not), over --seconds. It prints the decision's cost against the heartbeat budget of one
// decision interval: the CPU the coordinator's handlers spend on the heartbeats of that
// interval, at --worker_hb_interval and --client_hb_interval (the defaults' 1 s and 200 ms)
// and --decision_interval (10 s).
//
//   build/bench/coordinator_bench --workers=1000 --consumers=10000 --seconds=60
//   build/bench/coordinator_bench --restart_storm --seconds=40 --storm_after=10
//   build/bench/coordinator_bench --scaling_decision --workers=1000 --consumers=10000
#include <pthread.h>
#include <time.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/codegen/async_unary_call.h"
#include "grpcpp/impl/codegen/rpc_method.h"
#include "core/util/clock.h"
#include "core/util/mutex_deadlock_detection.h"
#include "proto/coordinator.grpc.pb.h"
#include "server/coordinator.h"

ABSL_FLAG(int, workers, 1000, "Simulated workers.");
ABSL_FLAG(int, consumers, 10000, "Simulated consumers, spread evenly over --jobs jobs.");
ABSL_FLAG(int, jobs, 100, "Coordinated jobs (OFF sharding, --tasks_per_job tasks each).");
ABSL_FLAG(int, tasks_per_job, 10, "Tasks of each job.");
ABSL_FLAG(int, threads, 2, "Client threads, each with its own completion queue.");
ABSL_FLAG(int, inflight, 64,
          "Heartbeats each client thread keeps in flight (each of a different simulated worker "
          "or consumer; 1: one at a time, a closed loop per thread).");
ABSL_FLAG(int, channels, 8,
          "Connections (channels) of each client thread; its calls in flight are spread over "
          "them.");
ABSL_FLAG(int, seconds, 60, "Length of the measured run.");
ABSL_FLAG(std::string, coordinator, "",
          "Path of sluice-coordinator; default: ../bin/sluice-coordinator next to this binary.");
ABSL_FLAG(absl::Duration, worker_timeout, absl::Seconds(10), "The coordinator's --worker_timeout.");
ABSL_FLAG(bool, empty, false,
          "Drive an empty gRPC server instead of the coordinator: the per-call floor of gRPC "
          "and the kernel (see the comment at the top).");
ABSL_FLAG(std::string, empty_server_port_file, "",
          "Internal (--empty): run as the empty server, writing its port to this file.");
ABSL_FLAG(bool, lean_generator, true,
          "Resend each simulated caller's request as pre-serialized bytes until it changes (the "
          "same bytes on the wire; see the comment at the top); false: the earlier generator.");
ABSL_FLAG(bool, client_retries, true,
          "--lean_generator: keep gRPC's client retry machinery on its channels, as real "
          "workers' and consumers' channels do (the typed generator always does); false turns "
          "it off, which also changes the server's cost (see the comment at the top).");
ABSL_FLAG(bool, restart_storm, false,
          "Journal to a work dir, make RANGES jobs, and kill and restart the coordinator "
          "--storm_after seconds into the run (see the comment at the top).");
ABSL_FLAG(int, storm_after, 10, "--restart_storm: seconds into the run of the restart.");
ABSL_FLAG(bool, versioned, true,
          "Send back the version of the last answer (as real workers and consumers do), so that "
          "answers carry only changes; false: every answer is full (older clients).");

ABSL_FLAG(bool, scaling_decision, false,
          "Measure the autoscaling decision's cost in process (see the comment at the top).");
ABSL_FLAG(absl::Duration, decision_interval, absl::Seconds(10),
          "--scaling_decision: the coordinator's --scaling_interval.");
ABSL_FLAG(absl::Duration, worker_hb_interval, absl::Seconds(1),
          "--scaling_decision: how often each worker heartbeats (sluice-worker's default).");
ABSL_FLAG(absl::Duration, client_hb_interval, absl::Milliseconds(200),
          "--scaling_decision: how often each consumer heartbeats (the client's default).");

namespace {

using sluice::proto::CoordinatorService;

constexpr char kWorkerHeartbeatMethod[] = "/sluice.proto.CoordinatorService/WorkerHeartbeat";
constexpr char kClientHeartbeatMethod[] = "/sluice.proto.CoordinatorService/ClientHeartbeat";

std::string SelfDir() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  std::string p(buf, static_cast<size_t>(n));
  return p.substr(0, p.rfind('/'));
}

int64_t RssKiB(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6);
  }
  return -1;
}

double SelfCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// --empty's server: both heartbeats answer OK with an empty message at once.
class EmptyHeartbeatService final
    : public CoordinatorService::WithCallbackMethod_WorkerHeartbeat<
          CoordinatorService::WithCallbackMethod_ClientHeartbeat<CoordinatorService::Service>> {
 public:
  grpc::ServerUnaryReactor* WorkerHeartbeat(grpc::CallbackServerContext* context,
                                            const sluice::proto::WorkerHeartbeatRequest*,
                                            sluice::proto::WorkerHeartbeatResponse*) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  grpc::ServerUnaryReactor* ClientHeartbeat(grpc::CallbackServerContext* context,
                                            const sluice::proto::ClientHeartbeatRequest*,
                                            sluice::proto::ClientHeartbeatResponse*) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

// Serves EmptyHeartbeatService on a loopback port until SIGTERM; writes the port to
// `port_file` (atomically) once serving. Returns the process's exit code.
int RunEmptyServer(const std::string& port_file) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  EmptyHeartbeatService service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::cerr << "empty server: cannot listen on 127.0.0.1\n";
    return 1;
  }
  const std::string tmp = port_file + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << port << "\n";
  }
  if (std::rename(tmp.c_str(), port_file.c_str()) != 0) return 1;
  int sig = 0;
  sigwait(&signals, &sig);
  server->Shutdown(std::chrono::system_clock::now());
  return 0;
}

double LoadAverage() {
  std::ifstream in("/proc/loadavg");
  double l = -1;
  in >> l;
  return l;
}

struct Worker {
  std::string address;
  std::vector<int64_t> tasks;
  uint64_t incarnation = 0, version = 0;  // of the last answer
  absl::Time last = absl::InfinitePast();
  absl::Duration max_gap = absl::ZeroDuration();
  grpc::ByteBuffer request;  // --lean_generator: the serialized request, while !request_stale
  bool request_stale = true;
};
struct Consumer {
  int64_t job_id = 0;
  int64_t index = 0;
  uint64_t incarnation = 0, version = 0;  // of the last answer
  grpc::ByteBuffer request;  // as Worker's
  bool request_stale = true;
};

Consumer MakeConsumer(int64_t job_id, int64_t index) {
  Consumer c;
  c.job_id = job_id;
  c.index = index;
  return c;
}

// `message` serialized into one slice.
grpc::ByteBuffer SerializedBytes(const google::protobuf::MessageLite& message) {
  grpc::Slice slice(message.SerializeAsString());
  return grpc::ByteBuffer(&slice, 1);
}

// The heartbeat a real worker sends: its tasks, each with its progress.
void FillWorkerHeartbeat(const Worker& w, bool versioned,
                         sluice::proto::WorkerHeartbeatRequest* req) {
  req->Clear();
  req->set_wire_version(sluice::proto::WIRE_VERSION_1);
  req->set_worker_address(w.address);
  if (versioned) {
    req->set_known_incarnation(w.incarnation);
    req->set_known_version(w.version);
  }
  for (int64_t t : w.tasks) {
    req->add_active_task_ids(t);
    sluice::proto::TaskProgress* p = req->add_task_progress();
    p->set_task_id(t);
    p->set_steps_produced(1);
  }
}

// What a real worker does with the answer: starts the new tasks, stops the others.
void ApplyWorkerHeartbeat(const sluice::proto::WorkerHeartbeatResponse& resp, Worker* w) {
  if (resp.new_tasks_size() > 0 || resp.tasks_to_stop_size() > 0 ||
      w->incarnation != resp.incarnation() || w->version != resp.version()) {
    w->request_stale = true;
  }
  for (const auto& t : resp.new_tasks()) w->tasks.push_back(t.task_id());
  for (int64_t t : resp.tasks_to_stop()) {
    w->tasks.erase(std::remove(w->tasks.begin(), w->tasks.end(), t), w->tasks.end());
  }
  w->incarnation = resp.incarnation();
  w->version = resp.version();
}

// The heartbeat a consumer sends.
void FillConsumerHeartbeat(const Consumer& c, bool versioned,
                           sluice::proto::ClientHeartbeatRequest* req) {
  req->Clear();
  req->set_wire_version(sluice::proto::WIRE_VERSION_1);
  req->set_job_id(c.job_id);
  req->set_consumer_index(c.index);
  if (versioned) {
    req->set_known_incarnation(c.incarnation);
    req->set_known_version(c.version);
  }
}

// One heartbeat in flight (a worker's or a consumer's), on a client thread's completion queue.
struct Call {
  bool worker = false;
  size_t index = 0;  // into the workers or the consumers
  std::unique_ptr<grpc::ClientContext> ctx;
  grpc::Status status;
  sluice::proto::WorkerHeartbeatRequest worker_request;
  sluice::proto::WorkerHeartbeatResponse worker_response;
  std::unique_ptr<grpc::ClientAsyncResponseReader<sluice::proto::WorkerHeartbeatResponse>>
      worker_reader;
  sluice::proto::ClientHeartbeatRequest consumer_request;
  sluice::proto::ClientHeartbeatResponse consumer_response;
  std::unique_ptr<grpc::ClientAsyncResponseReader<sluice::proto::ClientHeartbeatResponse>>
      consumer_reader;
  // --lean_generator: either heartbeat as bytes.
  grpc::ByteBuffer raw_response;
  std::unique_ptr<grpc::ClientAsyncResponseReader<grpc::ByteBuffer>> raw_reader;
};

// A channel of the load generator with its two heartbeat methods registered on it (as a
// generated stub registers its methods, so that a call does not name its method anew).
struct RawChannel {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<grpc::internal::RpcMethod> worker_heartbeat, client_heartbeat;
};

// Starts a unary call of `method` on `channel` whose request is `request` (bytes) and whose
// answer arrives as bytes; the reader is the call's (no delete).
std::unique_ptr<grpc::ClientAsyncResponseReader<grpc::ByteBuffer>> StartRawCall(
    const RawChannel& channel, const grpc::internal::RpcMethod& method,
    grpc::ClientContext* ctx, const grpc::ByteBuffer& request, grpc::CompletionQueue* cq) {
  std::unique_ptr<grpc::ClientAsyncResponseReader<grpc::ByteBuffer>> reader(
      grpc::internal::ClientAsyncResponseReaderHelper::Create<grpc::ByteBuffer, grpc::ByteBuffer,
                                                              grpc::ByteBuffer, grpc::ByteBuffer>(
          channel.channel.get(), cq, method, ctx, request));
  reader->StartCall();
  return reader;
}

// CPU seconds (user + system) process `pid` has used so far; -1 if unknown.
double ProcessCpuSeconds(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Fields after the command (which may hold spaces), from its closing parenthesis: state is
  // field 3, utime 14, stime 15.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream fields(stat.substr(close + 2));
  std::string f;
  long long utime = 0, stime = 0;
  for (int field = 3; field <= 15 && (fields >> f); ++field) {
    if (field == 14) utime = std::atoll(f.c_str());
    if (field == 15) stime = std::atoll(f.c_str());
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

}  // namespace

double ThreadCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}

// --scaling_decision: see the comment at the top.
int RunScalingDecisionBench() {
  const int num_workers = absl::GetFlag(FLAGS_workers);
  const int num_consumers = absl::GetFlag(FLAGS_consumers);
  const int num_jobs = std::max(1, absl::GetFlag(FLAGS_jobs));
  const int tasks_per_job = std::max(1, absl::GetFlag(FLAGS_tasks_per_job));
  const absl::Duration interval = absl::GetFlag(FLAGS_decision_interval);
  sluice::FakeClock clock;
  sluice::CoordinatorOptions options;
  options.clock = &clock;
  options.worker_timeout = absl::Hours(24);
  options.consumer_timeout = absl::Hours(24);
  options.idle_job_ttl = absl::Hours(24);
  options.scaling_interval = interval;
  options.scaling.max_workers = num_workers;
  options.max_jobs_per_identity = 0;
  options.log = [](absl::string_view) {};
  auto check = [](const absl::Status& s, const char* what) {
    if (!s.ok()) {
      std::cerr << "coordinator_bench --scaling_decision: " << what << ": " << s << "\n";
      std::exit(1);
    }
  };
  absl::StatusOr<std::unique_ptr<sluice::Coordinator>> created =
      sluice::Coordinator::Create(options);
  check(created.status(), "Create");
  sluice::Coordinator& coordinator = **created;
  // Workers (one registration heartbeat each), then the jobs: OFF sharding, tasks spread over
  // the workers.
  std::vector<sluice::proto::WorkerHeartbeatRequest> workers(num_workers);
  for (int i = 0; i < num_workers; ++i) {
    workers[i].set_wire_version(sluice::proto::WIRE_VERSION_1);
    workers[i].set_worker_address(absl::StrCat("10.0.", i / 250, ".", i % 250, ":5051"));
    workers[i].set_report_interval_us(absl::ToInt64Microseconds(absl::GetFlag(FLAGS_worker_hb_interval)));
    workers[i].set_cpu_busy_fraction(0.5);
    sluice::proto::WorkerHeartbeatResponse r;
    check(coordinator.WorkerHeartbeat(workers[i], &r), "register a worker");
  }
  sluice::proto::RegisterDatasetRequest reg;
  reg.set_wire_version(sluice::proto::WIRE_VERSION_1);
  reg.set_pipeline("range(1000000).batch(4)");
  sluice::proto::RegisterDatasetResponse reg_resp;
  check(coordinator.RegisterDataset(reg, &reg_resp), "register the dataset");
  const int per_job = std::max(1, num_consumers / num_jobs);
  std::vector<sluice::proto::ClientHeartbeatRequest> consumers;
  for (int j = 0; j < num_jobs; ++j) {
    sluice::proto::GetOrCreateJobRequest req;
    req.set_wire_version(sluice::proto::WIRE_VERSION_1);
    req.set_job_name(absl::StrCat("job-", j));
    req.mutable_options()->set_dataset_id(reg_resp.dataset_id());
    req.mutable_options()->set_num_consumers(per_job);
    req.mutable_options()->set_replicas_per_consumer(1);
    req.mutable_options()->set_sharding_policy(sluice::proto::SHARDING_OFF);
    req.mutable_options()->set_num_tasks(tasks_per_job);
    sluice::proto::GetOrCreateJobResponse resp;
    check(coordinator.GetOrCreateJob(req, &resp), "create a job");
    for (int c = 0; c < per_job; ++c) {
      sluice::proto::ClientHeartbeatRequest h;
      h.set_wire_version(sluice::proto::WIRE_VERSION_1);
      h.set_job_id(resp.job_id());
      h.set_consumer_index(c);
      h.set_report_interval_us(absl::ToInt64Microseconds(absl::GetFlag(FLAGS_client_hb_interval)));
      h.set_input_wait_us(h.report_interval_us() / 10);
      h.set_steps_consumed(20);
      consumers.push_back(h);
    }
  }
  // Each worker's tasks, with a rate each, as its heartbeats report them.
  for (auto& w : workers) {
    sluice::proto::WorkerHeartbeatResponse r;
    check(coordinator.WorkerHeartbeat(w, &r), "a worker heartbeat");
    for (const sluice::proto::TaskDef& t : r.new_tasks()) {
      w.add_active_task_ids(t.task_id());
      sluice::proto::TaskProgress* p = w.add_task_progress();
      p->set_task_id(t.task_id());
      p->set_steps_per_second(10);
    }
    w.set_known_incarnation(r.incarnation());
    w.set_known_version(r.version());
  }
  coordinator.CheckWorkerLiveness();  // the first decision window starts
  const double load = LoadAverage();
  const absl::Time end = absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_seconds));
  double worker_cpu = 0, client_cpu = 0, decision_cpu = 0, tick_cpu = 0;
  int64_t worker_hbs = 0, client_hbs = 0, decisions = 0, ticks = 0;
  size_t next_worker = 0, next_consumer = 0;
  while (absl::Now() < end) {
    // One interval's worth of reports would be 10^5+ heartbeats: a round of each caller is
    // enough to fill every job's window; the per-heartbeat cost is measured over them.
    double t0 = ThreadCpuSeconds();
    for (int i = 0; i < 200; ++i) {
      sluice::proto::WorkerHeartbeatResponse r;
      check(coordinator.WorkerHeartbeat(workers[next_worker], &r), "a worker heartbeat");
      next_worker = (next_worker + 1) % workers.size();
    }
    double t1 = ThreadCpuSeconds();
    worker_cpu += t1 - t0;
    worker_hbs += 200;
    for (int i = 0; i < 2000; ++i) {
      sluice::proto::ClientHeartbeatRequest& h = consumers[next_consumer];
      sluice::proto::ClientHeartbeatResponse r;
      check(coordinator.ClientHeartbeat(h, &r), "a consumer heartbeat");
      h.set_consumer_secret(r.consumer_secret());
      h.set_known_incarnation(r.incarnation());
      h.set_known_version(r.version());
      next_consumer = (next_consumer + 1) % consumers.size();
    }
    double t2 = ThreadCpuSeconds();
    client_cpu += t2 - t1;
    client_hbs += 2000;
    // A tick with no decision due, then one with a decision.
    clock.Advance(absl::Milliseconds(1));
    coordinator.CheckWorkerLiveness();
    double t3 = ThreadCpuSeconds();
    tick_cpu += t3 - t2;
    ++ticks;
    clock.Advance(interval);
    coordinator.CheckWorkerLiveness();
    double t4 = ThreadCpuSeconds();
    decision_cpu += t4 - t3;
    ++decisions;
  }
  sluice::proto::GetStatusRequest status_req;
  status_req.set_page_size(1);
  sluice::proto::GetStatusResponse status;
  check(coordinator.GetStatus(status_req, &status), "GetStatus");
  const double per_worker_hb = worker_cpu / worker_hbs;
  const double per_client_hb = client_cpu / client_hbs;
  const double per_decision = decision_cpu / decisions - tick_cpu / ticks;
  const double interval_s = absl::ToDoubleSeconds(interval);
  const double budget =
      num_workers * interval_s / absl::ToDoubleSeconds(absl::GetFlag(FLAGS_worker_hb_interval)) *
          per_worker_hb +
      static_cast<double>(consumers.size()) * interval_s /
          absl::ToDoubleSeconds(absl::GetFlag(FLAGS_client_hb_interval)) * per_client_hb;
  std::printf(
      "scaling decision: %d workers, %zu consumers in %d jobs (%d tasks each); load average "
      "%.2f\n"
      "  worker heartbeat with report: %.2f us CPU (%lld measured)\n"
      "  consumer heartbeat with report: %.2f us CPU (%lld measured)\n"
      "  decision: %.1f us CPU (%lld measured; a tick without one: %.1f us)\n"
      "  heartbeat budget of one %.0f s interval (workers every %s, consumers every %s): "
      "%.3f s CPU\n"
      "  decision / budget: %.4f%%  (target < 5%%)\n"
      "  desired workers %lld, decisions %lld, reports refused %lld\n",
      num_workers, consumers.size(), num_jobs, tasks_per_job, load, per_worker_hb * 1e6,
      static_cast<long long>(worker_hbs), per_client_hb * 1e6, static_cast<long long>(client_hbs),
      per_decision * 1e6, static_cast<long long>(decisions), tick_cpu / ticks * 1e6, interval_s,
      absl::FormatDuration(absl::GetFlag(FLAGS_worker_hb_interval)).c_str(),
      absl::FormatDuration(absl::GetFlag(FLAGS_client_hb_interval)).c_str(), budget,
      100 * per_decision / budget, static_cast<long long>(status.scaling().desired_workers()),
      static_cast<long long>(status.scaling().decisions()),
      static_cast<long long>(status.scaling().reports_refused()));
  return 0;
}

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  // As sluice-coordinator runs (core/util/mutex_deadlock_detection.h), so that the load
  // generator's gRPC costs what it costs in production.
  sluice::SkipMutexDeadlockDetection();
  if (absl::GetFlag(FLAGS_scaling_decision)) return RunScalingDecisionBench();
  if (const std::string f = absl::GetFlag(FLAGS_empty_server_port_file); !f.empty()) {
    return RunEmptyServer(f);
  }
  const bool empty = absl::GetFlag(FLAGS_empty);
  const int num_workers = absl::GetFlag(FLAGS_workers);
  const int num_consumers = absl::GetFlag(FLAGS_consumers);
  const int num_jobs = std::max(1, absl::GetFlag(FLAGS_jobs));
  const int threads = std::max(1, absl::GetFlag(FLAGS_threads));
  std::string binary = absl::GetFlag(FLAGS_coordinator);
  if (binary.empty()) binary = SelfDir() + "/../bin/sluice-coordinator";

  char dir_template[] = "/tmp/coordinator_bench.XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  const std::string port_file = dir + "/port";
  const bool storm = absl::GetFlag(FLAGS_restart_storm) && !empty;
  const std::string work_dir = dir + "/journal";
  std::vector<std::string> args = {
      binary, "--port=0", "--port_file=" + port_file, "--log_level=warning",
      "--worker_timeout=" + absl::FormatDuration(absl::GetFlag(FLAGS_worker_timeout))};
  if (storm) args.push_back("--work_dir=" + work_dir);
  if (empty) {
    binary = SelfDir() + "/coordinator_bench";
    args = {binary, "--empty_server_port_file=" + port_file};
  }
  // Starts the server with `args`; 0 if it cannot.
  auto spawn = [&binary](std::vector<std::string> a) -> pid_t {
    std::vector<char*> argv_c;
    for (auto& arg : a) argv_c.push_back(arg.data());
    argv_c.push_back(nullptr);
    pid_t child = 0;
    if (posix_spawn(&child, binary.c_str(), nullptr, nullptr, argv_c.data(), environ) != 0) {
      return 0;
    }
    return child;
  };
  // The port the server wrote to port_file, waiting for it (bounded: 30 s, or `limit`).
  auto await_port = [&port_file](absl::Duration limit = absl::Seconds(30)) {
    int p = 0;
    const absl::Time until = absl::Now() + limit;
    while (p == 0 && absl::Now() < until) {
      std::ifstream in(port_file);
      if (!(in >> p)) p = 0;
      if (p == 0) absl::SleepFor(absl::Milliseconds(10));
    }
    return p;
  };
  pid_t pid = spawn(args);
  if (pid == 0) {
    std::cerr << "cannot start " << binary << "\n";
    return 1;
  }
  int port = await_port();
  auto stop = [&] {
    kill(pid, SIGTERM);
    int status = 0;
    waitpid(pid, &status, 0);
    std::remove(port_file.c_str());
    if (storm) std::system(absl::StrCat("rm -rf '", work_dir, "'").c_str());
    rmdir(dir.c_str());
  };
  if (port == 0) {
    std::cerr << "the coordinator did not write its port\n";
    stop();
    return 1;
  }
  const std::string target = absl::StrCat("127.0.0.1:", port);
  auto setup = CoordinatorService::NewStub(
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));

  // Workers register; a dataset and the jobs; every worker learns its tasks.
  std::vector<Worker> workers(static_cast<size_t>(num_workers));
  const bool versioned = absl::GetFlag(FLAGS_versioned);
  const bool lean = absl::GetFlag(FLAGS_lean_generator);
  const bool client_retries = absl::GetFlag(FLAGS_client_retries);
  auto worker_heartbeat = [versioned](CoordinatorService::Stub* stub, Worker& w) -> bool {
    sluice::proto::WorkerHeartbeatRequest req;
    FillWorkerHeartbeat(w, versioned, &req);
    sluice::proto::WorkerHeartbeatResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    if (!stub->WorkerHeartbeat(&ctx, req, &resp).ok()) return false;
    ApplyWorkerHeartbeat(resp, &w);
    return true;
  };
  for (int i = 0; i < num_workers; ++i) {
    workers[i].address = absl::StrCat("10.0.", i / 250, ".", i % 250, ":7000");
    if (!worker_heartbeat(setup.get(), workers[i])) {
      std::cerr << "worker registration failed\n";
      stop();
      return 1;
    }
  }
  std::vector<Consumer> consumers;
  const int per_job = std::max(1, num_consumers / num_jobs);
  if (empty) {
    // Made-up tasks and jobs, as many as the coordinator would make, so that the requests
    // are as large as against it.
    const int64_t num_tasks = int64_t{num_jobs} * absl::GetFlag(FLAGS_tasks_per_job);
    for (int64_t t = 0; t < num_tasks && !workers.empty(); ++t) {
      workers[static_cast<size_t>(t) % workers.size()].tasks.push_back(t + 1);
    }
    for (int j = 0; j < num_jobs; ++j) {
      for (int c = 0; c < per_job; ++c) consumers.push_back(MakeConsumer(j + 1, c));
    }
  } else {
    sluice::proto::RegisterDatasetRequest reg;
    reg.set_wire_version(sluice::proto::WIRE_VERSION_1);
    reg.set_pipeline("range(1000000).batch(8)");
    sluice::proto::RegisterDatasetResponse reg_resp;
    {
      grpc::ClientContext ctx;
      if (!setup->RegisterDataset(&ctx, reg, &reg_resp).ok()) {
        std::cerr << "RegisterDataset failed\n";
        stop();
        return 1;
      }
    }
    for (int j = 0; j < num_jobs; ++j) {
      sluice::proto::GetOrCreateJobRequest req;
      req.set_wire_version(sluice::proto::WIRE_VERSION_1);
      req.set_job_name(absl::StrCat("job", j));
      auto* o = req.mutable_options();
      o->set_dataset_id(reg_resp.dataset_id());
      o->set_num_consumers(per_job);
      o->set_replicas_per_consumer(1);
      if (storm) {
        // range(1000000).batch(8): 125000 steps, cut into --tasks_per_job ranges.
        o->set_sharding_policy(sluice::proto::SHARDING_RANGES);
        o->mutable_order()->set_range_steps(
            125000 / std::max(1, absl::GetFlag(FLAGS_tasks_per_job)) + 1);
        o->mutable_order()->set_num_epochs(1);
      } else {
        o->set_sharding_policy(sluice::proto::SHARDING_OFF);
        o->set_num_tasks(absl::GetFlag(FLAGS_tasks_per_job));
      }
      sluice::proto::GetOrCreateJobResponse resp;
      grpc::ClientContext ctx;
      grpc::Status s = setup->GetOrCreateJob(&ctx, req, &resp);
      if (!s.ok()) {
        std::cerr << "GetOrCreateJob failed: " << s.error_message() << "\n";
        stop();
        return 1;
      }
      for (int c = 0; c < per_job; ++c) consumers.push_back(MakeConsumer(resp.job_id(), c));
    }
    for (Worker& w : workers) worker_heartbeat(setup.get(), w);
  }
  int64_t tasks_held = 0;
  for (const Worker& w : workers) tasks_held += static_cast<int64_t>(w.tasks.size());

  // The run: each thread owns its share of the workers and consumers and cycles through them
  // (interleaved), keeping --inflight heartbeats in flight on its --channels connections,
  // never two of the same simulated worker or consumer at once (each real one heartbeats from
  // its own loop, one call at a time).
  std::atomic<bool> done{false};
  std::atomic<int64_t> worker_beats{0}, consumer_beats{0}, errors{0}, delta_answers{0};
  const int inflight = std::max(1, absl::GetFlag(FLAGS_inflight));
  const int channels = std::max(1, absl::GetFlag(FLAGS_channels));
  std::vector<char> worker_busy(workers.size(), 0), consumer_busy(consumers.size(), 0);
  // --restart_storm: set once the coordinator was restarted; each worker and consumer counts
  // once in `back` at its first answer after that (touched by its own thread only).
  std::atomic<bool> restarted{false};
  std::atomic<int64_t> back_workers{0}, back_consumers{0};
  std::vector<char> worker_back(workers.size(), 0), consumer_back(consumers.size(), 0);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::vector<std::unique_ptr<CoordinatorService::Stub>> stubs;
      std::vector<RawChannel> raw_channels;
      for (int c = 0; c < channels; ++c) {
        grpc::ChannelArguments ch_args;
        ch_args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection of its own
        if (lean && !client_retries) ch_args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
        std::shared_ptr<grpc::Channel> channel =
            grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), ch_args);
        if (lean) {
          RawChannel raw{channel, nullptr, nullptr};
          raw.worker_heartbeat = std::make_unique<grpc::internal::RpcMethod>(
              kWorkerHeartbeatMethod, grpc::internal::RpcMethod::NORMAL_RPC, channel);
          raw.client_heartbeat = std::make_unique<grpc::internal::RpcMethod>(
              kClientHeartbeatMethod, grpc::internal::RpcMethod::NORMAL_RPC, channel);
          raw_channels.push_back(std::move(raw));
        }
        stubs.push_back(CoordinatorService::NewStub(channel));
      }
      sluice::proto::WorkerHeartbeatRequest worker_request;  // --lean_generator: scratch
      sluice::proto::ClientHeartbeatRequest consumer_request;
      sluice::proto::WorkerHeartbeatResponse worker_response;
      sluice::proto::ClientHeartbeatResponse consumer_response;
      std::vector<size_t> my_workers, my_consumers;
      for (size_t i = t; i < workers.size(); i += threads) my_workers.push_back(i);
      for (size_t i = t; i < consumers.size(); i += threads) my_consumers.push_back(i);
      const size_t total = my_workers.size() + my_consumers.size();
      if (total == 0) return;
      const size_t stride = std::max<size_t>(1, total / std::max<size_t>(1, my_workers.size()));
      size_t wi = 0, ci = 0, n = 0;
      grpc::CompletionQueue cq;
      std::vector<Call> calls(static_cast<size_t>(std::min<size_t>(inflight, total)));
      // Starts calls[k]'s next heartbeat: the next worker or consumer in the cycle that has
      // none in flight.
      auto start = [&](size_t k) {
        Call& call = calls[k];
        CoordinatorService::Stub* stub = stubs[k % stubs.size()].get();
        call.ctx = std::make_unique<grpc::ClientContext>();
        call.ctx->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
        // Across the restart, calls wait for the connection (as real callers retry) instead of
        // failing at once in a tight loop.
        if (storm) call.ctx->set_wait_for_ready(true);
        for (;; ++n) {
          if ((n % stride == 0 || my_consumers.empty()) && !my_workers.empty()) {
            const size_t i = my_workers[wi++ % my_workers.size()];
            if (worker_busy[i]) continue;
            worker_busy[i] = 1;
            ++n;
            Worker& w = workers[i];
            call.worker = true;
            call.index = i;
            const absl::Time now = absl::Now();
            if (w.last != absl::InfinitePast()) w.max_gap = std::max(w.max_gap, now - w.last);
            if (lean) {
              if (w.request_stale) {
                FillWorkerHeartbeat(w, versioned, &worker_request);
                w.request = SerializedBytes(worker_request);
                w.request_stale = false;
              }
              const RawChannel& ch = raw_channels[k % raw_channels.size()];
              call.raw_reader =
                  StartRawCall(ch, *ch.worker_heartbeat, call.ctx.get(), w.request, &cq);
              call.raw_reader->Finish(&call.raw_response, &call.status, &call);
              return;
            }
            FillWorkerHeartbeat(w, versioned, &call.worker_request);
            call.worker_reader =
                stub->PrepareAsyncWorkerHeartbeat(call.ctx.get(), call.worker_request, &cq);
            call.worker_reader->StartCall();
            call.worker_reader->Finish(&call.worker_response, &call.status, &call);
            return;
          }
          const size_t i = my_consumers[ci++ % my_consumers.size()];
          if (consumer_busy[i]) continue;
          consumer_busy[i] = 1;
          ++n;
          Consumer& c = consumers[i];
          call.worker = false;
          call.index = i;
          if (lean) {
            if (c.request_stale) {
              FillConsumerHeartbeat(c, versioned, &consumer_request);
              c.request = SerializedBytes(consumer_request);
              c.request_stale = false;
            }
            const RawChannel& ch = raw_channels[k % raw_channels.size()];
            call.raw_reader =
                StartRawCall(ch, *ch.client_heartbeat, call.ctx.get(), c.request, &cq);
            call.raw_reader->Finish(&call.raw_response, &call.status, &call);
            return;
          }
          FillConsumerHeartbeat(c, versioned, &call.consumer_request);
          call.consumer_reader =
              stub->PrepareAsyncClientHeartbeat(call.ctx.get(), call.consumer_request, &cq);
          call.consumer_reader->StartCall();
          call.consumer_reader->Finish(&call.consumer_response, &call.status, &call);
          return;
        }
      };
      for (size_t k = 0; k < calls.size(); ++k) start(k);
      size_t outstanding = calls.size();
      void* tag = nullptr;
      bool ok = false;
      while (outstanding > 0 && cq.Next(&tag, &ok)) {
        Call& call = *static_cast<Call*>(tag);
        // --lean_generator: the answer arrived as bytes; parsed here as the typed reader
        // would have (a malformed answer counts as an error).
        bool parsed = true;
        if (lean && ok && call.status.ok()) {
          if (call.worker) {
            parsed = grpc::SerializationTraits<sluice::proto::WorkerHeartbeatResponse>::
                         Deserialize(&call.raw_response, &worker_response)
                             .ok();
          } else {
            parsed = grpc::SerializationTraits<sluice::proto::ClientHeartbeatResponse>::
                         Deserialize(&call.raw_response, &consumer_response)
                             .ok();
          }
        }
        if (call.worker) {
          Worker& w = workers[call.index];
          if (ok && call.status.ok() && parsed) {
            ApplyWorkerHeartbeat(lean ? worker_response : call.worker_response, &w);
            w.last = absl::Now();
            worker_beats.fetch_add(1, std::memory_order_relaxed);
            if (restarted.load(std::memory_order_acquire) && !worker_back[call.index]) {
              worker_back[call.index] = 1;
              back_workers.fetch_add(1, std::memory_order_relaxed);
            }
          } else {
            errors.fetch_add(1, std::memory_order_relaxed);
          }
          worker_busy[call.index] = 0;
        } else {
          Consumer& c = consumers[call.index];
          const sluice::proto::ClientHeartbeatResponse& resp =
              lean ? consumer_response : call.consumer_response;
          if (ok && call.status.ok() && parsed) {
            if (c.incarnation != resp.incarnation() || c.version != resp.version()) {
              c.request_stale = true;
            }
            c.incarnation = resp.incarnation();
            c.version = resp.version();
            if (resp.delta()) delta_answers.fetch_add(1, std::memory_order_relaxed);
            consumer_beats.fetch_add(1, std::memory_order_relaxed);
            if (restarted.load(std::memory_order_acquire) && !consumer_back[call.index]) {
              consumer_back[call.index] = 1;
              back_consumers.fetch_add(1, std::memory_order_relaxed);
            }
          } else {
            errors.fetch_add(1, std::memory_order_relaxed);
          }
          consumer_busy[call.index] = 0;
        }
        if (done.load(std::memory_order_relaxed)) {
          --outstanding;
        } else {
          start(static_cast<size_t>(&call - calls.data()));
        }
      }
      cq.Shutdown();
      while (cq.Next(&tag, &ok)) {
      }
    });
  }
  const absl::Time start = absl::Now();
  double coordinator_cpu0 = ProcessCpuSeconds(pid);
  const double self_cpu0 = SelfCpuSeconds();
  double coordinator_cpu_before_restart = 0;
  std::vector<int64_t> rss;
  const int seconds = absl::GetFlag(FLAGS_seconds);
  // --restart_storm: when the restarted coordinator was started, served, and every worker and
  // consumer had an answer from it (InfiniteFuture: not yet).
  absl::Time restart_at = absl::InfiniteFuture(), serving_at = absl::InfiniteFuture();
  absl::Time workers_back_at = absl::InfiniteFuture(), all_back_at = absl::InfiniteFuture();
  double load_at_restart = -1;
  for (int s = 0; s < seconds; ++s) {
    if (storm && s == absl::GetFlag(FLAGS_storm_after)) {
      load_at_restart = LoadAverage();
      coordinator_cpu_before_restart = ProcessCpuSeconds(pid) - coordinator_cpu0;
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      std::remove(port_file.c_str());
      std::vector<std::string> again = args;
      again[1] = absl::StrCat("--port=", port);
      restart_at = absl::Now();
      pid = spawn(again);
      coordinator_cpu0 = 0;  // a new process
      restarted.store(true, std::memory_order_release);
      if (pid == 0 || await_port(absl::Seconds(60)) != port) {
        std::cerr << "the restarted coordinator did not serve on port " << port << "\n";
        done = true;
        for (auto& th : pool) th.join();
        stop();
        return 1;
      }
      serving_at = absl::Now();
    }
    // Until the next second, watching for the storm to settle (every 10 ms).
    const absl::Time next = start + absl::Seconds(s + 1);
    while (absl::Now() < next) {
      if (storm && restarted.load() && all_back_at == absl::InfiniteFuture()) {
        if (workers_back_at == absl::InfiniteFuture() &&
            back_workers.load() == static_cast<int64_t>(workers.size())) {
          workers_back_at = absl::Now();
        }
        if (back_workers.load() == static_cast<int64_t>(workers.size()) &&
            back_consumers.load() == static_cast<int64_t>(consumers.size())) {
          all_back_at = absl::Now();
        }
      }
      absl::SleepFor(std::min(absl::Milliseconds(10), next - absl::Now()));
    }
    rss.push_back(RssKiB(pid));
  }
  done = true;
  for (auto& th : pool) th.join();
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - start);
  const double coordinator_cpu =
      coordinator_cpu_before_restart + ProcessCpuSeconds(pid) - coordinator_cpu0;
  const double self_cpu = SelfCpuSeconds() - self_cpu0;

  // The status comes in pages (the workers first): follow them, a bounded number.
  int64_t dead = 0;
  {
    sluice::proto::GetStatusRequest req;
    req.set_page_size(1000);
    for (int page = 0; page < 1000; ++page) {
      sluice::proto::GetStatusResponse status;
      grpc::ClientContext ctx;
      if (!setup->GetStatus(&ctx, req, &status).ok()) break;
      for (const auto& w : status.workers()) dead += w.alive() ? 0 : 1;
      if (status.next_page_token().empty() || status.workers_size() == 0) break;
      req.set_page_token(status.next_page_token());
    }
  }
  absl::Duration max_gap = absl::ZeroDuration();
  for (const Worker& w : workers) max_gap = std::max(max_gap, w.max_gap);
  const int64_t wb = worker_beats.load(), cb = consumer_beats.load();
  if (empty) std::printf("--empty: an empty gRPC server, not the coordinator (the floor)\n");
  std::printf("coordinator_bench: %d workers, %zu consumers in %d jobs (%lld tasks held), %d "
              "client threads x %d calls in flight on %d connections each, %.1f s, load "
              "average %.2f\n",
              num_workers, consumers.size(), num_jobs, static_cast<long long>(tasks_held),
              threads, inflight, channels, elapsed, LoadAverage());
  std::printf("heartbeats/s: %.0f (worker %.0f, consumer %.0f); errors %lld; versioned %s "
              "(%lld consumer answers were deltas); %s generator\n",
              (wb + cb) / elapsed, wb / elapsed, cb / elapsed, static_cast<long long>(errors),
              versioned ? "yes" : "no", static_cast<long long>(delta_answers.load()),
              !lean ? "typed"
              : client_retries ? "lean (pre-serialized requests)"
                               : "lean (pre-serialized requests, no client retries)");
  // CPU per heartbeat: what bounds the rate on a machine whose cores both processes share
  // (2 cores / (coordinator + load generator) is the ceiling there), and what the load (other
  // processes on the cores) does not change much.
  if (wb + cb > 0) {
    std::printf("CPU per heartbeat: coordinator %.1f us, load generator %.1f us (%.2f + %.2f "
                "cores busy)\n",
                coordinator_cpu * 1e6 / static_cast<double>(wb + cb),
                self_cpu * 1e6 / static_cast<double>(wb + cb), coordinator_cpu / elapsed,
                self_cpu / elapsed);
  }
  std::printf("false deaths: %lld (largest gap between one worker's heartbeats %s, "
              "worker_timeout %s)\n",
              static_cast<long long>(dead), absl::FormatDuration(max_gap).c_str(),
              absl::FormatDuration(absl::GetFlag(FLAGS_worker_timeout)).c_str());
  if (storm) {
    auto since_restart = [&](absl::Time t) {
      return t == absl::InfiniteFuture() ? std::string("never (within the run)")
                                         : absl::FormatDuration(t - restart_at);
    };
    std::printf("restart storm: %zu RANGES jobs; coordinator killed and restarted %d s into "
                "the run (load average %.2f then); serving after %s; every worker answered "
                "after %s; every worker and consumer after %s (steady state)\n",
                static_cast<size_t>(num_jobs), absl::GetFlag(FLAGS_storm_after),
                load_at_restart, since_restart(serving_at).c_str(),
                since_restart(workers_back_at).c_str(), since_restart(all_back_at).c_str());
  }
  if (!rss.empty()) {
    std::printf("coordinator RSS MiB: first %.1f, max %.1f, last %.1f (sampled every second)\n",
                rss.front() / 1024.0, *std::max_element(rss.begin(), rss.end()) / 1024.0,
                rss.back() / 1024.0);
    // Whether growth levels off: the RSS at the end of each tenth of the run.
    std::printf("coordinator RSS MiB by tenth of the run:");
    for (int tenth = 1; tenth <= 10; ++tenth) {
      size_t i = rss.size() * static_cast<size_t>(tenth) / 10;  // samples up to that point
      if (i > 0) --i;
      std::printf(" %.1f", rss[i] / 1024.0);
    }
    std::printf("\n");
  }
  stop();
  // --restart_storm: a storm that never settled fails the run too.
  return dead == 0 && (!storm || all_back_at != absl::InfiniteFuture()) ? 0 : 2;
}
