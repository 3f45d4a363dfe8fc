// Reading a DistributedDataset from the Sluice service (a coordinator and input workers)
// instead of running the pipeline in the trainer: the tf.data service's `distribute` in C++.
//
//   ServiceOptions options;
//   options.coordinator_address = "coordinator:5000";
//   options.job_name = "resnet-train";   // every trainer process names the same job
//   options.consumer_index = rank;       // this process, of num_consumers
//   options.num_consumers = world_size;
//   ASSIGN_OR_RETURN(DistributedDataset dist,
//                    DistributeDatasetFromService(strategy, dataset, options));
//   for (const PerReplica<Element>& x : dist) { ... }
//
// Coordinated reads (the default): every step is one global batch of the dataset's batch size
// B, cut into num_consumers x R per-replica pieces by TF's rebatching rule; this process gets
// the pieces of its R = strategy.num_local_replicas() replicas, and every consumer sees the
// same number of steps (size-0 dummies at a partial last step). Independent reads: each
// consumer gets whole batches (split over its R replicas), first come first served, and sees
// its own end of data.
//
// Protocol and guarantees under failures: docs/SERVICE.md.
#ifndef SLUICE_CLIENT_SERVICE_H_
#define SLUICE_CLIENT_SERVICE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "sluice/dataset.h"
#include "sluice/tensor.h"
#include "sluice/distributed_dataset.h"
#include "sluice/strategy.h"

namespace sluice {

class Collective;  // client/collective.h

enum class ServiceReadMode { kCoordinated, kIndependent };

// How the job's tasks share the data (docs/SERVICE.md, "Task pipelines by sharding policy").
// kRanges: a deterministic global order whose ranges of steps the coordinator hands to
// whichever workers have room (elastic; docs/SERVICE.md, "Global order").
enum class ServiceShardingPolicy { kAuto, kFile, kData, kHint, kOff, kDynamic, kRanges };

// Wire compression of the steps workers send this job's consumers (docs/SERVICE.md, "Wire
// compression"): for clusters whose network, not CPU, limits input. kLz4 is fast (GB/s a
// core), kZstd (level 1) shrinks more for more CPU.
enum class ServiceCompression { kNone, kLz4, kZstd };

// How a kRanges job visits the dataset's records each epoch.
enum class ServiceShuffle {
  kNone,   // record order
  kFull,   // a seeded permutation of all records (needs a source with random access)
  kBlock,  // blocks of consecutive records in a seeded order, shuffled within each block
};

// The order of a kRanges job: its global steps are a pure function of (dataset, these options),
// whatever the number of workers, their speed, failures and restarts.
struct ServiceOrder {
  uint64_t seed = 0;
  ServiceShuffle shuffle = ServiceShuffle::kNone;
  int64_t shuffle_block_size = 0;  // kBlock: records per block; 0: the coordinator's default
  int64_t num_epochs = 1;          // each epoch reshuffles with (seed, epoch)
  int64_t range_steps = 0;         // steps per range handed to a worker; 0: the default
};

// TLS and the shared token for every connection to the service: the coordinator and each
// worker (docs/SERVICE.md, "Security"). All empty: plaintext, no token.
struct ServiceSecurity {
  // Dial with TLS; also on when any tls_*_file is set.
  bool tls = false;
  // PEM CA certificates the servers' certificates must chain to; empty: gRPC's default roots.
  std::string tls_ca_file;
  // This client's PEM certificate and private key, for a service that requires client
  // certificates (mTLS). Both or neither.
  std::string tls_cert_file;
  std::string tls_key_file;
  // The name the servers' certificates must carry, when it is not the host dialed.
  std::string tls_server_name;
  // The service's shared token, sent on every call; empty: none.
  std::string token;
};

// A job shared across trainers, as the tf.data service's CrossTrainerCache (docs/SERVICE.md,
// "Shared jobs"): trainers naming the same job_name with different ServiceOptions::trainer_id
// read one production; each worker keeps the task's steps in a window bounded in bytes
// (sluice-worker --cross_trainer_window_bytes) and every trainer reads it at its own pace.
// Needs ServiceReadMode::kIndependent and a job_name.
struct ServiceCrossTrainer {
  bool enabled = false;
  // false: a trainer that falls behind the window's start skips to it (as TF; the worker's
  // sluice_worker_trainer_skipped_steps_total counts the steps it missed). true: the slowest
  // trainer holds the producer, so every trainer reads every step from where it joined.
  bool lossless = false;
  // Lossless: workers keep every step until this many trainers have joined (0: none awaited).
  int64_t expected_trainers = 0;
  // Distinct trainers the job admits; 0: the coordinator's default (16); at most 64.
  int64_t max_trainers = 0;
};

struct ServiceOptions {
  // The coordinator, "host:port". Required.
  std::string coordinator_address;
  // Consumers naming the same job share it; an empty name makes a job of this process alone,
  // so it is required (INVALID_ARGUMENT) when num_consumers > 1.
  std::string job_name;
  // This trainer process among the job's consumers.
  int64_t consumer_index = 0;
  int64_t num_consumers = 1;
  ServiceReadMode read_mode = ServiceReadMode::kCoordinated;
  ServiceShardingPolicy sharding_policy = ServiceShardingPolicy::kAuto;
  // Static policies: number of tasks; 0 means one per worker registered when the job is made.
  int64_t num_tasks = 0;
  // kDynamic over a source of elements (not files): source elements per split; 0: the
  // coordinator's default (a few global batches).
  int64_t split_size = 0;
  // Deadline of each coordinator RPC.
  absl::Duration rpc_deadline = absl::Seconds(10);
  // How long UNAVAILABLE (no worker yet, a worker gone and its task not reassigned yet) is
  // retried, with exponential backoff, before the error is returned naming the address.
  absl::Duration retry_deadline = absl::Seconds(60);
  // The receive budget in bytes, shared by all of this consumer's streams (docs/SERVICE.md,
  // "Flow control"): the steps received and not yet consumed plus the credit granted to workers
  // and not yet used stay within it (a single step larger than a stream's share still flows).
  // At least 1.
  int64_t receive_budget_bytes = int64_t{64} << 20;
  // HTTP/2 keepalive on the channels to the coordinator and the workers: a connection silent
  // for keepalive_time is pinged, and dropped when the ping is not answered within
  // keepalive_timeout; the calls on it fail with UNAVAILABLE and are retried (a partition or
  // a frozen worker ends in a retry, not a hang). absl::InfiniteDuration(): no pings.
  absl::Duration keepalive_time = absl::Seconds(30);
  absl::Duration keepalive_timeout = absl::Seconds(10);
  // Allocates the host buffers received tensors are copied into (pinned memory, a pool, ...).
  // Empty: pooled pinned memory when batches are prefetched to a real GPU (so they go to the
  // device with no staging copy), else 64-byte aligned host memory.
  std::function<std::shared_ptr<TensorBuffer>(size_t bytes)> allocator;
  // Device prefetch, as tf.distribute.InputOptions: on the strategy's GPU devices each replica's
  // next `per_replica_buffer_size` steps are copied into its device's memory ahead of the
  // trainer (0 disables); fetch_to_device = false keeps them on the host
  // (client/device_prefetcher.h).
  bool fetch_to_device = true;
  int64_t per_replica_buffer_size = 1;
  // Independent reads only (INVALID_ARGUMENT otherwise): a collective spanning the job's
  // consumers (size num_consumers, rank consumer_index). Every step the consumers all-reduce
  // whether they still have data, as TF does across workers, so all of them end at the same
  // step, with size-0 dummies where a consumer's own data has ended
  // (client/end_of_data_agreement.h). Borrowed: must outlive the dataset and its iterators.
  // Null: each consumer sees its own end of data.
  Collective* end_of_data_collective = nullptr;
  // TLS and token for the coordinator and the workers. A wrong CA is UNAVAILABLE (the handshake
  // fails, retried until retry_deadline); a missing or wrong token is UNAUTHENTICATED.
  ServiceSecurity security;
  // kRanges: the order (ignored by other policies).
  ServiceOrder order;
  // Resume: continue the sequence a DistributedIterator::Checkpoint() of an earlier run (of
  // the same dataset and order) was taken from; its iterators return exactly the steps that
  // run had not returned. Coordinated reads with kRanges or kData only. The job joined is
  // named job_name + "@" + the step (so that every consumer resuming from the same checkpoint
  // shares it); with an empty job_name the job is this process's alone.
  std::optional<IteratorCheckpoint> resume_from;
  // How often each iterator asks the coordinator where its tasks are (new ranges, tasks moved
  // to another worker: a stream to a worker whose link was cut is then abandoned).
  absl::Duration heartbeat_interval = absl::Milliseconds(200);
  // The job's wire compression (an option of the job: consumers of one job name must agree).
  // Workers compress a stream's frames with it only when the consumer is on another host;
  // force_compression compresses on loopback too (tests, measuring the codec's cost). Each
  // frame whose payload shrinks by less than 1/16 (random or compressed bytes) goes raw.
  ServiceCompression compression = ServiceCompression::kNone;
  bool force_compression = false;
  // Steps from a worker on this host travel through shared memory (a segment the worker writes
  // and this process maps; the tensors are views of it until dropped), negotiated per stream
  // and falling back to TCP when the worker is remote, has it off, or the hand-over fails.
  // false: TCP only (docs/SERVICE.md "Shared memory").
  bool shared_memory = true;
  // Steps from a remote worker (or one shared memory does not serve) send their tensor bytes
  // on a TCP socket of their own next to the gRPC stream, received straight into this
  // process's buffers (one kernel copy); negotiated per stream, falling back to gRPC when the
  // worker has it off or its data port cannot be reached (logged once per worker, counted in
  // sluice_client_bulk_fallbacks_total). Each stream receives its socket's bytes on a thread of
  // its own, so a worker stopped between a header and its bytes delays that stream only, up
  // to the receive timeout, after which the stream is made again (docs/SERVICE.md "Bulk data
  // channel", "Why it is safe on by default"). false: every byte on gRPC.
  bool bulk_data = true;
  // A bulk socket that brings no byte of a frame it owes for this long fails that stream,
  // which is made again (the steps it did not deliver are sent again, exactly once).
  absl::Duration bulk_receive_timeout = absl::Seconds(60);
  // Share the job across trainers (see ServiceCrossTrainer); every trainer must give the same
  // cross_trainer options (the job's options must match, INVALID_ARGUMENT otherwise).
  ServiceCrossTrainer cross_trainer;
  // With cross_trainer: the trainer this process reads for (printable ASCII, at most 128
  // bytes). Processes giving the same trainer_id are consumers of one trainer and split its
  // steps; a new id beyond max_trainers is RESOURCE_EXHAUSTED.
  std::string trainer_id;
};

// Registers `dataset` with the coordinator, gets or creates the job (replicas_per_consumer =
// strategy.num_local_replicas()) and its per-replica element spec, and returns a
// DistributedDataset whose iterators stream from the job's workers. INVALID_ARGUMENT for bad
// options and the coordinator's validation errors (an unbatched dataset, FILE sharding with too
// few files, a job of that name with other options, a resume_from of another dataset or order,
// a global shuffle of a pipeline without random access); UNAVAILABLE (naming the coordinator) when
// it cannot be reached within retry_deadline.
absl::StatusOr<DistributedDataset> DistributeDatasetFromService(const MirroredStrategy& strategy,
                                                                const Dataset& dataset,
                                                                const ServiceOptions& options);

}  // namespace sluice

#endif  // SLUICE_CLIENT_SERVICE_H_
