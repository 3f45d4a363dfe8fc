// sluicectl element-spec: prints a distributed pipeline's element_spec as TensorFlow prints it
// (--format=tf) or as one JSON object (--format=json). No data is read.
#include <iostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/format/json_format.h"
#include "core/util/status_macros.h"
#include "sluice/per_replica_format.h"
#include "tools/sluicectl/commands.h"

namespace sluice {
namespace {

absl::Status PrintElementSpec(const SluicectlPipelineArgs& args, OutputFormat format) {
  ASSIGN_OR_RETURN(SluicectlDataset ds, MakeSluicectlDataset(args));
  if (format == OutputFormat::kTf) {
    std::cout << FormatPerReplicaSpec(ds.dataset.element_spec(), ds.dataset.wrapping()) << "\n";
  } else {
    std::cout << FormatElementSpecJson(ds.dataset.element_spec(), ds.dataset.wrapping()) << "\n";
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

SLUICECTL_REGISTER_COMMAND({
    .name = "element-spec",
    .synopsis = "element-spec --pipeline=EXPR --devices=GPU:0,GPU:1 [--num_workers=W] "
                "[--format=tf|json] [--coordinator=HOST:PORT]",
    .help = "Prints the DistributedDataset's element_spec: --format=tf as TensorFlow's repr\n"
            "(a nest of PerReplicaSpec), --format=json one JSON object. No data is read.",
    .flags = {"pipeline", "devices", "num_workers", "worker_index", "auto_shard_policy", "format",
              "coordinator",
              // Service mode (tools/sluicectl/service_dataset.cc).
              "num_consumers", "sharding_policy", "read_mode", "num_tasks", "retry_deadline"},
    .run = &ElementSpecMain,
});

}  // namespace sluice
