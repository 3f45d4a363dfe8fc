// sluicectl bench: iterates a distributed pipeline as a trainer does, without printing values,
// and prints one JSON line of throughput and input-wait figures (what users run to size their
// input worker pool).
//
// Local mode runs the pipeline in this process through MirroredStrategy's
// experimental_distribute_dataset; with --coordinator it reads through the service with
// DistributeDatasetFromService (tools/sluicectl/service_dataset.cc, MakeTrainerServiceDataset).
// Either way the steps come out of DistributedIterator::GetNext, through the device prefetcher
// for GPU devices (host memory standing in without a GPU): the production path.
//
// Output (stdout, exactly one line; fields in this order):
//   {"steps": N, "seconds": S, "steps_per_second": .., "elements": E, "elements_per_second": ..,
//    "bytes": B, "bytes_per_second": .., "wait_seconds": {"p50": .., "p99": .., "max": ..,
//    "mean": ..}, "end_of_data": false, "first_step_seconds": .., "turnaround_seconds": ..,
//    "parameters": {...}, "ops": null}
//   - steps: measured steps (after --warmup_steps, which are not counted);
//   - seconds: from the first measured GetNext call to the return of the last;
//   - elements: per step, the sum over replicas of the leading dimension of the replica's first
//     component (1 for a scalar): steps x global batch for a batched pipeline;
//   - bytes: every component's payload (numeric bytes, or the strings' lengths), all replicas;
//   - wait_seconds: the time the caller spent in GetNext per measured step (the trainer's wait
//     for input), quantiles to within 1.1% (core/obs/latency_histogram.h);
//   - end_of_data: the data ended before --steps / --seconds;
//   - parameters: the flags that shaped the run; through the service also shared_memory (the
//     flag) and shared_memory_frames (frames this process decoded from shared memory);
//   - first_step_seconds, turnaround_seconds: with --first_step_runs=N (service mode), the
//     median over N runs, each on a new anonymous job, of the time from the start of
//     DistributeDatasetFromService (register, create the job) to the return of the first
//     GetNext, and of that plus releasing the iterator and dataset (the job's turnaround:
//     create, read one step, release). Measured before the throughput run, on the cluster as
//     it is (warm when its processes run already); null without the flag;
//   - ops: with --profile (local mode only), one object per op of the pipeline, source first:
//     {"op": "op 2 (batch)", "elements": .., "calls": .., "seconds": .., "self_seconds": ..}
//     (core/data/op_profile.h; warm-up steps included); otherwise null. Through the service the
//     ops run on the workers: `sluice-worker --op_metrics` exports the same figures.
//   - wire (service mode; null in local mode), over the measured steps: "compression" (the
//     --compression asked for), "compressed_frames" received, "wire_bytes" and "raw_bytes" of
//     those frames, "ratio" (raw / wire; null without compressed frames),
//     "decompress_cpu_seconds_per_gb" (this process's CPU in the codec per GB of raw bytes),
//     "process_cpu_seconds_per_gb" (all of this process's CPU, user + system, per GB of
//     `bytes`: the consumer's whole cost of receiving). The workers' compression CPU is on
//     the workers (their sluice_wire_compress_* metrics are not read here).
// While stderr is a terminal, a progress line is redrawn there about twice a second.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/data/op_profile.h"
#include "core/obs/latency_histogram.h"
#include "core/rpc/shm_ring.h"
#include "core/rpc/wire_compression.h"
#include "core/util/json_value.h"
#include "core/util/status_macros.h"
#include "sluice/dataset.h"
#include "tools/sluicectl/commands.h"

// Service-mode flags echoed in the parameters (tools/sluicectl/service_dataset.cc).
ABSL_DECLARE_FLAG(std::string, job);
ABSL_DECLARE_FLAG(std::string, sharding_policy);
ABSL_DECLARE_FLAG(std::string, read_mode);
ABSL_DECLARE_FLAG(int64_t, num_consumers);
ABSL_DECLARE_FLAG(int64_t, consumer_index);
ABSL_DECLARE_FLAG(bool, shared_memory);
ABSL_DECLARE_FLAG(std::string, trainer_id);
ABSL_DECLARE_FLAG(bool, profile);  // tools/sluicectl/run.cc

ABSL_FLAG(double, seconds, 0,
          "bench: measure for this many seconds (0: no time limit); with --steps, whichever "
          "comes first.");
ABSL_FLAG(int64_t, first_step_runs, 0,
          "bench, service mode: also measure the time to the first step and the job "
          "turnaround (create, read one step, release) over this many new anonymous jobs, "
          "reporting the medians (first_step_seconds, turnaround_seconds); 0: not measured.");
ABSL_FLAG(double, step_interval, 0,
          "bench: a trainer's step time, in seconds: after each step the loop sleeps until "
          "this long after that step's GetNext began (0: no pause), so that steps/s and the "
          "wait show whether the input keeps up with a trainer of that pace.");
ABSL_FLAG(int64_t, warmup_steps, 0,
          "bench: steps taken before measuring (connections, pools, the job's start), not "
          "counted.");

namespace sluice {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct BenchParams {
  SluicectlPipelineArgs args;
  int64_t steps = -1;     // -1: no step limit
  double seconds = 0;     // 0: no time limit
  int64_t warmup_steps = 0;
  double step_interval = 0;  // seconds; 0: no pause between steps
  int64_t first_step_runs = 0;  // service mode: jobs timed to their first step
  bool profile = false;  // per-op profile of the local pipeline
};

struct BenchResult {
  int64_t steps = 0;
  double seconds = 0;
  int64_t elements = 0;
  int64_t bytes = 0;
  bool end_of_data = false;
  LatencyHistogram wait;
  // Over the measured steps: the decompression this process did, and its CPU time.
  WireCodecTotals decompressed;
  double process_cpu_seconds = 0;
  std::shared_ptr<OpProfile> profile;  // null without --profile
  // --first_step_runs: each run's time to its first step and its turnaround, in seconds.
  std::vector<double> first_step;
  std::vector<double> turnaround;
};

// Times --first_step_runs new anonymous jobs (see the file comment) into r->first_step and
// r->turnaround. Errors: the service's; FAILED_PRECONDITION when a job has no step at all.
absl::Status MeasureFirstSteps(const BenchParams& p, BenchResult* r) {
  for (int64_t run = 0; run < p.first_step_runs; ++run) {
    const Clock::time_point start = Clock::now();
    {
      ASSIGN_OR_RETURN(SluicectlDataset ds, MakeTrainerServiceDataset(p.args, std::string()));
      ASSIGN_OR_RETURN(DistributedIterator it, ds.dataset.MakeIterator());
      absl::StatusOr<PerReplica<Element>> x = it.GetNext();
      if (absl::IsOutOfRange(x.status())) {
        return absl::FailedPreconditionError(absl::StrCat(
            "--first_step_runs: the pipeline '", p.args.pipeline, "' has no step"));
      }
      RETURN_IF_ERROR(x.status());
      r->first_step.push_back(SecondsBetween(start, Clock::now()));
    }  // the step, the iterator and the dataset released: the job is left
    r->turnaround.push_back(SecondsBetween(start, Clock::now()));
  }
  return absl::OkStatus();
}

// The median of `v` (the mean of the middle two for an even count); null when empty.
JsonValue Median(std::vector<double> v) {
  if (v.empty()) return JsonValue::Null();
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return JsonValue::Number(n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2);
}

// Elements and payload bytes of one step (see the file comment).
void CountStep(const PerReplica<Element>& x, int64_t* elements, int64_t* bytes) {
  for (const Element& e : x.values()) {
    std::vector<Tensor> leaves = e.Flatten();
    if (!leaves.empty() && leaves[0].valid()) {
      const Shape& s = leaves[0].shape();
      *elements += s.rank() >= 1 ? s.dim(0) : 1;
    }
    for (const Tensor& t : leaves) {
      if (t.valid()) *bytes += static_cast<int64_t>(t.payload_bytes());
    }
  }
}

std::string HumanBytes(double b) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1000 && u < 4) {
    b /= 1000;
    ++u;
  }
  return absl::StrFormat("%.1f %s", b, units[u]);
}

// The progress line on a terminal: overwritten in place, cleared at the end.
class Progress {
 public:
  Progress() : enabled_(isatty(STDERR_FILENO) == 1) {}

  void MaybeDraw(const BenchResult& r, Clock::time_point start, Clock::time_point now) {
    if (!enabled_ || now < next_) return;
    next_ = now + std::chrono::milliseconds(500);
    const double s = SecondsBetween(start, now);
    if (s <= 0) return;
    std::fprintf(stderr, "\rsluicectl bench: %lld steps  %.1f s  %.0f steps/s  %s/s  wait p50 %s  ",
                 static_cast<long long>(r.steps), s, static_cast<double>(r.steps) / s,
                 HumanBytes(static_cast<double>(r.bytes) / s).c_str(),
                 absl::FormatDuration(r.wait.Quantile(0.5)).c_str());
    std::fflush(stderr);
    drawn_ = true;
  }

  void Clear() {
    if (drawn_) std::fprintf(stderr, "\r\033[K");
  }

 private:
  const bool enabled_;
  bool drawn_ = false;
  Clock::time_point next_ = Clock::now() + std::chrono::milliseconds(500);
};

// This process's CPU time so far, user + system.
double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6;
  };
  return seconds(u.ru_utime) + seconds(u.ru_stime);
}

absl::StatusOr<BenchResult> RunBench(const BenchParams& p) {
  BenchResult r;
  if (p.profile) {  // before the pipeline is built: MakeIterator wraps the ops it builds
    r.profile = std::make_shared<OpProfile>();
    SetProcessOpProfile(r.profile);
  }
  RETURN_IF_ERROR(MeasureFirstSteps(p, &r));
  ASSIGN_OR_RETURN(SluicectlDataset ds, p.args.coordinator.empty()
                                            ? MakeLocalDataset(p.args)
                                            : MakeTrainerServiceDataset(p.args));
  if (p.steps < 0 && p.seconds <= 0 && ds.input_cardinality == kInfiniteCardinality) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the pipeline '", p.args.pipeline,
        "' is infinite (it repeats forever); pass --steps=N or --seconds=T"));
  }
  ASSIGN_OR_RETURN(DistributedIterator it, ds.dataset.MakeIterator());
  for (int64_t i = 0; i < p.warmup_steps; ++i) {
    absl::StatusOr<PerReplica<Element>> x = it.GetNext();
    if (absl::IsOutOfRange(x.status())) {
      r.end_of_data = true;
      return r;
    }
    RETURN_IF_ERROR(x.status());
  }
  Progress progress;
  const WireCodecTotals codec_start = DecompressionTotals();
  const double cpu_start = ProcessCpuSeconds();
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline =
      p.seconds > 0 ? start + std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::duration<double>(p.seconds))
                    : Clock::time_point::max();
  Clock::time_point after = start;
  while (p.steps < 0 || r.steps < p.steps) {
    const Clock::time_point before = Clock::now();
    {
      absl::StatusOr<PerReplica<Element>> x = it.GetNext();
      after = Clock::now();
      if (absl::IsOutOfRange(x.status())) {
        r.end_of_data = true;
        break;
      }
      if (!x.ok()) {
        progress.Clear();
        return x.status();
      }
      r.wait.Add(absl::FromChrono(after - before));
      ++r.steps;
      CountStep(*x, &r.elements, &r.bytes);
    }  // the step is dropped before the next call, as a trainer's loop drops it
    progress.MaybeDraw(r, start, after);
    if (after >= deadline) break;
    if (p.step_interval > 0) {
      // The trainer's compute: the next GetNext comes step_interval after this one began.
      const Clock::time_point next = before + std::chrono::duration_cast<Clock::duration>(
                                                  std::chrono::duration<double>(p.step_interval));
      std::this_thread::sleep_until(std::min(next, deadline));
      after = std::max(after, std::min(Clock::now(), deadline));
    }
  }
  progress.Clear();
  r.seconds = SecondsBetween(start, after);
  r.process_cpu_seconds = ProcessCpuSeconds() - cpu_start;
  const WireCodecTotals codec_end = DecompressionTotals();
  r.decompressed.frames = codec_end.frames - codec_start.frames;
  r.decompressed.wire_bytes = codec_end.wire_bytes - codec_start.wire_bytes;
  r.decompressed.raw_bytes = codec_end.raw_bytes - codec_start.raw_bytes;
  r.decompressed.cpu_seconds = codec_end.cpu_seconds - codec_start.cpu_seconds;
  return r;
}

// The "wire" object (see the file comment).
JsonValue WireJson(const BenchResult& r) {
  const WireCodecTotals& d = r.decompressed;
  const double raw_gb = static_cast<double>(d.raw_bytes) / 1e9;
  const double gb = static_cast<double>(r.bytes) / 1e9;
  return JsonValue::Object({
      {"compression", JsonValue::String(absl::GetFlag(FLAGS_compression).empty()
                                            ? "none"
                                            : absl::GetFlag(FLAGS_compression))},
      {"compressed_frames", JsonValue::Integer(static_cast<int64_t>(d.frames))},
      {"wire_bytes", JsonValue::Integer(static_cast<int64_t>(d.wire_bytes))},
      {"raw_bytes", JsonValue::Integer(static_cast<int64_t>(d.raw_bytes))},
      {"ratio", d.wire_bytes > 0 ? JsonValue::Number(static_cast<double>(d.raw_bytes) /
                                                     static_cast<double>(d.wire_bytes))
                                 : JsonValue::Null()},
      {"decompress_cpu_seconds_per_gb",
       raw_gb > 0 ? JsonValue::Number(d.cpu_seconds / raw_gb) : JsonValue::Null()},
      {"process_cpu_seconds_per_gb",
       gb > 0 ? JsonValue::Number(r.process_cpu_seconds / gb) : JsonValue::Null()},
  });
}

JsonValue Rate(double count, double seconds) {
  return seconds > 0 ? JsonValue::Number(count / seconds) : JsonValue::Null();
}

// The per-op profile as a JSON array (see the file comment); null without one.
JsonValue OpsJson(const OpProfile* profile) {
  if (profile == nullptr) return JsonValue::Null();
  std::vector<JsonValue> ops;
  for (const OpProfile::OpStats& op : profile->Snapshot()) {
    ops.push_back(JsonValue::Object({
        {"op", JsonValue::String(op.label)},
        {"elements", JsonValue::Integer(op.elements)},
        {"calls", JsonValue::Integer(op.calls)},
        {"seconds", JsonValue::Number(static_cast<double>(op.total_ns) / 1e9)},
        {"self_seconds", JsonValue::Number(static_cast<double>(op.self_ns) / 1e9)},
    }));
  }
  return JsonValue::Array(std::move(ops));
}

std::string ResultJson(const BenchParams& p, const BenchResult& r) {
  std::vector<JsonValue> devices;
  for (const std::string& d : p.args.devices) devices.push_back(JsonValue::String(d));
  auto seconds = [](absl::Duration d) { return JsonValue::Number(absl::ToDoubleSeconds(d)); };
  std::vector<JsonValue::Member> params = {
      {"pipeline", JsonValue::String(p.args.pipeline)},
      {"devices", JsonValue::Array(std::move(devices))},
      {"mode", JsonValue::String(p.args.coordinator.empty() ? "local" : "service")},
      {"coordinator", p.args.coordinator.empty() ? JsonValue::Null()
                                                 : JsonValue::String(p.args.coordinator)},
      {"steps", p.steps >= 0 ? JsonValue::Integer(p.steps) : JsonValue::Null()},
      {"seconds", p.seconds > 0 ? JsonValue::Number(p.seconds) : JsonValue::Null()},
      {"warmup_steps", JsonValue::Integer(p.warmup_steps)},
      {"step_interval", JsonValue::Number(p.step_interval)},
      {"first_step_runs", JsonValue::Integer(p.first_step_runs)},
  };
  if (p.args.coordinator.empty()) {
    params.push_back({"num_workers", JsonValue::Integer(p.args.layout.num_workers)});
    params.push_back({"worker_index", JsonValue::Integer(p.args.layout.worker_index)});
  } else {
    params.push_back({"job", JsonValue::String(absl::GetFlag(FLAGS_job))});
    params.push_back({"sharding_policy", JsonValue::String(absl::GetFlag(FLAGS_sharding_policy))});
    params.push_back({"read_mode", JsonValue::String(absl::GetFlag(FLAGS_read_mode))});
    params.push_back({"num_consumers", JsonValue::Integer(absl::GetFlag(FLAGS_num_consumers))});
    params.push_back({"consumer_index", JsonValue::Integer(absl::GetFlag(FLAGS_consumer_index))});
    // Whether steps may come through shared memory, and how many frames did (0: all over TCP,
    // the workers being remote or having it off).
    params.push_back({"shared_memory", JsonValue::Bool(absl::GetFlag(FLAGS_shared_memory))});
    params.push_back({"shared_memory_frames",
                      JsonValue::Integer(ProcessShmRingCounts().frames_read)});
    params.push_back({"trainer_id", JsonValue::String(absl::GetFlag(FLAGS_trainer_id))});
  }
  const double s = r.seconds;
  JsonValue out = JsonValue::Object({
      {"steps", JsonValue::Integer(r.steps)},
      {"seconds", JsonValue::Number(s)},
      {"steps_per_second", Rate(static_cast<double>(r.steps), s)},
      {"elements", JsonValue::Integer(r.elements)},
      {"elements_per_second", Rate(static_cast<double>(r.elements), s)},
      {"bytes", JsonValue::Integer(r.bytes)},
      {"bytes_per_second", Rate(static_cast<double>(r.bytes), s)},
      {"wait_seconds", JsonValue::Object({{"p50", seconds(r.wait.Quantile(0.5))},
                                          {"p99", seconds(r.wait.Quantile(0.99))},
                                          {"max", seconds(r.wait.max())},
                                          {"mean", seconds(r.wait.mean())}})},
      {"end_of_data", JsonValue::Bool(r.end_of_data)},
      {"first_step_seconds", Median(r.first_step)},
      {"turnaround_seconds", Median(r.turnaround)},
      {"parameters", JsonValue::Object(std::move(params))},
      {"ops", OpsJson(r.profile.get())},
      {"wire", p.args.coordinator.empty() ? JsonValue::Null() : WireJson(r)},
  });
  return out.ToString();
}

int BenchMain(const std::vector<std::string>& positional) {
  BenchParams p;
  OutputFormat unused = OutputFormat::kJson;
  if (int rc = ReadPipelineFlags("bench", positional, &p.args, &unused); rc != kExitOk) return rc;
  p.steps = absl::GetFlag(FLAGS_steps);
  p.seconds = absl::GetFlag(FLAGS_seconds);
  p.warmup_steps = absl::GetFlag(FLAGS_warmup_steps);
  p.step_interval = absl::GetFlag(FLAGS_step_interval);
  if (!(p.step_interval >= 0) || p.step_interval > 3600) {
    return ReportUsageError("bench", absl::StrCat("--step_interval must be in [0, 3600] seconds, "
                                                  "got ", p.step_interval));
  }
  p.profile = absl::GetFlag(FLAGS_profile);
  p.first_step_runs = absl::GetFlag(FLAGS_first_step_runs);
  if (p.first_step_runs < 0) {
    return ReportUsageError("bench", absl::StrCat("--first_step_runs must be non-negative, got ",
                                                  p.first_step_runs));
  }
  if (p.first_step_runs > 0 && p.args.coordinator.empty()) {
    return ReportUsageError("bench", "--first_step_runs times jobs of the service: it needs "
                                     "--coordinator");
  }
  if (p.first_step_runs > 0 && absl::GetFlag(FLAGS_num_consumers) != 1) {
    return ReportUsageError("bench", "--first_step_runs times new anonymous jobs, which have "
                                     "one consumer: it needs --num_consumers=1");
  }
  if (p.profile && !p.args.coordinator.empty()) {
    return ReportUsageError(
        "bench", "--profile profiles a local pipeline; through the service the ops run on the "
                 "workers: start sluice-worker with --op_metrics and read its /metrics");
  }
  if (p.steps < -1) {
    return ReportUsageError("bench", absl::StrCat("--steps must be non-negative, got ", p.steps));
  }
  if (!(p.seconds >= 0) || std::isinf(p.seconds)) {
    return ReportUsageError(
        "bench", absl::StrCat("--seconds must be a non-negative number, got ", p.seconds));
  }
  if (p.warmup_steps < 0) {
    return ReportUsageError(
        "bench", absl::StrCat("--warmup_steps must be non-negative, got ", p.warmup_steps));
  }
  absl::StatusOr<BenchResult> r = RunBench(p);
  if (!r.ok()) return ReportError(r.status());
  std::cout << ResultJson(p, *r) << "\n";
  return kExitOk;
}

}  // namespace

SLUICECTL_REGISTER_COMMAND({
    .name = "bench",
    .synopsis = "bench --pipeline=EXPR --devices=GPU:0,GPU:1 [--steps=N] [--seconds=T] "
                "[--warmup_steps=W] [--profile] [--coordinator=HOST:PORT [--first_step_runs=N] ...]",
    .help = "Iterates the distributed pipeline as a trainer does (local, or through the service\n"
            "with --coordinator), without printing values, and prints one JSON line: steps,\n"
            "seconds, steps/s, elements/s, bytes/s, the trainer's wait in GetNext per step\n"
            "(p50, p99, max, mean) and the parameters. Stops after --steps or --seconds,\n"
            "whichever comes first, or at the end of data. A progress line is shown on stderr\n"
            "when it is a terminal. --profile (local mode) adds each op's elements and time.\n"
            "--step_interval=S paces it as a trainer whose step takes S seconds.\n"
            "--first_step_runs=N (service mode) first times N new jobs to their first step\n"
            "and to their release (first_step_seconds, turnaround_seconds: medians).",
    .flags = {"pipeline", "devices", "steps", "seconds", "warmup_steps", "step_interval",
              "first_step_runs",
              "num_workers",
              "worker_index", "auto_shard_policy", "coordinator",
              // Service mode (tools/sluicectl/service_dataset.cc).
              "job", "consumer_index", "num_consumers", "sharding_policy", "read_mode",
              "trainer_id", "cross_trainer_mode", "expected_trainers", "max_trainers",
              "num_tasks", "retry_deadline", "seed", "shuffle", "shuffle_block_size", "epochs",
              "range_steps", "receive_budget_bytes", "profile",
              "compression", "force_compression", "shared_memory", "bulk_data"},
    .run = &BenchMain,
});

}  // namespace sluice
