// sluicectl run / element-spec --coordinator=HOST:PORT (docs/SERVICE.md): the commands of
// tools/sluicectl/run.cc and element_spec.cc read through the service; this file registers
// their coordinator dataset maker and owns the service-mode flags.
//
// The maker registers the pipeline, asks the coordinator for the per-replica element spec of
// the job's layout (GetElementSpec over RPC; no job is created, so `element-spec` leaves no
// trace), and defers joining the job (GetOrCreateJob, through DistributeDatasetFromService) to
// the first iterator, so only `run` creates or joins a job.
#include <cstdint>
#include <fstream>
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
#include "absl/time/time.h"
#include "client/service_job_options.h"
#include "core/rpc/bulk_channel.h"
#include "core/rpc/shm_segment.h"
#include "client/service_step_source.h"
#include "core/rpc/coordinator_call.h"
#include "core/tensor/proto_convert.h"
#include "core/util/status_macros.h"
#include "proto/coordinator.grpc.pb.h"
#include "sluice/dataset.h"
#include "sluice/service.h"
#include "tools/sluicectl/commands.h"
#include "tools/sluicectl/security.h"

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
ABSL_FLAG(std::string, trainer_id, "",
          "Service mode: share --job across trainers (as tf.data's CrossTrainerCache): the "
          "trainer this process reads for; trainers with different ids read one production at "
          "their own pace, processes with the same id split that trainer's steps. Implies "
          "--read_mode=independent and needs --job.");
ABSL_FLAG(std::string, cross_trainer_mode, "skip",
          "Service mode, with --trainer_id: skip (a trainer that falls behind the workers' "
          "window skips to its start, as TF) or lossless (the slowest trainer holds the "
          "producer; every trainer reads every step).");
ABSL_FLAG(int64_t, expected_trainers, 0,
          "Service mode, --cross_trainer_mode=lossless: workers keep every step until this many "
          "trainers have joined (0: none awaited).");
ABSL_FLAG(int64_t, max_trainers, 0,
          "Service mode, with --trainer_id: distinct trainers the job admits (0: the "
          "coordinator's default, 16; at most 64).");
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
ABSL_FLAG(int64_t, receive_budget_bytes, int64_t{64} << 20,
          "Service mode: this consumer's receive budget in bytes, shared by its streams: steps "
          "received and not yet consumed plus credit granted to workers (docs/SERVICE.md).");
ABSL_FLAG(bool, force_compression, false,
          "Service mode: use --compression on loopback and same-host workers too (by default "
          "only remote workers compress).");
ABSL_FLAG(bool, shared_memory, sluice::SharedMemoryDefaultFromEnvironment(),
          "Service mode: read from workers on this host through shared memory (negotiated, TCP "
          "otherwise); false: TCP only. Default: true unless the environment sets "
          "SLUICE_SHARED_MEMORY=0.");
ABSL_FLAG(bool, bulk_data, sluice::BulkDataDefaultFromEnvironment(),
          "Service mode: take the tensor bytes of workers that shared memory does not serve on "
          "a TCP socket of each stream's own (the bulk data channel, negotiated; falls back to "
          "gRPC when a worker's data port cannot be reached); false: every byte on gRPC. "
          "Default: true unless the environment sets SLUICE_BULK_DATA=0.");
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

// --trainer_id and the sharing flags into `o` (after --read_mode, which they override).
absl::Status ReadCrossTrainerFlags(ServiceOptions* o) {
  o->trainer_id = absl::GetFlag(FLAGS_trainer_id);
  const std::string mode = absl::AsciiStrToLower(absl::GetFlag(FLAGS_cross_trainer_mode));
  if (mode != "skip" && mode != "lossless") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--cross_trainer_mode must be skip or lossless, got '",
        absl::GetFlag(FLAGS_cross_trainer_mode), "'"));
  }
  if (o->trainer_id.empty()) return absl::OkStatus();
  if (o->job_name.empty()) {
    return absl::InvalidArgumentError("--trainer_id needs --job: trainers share the named job");
  }
  o->read_mode = ServiceReadMode::kIndependent;
  o->cross_trainer.enabled = true;
  o->cross_trainer.lossless = mode == "lossless";
  o->cross_trainer.expected_trainers = absl::GetFlag(FLAGS_expected_trainers);
  o->cross_trainer.max_trainers = absl::GetFlag(FLAGS_max_trainers);
  return absl::OkStatus();
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
  RETURN_IF_ERROR(ReadCrossTrainerFlags(&o));
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
  o.receive_budget_bytes = absl::GetFlag(FLAGS_receive_budget_bytes);
  o.shared_memory = absl::GetFlag(FLAGS_shared_memory);
  o.bulk_data = absl::GetFlag(FLAGS_bulk_data);
  if (o.receive_budget_bytes < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--receive_budget_bytes must be positive, got ",
                                                   o.receive_budget_bytes));
  }
  const std::string compression = absl::AsciiStrToLower(absl::GetFlag(FLAGS_compression));
  if (compression.empty() || compression == "none") {
    o.compression = ServiceCompression::kNone;
  } else if (compression == "lz4") {
    o.compression = ServiceCompression::kLz4;
  } else if (compression == "zstd") {
    o.compression = ServiceCompression::kZstd;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--compression must be none, lz4 or zstd with --coordinator, got '",
        absl::GetFlag(FLAGS_compression), "'"));
  }
  o.force_compression = absl::GetFlag(FLAGS_force_compression);
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
  RETURN_IF_ERROR(CallCoordinator(flags.coordinator, kRpcDeadline, options.retry_deadline,
                                  "RegisterDataset",
                                  [&](grpc::ClientContext* c) {
                                    return stub->RegisterDataset(c, reg, &reg_response);
                                  }));
  proto::GetElementSpecRequest spec_request;
  *spec_request.mutable_options() = JobOptionsProto(options, reg_response.dataset_id(), replicas);
  proto::GetElementSpecResponse spec_response;
  RETURN_IF_ERROR(CallCoordinator(flags.coordinator, kRpcDeadline, options.retry_deadline,
                                  "GetElementSpec",
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
  return SluicectlDataset{
      DistributedDataset(std::move(spec), std::move(factory),
                         WrappingFor(strategy.layout().num_workers, replicas)),
      dataset.Cardinality()};
}

const bool kCoordinatorMakerRegistered = RegisterCoordinatorDatasetMaker(&MakeServiceDataset);

}  // namespace

absl::StatusOr<SluicectlDataset> MakeTrainerServiceDataset(const SluicectlPipelineArgs& args,
                                                           std::optional<std::string> job_name) {
  ASSIGN_OR_RETURN(ServiceFlags flags, ReadServiceFlags());
  if (job_name.has_value()) flags.options.job_name = *std::move(job_name);
  ASSIGN_OR_RETURN(Dataset dataset, Dataset::Parse(args.pipeline));
  ASSIGN_OR_RETURN(MirroredStrategy strategy, MirroredStrategy::Create(args.devices));
  ASSIGN_OR_RETURN(DistributedDataset dist,
                   DistributeDatasetFromService(strategy, dataset, flags.options));
  return SluicectlDataset{std::move(dist), dataset.Cardinality()};
}

}  // namespace sluice
