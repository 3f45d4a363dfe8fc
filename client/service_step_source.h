// ServiceStepSource: the StepSource behind DistributeDatasetFromService (sluice/service.h).
//
// It learns the job's tasks and their workers from ClientHeartbeat and opens one StreamSteps
// call per task (docs/SERVICE.md), on gRPC's callback API: no thread per task (a constant three
// of its own and gRPC's callback threads, however many tasks). Each frame is decoded as it
// arrives straight into buffers from the allocator and its steps are queued.
//
// Flow control in bytes: the consumer has one receive budget (receive_budget_bytes) shared by
// the streams open at once, each getting window = (budget - 1) / streams (every task of a
// round-robin job, or the max_open_tasks next ranges of a sequential one: the tasks it reads
// next). A step costs StepCreditBytes (core/rpc/step_frame.h). Per stream, the cost of the
// steps queued and not yet returned plus the credit granted and not yet used never exceeds the
// window. A step larger than its credit flows only on the one stream at a time whose credit the
// caller raised to window + 1 after waiting raise_credit_after for it, so the consumer holds at
// most its budget, or budget - 1 + (step - window) while it holds a step larger than a window,
// with any number of streams. Credit goes back in batches: when a quarter of a stream's window
// is free, a credit thread of the source (never the caller's thread, which only signals it)
// sends one CreditGrant for all of it.
//
// Coordinated mode follows the schedule of docs/SERVICE.md: tasks round-robin in task order,
// one step each, a task leaving the rotation at its end; the data ends when every task has.
// Independent mode takes the next step of whichever task has one. Sequential mode (a
// SHARDING_RANGES job: task i is range i of the job's global steps) reads task 0 to its end,
// then task 1, ...; the tasks are made by the coordinator as workers have room, so a monitor
// thread keeps asking ClientHeartbeat and opens the streams of the next max_open_tasks tasks
// ahead as they appear; the data ends after the last of the job's num_tasks.
//
// Independent reads: the worker keeps the steps it sent this consumer until acknowledged (credit
// grants carry the count received; a new call starts from it, under the same random
// consumer_id), so a broken call that the worker survives loses no step.
//
// Failures: when a stream breaks (worker gone, UNAVAILABLE), its reader asks the coordinator
// for the task's worker (possibly a new one) and reopens the stream at the first task step it
// has not received, retrying with exponential backoff until retry_deadline has passed without
// progress; then, and for any other error, GetNextStep fails with a message naming the task and
// the worker address. A stream that does not break but whose task the coordinator has moved to
// another worker (the old worker's link was cut: no TCP error arrives, only the coordinator's
// heartbeat timeout) is cancelled by the monitor, so the reader moves too. A call that
// delivered its end of task is not waited for: the caller reads on at once, even if the worker
// froze before sending the call's status (the monitor cancels such a call after end_grace).
//
// Where the code is: this class is the factory and the caller's face (sticky errors, the last
// report of ended tasks, checkpoints). The per-task calls, reconnects, credits and the monitor
// are client/task_streams.h (credits: task_stream_credits.cc); the three read modes are read
// orders (client/read_order.h): coordinated_read.h, independent_read.h and ranges_read.h
// (sequential).
//
// Not thread-safe (one caller at a time, like the DistributedIterator that owns it); the
// destructor cancels the streams and returns once every call has finished.
#ifndef SLUICE_CLIENT_SERVICE_STEP_SOURCE_H_
#define SLUICE_CLIENT_SERVICE_STEP_SOURCE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "sluice/element.h"
#include "core/device/device_memory.h"
#include "core/rpc/grpc_security.h"
#include "core/rpc/step_frame.h"
#include "grpcpp/grpcpp.h"
#include "client/read_ahead_source.h"
#include "sluice/distributed_dataset.h"
#include "core/util/jitter.h"

namespace sluice {

class ConsumerRelease;
class ReadOrder;
class TaskStreams;

using ChannelFactory = std::function<std::shared_ptr<grpc::Channel>(const std::string& address)>;

// Insecure channels with no message size limits.
std::shared_ptr<grpc::Channel> DefaultChannel(const std::string& address);
// Insecure channels with `limits` (receive limit, keepalive), each with a connection of its own.
std::shared_ptr<grpc::Channel> LimitedChannel(const std::string& address,
                                              const ChannelLimits& limits);

// The largest message a consumer with this receive budget accepts from a worker (its channels'
// receive limit): max(budget, 256 MiB) + 1 MiB of frame headers, at most INT_MAX. A frame holds
// at most the credit granted (at most the budget), or one step of any size while the stream
// holds the raise: a step larger than this fails the task with RESOURCE_EXHAUSTED.
int ReceiveLimitBytes(int64_t receive_budget_bytes);

// This process's consumer instance (StreamRequest.consumer_instance): random, not 0, the same
// for every iterator of the process.
uint64_t ProcessConsumerInstance();

struct ServiceStepSourceOptions {
  std::string coordinator_address;
  int64_t job_id = 0;
  int64_t consumer_index = 0;
  int64_t num_local_replicas = 1;
  bool independent = false;
  // A job shared across trainers (proto JobOptions.cross_trainer): the trainer this consumer
  // reads for (StreamRequest.trainer_id). Empty for other jobs.
  std::string trainer_id;
  // The spec of one replica's value: decoded leaves are packed into its structure.
  ElementSpec per_replica_spec;
  // The job cuts batches into pieces (more than one replica in sync): every received piece
  // holding a SparseTensor or RaggedTensor must then have one row count in all its components
  // (core/tensor/row_pieces.h, CheckSameRows), else the stream fails with DATA_LOSS.
  bool pieces_are_cut = false;
  absl::Duration rpc_deadline = absl::Seconds(10);
  absl::Duration retry_deadline = absl::Seconds(60);
  // The receive budget in bytes, shared by the open streams (see above). At least 1.
  int64_t receive_budget_bytes = int64_t{64} << 20;
  // A caller that has waited this long for a task's step raises that task's credit one byte
  // above its window, so that a step larger than the window can come (one task at a time, see
  // above); once such a step has arrived, it raises without waiting. Shorter: less delay for
  // the first such step; longer: fewer raises (one CreditGrant each) when the caller outruns
  // its workers.
  absl::Duration raise_credit_after = absl::Milliseconds(1);
  // While the credit of every stream the caller waits for covers the largest step received so
  // far, the wait is most likely the pipeline's, not the credit's: the caller raises only after
  // this long (or raise_credit_after, if longer), so that a trainer outrunning its pipeline
  // sends no raise per frame; a step larger than any before still comes, that much later.
  absl::Duration raise_credit_after_covered = absl::Milliseconds(100);
  // Where received frames are decoded into. Empty: one pool of reused host buffers shared by
  // all of this consumer's streams, keeping idle min(16 MiB, receive_budget_bytes / 4), or more
  // while the idle buffers and those out stay within receive_budget_bytes.
  TensorAllocator allocator;
  // Numeric tensors of 4 KiB or more that arrive inside one of gRPC's received slices, aligned
  // to their dtype, are views of that slice instead of copies (core/rpc/step_frame.h). Only
  // without an allocator (ordinary host memory); false: every tensor is copied into buffers
  // of the pool.
  bool view_received_slices = true;
  // Tell workers this consumer decodes LZ4 and zstd frames (StreamRequest.
  // accepted_compression), so that a job with JobOptions.compression gets them compressed
  // when the worker is remote (or the job forces it). false: raw frames whatever the job says.
  bool accept_compression = true;
  // Ask workers for compact frame headers (StreamRequest.compact_headers, core/rpc/step_frame.h):
  // only the dimensions per_replica_spec leaves open travel with each step. false: full
  // headers (what a consumer of an older release gets).
  bool compact_headers = true;
  // Offer workers this host's identity for shared memory (StreamRequest.shm_offer,
  // core/rpc/shm_ring.h); false: TCP only.
  bool shared_memory = true;
  // Offer workers the bulk data channel (StreamRequest.bulk_offer, core/rpc/bulk_channel.h):
  // a frame's numeric bytes on a socket of the stream's own, received straight into the
  // allocator's buffers. A worker whose data port cannot be reached within
  // bulk_connect_timeout is not offered it again by this consumer (logged once, counted in
  // sluice_client_bulk_fallbacks_total); a socket that ends, fails or sends no byte for
  // bulk_receive_timeout ends its call, which is made again (exactly once, as any broken
  // call). The socket's bytes are received on a thread of the call's own, never on gRPC's
  // (core/rpc/bulk_channel.h "Threads"). false: every byte on gRPC.
  bool bulk_data = true;
  // With bulk_data: ask for the frames' headers on the socket too (BulkOffer.inband_headers),
  // so that once it is up no frame goes through gRPC (docs/SERVICE.md "Bulk data channel").
  // A worker that does not offer it keeps the headers on gRPC. false (or SLUICE_BULK_INBAND=0
  // in the environment): headers on gRPC.
  bool bulk_inband_headers = true;
  absl::Duration bulk_connect_timeout = absl::Seconds(2);
  absl::Duration bulk_receive_timeout = absl::Seconds(60);
  // Page-locks shared-memory segments for these devices (the consumer prefetches to a real
  // GPU), so that the device copy from a segment needs no staging; null: not locked.
  std::shared_ptr<DeviceMemory> shared_memory_devices;
  ChannelFactory channel_factory;  // empty: LimitedChannel with the limits below
  // The channels' receive limit when channel_factory is empty; 0: ReceiveLimitBytes(budget).
  int max_receive_message_bytes = 0;
  // HTTP/2 keepalive of the channels when channel_factory is empty (ChannelLimits,
  // core/rpc/grpc_security.h): a call whose worker went silent (a partition, a frozen process)
  // fails with UNAVAILABLE about keepalive_time + keepalive_timeout later and is retried.
  absl::Duration keepalive_time = absl::Seconds(30);
  absl::Duration keepalive_timeout = absl::Seconds(10);
  // This consumer's instance on every call (StreamRequest.consumer_instance): two processes
  // claiming the same consumer_index of a job are refused. 0: ProcessConsumerInstance().
  uint64_t consumer_instance = 0;
  // SHARDING_RANGES: read tasks in task_index order, each to its end (see above).
  bool sequential = false;
  // Sequential: tasks streamed at once (the one being read and the next ones).
  int64_t max_open_tasks = 8;
  // How often the monitor asks ClientHeartbeat (new tasks, moved tasks): each wait is drawn
  // uniformly in heartbeat_interval * [1 - heartbeat_jitter, 1 + heartbeat_jitter], so that
  // many consumers started together do not reach the coordinator in waves.
  absl::Duration heartbeat_interval = absl::Milliseconds(200);
  double heartbeat_jitter = 0.25;
  // The jitter's random source (tests inject a fixed one). Unset: seeded from the system.
  RandomSource random;
  // A call whose end of task arrived but whose worker has not sent the call's status this long
  // after (the worker froze right after the end) is cancelled by the monitor (and by the
  // destructor, which waits for it at most this long). The end and the steps before it are the caller's as soon as they arrive.
  absl::Duration end_grace = absl::Seconds(5);
  // The consumer's place in its job, shared with the dataset and its other iterators: released
  // when the last holder goes (client/consumer_release.h). Null: never released.
  std::shared_ptr<ConsumerRelease> release;
  // Checkpoints (CheckpointAfter): empty job key = not resumable. The job's first step in
  // its sequence and its epoch length (-1: unknown).
  std::string checkpoint_job_key;
  int64_t start_step = 0;
  int64_t steps_per_epoch = -1;
};

class InputWaitMeter;  // client/input_wait_meter.h

// A ReadAheadSource (client/read_ahead_source.h): the streams receive ahead of the caller, within
// the credit window; GetNextStep takes the next received step (packing its tensors into the
// replicas' elements, no byte copied) or waits for it.
class ServiceStepSource : public ReadAheadSource {
 public:
  // Waits (up to retry_deadline) until the coordinator reports the job's tasks, then opens
  // their streams. UNAVAILABLE naming the coordinator when it does not answer.
  static absl::StatusOr<std::unique_ptr<ServiceStepSource>> Create(ServiceStepSourceOptions options);
  ~ServiceStepSource() override;

  absl::Status GetNextStep(std::vector<Element>* replicas, bool* end_of_data) override;
  absl::StatusOr<IteratorCheckpoint> CheckpointAfter(int64_t steps_returned) const override;
  // Autoscaling (docs/AUTOSCALING.md): the meter of the trainer's input wait, reported in the
  // heartbeats. A wrapper that reads ahead of the trainer (DevicePrefetcher) takes it over
  // before the first read: this source then stops timing its own reads, and the wrapper times
  // its callers' waits instead. Never null; lives as long as this source.
  InputWaitMeter* TakeOverWaitMeter();

  // Flow control, for tests and metrics. Bytes are credit bytes (StepCreditBytes).
  struct FlowStats {
    int64_t budget_bytes = 0;
    int64_t window_bytes = 0;       // per stream
    int64_t held_bytes = 0;         // received and not yet returned by GetNextStep
    // Granted to workers and not yet received (a stream's credit below 0, after a step larger
    // than it, counts as 0).
    int64_t outstanding_bytes = 0;
    int64_t peak_bytes = 0;         // the largest held + outstanding so far
    int64_t received_bytes = 0;     // in all
    int64_t steps_received = 0;
    // CreditGrant messages sent (initial credits not counted): quarter-window grants, and
    // raises (a grant to window + 1 for a step larger than the credit).
    int64_t credit_grants = 0;
    int64_t credit_raises = 0;
  };
  FlowStats flow_stats() const;
  // Test hook: waits until `predicate` holds for the stats (re-checked whenever a frame arrives
  // or credit changes), up to `timeout`; returns whether it holds.
  bool WaitForFlowStats(const std::function<bool(const FlowStats&)>& predicate,
                        absl::Duration timeout) const;

 private:
  ServiceStepSource(std::unique_ptr<TaskStreams> streams, std::unique_ptr<ReadOrder> order);
  absl::Status NextStep(std::vector<Element>* replicas, bool* end_of_data);

  // Declared first: destroyed last (Shutdown, in the destructor, stops every thread that uses
  // the order).
  std::unique_ptr<TaskStreams> streams_;
  std::unique_ptr<ReadOrder> order_;
  // The read's end or failure, once returned: answered from then on.
  bool finished_ = false;
  absl::Status status_;
};

}  // namespace sluice

#endif  // SLUICE_CLIENT_SERVICE_STEP_SOURCE_H_
