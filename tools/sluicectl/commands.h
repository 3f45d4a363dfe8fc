// sluicectl's subcommand table and the pieces subcommands share.
//
// sluicectl is `sluicectl <subcommand> [--flag=value ...]`. Each subcommand is one
// SluicectlCommand in its own file tools/sluicectl/<name>.cc (run.cc, element_spec.cc, gen.cc,
// inspect.cc, index.cc, register.cc, status.cc, bench.cc), registered with
// SLUICECTL_REGISTER_COMMAND. command_line.cc parses the command line against the chosen
// command's flag list (an unknown flag, or one the command does not take, is a usage error);
// main.cc then calls its `run`.
//
// Adding a subcommand (service ones: `register`, `status`):
//   1. Define its flags with ABSL_FLAG in its own tools/sluicectl/<name>.cc (or reuse the
//      shared ones declared below).
//   2. SLUICECTL_REGISTER_COMMAND({.name = "status", .synopsis = "...", .help = "...",
//                                  .flags = {"coordinator"}, .run = &StatusMain});
//
// `run` and `element-spec` with --coordinator: they obtain their DistributedDataset from a
// SluicectlDatasetMaker. The local one is built in; the service client registers its own with
// RegisterCoordinatorDatasetMaker(), and run/element-spec use it whenever --coordinator is set.
//
// Exit codes: 0 success, 1 an error from the library (printed as "sluicectl: <message>"),
// 2 a usage error (bad subcommand, flag or flag value).
#ifndef SLUICE_TOOLS_SLUICECTL_COMMANDS_H_
#define SLUICE_TOOLS_SLUICECTL_COMMANDS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "sluice/distributed_dataset.h"
#include "sluice/input_options.h"
#include "sluice/strategy.h"

// Flags shared by several subcommands (defined in command_line.cc unless noted).
ABSL_DECLARE_FLAG(std::string, pipeline);
ABSL_DECLARE_FLAG(std::string, devices);
ABSL_DECLARE_FLAG(int64_t, steps);
ABSL_DECLARE_FLAG(std::string, save_state);
ABSL_DECLARE_FLAG(int64_t, seed);
ABSL_DECLARE_FLAG(int64_t, num_workers);
ABSL_DECLARE_FLAG(int64_t, worker_index);
ABSL_DECLARE_FLAG(std::string, auto_shard_policy);
ABSL_DECLARE_FLAG(std::string, format);
ABSL_DECLARE_FLAG(std::string, coordinator);
ABSL_DECLARE_FLAG(absl::Duration, retry_deadline);  // service_dataset.cc; register, status
ABSL_DECLARE_FLAG(std::string, compression);        // gen.cc; gen, inspect

namespace sluice {

// The deadline of one coordinator RPC attempt (CallCoordinator); --retry_deadline bounds them all.
inline constexpr absl::Duration kRpcDeadline = absl::Seconds(10);

inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;

struct SluicectlCommand {
  std::string name;      // "run"
  std::string synopsis;  // one line: "run --pipeline=EXPR --devices=GPU:0,GPU:1 [--steps=N]"
  std::string help;      // a few lines for `sluicectl help <name>`
  std::vector<std::string> flags;  // flag names this command accepts
  // Runs the command with its positional arguments (those after the subcommand); returns the
  // exit code. Flags are already set.
  int (*run)(const std::vector<std::string>& args) = nullptr;
};

// Adds a command to the table; aborts on a duplicate name (a programming error). Returns true
// so that it can initialise a static.
bool RegisterSluicectlCommand(SluicectlCommand command);
// Every registered command, in name order.
std::vector<const SluicectlCommand*> SluicectlCommands();
const SluicectlCommand* FindSluicectlCommand(const std::string& name);

#define SLUICECTL_REGISTER_COMMAND_CONCAT_INNER_(a, b) a##b
#define SLUICECTL_REGISTER_COMMAND_CONCAT_(a, b) SLUICECTL_REGISTER_COMMAND_CONCAT_INNER_(a, b)
#define SLUICECTL_REGISTER_COMMAND(...)                                                        \
  static const bool SLUICECTL_REGISTER_COMMAND_CONCAT_(sluicectl_registered_, __LINE__) =     \
      ::sluice::RegisterSluicectlCommand(::sluice::SluicectlCommand __VA_ARGS__)

// Prints "sluicectl: <message>" on stderr and returns kExitError.
int ReportError(const absl::Status& status);
// Prints "sluicectl <command>: <message>" and a hint to `sluicectl help` on stderr and returns
// kExitUsage.
int ReportUsageError(const std::string& command, const std::string& message);

// What run and element-spec need to build their DistributedDataset, from the flags.
struct SluicectlPipelineArgs {
  std::string pipeline;              // --pipeline
  std::vector<std::string> devices;  // --devices, split at commas
  InputWorkerLayout layout;          // --num_workers, --worker_index
  InputOptions options;              // --auto_shard_policy
  std::string coordinator;           // --coordinator; empty: local mode
};

// A DistributedDataset with the cardinality of the (global) input dataset, so that `run` can
// refuse an infinite one without --steps. kUnknownCardinality when the maker cannot tell.
struct SluicectlDataset {
  DistributedDataset dataset;
  int64_t input_cardinality;
};

using SluicectlDatasetMaker = absl::StatusOr<SluicectlDataset> (*)(const SluicectlPipelineArgs&);

// Registers how to get a DistributedDataset from a coordinator (--coordinator set). Returns
// true so that it can initialise a static. Without one, --coordinator is FAILED_PRECONDITION.
bool RegisterCoordinatorDatasetMaker(SluicectlDatasetMaker maker);
// The local (in-process) maker: parses the pipeline, creates a MirroredStrategy on the devices
// and distributes the dataset with experimental_distribute_dataset.
// How run and element-spec print: as TensorFlow does, or as JSON.
enum class OutputFormat { kTf, kJson };

// Reads the flags that run and element-spec share (pipeline_flags.cc). Returns kExitOk or the
// exit code of a usage error it has reported.
int ReadPipelineFlags(const std::string& command, const std::vector<std::string>& positional,
                      SluicectlPipelineArgs* args, OutputFormat* format);

absl::StatusOr<SluicectlDataset> MakeLocalDataset(const SluicectlPipelineArgs& args);
// What a trainer gets from DistributeDatasetFromService with the service-mode flags
// (service_dataset.cc; `bench --coordinator`): registers the pipeline and joins (or creates)
// the job at once, and iterates through the client's own step source and device prefetch with
// no adapter in between. Errors: bad service flags (INVALID_ARGUMENT naming the flag), the
// coordinator's. `job_name`, when set, replaces --job ("" : a new anonymous job).
absl::StatusOr<SluicectlDataset> MakeTrainerServiceDataset(
    const SluicectlPipelineArgs& args, std::optional<std::string> job_name = std::nullopt);
// The maker for `args`: the coordinator one when args.coordinator is set, else the local one.
absl::StatusOr<SluicectlDataset> MakeSluicectlDataset(const SluicectlPipelineArgs& args);

}  // namespace sluice

#endif  // SLUICE_TOOLS_SLUICECTL_COMMANDS_H_
