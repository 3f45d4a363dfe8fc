// status_page_bench: what one GetStatus call costs the coordinator (it holds the coordinator's
// mutex for the whole call) when the status is answered in one piece, as it was, and one page
// at a time (docs/SERVICE.md, "Bounded state"). An in-process Coordinator (no network, no
// journal) with --workers workers and --jobs jobs of --tasks_per_job tasks each; prints CPU
// microseconds per call (thread CPU time: the machine is shared, so wall time would measure
// the neighbours) and the load average.
//
//   build/bench/status_page_bench [--workers=1000] [--jobs=2000] [--tasks_per_job=4]
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "server/coordinator.h"

ABSL_FLAG(int, workers, 1000, "Workers (each registered by one heartbeat).");
ABSL_FLAG(int, jobs, 2000, "Jobs (SHARDING_OFF, --tasks_per_job tasks each).");
ABSL_FLAG(int, tasks_per_job, 4, "Tasks per job.");
ABSL_FLAG(int, calls, 50, "GetStatus calls measured per mode.");

namespace {

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double LoadAverage() {
  double load[1] = {0};
  return getloadavg(load, 1) == 1 ? load[0] : -1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int workers = absl::GetFlag(FLAGS_workers), jobs = absl::GetFlag(FLAGS_jobs);
  const int calls = absl::GetFlag(FLAGS_calls);
  sluice::CoordinatorOptions options;
  options.log = [](absl::string_view) {};
  options.worker_timeout = absl::Hours(1);
  options.max_jobs_per_identity = 0;
  options.max_status_page_size = 1 << 30;  // so that one call can still answer everything
  absl::StatusOr<std::unique_ptr<sluice::Coordinator>> created =
      sluice::Coordinator::Create(options);
  if (!created.ok()) {
    std::fprintf(stderr, "Create: %s\n", created.status().ToString().c_str());
    return 1;
  }
  sluice::Coordinator& c = **created;
  for (int w = 0; w < workers; ++w) {
    sluice::proto::WorkerHeartbeatRequest req;
    req.set_wire_version(sluice::proto::WIRE_VERSION_1);
    req.set_worker_address(absl::StrCat("10.0.", w / 250, ".", w % 250, ":7000"));
    sluice::proto::WorkerHeartbeatResponse resp;
    if (!c.WorkerHeartbeat(req, &resp).ok()) return 1;
  }
  sluice::proto::RegisterDatasetRequest reg;
  reg.set_wire_version(sluice::proto::WIRE_VERSION_1);
  reg.set_pipeline("range(4096).batch(8)");
  sluice::proto::RegisterDatasetResponse reg_resp;
  if (!c.RegisterDataset(reg, &reg_resp).ok()) return 1;
  for (int j = 0; j < jobs; ++j) {
    sluice::proto::GetOrCreateJobRequest req;
    req.set_wire_version(sluice::proto::WIRE_VERSION_1);
    sluice::proto::JobOptions* o = req.mutable_options();
    o->set_dataset_id(reg_resp.dataset_id());
    o->set_num_consumers(1);
    o->set_replicas_per_consumer(1);
    o->set_sharding_policy(sluice::proto::SHARDING_OFF);
    o->set_num_tasks(absl::GetFlag(FLAGS_tasks_per_job));
    sluice::proto::GetOrCreateJobResponse resp;
    if (absl::Status s = c.GetOrCreateJob(req, &resp); !s.ok()) {
      std::fprintf(stderr, "GetOrCreateJob: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  auto measure = [&](int64_t page_size, const std::string& token) {
    size_t entries = 0;
    const double t0 = ThreadCpuSeconds();
    for (int i = 0; i < calls; ++i) {
      sluice::proto::GetStatusRequest req;
      req.set_page_size(page_size);
      req.set_page_token(token);
      sluice::proto::GetStatusResponse resp;
      if (!c.GetStatus(req, &resp).ok()) std::abort();
      entries = resp.workers_size() + resp.jobs_size();
    }
    std::printf("  page_size %10lld from \"%s\": %6zu entries a call, %9.1f us CPU a call\n",
                static_cast<long long>(page_size), token.c_str(), entries,
                (ThreadCpuSeconds() - t0) / calls * 1e6);
  };
  std::printf("status_page_bench: %d workers, %d jobs x %d tasks, %d calls each, load average "
              "%.2f\n",
              workers, jobs, absl::GetFlag(FLAGS_tasks_per_job), calls, LoadAverage());
  measure(int64_t{1} << 30, "");  // the whole status in one call (before paging)
  measure(100, "");    // the default page (--status_page_size): the first 100 workers
  measure(100, "j1");  // a default page of jobs (each with its tasks)
  measure(1000, "j1");  // the largest page by default (max_status_page_size)
  std::printf("load average after: %.2f\n", LoadAverage());
  return 0;
}
