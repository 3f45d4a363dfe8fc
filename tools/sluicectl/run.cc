// sluicectl run: iterates a distributed pipeline and prints its per-replica values as
// TensorFlow prints them (--format=tf) or as JSON lines (--format=json). In local mode the
// pipeline runs in this process; with --coordinator the registered coordinator maker supplies
// the DistributedDataset (tools/sluicectl/service_dataset.cc).
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/data/op_profile.h"
#include "core/format/json_format.h"
#include "core/util/status_macros.h"
#include "sluice/dataset.h"
#include "sluice/per_replica_format.h"
#include "tools/sluicectl/commands.h"

ABSL_FLAG(bool, profile, false,
          "run, local mode: after the run, print to stderr each op's elements, calls and time "
          "(total and self), a table summed over this process's pipelines "
          "(core/data/op_profile.h).");

ABSL_FLAG(std::string, step_sleep_file, "",
          "run: a simulated trainer's compute time: after each step, sleep for the duration "
          "this file holds (absl syntax: 20ms, 0s), read again whenever the file changes; a "
          "missing or empty file: no sleep. For autoscaling drills (docs/AUTOSCALING.md).");

namespace sluice {
namespace {

// The sleep --step_sleep_file asks for now; re-read only when the file's mtime changes.
class StepSleep {
 public:
  explicit StepSleep(std::string path) : path_(std::move(path)) {}
  absl::Duration Get() {
    if (path_.empty()) return absl::ZeroDuration();
    struct stat st {};
    if (stat(path_.c_str(), &st) != 0) return absl::ZeroDuration();
    if (st.st_mtim.tv_sec != mtime_.tv_sec || st.st_mtim.tv_nsec != mtime_.tv_nsec) {
      mtime_ = st.st_mtim;
      std::ifstream in(path_);
      std::string text;
      std::getline(in, text);
      absl::Duration d;
      sleep_ = absl::ParseDuration(text, &d) && d > absl::ZeroDuration()
                   ? std::min(d, absl::Seconds(60))
                   : absl::ZeroDuration();
    }
    return sleep_;
  }

 private:
  const std::string path_;
  timespec mtime_{};
  absl::Duration sleep_ = absl::ZeroDuration();
};

// restarted run) never sees a partial file.
absl::Status SaveCheckpoint(const IteratorCheckpoint& checkpoint, const std::string& path) {
  const std::string temp = path + ".tmp";
  {
    std::ofstream out(temp, std::ios::trunc);
    out << checkpoint.Serialize() << "\n";
    out.flush();
    if (!out) return absl::InternalError(absl::StrCat("--save_state: cannot write '", temp, "'"));
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("--save_state: cannot rename '", temp, "' to '",
                                            path, "': ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status RunSteps(const SluicectlPipelineArgs& args, OutputFormat format, int64_t steps) {
  const std::string save_state = absl::GetFlag(FLAGS_save_state);
  ASSIGN_OR_RETURN(SluicectlDataset ds, MakeSluicectlDataset(args));
  if (steps < 0 && ds.input_cardinality == kInfiniteCardinality) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the pipeline '", args.pipeline,
        "' is infinite (it repeats forever); pass --steps=N to print N steps"));
  }
  ASSIGN_OR_RETURN(DistributedIterator it, ds.dataset.MakeIterator());
  StepSleep step_sleep(absl::GetFlag(FLAGS_step_sleep_file));
  for (int64_t step = 0; steps < 0 || step < steps; ++step) {
    if (step > 0) {
      if (const absl::Duration d = step_sleep.Get(); d > absl::ZeroDuration()) absl::SleepFor(d);
    }
    absl::StatusOr<PerReplica<Element>> x = it.GetNext();
    if (absl::IsOutOfRange(x.status())) break;
    RETURN_IF_ERROR(x.status());
    // As Python's `for x in dist: print(x)`: each value, then a newline.
    if (format == OutputFormat::kTf) {
      std::cout << FormatPerReplica(*x, it.wrapping()) << "\n";
    } else {
      std::cout << FormatRunStepJson(step, *x, it.wrapping()) << "\n";
    }
    std::cout.flush();
    if (!save_state.empty()) {
      ASSIGN_OR_RETURN(IteratorCheckpoint checkpoint, it.Checkpoint());
      RETURN_IF_ERROR(SaveCheckpoint(checkpoint, save_state));
    }
  }
  if (!save_state.empty()) {
    // Also at the end (and before the first step of an empty run): the state says where the
    // next run starts.
    ASSIGN_OR_RETURN(IteratorCheckpoint checkpoint, it.Checkpoint());
    RETURN_IF_ERROR(SaveCheckpoint(checkpoint, save_state));
  }
  return absl::OkStatus();
}

int RunMain(const std::vector<std::string>& positional) {
  SluicectlPipelineArgs args;
  OutputFormat format = OutputFormat::kTf;
  if (int rc = ReadPipelineFlags("run", positional, &args, &format); rc != kExitOk) return rc;
  const int64_t steps = absl::GetFlag(FLAGS_steps);
  if (steps < -1) {
    return ReportUsageError("run", absl::StrCat("--steps must be non-negative, got ", steps));
  }
  std::shared_ptr<OpProfile> profile;
  if (absl::GetFlag(FLAGS_profile)) {
    profile = std::make_shared<OpProfile>();
    SetProcessOpProfile(profile);
  }
  // The backstop behind the allocator that can refuse (sluice/tensor.h): an allocation outside
  // the memory budget's checks that fails is a clear error and a non-zero exit, not an abort.
  absl::Status status;
  try {
    status = RunSteps(args, format, steps);
  } catch (const std::bad_alloc&) {
    status = absl::ResourceExhaustedError(
        "the pipeline ran this process out of memory (std::bad_alloc) outside the memory "
        "budget's checks (--memory_limit, --max_element_bytes)");
  }
  if (profile != nullptr) {
    SetProcessOpProfile(nullptr);
    std::cerr << "per-op profile (wall time in the caller's thread; self = total less the op "
                 "below):\n"
              << profile->ToTable();
  }
  return status.ok() ? kExitOk : ReportError(status);
}

}  // namespace

SLUICECTL_REGISTER_COMMAND({
    .name = "run",
    .synopsis = "run --pipeline=EXPR --devices=GPU:0,GPU:1 [--steps=N] [--num_workers=W "
                "--worker_index=I --auto_shard_policy=AUTO|FILE|DATA|HINT|OFF] "
                "[--format=tf|json] [--coordinator=HOST:PORT] [--save_state=FILE] [--profile] "
                "[--threads=N]",
    .help = "Distributes the pipeline over the devices as strategy.experimental_distribute_dataset\n"
            "does and prints each step's per-replica value: --format=tf as Python's\n"
            "`for x in dist_dataset: print(x)`, --format=json one JSON object per step.\n"
            "Without --steps it runs to the end of data (an infinite pipeline needs --steps).",
    .flags = {"pipeline", "devices", "steps", "num_workers", "worker_index", "auto_shard_policy",
              "format", "coordinator",
              // Service mode (tools/sluicectl/service_dataset.cc).
              "job", "consumer_index", "num_consumers", "sharding_policy", "read_mode",
              "trainer_id", "cross_trainer_mode", "expected_trainers", "max_trainers",
              "num_tasks", "retry_deadline", "seed", "shuffle", "shuffle_block_size", "epochs",
              "range_steps", "resume_state", "save_state", "receive_budget_bytes", "profile",
              "compression", "force_compression", "shared_memory", "bulk_data",
              "step_sleep_file"},
    .run = &RunMain,
});

}  // namespace sluice
