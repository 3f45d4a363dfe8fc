// Cluster configuration: where the coordinator is and which trainer (consumer) this process is,
// from flags, a TF_CONFIG-style JSON cluster spec, or the environment Slurm and Kubernetes set,
// so that one trainer script runs unchanged under Slurm, Kubernetes and on a laptop.
//
// The JSON cluster spec (a file, or the environment variable SLUICE_CLUSTER or TF_CONFIG):
//
//   {"cluster": {"coordinator": ["coord-host:5000"],
//                "worker":      ["in-0:5001", "in-1:5001"],    // Sluice input workers
//                "trainer":     ["gpu-0:2222", "gpu-1:2222"]},
//    "task": {"type": "trainer", "index": 1}}
//
//   - cluster.coordinator: exactly one "host:port" (a list of one, or a string).
//   - The trainers (consumers of the job) are cluster.trainer when it exists. Without a
//     "trainer" key the spec is read the way TensorFlow reads TF_CONFIG: the trainers are
//     cluster.chief (at most one, consumer 0) followed by cluster.worker, so the TF_CONFIG of a
//     MultiWorkerMirroredStrategy job works as it is (add a "coordinator" entry, or give the
//     address another way).
//   - task.type: "trainer" (or "chief"/"worker" in the TF reading) makes this process a trainer:
//     consumer_index is its position among the trainers and num_consumers their count. Any other
//     type ("coordinator", "worker" next to "trainer", "ps", "evaluator") is a role that
//     consumes nothing; the spec then gives only the coordinator address. task.index defaults
//     to 0.
//   - "task" may be absent: the spec then gives only the coordinator address (and the count of
//     trainers is not used), and the consumer index comes from a lower source.
//
// Sources, highest first; each field (coordinator address, consumer index, number of consumers)
// comes from the highest source that has it:
//   1. explicit flags (ClusterSpecSources::flag_*)
//   2. the spec file (--cluster_spec=FILE)
//   3. the environment variable SLUICE_CLUSTER holding the JSON spec, else TF_CONFIG (only one
//      of the two is read: SLUICE_CLUSTER when set)
//   4. SLUICE_COORDINATOR, SLUICE_CONSUMER_INDEX, SLUICE_NUM_CONSUMERS
//      (deploy/local/start_local_cluster.sh exports SLUICE_COORDINATOR)
//   5. Slurm: SLURM_PROCID and SLURM_NTASKS (inside `srun`, one trainer per task)
//   6. Kubernetes Indexed Job: JOB_COMPLETION_INDEX with SLUICE_NUM_CONSUMERS
//   7. defaults: no coordinator (run in-process: the laptop case), consumer 0 of 1, trainer.
//
// Errors are INVALID_ARGUMENT naming the source and the key, e.g.
//   "TF_CONFIG: task.index 3 out of range for 2 trainers"
//   "--cluster_spec=/etc/sluice/cluster.json: cluster.coordinator must hold exactly one address"
// A spec file that cannot be read is NOT_FOUND (or the reader's error), naming the file.
//
// Thread safety: the functions are pure given their sources (the default getenv and file
// reader read the process environment and the filesystem).
#ifndef SLUICE_CLIENT_INCLUDE_SLUICE_CLUSTER_SPEC_H_
#define SLUICE_CLIENT_INCLUDE_SLUICE_CLUSTER_SPEC_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace sluice {

// What a process needs to know about its place in the cluster.
struct ClusterConfig {
  // "host:port" of the coordinator; empty: none given (run the pipeline in-process).
  std::string coordinator_address;
  // This trainer among num_consumers (ServiceOptions::consumer_index / num_consumers).
  int64_t consumer_index = 0;
  int64_t num_consumers = 1;
  // "trainer", or the spec's task.type when this process is not a trainer ("coordinator",
  // "worker", "ps", ...).
  std::string role = "trainer";
  // Where each field came from, for messages: "--coordinator", "--cluster_spec=PATH",
  // "SLUICE_CLUSTER", "TF_CONFIG", "SLUICE_COORDINATOR", "SLURM_PROCID/SLURM_NTASKS",
  // "JOB_COMPLETION_INDEX/SLUICE_NUM_CONSUMERS", "default", ...
  std::string coordinator_source = "default";
  std::string consumer_index_source = "default";
  std::string num_consumers_source = "default";
  std::string role_source = "default";

  // One line for logs: "coordinator coord:5000 (TF_CONFIG); trainer 1 of 2 (SLURM_...)".
  std::string DebugString() const;
};

// A parsed JSON cluster spec (one source).
struct ParsedClusterSpec {
  std::optional<std::string> coordinator_address;  // cluster.coordinator
  std::vector<std::string> input_workers;          // cluster.worker when cluster.trainer exists
  std::vector<std::string> trainers;               // see the file comment
  std::optional<std::string> task_type;            // task.type
  int64_t task_index = 0;                          // task.index
  // Set when the task is a trainer: its consumer index (among `trainers`).
  std::optional<int64_t> consumer_index;
};

// Parses `json` (the contents of `source`, a name used in error messages such as "TF_CONFIG"
// or "--cluster_spec=/path"). INVALID_ARGUMENT naming the source and the key when the text is
// not JSON, a field has the wrong type, the coordinator list does not hold exactly one address,
// task.type names no cluster entry, or task.index is out of range.
absl::StatusOr<ParsedClusterSpec> ParseClusterSpec(const std::string& json,
                                                   const std::string& source);

// Everything ResolveClusterConfig reads; tests fill it, programs use ClusterSpecSources::
// FromProcess().
struct ClusterSpecSources {
  // Flags given explicitly on the command line (unset: not given).
  std::optional<std::string> flag_coordinator;
  std::optional<int64_t> flag_consumer_index;
  std::optional<int64_t> flag_num_consumers;
  // --cluster_spec=FILE; empty: none.
  std::string spec_file;
  // The environment: returns the variable's value, nullopt when unset. Default: std::getenv.
  std::function<std::optional<std::string>(const std::string& name)> getenv;
  // Reads a whole file. Default: the local filesystem (NOT_FOUND naming the path).
  std::function<absl::StatusOr<std::string>(const std::string& path)> read_file;

  // getenv and read_file set to the process's environment and the local filesystem.
  static ClusterSpecSources FromProcess();
};

// Resolves the configuration from `sources` (the precedence in the file comment). Errors: see
// the file comment; also INVALID_ARGUMENT when the resulting consumer_index is not in
// [0, num_consumers), naming where each came from, or when an environment variable that must be
// an integer is not one.
absl::StatusOr<ClusterConfig> ResolveClusterConfig(const ClusterSpecSources& sources);

}  // namespace sluice

#endif  // SLUICE_CLIENT_INCLUDE_SLUICE_CLUSTER_SPEC_H_
