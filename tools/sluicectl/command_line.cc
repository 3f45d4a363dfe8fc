// sluicectl's command line: the subcommand table, parsing, usage and help, the cluster spec and
// the plugins (command_line.h). The subcommands live in the other tools/sluicectl/*.cc files,
// one per file (commands.h says how to add one); main.cc only dispatches.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data/data_roots.h"
#include "core/data/memory_budget.h"
#include "core/data/plugin_loader.h"
#include "core/util/status_macros.h"
#include "tools/sluicectl/command_line.h"
#include "core/util/thread_pool.h"
#include "tools/sluicectl/commands.h"
#include "tools/sluicectl/security.h"
#include "sluice/cluster_spec.h"

ABSL_FLAG(std::string, pipeline, "",
          "The input pipeline as a tf.data expression, e.g. "
          "'from_tensor_slices([1, 2, 3, 4]).repeat().batch(4)'.");
ABSL_FLAG(std::string, devices, "GPU:0",
          "Comma-separated local devices, one replica each, e.g. GPU:0,GPU:1.");
ABSL_FLAG(int64_t, steps, -1, "Steps to print; default: until the end of data.");
ABSL_FLAG(int64_t, seed, 0,
          "gen: the data is a pure function of the seed and the sizes. run, service mode with "
          "--sharding_policy=RANGES: the seed of the job's global order.");
ABSL_FLAG(std::string, save_state, "",
          "run: after each printed step, write the iterator's checkpoint to this file (atomically)"
          "; --resume_state continues from it. Service mode, RANGES or DATA, coordinated.");
ABSL_FLAG(int64_t, num_workers, 1, "Number of input workers (trainer processes) in all.");
ABSL_FLAG(int64_t, worker_index, 0, "This process's index among the input workers.");
ABSL_FLAG(std::string, auto_shard_policy, "AUTO",
          "How the dataset is sharded across input workers: AUTO, FILE, DATA, HINT or OFF.");
ABSL_FLAG(std::string, format, "tf",
          "Output format: tf (as TensorFlow prints) or json (one JSON object per line).");
ABSL_FLAG(std::vector<std::string>, plugin, {},
          "Custom-op plugin shared libraries to load before running the command "
          "(comma-separated; include/sluice/plugin_api.h). Accepted by every command.");
ABSL_FLAG(std::string, memory_limit, "",
          "Pipelines run in this process: bytes their live tensors and op buffers (batch, "
          "shuffle, cache, prefetch) may hold, e.g. 8GiB; more is RESOURCE_EXHAUSTED naming the "
          "op. Empty: 3/4 of the smallest of the cgroup's memory limit, RLIMIT_AS and physical "
          "memory. Accepted by every command.");
ABSL_FLAG(std::string, max_element_bytes, "",
          "Pipelines run in this process: bytes one element (one batch), or one allocation, "
          "may hold. Empty: a quarter of --memory_limit. Accepted by every command.");
ABSL_FLAG(int, threads, 0,
          "Pipelines run in this process: threads of the process's pool that every parallel op "
          "shares (parallel map fn calls; num_parallel_calls=AUTOTUNE resolves to it); 0: the "
          "number of cores. Accepted by every command.");
ABSL_FLAG(std::vector<std::string>, data_root, {},
          "Pipelines run in this process: comma-separated folders and URL prefixes they may read "
          "(as sluice-worker's --data_root); an http(s) root (http://HOST:PORT/...) is also how "
          "to reach a loopback, link-local or private-network address, which remote reads refuse "
          "otherwise. Empty: any local file, public addresses only. Accepted by every command.");
ABSL_FLAG(std::string, coordinator, "",
          "host:port of a Sluice coordinator; empty: run the pipeline in this process.");
ABSL_FLAG(std::string, cluster_spec, "",
          "A TF_CONFIG-style JSON cluster spec file (sluice/cluster_spec.h) giving --coordinator, "
          "--consumer_index and --num_consumers where they are not given as flags; without it "
          "SLUICE_CLUSTER, TF_CONFIG, SLUICE_COORDINATOR and Slurm's SLURM_PROCID/SLURM_NTASKS "
          "are read. Accepted by every command.");

namespace sluice {
namespace {

// Whether `--name` (or -name, --name=V, --name V) appears before a "--" in argv.
bool FlagOnCommandLine(int argc, char** argv, const std::string& name) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") return false;
    if (arg.size() < 2 || arg[0] != '-') continue;
    const std::string body = arg.substr(arg[1] == '-' ? 2 : 1);
    if (body == name || absl::StartsWith(body, name + "=")) return true;
  }
  return false;
}

}  // namespace

// Fills --coordinator, --consumer_index and --num_consumers, for a command that takes them and
// where the command line does not give them, from the cluster spec (--cluster_spec, the
// environment; sluice/cluster_spec.h). Prints where they came from on stderr when any did not
// come from a flag or a default.
absl::Status ApplyClusterSpec(const SluicectlCommand& command, int argc, char** argv) {
  auto takes = [&](const std::string& name) {
    return std::find(command.flags.begin(), command.flags.end(), name) != command.flags.end();
  };
  const bool wants_coordinator = takes("coordinator");
  // element-spec takes --num_consumers without --consumer_index.
  const bool wants_index = takes("consumer_index");
  const bool wants_count = takes("num_consumers");
  if (!wants_coordinator && !wants_index && !wants_count) return absl::OkStatus();
  ClusterSpecSources sources = ClusterSpecSources::FromProcess();
  sources.spec_file = absl::GetFlag(FLAGS_cluster_spec);
  auto int_flag = [](const std::string& name) -> std::optional<int64_t> {
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    int64_t v = 0;
    if (flag == nullptr || !absl::SimpleAtoi(flag->CurrentValue(), &v)) return std::nullopt;
    return v;
  };
  if (FlagOnCommandLine(argc, argv, "coordinator")) {
    sources.flag_coordinator = absl::GetFlag(FLAGS_coordinator);
  }
  // A flag the command does not take is pinned, so that only the others are checked.
  if (!wants_index || FlagOnCommandLine(argc, argv, "consumer_index")) {
    sources.flag_consumer_index = wants_index ? int_flag("consumer_index") : 0;
  }
  if (!wants_count || FlagOnCommandLine(argc, argv, "num_consumers")) {
    sources.flag_num_consumers = wants_count ? int_flag("num_consumers") : 1;
  }
  absl::StatusOr<ClusterConfig> config = ResolveClusterConfig(sources);
  if (!config.ok()) return config.status();
  bool from_spec = false;
  if (wants_coordinator && !sources.flag_coordinator.has_value() &&
      config->coordinator_source != "default") {
    absl::SetFlag(&FLAGS_coordinator, config->coordinator_address);
    from_spec = true;
  }
  std::string error;
  if (wants_index && config->consumer_index_source != "--consumer_index" &&
      config->consumer_index_source != "default") {
    absl::FindCommandLineFlag("consumer_index")
        ->ParseFrom(absl::StrCat(config->consumer_index), &error);
    from_spec = true;
  }
  if (wants_count && config->num_consumers_source != "--num_consumers" &&
      config->num_consumers_source != "default") {
    absl::FindCommandLineFlag("num_consumers")
        ->ParseFrom(absl::StrCat(config->num_consumers), &error);
    from_spec = true;
  }
  if (from_spec) std::cerr << "sluicectl: cluster spec: " << config->DebugString() << "\n";
  return absl::OkStatus();
}

}  // namespace sluice

namespace sluice {
namespace {

std::map<std::string, SluicectlCommand>& CommandTable() {
  static auto* table = new std::map<std::string, SluicectlCommand>();
  return *table;
}

SluicectlDatasetMaker& CoordinatorMaker() {
  static SluicectlDatasetMaker maker = nullptr;
  return maker;
}

void PrintUsage(std::ostream& out) {
  out << "Usage: sluicectl <command> [--flag=value ...]\n"
         "\n"
         "Commands:\n";
  out << "  help [command]\n";
  for (const SluicectlCommand* c : SluicectlCommands()) out << "  " << c->synopsis << "\n";
  out << "\n"
         "Run `sluicectl help <command>` for a command's flags.\n"
         "Global flag: --plugin=PATH[,PATH...] loads custom-op plugins first.\n"
         "Global flag: --cluster_spec=FILE (or $SLUICE_CLUSTER, $TF_CONFIG, Slurm's environment)\n"
         "  gives --coordinator, --consumer_index, --num_consumers when not set as flags.\n"
         "Global flag: --data_root=DIR|URL[,...] limits what pipelines run in this process read;\n"
         "  loopback, link-local and private-network URLs need their endpoint as a root.\n"
         "Exit codes: 0 success, 1 error, 2 usage error.\n";
}

}  // namespace

void PrintCommandHelp(const SluicectlCommand& c, std::ostream& out) {
  out << "Usage: sluicectl " << c.synopsis << "\n\n" << c.help << "\n";
  if (!c.flags.empty()) out << "\nFlags:\n";
  for (const std::string& name : c.flags) {
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr) continue;
    out << "  --" << name << " (default: \"" << flag->DefaultValue() << "\")\n      "
        << flag->Help() << "\n";
  }
}

int HelpMain(const std::vector<std::string>& args) {
  if (args.empty()) {
    PrintUsage(std::cout);
    return kExitOk;
  }
  if (args.size() > 1) return ReportUsageError("help", "takes at most one command name");
  const SluicectlCommand* c = FindSluicectlCommand(args[0]);
  if (c == nullptr) return ReportUsageError("help", absl::StrCat("unknown command '", args[0], "'"));
  PrintCommandHelp(*c, std::cout);
  return kExitOk;
}

// Parses argv[1..] in the style of absl flags (--name=value, --name value, --bool, --nobool,
// one or two dashes, "--" ends the flags): the first positional argument is the command, the
// others go to it. Every flag must be one the command accepts. Sets the flags through absl's
// registry. Returns kExitOk, or the exit code of a usage error it has reported.
int ParseCommandLine(int argc, char** argv, const SluicectlCommand** command,
                     std::vector<std::string>* positional, bool* help_requested) {
  struct FlagArg {
    std::string name;
    std::string value;
    bool has_value;
  };
  std::vector<FlagArg> flag_args;
  std::vector<std::string> positionals;
  bool flags_done = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (flags_done || arg.size() < 2 || arg[0] != '-') {
      positionals.push_back(arg);
      continue;
    }
    if (arg == "--") {
      flags_done = true;
      continue;
    }
    std::string body = arg.substr(arg[1] == '-' ? 2 : 1);
    size_t eq = body.find('=');
    FlagArg fa{body.substr(0, eq), eq == std::string::npos ? "" : body.substr(eq + 1),
               eq != std::string::npos};
    if (fa.name == "help" || fa.name == "h" || fa.name == "helpfull") {
      *help_requested = true;
      continue;
    }
    // A non-boolean flag without '=' takes the next argument as its value.
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(fa.name);
    if (!fa.has_value && flag != nullptr && !flag->IsOfType<bool>() && i + 1 < argc) {
      fa.value = argv[++i];
      fa.has_value = true;
    }
    flag_args.push_back(std::move(fa));
  }

  *command = nullptr;
  std::string command_name = positionals.empty() ? "help" : positionals[0];
  if (!positionals.empty()) positionals.erase(positionals.begin());
  if (command_name != "help") {
    *command = FindSluicectlCommand(command_name);
    if (*command == nullptr) {
      std::cerr << "sluicectl: unknown command '" << command_name
                << "'; run `sluicectl help` for the list of commands\n";
      return kExitUsage;
    }
  }
  const std::string where = command_name;
  std::set<std::string> accepted = {"plugin", "cluster_spec", "memory_limit",
                                    "max_element_bytes", "threads", "data_root"};  // global
  if (*command != nullptr) accepted.insert((*command)->flags.begin(), (*command)->flags.end());
  // Commands that dial the service take the security flags (tools/sluicectl/security.h).
  if (accepted.count("coordinator")) {
    accepted.insert(std::begin(kSluicectlSecurityFlags), std::end(kSluicectlSecurityFlags));
  }

  for (FlagArg& fa : flag_args) {
    std::string name = fa.name;
    std::string value = fa.value;
    absl::CommandLineFlag* flag = accepted.count(name) ? absl::FindCommandLineFlag(name) : nullptr;
    // --noNAME for a boolean NAME.
    if (flag == nullptr && absl::StartsWith(name, "no") && !fa.has_value &&
        accepted.count(name.substr(2))) {
      absl::CommandLineFlag* negated = absl::FindCommandLineFlag(name.substr(2));
      if (negated != nullptr && negated->IsOfType<bool>()) {
        flag = negated;
        value = "false";
        fa.has_value = true;
      }
    }
    if (flag == nullptr) {
      return ReportUsageError(where, absl::StrCat("unknown flag --", fa.name));
    }
    if (!fa.has_value) {
      if (!flag->IsOfType<bool>()) {
        return ReportUsageError(where, absl::StrCat("flag --", fa.name, " needs a value"));
      }
      value = "true";
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      return ReportUsageError(where,
                              absl::StrCat("bad value for --", flag->Name(), ": ", error));
    }
  }
  positional->assign(positionals.begin(), positionals.end());
  return kExitOk;
}


bool RegisterSluicectlCommand(SluicectlCommand command) {
  std::string name = command.name;
  if (!CommandTable().emplace(name, std::move(command)).second) {
    std::fprintf(stderr, "sluicectl: command '%s' registered twice\n", name.c_str());
    std::abort();
  }
  return true;
}

std::vector<const SluicectlCommand*> SluicectlCommands() {
  std::vector<const SluicectlCommand*> out;
  for (const auto& [name, c] : CommandTable()) out.push_back(&c);
  return out;
}

const SluicectlCommand* FindSluicectlCommand(const std::string& name) {
  auto it = CommandTable().find(name);
  return it == CommandTable().end() ? nullptr : &it->second;
}

int ReportError(const absl::Status& status) {
  std::cout.flush();
  std::cerr << "sluicectl: " << status.message() << "\n";
  return kExitError;
}

int ReportUsageError(const std::string& command, const std::string& message) {
  std::cerr << "sluicectl " << command << ": " << message << "\n"
            << "Run `sluicectl help" << (command == "help" ? "" : " " + command)
            << "` for usage.\n";
  return kExitUsage;
}

bool RegisterCoordinatorDatasetMaker(SluicectlDatasetMaker maker) {
  CoordinatorMaker() = maker;
  return true;
}

absl::StatusOr<SluicectlDataset> MakeSluicectlDataset(const SluicectlPipelineArgs& args) {
  if (args.coordinator.empty()) return MakeLocalDataset(args);
  if (CoordinatorMaker() == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("--coordinator=", args.coordinator,
                     ": this sluicectl was built without the service client"));
  }
  return CoordinatorMaker()(args);
}

absl::Status PrepareCommand(const SluicectlCommand& command, int argc, char** argv) {
  RETURN_IF_ERROR(LoadPlugins(absl::GetFlag(FLAGS_plugin)));
  RETURN_IF_ERROR(ConfigureProcessMemoryBudget(absl::GetFlag(FLAGS_memory_limit),
                                               absl::GetFlag(FLAGS_max_element_bytes)));
  if (const int threads = absl::GetFlag(FLAGS_threads); threads != 0) {
    absl::Status s = SetProcessThreadPoolSize(threads);
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat("--threads: ", s.message()));
  }
  absl::StatusOr<DataRoots> roots = DataRoots::Create(absl::GetFlag(FLAGS_data_root));
  if (!roots.ok()) {
    return absl::Status(roots.status().code(),
                        absl::StrCat("--data_root: ", roots.status().message()));
  }
  RETURN_IF_ERROR(InstallProcessDataRoots(*roots));
  return ApplyClusterSpec(command, argc, argv);
}

}  // namespace sluice
