// Running one pipeline in-process (MirroredStrategy::ExperimentalDistributeDataset) and through
// the service (DistributeDatasetFromService on an in-process cluster), recording every step
// exactly: per replica, each leaf's dtype, shape and bytes, and the element_spec.
//
//   Cluster cluster(3);
//   ConformanceCase c = GenerateCase(7);
//   std::string why = CompareServiceWithLocal(cluster.address(), c, "job-7");
//   EXPECT_EQ(why, "") << c.Describe();
//
// Thread-compatible: one call at a time per job name.
#ifndef SLUICE_TESTS_CONFORMANCE_SERVICE_VS_LOCAL_H_
#define SLUICE_TESTS_CONFORMANCE_SERVICE_VS_LOCAL_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "sluice/distributed_dataset.h"
#include "tests/conformance/pipeline_generator.h"

namespace sluice {

// What one consumer (or one in-process worker) read.
struct RecordedRun {
  absl::Status status;
  std::string spec;                // FormatPerReplicaSpecRepr of the element_spec
  std::vector<std::string> steps;  // each step's repr and every leaf's dtype, shape and bytes
  std::vector<std::string> rows;   // every row of every leaf, for multiset comparison
  std::optional<IteratorCheckpoint> checkpoint;  // after the last step read
};

// In-process mode under `c.local_policy`, to the end: with one consumer, one worker with
// c.replicas replicas; with C consumers, consumer `worker_index`'s share of one worker with
// C x R replicas (replicas c*R .. c*R+R-1), and the element_spec of in-process worker c of C.
RecordedRun RunLocal(const ConformanceCase& c, int64_t worker_index);

// Every consumer of the case's service job (threads, in lockstep), to the end; with
// c.resume_after > 0, each reads that many steps, then a resumed job from the checkpoint reads
// the rest, and the runs are concatenated.
std::vector<RecordedRun> RunService(const std::string& coordinator, const ConformanceCase& c,
                                    const std::string& job_name);

// Writes the generator's data files (3 text files, 2 TFRecord files of Examples) into `dir`
// and returns the options naming them. Deterministic contents.
GeneratorOptions WriteConformanceFiles(const std::string& dir);

// "" when the service's runs equal in-process mode's (step by step, byte for byte, and the
// element_spec; DYNAMIC: the multiset of rows); else what differs, with both outputs. When both
// fail, they must fail alike: the same status code, and the service's message containing
// in-process mode's (the service may add where it failed); then *both_rejected is set (may be
// null). The caller bounds how many cases may end so (a generator or a parser that makes most
// pipelines fail would otherwise pass).
std::string CompareServiceWithLocal(const std::string& coordinator, const ConformanceCase& c,
                                    const std::string& job_name, bool* both_rejected = nullptr);

}  // namespace sluice

#endif  // SLUICE_TESTS_CONFORMANCE_SERVICE_VS_LOCAL_H_
