// The flags `run` and `element-spec` share (--pipeline, --devices, --num_workers, ...), and the
// local-mode DistributedDataset they iterate (the pipeline runs in this process).
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/util/status_macros.h"
#include "sluice/dataset.h"
#include "tools/sluicectl/commands.h"

namespace sluice {

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

absl::StatusOr<SluicectlDataset> MakeLocalDataset(const SluicectlPipelineArgs& args) {
  ASSIGN_OR_RETURN(Dataset dataset, Dataset::Parse(args.pipeline));
  ASSIGN_OR_RETURN(MirroredStrategy strategy, MirroredStrategy::Create(args.devices, args.layout));
  ASSIGN_OR_RETURN(DistributedDataset dist,
                   strategy.ExperimentalDistributeDataset(dataset, args.options));
  return SluicectlDataset{std::move(dist), dataset.Cardinality()};
}

}  // namespace sluice
