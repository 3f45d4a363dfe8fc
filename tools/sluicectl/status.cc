// sluicectl status --coordinator=HOST:PORT [--format=json] [--watch]: the coordinator's workers
// and jobs as a table (or one JSON object).
#include <algorithm>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "core/rpc/coordinator_call.h"
#include "core/util/json_value.h"
#include "proto/coordinator.grpc.pb.h"
#include "tools/sluicectl/commands.h"
#include "tools/sluicectl/security.h"

ABSL_FLAG(bool, watch, false,
          "status: refresh the table every --interval (clearing the screen) until interrupted "
          "or --watch_count frames were shown; throughput comes from consecutive frames.");
ABSL_FLAG(absl::Duration, interval, absl::Seconds(2), "status --watch: time between frames.");
ABSL_FLAG(int64_t, watch_count, 0, "status --watch: stop after this many frames; 0: never.");

namespace sluice {
namespace {

// GetStatus pages followed at most (each of the coordinator's --status_page_size entries): a
// bound on the loop, far above any fleet.
constexpr int64_t kMaxStatusPages = 100000;

const char* PolicyName(proto::ShardingPolicy p) {
  switch (p) {
    case proto::SHARDING_AUTO: return "AUTO";
    case proto::SHARDING_FILE: return "FILE";
    case proto::SHARDING_DATA: return "DATA";
    case proto::SHARDING_HINT: return "HINT";
    case proto::SHARDING_OFF: return "OFF";
    case proto::SHARDING_DYNAMIC: return "DYNAMIC";
    case proto::SHARDING_RANGES: return "RANGES";
    default: return "?";
  }
}

std::string FormatAge(double seconds) {
  if (seconds < 0) return "never";
  if (seconds < 100) return absl::StrFormat("%.1fs ago", seconds);
  return absl::StrFormat("%.0fs ago", seconds);
}

// Left-aligned columns separated by two spaces.
std::string FormatTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 2, ' ');
    }
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

int64_t TasksFinished(const proto::JobStatus& job) {
  int64_t n = 0;
  for (const proto::TaskInfo& t : job.tasks()) n += t.finished() ? 1 : 0;
  return n;
}

// The table's "finished" column: "released" for a job its consumers released (the
// coordinator's JobStatus.released: nobody reads it, no failure), "failed" for any other
// error, whatever its code, else yes / no.
std::string FinishedText(const proto::JobStatus& j) {
  if (j.released()) return "released";
  if (!j.error().empty()) return "failed";
  return j.finished() ? "yes" : "no";
}

// Finished tasks over tasks, as a percentage; 100% once the job finished.
std::string JobProgress(const proto::JobStatus& j) {
  if (j.finished()) return "100%";
  if (j.tasks_size() == 0) return "0%";
  return absl::StrFormat("%.0f%%", 100.0 * static_cast<double>(TasksFinished(j)) / j.tasks_size());
}

// Steps delivered per second between two samples of the same job; "-" without a previous one.
std::string JobThroughput(const proto::JobStatus& j, const proto::GetStatusResponse* previous,
                          double elapsed_seconds) {
  if (previous == nullptr || elapsed_seconds <= 0) return "-";
  for (const proto::JobStatus& p : previous->jobs()) {
    if (p.job_id() != j.job_id()) continue;
    const int64_t delta = std::max<int64_t>(j.steps_delivered() - p.steps_delivered(), 0);
    return absl::StrFormat("%.1f", static_cast<double>(delta) / elapsed_seconds);
  }
  return "-";
}

// Jobs shared across trainers: one row per trainer, joined ones then the ones a worker dropped
// (empty when there is none).
std::string TrainersTable(const proto::GetStatusResponse& r) {
  std::vector<std::vector<std::string>> rows = {
      {"JOB", "TRAINER", "STATE", "STEPS READ", "SKIPPED STEPS", "LAG STEPS"}};
  for (const proto::JobStatus& j : r.jobs()) {
    for (const std::string& id : j.trainer_ids()) {
      std::vector<std::string> row = {absl::StrCat(j.job_id()), id, "joined", "-", "-", "-"};
      for (const proto::TrainerProgress& t : j.trainer_progress()) {
        if (t.trainer_id() != id) continue;
        row = {absl::StrCat(j.job_id()), id, "joined", absl::StrCat(t.steps_read()),
               absl::StrCat(t.skipped_steps()), absl::StrCat(t.lag_steps())};
      }
      rows.push_back(std::move(row));
    }
    for (const std::string& id : j.dropped_trainer_ids()) {
      rows.push_back({absl::StrCat(j.job_id()), id, "dropped", "-", "-", "-"});
    }
  }
  return rows.size() == 1 ? std::string() : absl::StrCat("\nTRAINERS\n", FormatTable(rows));
}

// `previous`, taken `elapsed_seconds` earlier, gives the throughput column (nullptr: "-").
// The autoscaling decision and each running job's load (docs/AUTOSCALING.md).
std::string ScalingText(const proto::GetStatusResponse& r) {
  const proto::ScalingStatus& sc = r.scaling();
  std::string out = absl::StrFormat(
      "\nAUTOSCALING\ndesired workers: %d (live %d, bounds [%d, %d]; %d decision(s), every "
      "%.3gs; reports refused %d, clamped %d)\n",
      sc.desired_workers(), sc.live_workers(), sc.min_workers(), sc.max_workers(), sc.decisions(),
      sc.decision_interval_seconds(), sc.reports_refused(), sc.reports_clamped());
  if (!sc.last_change().empty()) absl::StrAppend(&out, "last change: ", sc.last_change(), "\n");
  for (const proto::JobStatus& j : r.jobs()) {
    if (!j.has_load() || j.finished()) continue;
    const proto::JobLoad& l = j.load();
    absl::StrAppend(&out, absl::StrFormat(
        "job %d: %s; consumers' wait %.1f%%, %.3g steps/s per consumer, workers produce %.3g "
        "steps/s; %d worker(s) (CPU busy %.0f%%); desired workers: %d\n",
        j.job_id(), l.bound(), 100 * l.wait_fraction(), l.steps_per_second(),
        l.produced_steps_per_second(), l.workers(), 100 * l.worker_cpu_busy(),
        l.desired_workers()));
  }
  return out;
}

std::string StatusTable(const std::string& coordinator, const proto::GetStatusResponse& r,
                        const proto::GetStatusResponse* previous = nullptr,
                        double elapsed_seconds = 0) {
  int64_t alive = 0;
  for (const proto::WorkerStatus& w : r.workers()) alive += w.alive() ? 1 : 0;
  std::string out = absl::StrCat("coordinator ", coordinator, ": ", r.workers_size(),
                                 " worker(s), ", alive, " alive; ", r.jobs_size(), " job(s); ",
                                 r.num_datasets(), " dataset(s)\n\nWORKERS\n");
  std::vector<std::vector<std::string>> workers = {
      {"ID", "ADDRESS", "ALIVE", "HEARTBEAT", "TASKS"}};
  for (const proto::WorkerStatus& w : r.workers()) {
    workers.push_back({absl::StrCat(w.worker_id()), w.address(), w.alive() ? "yes" : "no",
                       FormatAge(w.seconds_since_heartbeat()),
                       w.task_ids().empty() ? "-" : absl::StrJoin(w.task_ids(), ",")});
  }
  out += FormatTable(workers);
  out += "\nJOBS\n";
  std::vector<std::vector<std::string>> jobs = {{"ID", "NAME", "DATASET", "CONSUMERS",
                                                 "REPLICAS", "POLICY", "MODE", "TASKS FINISHED",
                                                 "PROGRESS", "STEPS DELIVERED", "STEPS/S",
                                                 "FINISHED"}};
  for (const proto::JobStatus& j : r.jobs()) {
    const proto::JobOptions& o = j.options();
    jobs.push_back({absl::StrCat(j.job_id()), j.job_name().empty() ? "-" : j.job_name(),
                    o.dataset_id(), absl::StrCat(o.num_consumers()),
                    absl::StrCat(o.replicas_per_consumer()), PolicyName(o.sharding_policy()),
                    o.read_mode() == proto::READ_MODE_INDEPENDENT ? "independent" : "coordinated",
                    absl::StrCat(TasksFinished(j), "/", j.tasks_size()), JobProgress(j),
                    absl::StrCat(j.steps_delivered()),
                    JobThroughput(j, previous, elapsed_seconds),
                    FinishedText(j)});
  }
  out += FormatTable(jobs);
  out += ScalingText(r);
  out += TrainersTable(r);
  // Jobs ended before their data, failed or released: the error their consumers get
  // (docs/SERVICE.md, "Failure policy").
  for (const proto::JobStatus& j : r.jobs()) {
    if (!j.error().empty()) absl::StrAppend(&out, "\njob ", j.job_id(), ": ", j.error(), "\n");
  }
  return out;
}

std::string StatusJson(const proto::GetStatusResponse& r) {
  std::vector<JsonValue> workers;
  for (const proto::WorkerStatus& w : r.workers()) {
    std::vector<JsonValue> tasks;
    for (int64_t t : w.task_ids()) tasks.push_back(JsonValue::Integer(t));
    workers.push_back(JsonValue::Object({
        {"worker_id", JsonValue::Integer(w.worker_id())},
        {"address", JsonValue::String(w.address())},
        {"alive", JsonValue::Bool(w.alive())},
        {"seconds_since_heartbeat", JsonValue::Number(w.seconds_since_heartbeat())},
        {"task_ids", JsonValue::Array(std::move(tasks))},
    }));
  }
  std::vector<JsonValue> jobs;
  for (const proto::JobStatus& j : r.jobs()) {
    const proto::JobOptions& o = j.options();
    std::vector<JsonValue> tasks;
    for (const proto::TaskInfo& t : j.tasks()) {
      tasks.push_back(JsonValue::Object({
          {"task_id", JsonValue::Integer(t.task_id())},
          {"task_index", JsonValue::Integer(t.task_index())},
          {"worker_address", JsonValue::String(t.worker_address())},
          {"finished", JsonValue::Bool(t.finished())},
      }));
    }
    std::vector<JsonValue::Member> fields = {
        {"job_id", JsonValue::Integer(j.job_id())},
        {"job_name", JsonValue::String(j.job_name())},
        {"dataset_id", JsonValue::String(o.dataset_id())},
        {"num_consumers", JsonValue::Integer(o.num_consumers())},
        {"replicas_per_consumer", JsonValue::Integer(o.replicas_per_consumer())},
        {"sharding_policy", JsonValue::String(PolicyName(o.sharding_policy()))},
        {"read_mode", JsonValue::String(o.read_mode() == proto::READ_MODE_INDEPENDENT
                                            ? "independent"
                                            : "coordinated")},
        {"tasks", JsonValue::Array(std::move(tasks))},
        {"tasks_finished", JsonValue::Integer(TasksFinished(j))},
        {"steps_delivered", JsonValue::Integer(j.steps_delivered())},
        {"bytes_delivered", JsonValue::Integer(j.bytes_delivered())},
        {"steps_produced", JsonValue::Integer(j.steps_produced())},
        {"finished", JsonValue::Bool(j.finished())},
        {"released", JsonValue::Bool(j.released())},
    };
    if (!j.error().empty()) fields.emplace_back("error", JsonValue::String(j.error()));
    if (j.has_load()) {
      const proto::JobLoad& l = j.load();
      fields.emplace_back("load", JsonValue::Object({
          {"wait_fraction", JsonValue::Number(l.wait_fraction())},
          {"steps_per_second", JsonValue::Number(l.steps_per_second())},
          {"produced_steps_per_second", JsonValue::Number(l.produced_steps_per_second())},
          {"workers", JsonValue::Integer(l.workers())},
          {"worker_cpu_busy", JsonValue::Number(l.worker_cpu_busy())},
          {"consumers_reporting", JsonValue::Integer(l.consumers_reporting())},
          {"bound", JsonValue::String(l.bound())},
          {"desired_workers", JsonValue::Integer(l.desired_workers())},
      }));
    }
    if (j.trainer_ids_size() > 0) {
      std::vector<JsonValue> trainers;
      for (const std::string& id : j.trainer_ids()) {
        std::vector<JsonValue::Member> t = {{"trainer_id", JsonValue::String(id)}};
        for (const proto::TrainerProgress& p : j.trainer_progress()) {
          if (p.trainer_id() != id) continue;
          t.emplace_back("steps_read", JsonValue::Integer(p.steps_read()));
          t.emplace_back("skipped_steps", JsonValue::Integer(p.skipped_steps()));
          t.emplace_back("lag_steps", JsonValue::Integer(p.lag_steps()));
        }
        trainers.push_back(JsonValue::Object(std::move(t)));
      }
      fields.emplace_back("trainers", JsonValue::Array(std::move(trainers)));
    }
    if (j.dropped_trainer_ids_size() > 0) {
      std::vector<JsonValue> dropped;
      for (const std::string& id : j.dropped_trainer_ids()) dropped.push_back(JsonValue::String(id));
      fields.emplace_back("dropped_trainers", JsonValue::Array(std::move(dropped)));
    }
    jobs.push_back(JsonValue::Object(std::move(fields)));
  }
  return JsonValue::Object({
                               {"workers", JsonValue::Array(std::move(workers))},
                               {"jobs", JsonValue::Array(std::move(jobs))},
                               {"num_datasets", JsonValue::Integer(r.num_datasets())},
                               {"scaling", JsonValue::Object({
                                   {"desired_workers",
                                    JsonValue::Integer(r.scaling().desired_workers())},
                                   {"live_workers", JsonValue::Integer(r.scaling().live_workers())},
                                   {"min_workers", JsonValue::Integer(r.scaling().min_workers())},
                                   {"max_workers", JsonValue::Integer(r.scaling().max_workers())},
                                   {"decisions", JsonValue::Integer(r.scaling().decisions())},
                                   {"reports_refused",
                                    JsonValue::Integer(r.scaling().reports_refused())},
                                   {"reports_clamped",
                                    JsonValue::Integer(r.scaling().reports_clamped())},
                                   {"last_change", JsonValue::String(r.scaling().last_change())},
                               })},
                           })
      .ToString();
}

int StatusMain(const std::vector<std::string>& positional) {
  if (!positional.empty()) {
    return ReportUsageError("status", absl::StrCat("unexpected argument '", positional[0], "'"));
  }
  const std::string coordinator = absl::GetFlag(FLAGS_coordinator);
  if (coordinator.empty()) return ReportUsageError("status", "--coordinator is required");
  const std::string format = absl::GetFlag(FLAGS_format);
  // "tf" is the shared flag's default; for status it means the table.
  if (format != "tf" && format != "table" && format != "json") {
    return ReportUsageError("status",
                            absl::StrCat("--format must be table or json, got '", format, "'"));
  }
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = SluicectlChannel(coordinator);
  if (!channel.ok()) return ReportError(channel.status());
  auto stub = proto::CoordinatorService::NewStub(*channel);
  const bool watch = absl::GetFlag(FLAGS_watch);
  const absl::Duration interval = absl::GetFlag(FLAGS_interval);
  const int64_t watch_count = absl::GetFlag(FLAGS_watch_count);
  if (watch && (interval <= absl::ZeroDuration() || watch_count < 0)) {
    return ReportUsageError("status", "--interval must be positive and --watch_count >= 0");
  }
  std::optional<proto::GetStatusResponse> previous;
  absl::Time previous_at;
  for (int64_t frame = 1;; ++frame) {
    // The status comes in pages (proto GetStatusRequest) of the coordinator's size
    // (--status_page_size): follow them into one response, each page a bounded call.
    proto::GetStatusResponse response;
    proto::GetStatusRequest request;
    absl::Status s;
    for (int64_t page = 0; page < kMaxStatusPages; ++page) {
      proto::GetStatusResponse part;
      s = CallCoordinator(coordinator, kRpcDeadline, absl::GetFlag(FLAGS_retry_deadline),
                          "GetStatus", [&](grpc::ClientContext* c) {
                            return stub->GetStatus(c, request, &part);
                          });
      if (!s.ok()) break;
      response.mutable_workers()->MergeFrom(part.workers());
      response.mutable_jobs()->MergeFrom(part.jobs());
      response.set_num_datasets(part.num_datasets());
      *response.mutable_scaling() = part.scaling();
      if (part.next_page_token().empty()) break;
      if (part.next_page_token() == request.page_token()) {
        s = absl::DataLossError(absl::StrCat("GetStatus: the coordinator returned page token \"",
                                             part.next_page_token(), "\" twice"));
        break;
      }
      request.set_page_token(part.next_page_token());
    }
    if (!s.ok()) return ReportError(s);
    const absl::Time now = absl::Now();
    if (format == "json") {
      std::cout << StatusJson(response) << "\n";
    } else {
      // Clear the screen and home the cursor, then the frame.
      if (watch) std::cout << "\x1b[H\x1b[2J";
      std::cout << StatusTable(coordinator, response, previous ? &*previous : nullptr,
                               previous ? absl::ToDoubleSeconds(now - previous_at) : 0);
      if (watch) {
        std::cout << "\n" << absl::FormatTime("%H:%M:%S", now, absl::LocalTimeZone())
                  << "  every " << absl::FormatDuration(interval) << ", frame " << frame
                  << (watch_count > 0 ? absl::StrCat(" of ", watch_count) : std::string())
                  << "\n";
      }
    }
    std::cout.flush();
    if (!watch || (watch_count > 0 && frame >= watch_count)) break;
    previous = std::move(response);
    previous_at = now;
    absl::SleepFor(interval);
  }
  return kExitOk;
}

}  // namespace

SLUICECTL_REGISTER_COMMAND({
    .name = "status",
    .synopsis = "status --coordinator=HOST:PORT [--format=table|json] [--watch [--interval=2s] "
                "[--watch_count=N]]",
    .help = "Prints the coordinator's workers (address, liveness, heartbeat age, tasks) and\n"
            "jobs (name, consumers, replicas, policy, read mode, tasks finished, progress,\n"
            "steps delivered) as a table, or as one JSON object with --format=json.\n"
            "--watch clears the screen and prints the table again every --interval, with each\n"
            "job's throughput (steps delivered per second since the previous frame), until\n"
            "interrupted or --watch_count frames were shown.",
    .flags = {"coordinator", "format", "retry_deadline", "watch", "interval", "watch_count"},
    .run = &StatusMain,
});

}  // namespace sluice
