// sluicectl run and sluicectl element-spec: iterate a distributed pipeline and print its
// per-replica values, or print its element_spec, as TensorFlow prints them (--format=tf) or as
// JSON lines (--format=json). In local mode the pipeline runs in this process; with
// --coordinator the registered coordinator maker supplies the DistributedDataset.
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "tools/sluicectl/commands.h"
#include "sluice/dataset.h"
#include "core/format/json_format.h"
#include "sluice/per_replica_format.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

enum class OutputFormat { kTf, kJson };

// Reads the flags that run and element-spec share. Returns kExitOk or a reported usage error.
int ReadPipelineFlags(const std::string& command, const std::vector<std::string>& positional,
                      SluicectlPipelineArgs* args, OutputFormat* format) {
  if (!positional.empty()) {
    return ReportUsageError(command, absl::StrCat("unexpected argument '", positional[0],
                                                  "' (flags take the form --name=value)"));
  }
  args->pipeline = absl::GetFlag(FLAGS_pipeline);
  if (args->pipeline.empty()) {
    return ReportUsageError(command, "--pipeline is required, e.g. "
                                     "--pipeline='from_tensor_slices([1, 2, 3, 4]).batch(4)'");
  }
  for (absl::string_view d : absl::StrSplit(absl::GetFlag(FLAGS_devices), ',')) {
    d = absl::StripAsciiWhitespace(d);
    if (!d.empty()) args->devices.emplace_back(d);
  }
  if (args->devices.empty()) {
    return ReportUsageError(command, "--devices is empty; name at least one, e.g. GPU:0");
  }
  args->layout.num_workers = absl::GetFlag(FLAGS_num_workers);
  args->layout.worker_index = absl::GetFlag(FLAGS_worker_index);
  if (args->layout.num_workers < 1) {
    return ReportUsageError(command, absl::StrCat("--num_workers must be at least 1, got ",
                                                  args->layout.num_workers));
  }
  if (args->layout.worker_index < 0 || args->layout.worker_index >= args->layout.num_workers) {
    return ReportUsageError(command,
                            absl::StrCat("--worker_index must be in [0, ",
                                         args->layout.num_workers, "), got ",
                                         args->layout.worker_index));
  }
  absl::StatusOr<AutoShardPolicy> policy =
      ParseAutoShardPolicy(absl::GetFlag(FLAGS_auto_shard_policy));
  if (!policy.ok()) {
    return ReportUsageError(command, absl::StrCat("--auto_shard_policy: ",
                                                  policy.status().message()));
  }
  args->options.auto_shard_policy = *policy;
  args->coordinator = absl::GetFlag(FLAGS_coordinator);

  const std::string f = absl::GetFlag(FLAGS_format);
  if (f == "tf") {
    *format = OutputFormat::kTf;
  } else if (f == "json") {
    *format = OutputFormat::kJson;
  } else {
    return ReportUsageError(command, absl::StrCat("--format must be tf or json, got '", f, "'"));
  }
  return kExitOk;
}

// Writes the checkpoint to `path` through a temporary file and a rename, so that a reader (or a
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
  for (int64_t step = 0; steps < 0 || step < steps; ++step) {
    absl::StatusOr<PerReplica<Element>> x = it.GetNext();
    if (absl::IsOutOfRange(x.status())) break;
    RETURN_IF_ERROR(x.status());
    // As Python's `for x in dist: print(x)`: each value, then a newline.
    if (format == OutputFormat::kTf) {
      std::cout << FormatPerReplica(*x) << "\n";
    } else {
      std::cout << FormatRunStepJson(step, *x) << "\n";
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
  absl::Status status = RunSteps(args, format, steps);
  return status.ok() ? kExitOk : ReportError(status);
}

absl::Status PrintElementSpec(const SluicectlPipelineArgs& args, OutputFormat format) {
  ASSIGN_OR_RETURN(SluicectlDataset ds, MakeSluicectlDataset(args));
  if (format == OutputFormat::kTf) {
    std::cout << FormatPerReplicaSpec(ds.dataset.element_spec()) << "\n";
  } else {
    std::cout << FormatElementSpecJson(ds.dataset.element_spec()) << "\n";
  }
  return absl::OkStatus();
}

int ElementSpecMain(const std::vector<std::string>& positional) {
  SluicectlPipelineArgs args;
  OutputFormat format = OutputFormat::kTf;
  if (int rc = ReadPipelineFlags("element-spec", positional, &args, &format); rc != kExitOk) {
    return rc;
  }
  absl::Status status = PrintElementSpec(args, format);
  return status.ok() ? kExitOk : ReportError(status);
}

}  // namespace

absl::StatusOr<SluicectlDataset> MakeLocalDataset(const SluicectlPipelineArgs& args) {
  ASSIGN_OR_RETURN(Dataset dataset, Dataset::Parse(args.pipeline));
  ASSIGN_OR_RETURN(MirroredStrategy strategy, MirroredStrategy::Create(args.devices, args.layout));
  ASSIGN_OR_RETURN(DistributedDataset dist,
                   strategy.ExperimentalDistributeDataset(dataset, args.options));
  return SluicectlDataset{std::move(dist), dataset.Cardinality()};
}

SLUICECTL_REGISTER_COMMAND({
    .name = "run",
    .synopsis = "run --pipeline=EXPR --devices=GPU:0,GPU:1 [--steps=N] [--num_workers=W "
                "--worker_index=I --auto_shard_policy=AUTO|FILE|DATA|HINT|OFF] "
                "[--format=tf|json] [--coordinator=HOST:PORT] [--save_state=FILE]",
    .help = "Distributes the pipeline over the devices as strategy.experimental_distribute_dataset\n"
            "does and prints each step's per-replica value: --format=tf as Python's\n"
            "`for x in dist_dataset: print(x)`, --format=json one JSON object per step.\n"
            "Without --steps it runs to the end of data (an infinite pipeline needs --steps).",
    .flags = {"pipeline", "devices", "steps", "num_workers", "worker_index", "auto_shard_policy",
              "format", "coordinator",
              // Service mode (tools/sluicectl/service.cc).
              "job", "consumer_index", "num_consumers", "sharding_policy", "read_mode",
              "num_tasks", "retry_deadline", "seed", "shuffle", "shuffle_block_size", "epochs",
              "range_steps", "resume_state", "save_state"},
    .run = &RunMain,
});

SLUICECTL_REGISTER_COMMAND({
    .name = "element-spec",
    .synopsis = "element-spec --pipeline=EXPR --devices=GPU:0,GPU:1 [--num_workers=W] "
                "[--format=tf|json] [--coordinator=HOST:PORT]",
    .help = "Prints the DistributedDataset's element_spec: --format=tf as TensorFlow's repr\n"
            "(a nest of PerReplicaSpec), --format=json one JSON object. No data is read.",
    .flags = {"pipeline", "devices", "num_workers", "worker_index", "auto_shard_policy", "format",
              "coordinator",
              // Service mode (tools/sluicectl/service.cc).
              "num_consumers", "sharding_policy", "read_mode", "num_tasks", "retry_deadline"},
    .run = &ElementSpecMain,
});

}  // namespace sluice
