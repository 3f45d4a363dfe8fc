// sluicectl against a Sluice service (docs/SERVICE.md):
//
//   sluicectl register --coordinator=HOST:PORT --pipeline=EXPR
//       registers the pipeline and prints its dataset id ("ds-" + 16 hex digits).
//   sluicectl status --coordinator=HOST:PORT [--format=json]
//       the coordinator's workers and jobs as a table (or one JSON object).
//   sluicectl run / element-spec --coordinator=HOST:PORT ...
//       (the commands of sluicectl_local.cc) read through the service: this file registers
//       their coordinator dataset maker.
//
// The maker registers the pipeline, asks the coordinator for the per-replica element spec of
// the job's layout (GetElementSpec over RPC; no job is created, so `element-spec` leaves no
// trace), and defers joining the job (GetOrCreateJob, through DistributeDatasetFromService) to
// the first iterator, so only `run` creates or joins a job.
#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/service_job_options.h"
#include "client/service_step_source.h"
#include "tools/sluicectl/commands.h"
#include "tools/sluicectl/security.h"
#include "sluice/dataset.h"
#include "core/rpc/grpc_status.h"
#include "core/util/json_value.h"
#include "core/tensor/proto_convert.h"
#include "core/util/status_macros.h"
#include "proto/coordinator.grpc.pb.h"
#include "sluice/service.h"

ABSL_FLAG(std::string, job, "",
          "Service mode: the job's name; consumers naming the same job share it (empty: a job "
          "of this process alone).");
ABSL_FLAG(int64_t, consumer_index, 0, "Service mode: this consumer among --num_consumers.");
ABSL_FLAG(int64_t, num_consumers, 1,
          "Service mode: consumer (trainer) processes of the job, each with --devices replicas.");
ABSL_FLAG(std::string, sharding_policy, "AUTO",
          "Service mode: how the job's tasks share the data: AUTO, FILE, DATA, HINT, OFF or "
          "DYNAMIC (docs/SERVICE.md).");
ABSL_FLAG(std::string, read_mode, "coordinated",
          "Service mode: coordinated (every step is one global batch, all consumers in "
          "lockstep) or independent (each consumer reads its own stream).");
ABSL_FLAG(int64_t, num_tasks, 0,
          "Service mode, static policies: number of tasks; 0: one per registered worker.");
ABSL_FLAG(std::string, shuffle, "none",
          "Service mode, --sharding_policy=RANGES: none (record order), full (a seeded "
          "permutation of every record) or block (seeded blocks, shuffled within).");
ABSL_FLAG(int64_t, shuffle_block_size, 0,
          "Service mode, --shuffle=block: records per block; 0: the coordinator's default.");
ABSL_FLAG(int64_t, epochs, 1,
          "Service mode, --sharding_policy=RANGES: epochs, each reshuffled with (seed, epoch).");
ABSL_FLAG(int64_t, range_steps, 0,
          "Service mode, --sharding_policy=RANGES: global steps per range handed to a worker; "
          "0: the coordinator's default.");
ABSL_FLAG(std::string, resume_state, "",
          "Service mode: a file written by --save_state; the run continues the sequence that "
          "run had reached (same pipeline, policy and order; any number of workers).");
ABSL_FLAG(absl::Duration, retry_deadline, absl::Seconds(60),
          "Service mode: how long an unavailable coordinator or worker is retried before the "
          "command fails.");

ABSL_FLAG(bool, watch, false,
          "status: refresh the table every --interval (clearing the screen) until interrupted "
          "or --watch_count frames were shown; throughput comes from consecutive frames.");
ABSL_FLAG(absl::Duration, interval, absl::Seconds(2), "status --watch: time between frames.");
ABSL_FLAG(int64_t, watch_count, 0, "status --watch: stop after this many frames; 0: never.");
namespace sluice {
namespace {

// Flags shared by the service paths, read and checked once.
struct ServiceFlags {
  std::string coordinator;
  ServiceOptions options;  // coordinator_address filled, the rest from the flags
};

absl::StatusOr<ServiceShardingPolicy> ParseShardingPolicy(const std::string& text) {
  const std::string p = absl::AsciiStrToUpper(text);
  if (p == "AUTO") return ServiceShardingPolicy::kAuto;
  if (p == "FILE") return ServiceShardingPolicy::kFile;
  if (p == "DATA") return ServiceShardingPolicy::kData;
  if (p == "HINT") return ServiceShardingPolicy::kHint;
  if (p == "OFF") return ServiceShardingPolicy::kOff;
  if (p == "DYNAMIC") return ServiceShardingPolicy::kDynamic;
  if (p == "RANGES") return ServiceShardingPolicy::kRanges;
  return absl::InvalidArgumentError(absl::StrCat(
      "--sharding_policy must be AUTO, FILE, DATA, HINT, OFF, DYNAMIC or RANGES, got '", text,
      "'"));
}

absl::StatusOr<ServiceShuffle> ParseShuffle(const std::string& text) {
  const std::string s = absl::AsciiStrToLower(text);
  if (s == "none") return ServiceShuffle::kNone;
  if (s == "full") return ServiceShuffle::kFull;
  if (s == "block") return ServiceShuffle::kBlock;
  return absl::InvalidArgumentError(
      absl::StrCat("--shuffle must be none, full or block, got '", text, "'"));
}

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

// INVALID_ARGUMENT naming the flag for bad values (sluicectl reports them as usage errors).
absl::StatusOr<ServiceFlags> ReadServiceFlags() {
  ServiceFlags f;
  f.coordinator = absl::GetFlag(FLAGS_coordinator);
  if (f.coordinator.empty()) {
    return absl::InvalidArgumentError("--coordinator=HOST:PORT is required");
  }
  ServiceOptions& o = f.options;
  o.coordinator_address = f.coordinator;
  o.job_name = absl::GetFlag(FLAGS_job);
  o.num_consumers = absl::GetFlag(FLAGS_num_consumers);
  o.consumer_index = absl::GetFlag(FLAGS_consumer_index);
  if (o.num_consumers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--num_consumers must be at least 1, got ", o.num_consumers));
  }
  if (o.consumer_index < 0 || o.consumer_index >= o.num_consumers) {
    return absl::InvalidArgumentError(absl::StrCat("--consumer_index must be in [0, ",
                                                   o.num_consumers, "), got ",
                                                   o.consumer_index));
  }
  ASSIGN_OR_RETURN(o.sharding_policy, ParseShardingPolicy(absl::GetFlag(FLAGS_sharding_policy)));
  const std::string mode = absl::AsciiStrToLower(absl::GetFlag(FLAGS_read_mode));
  if (mode == "coordinated") {
    o.read_mode = ServiceReadMode::kCoordinated;
  } else if (mode == "independent") {
    o.read_mode = ServiceReadMode::kIndependent;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--read_mode must be coordinated or independent, got '", absl::GetFlag(FLAGS_read_mode),
        "'"));
  }
  o.num_tasks = absl::GetFlag(FLAGS_num_tasks);
  if (o.num_tasks < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--num_tasks must be non-negative, got ", o.num_tasks));
  }
  ASSIGN_OR_RETURN(o.security, SluicectlSecurity());
  o.retry_deadline = absl::GetFlag(FLAGS_retry_deadline);
  if (o.retry_deadline < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--retry_deadline must be non-negative");
  }
  o.order.seed = static_cast<uint64_t>(absl::GetFlag(FLAGS_seed));
  ASSIGN_OR_RETURN(o.order.shuffle, ParseShuffle(absl::GetFlag(FLAGS_shuffle)));
  o.order.shuffle_block_size = absl::GetFlag(FLAGS_shuffle_block_size);
  o.order.num_epochs = absl::GetFlag(FLAGS_epochs);
  o.order.range_steps = absl::GetFlag(FLAGS_range_steps);
  if (o.order.num_epochs < 1 || o.order.range_steps < 0 || o.order.shuffle_block_size < 0) {
    return absl::InvalidArgumentError(
        "--epochs must be at least 1; --range_steps and --shuffle_block_size non-negative");
  }
  if (const std::string path = absl::GetFlag(FLAGS_resume_state); !path.empty()) {
    std::ifstream in(path);
    if (!in) {
      return absl::InvalidArgumentError(
          absl::StrCat("--resume_state: cannot read '", path, "'"));
    }
    std::stringstream bytes;
    bytes << in.rdbuf();
    absl::StatusOr<IteratorCheckpoint> c = IteratorCheckpoint::Parse(bytes.str());
    if (!c.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--resume_state '", path, "': ", c.status().message()));
    }
    o.resume_from = *std::move(c);
  }
  return f;
}

// One coordinator RPC, retried with backoff while UNAVAILABLE / DEADLINE_EXCEEDED until
// `retry_deadline`; errors name the RPC and the coordinator.
template <typename Rpc>
absl::Status CallCoordinator(const std::string& address, absl::Duration retry_deadline,
                             const char* what, Rpc rpc) {
  const absl::Time give_up = absl::Now() + retry_deadline;
  absl::Duration backoff = absl::Milliseconds(20);
  while (true) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    absl::Status s = FromGrpcStatus(rpc(&context));
    if (s.ok()) return s;
    const bool retry = s.code() == absl::StatusCode::kUnavailable ||
                       s.code() == absl::StatusCode::kDeadlineExceeded;
    if (!retry || absl::Now() + backoff > give_up) {
      return absl::Status(s.code(),
                          absl::StrCat(what, " on coordinator ", address, ": ", s.message()));
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(1));
  }
}

// Adapts a DistributedIterator (from DistributeDatasetFromService) to the StepSource the
// sluicectl DistributedDataset wants. Not thread-safe, as StepSource.
class IteratorStepSource : public StepSource {
 public:
  explicit IteratorStepSource(DistributedIterator it) : it_(std::move(it)) {}

  absl::Status GetNextStep(std::vector<Element>* replicas, bool* end_of_data) override {
    absl::StatusOr<PerReplica<Element>> x = it_.GetNext();
    if (absl::IsOutOfRange(x.status())) {
      *end_of_data = true;
      return absl::OkStatus();
    }
    RETURN_IF_ERROR(x.status());
    *end_of_data = false;
    *replicas = x->values();
    return absl::OkStatus();
  }

  absl::Status GetNextStepPadded(std::vector<Element>* replicas, bool* end_of_data) override {
    ASSIGN_OR_RETURN(std::optional<PerReplica<Element>> x, it_.GetNextAsOptional());
    *end_of_data = !x.has_value();
    if (x.has_value()) *replicas = x->values();
    return absl::OkStatus();
  }

  // The wrapped iterator returned exactly the steps this source did.
  absl::StatusOr<IteratorCheckpoint> CheckpointAfter(int64_t) const override {
    return it_.Checkpoint();
  }

 private:
  DistributedIterator it_;
};

absl::StatusOr<SluicectlDataset> MakeServiceDataset(const SluicectlPipelineArgs& args) {
  ASSIGN_OR_RETURN(ServiceFlags flags, ReadServiceFlags());
  // Parsed here too: `run` needs the cardinality, and the service client sends the graph.
  ASSIGN_OR_RETURN(Dataset dataset, Dataset::Parse(args.pipeline));
  ASSIGN_OR_RETURN(MirroredStrategy strategy, MirroredStrategy::Create(args.devices));
  const ServiceOptions& options = flags.options;
  const int64_t replicas = strategy.num_local_replicas();

  ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, SluicectlChannel(flags.coordinator));
  auto stub = proto::CoordinatorService::NewStub(channel);
  proto::RegisterDatasetRequest reg;
  reg.set_wire_version(proto::WIRE_VERSION_1);
  reg.set_pipeline(args.pipeline);
  proto::RegisterDatasetResponse reg_response;
  RETURN_IF_ERROR(CallCoordinator(flags.coordinator, options.retry_deadline, "RegisterDataset",
                                  [&](grpc::ClientContext* c) {
                                    return stub->RegisterDataset(c, reg, &reg_response);
                                  }));
  proto::GetElementSpecRequest spec_request;
  *spec_request.mutable_options() = JobOptionsProto(options, reg_response.dataset_id(), replicas);
  proto::GetElementSpecResponse spec_response;
  RETURN_IF_ERROR(CallCoordinator(flags.coordinator, options.retry_deadline, "GetElementSpec",
                                  [&](grpc::ClientContext* c) {
                                    return stub->GetElementSpec(c, spec_request, &spec_response);
                                  }));
  ASSIGN_OR_RETURN(ElementSpec replica_spec,
                   ElementSpecFromProto(spec_response.per_replica_spec()));
  DistributedElementSpec spec = replica_spec.Map([replicas](const TensorSpec& s) {
    return PerReplicaSpec{std::vector<TensorSpec>(static_cast<size_t>(replicas), s)};
  });

  StepSourceFactory factory = [strategy, dataset,
                               options]() -> absl::StatusOr<std::unique_ptr<StepSource>> {
    ASSIGN_OR_RETURN(DistributedDataset dist,
                     DistributeDatasetFromService(strategy, dataset, options));
    ASSIGN_OR_RETURN(DistributedIterator it, dist.MakeIterator());
    return std::unique_ptr<StepSource>(new IteratorStepSource(std::move(it)));
  };
  return SluicectlDataset{DistributedDataset(std::move(spec), std::move(factory)),
                          dataset.Cardinality()};
}

const bool kCoordinatorMakerRegistered = RegisterCoordinatorDatasetMaker(&MakeServiceDataset);

// --- register ---------------------------------------------------------------------------------

int RegisterMain(const std::vector<std::string>& positional) {
  if (!positional.empty()) {
    return ReportUsageError("register", absl::StrCat("unexpected argument '", positional[0],
                                                     "' (flags take the form --name=value)"));
  }
  const std::string coordinator = absl::GetFlag(FLAGS_coordinator);
  if (coordinator.empty()) return ReportUsageError("register", "--coordinator is required");
  const std::string pipeline = absl::GetFlag(FLAGS_pipeline);
  if (pipeline.empty()) return ReportUsageError("register", "--pipeline is required");
  // The coordinator parses the expression: a malformed one comes back as its INVALID_ARGUMENT.
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = SluicectlChannel(coordinator);
  if (!channel.ok()) return ReportError(channel.status());
  auto stub = proto::CoordinatorService::NewStub(*channel);
  proto::RegisterDatasetRequest request;
  request.set_wire_version(proto::WIRE_VERSION_1);
  request.set_pipeline(pipeline);
  proto::RegisterDatasetResponse response;
  absl::Status s = CallCoordinator(coordinator, absl::GetFlag(FLAGS_retry_deadline),
                                   "RegisterDataset", [&](grpc::ClientContext* c) {
                                     return stub->RegisterDataset(c, request, &response);
                                   });
  if (!s.ok()) return ReportError(s);
  std::cout << response.dataset_id() << "\n";
  return kExitOk;
}

// --- status -----------------------------------------------------------------------------------

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

// `previous`, taken `elapsed_seconds` earlier, gives the throughput column (nullptr: "-").
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
                    JobThroughput(j, previous, elapsed_seconds), j.finished() ? "yes" : "no"});
  }
  out += FormatTable(jobs);
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
    jobs.push_back(JsonValue::Object({
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
    }));
  }
  return JsonValue::Object({
                               {"workers", JsonValue::Array(std::move(workers))},
                               {"jobs", JsonValue::Array(std::move(jobs))},
                               {"num_datasets", JsonValue::Integer(r.num_datasets())},
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
    proto::GetStatusRequest request;
    proto::GetStatusResponse response;
    absl::Status s = CallCoordinator(coordinator, absl::GetFlag(FLAGS_retry_deadline),
                                     "GetStatus", [&](grpc::ClientContext* c) {
                                       return stub->GetStatus(c, request, &response);
                                     });
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
    .name = "register",
    .synopsis = "register --coordinator=HOST:PORT --pipeline=EXPR",
    .help = "Registers the pipeline with the coordinator, which parses and validates it, and\n"
            "prints its dataset id (the same pipeline always gets the same id).",
    .flags = {"coordinator", "pipeline", "retry_deadline"},
    .run = &RegisterMain,
});

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
