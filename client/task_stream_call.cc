#include "client/task_stream_call.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sluice/composite_tensor.h"
#include "core/tensor/row_pieces.h"
#include "absl/time/clock.h"
#include "core/obs/metrics.h"
#include "core/rpc/grpc_status.h"
#include "core/util/logging.h"
#include "core/rpc/shm_fd_passing.h"
#include "core/rpc/shm_mapping_cache.h"
#include "core/rpc/step_frame.h"
#include "core/util/status_macros.h"
#include "grpcpp/impl/rpc_method.h"

namespace sluice {
namespace {

constexpr char kStreamStepsMethod[] = "/sluice.proto.WorkerService/StreamSteps";
// A deterministic error a stream ended with is asked about again this many times (each after
// the task's backoff) before the consumer fails with it (TaskStream::deterministic_retries).
constexpr int kDeterministicRetries = 3;
// The worker answers a segment hand-over at once (a local socket): this bounds a stuck one.
constexpr absl::Duration kSharedMemoryHandOverTimeout = absl::Seconds(2);
// At most this many released job segment regions ride on one grant (the rest on the next).
constexpr size_t kMaxJobReleasesPerGrant = 4096;

// The bulk data channel's process-wide counters (docs/SERVICE.md "Metrics and status").
void CountBulkFallback() {
  static CounterFamily* const fallbacks = MetricsRegistry::Default().Counter(
      "sluice_client_bulk_fallbacks_total",
      "Workers whose bulk data port this process could not reach (their steps stay on gRPC)");
  fallbacks->Add({});
}
void CountBulkFailure() {
  static CounterFamily* const failures = MetricsRegistry::Default().Counter(
      "sluice_client_bulk_failures_total",
      "Calls whose bulk data socket ended or failed mid-frame (each made again)");
  failures->Add({});
}

}  // namespace

TaskStreamCall::TaskStreamCall(TaskStreams* streams, std::shared_ptr<TaskStream> task,
                               std::shared_ptr<grpc::Channel> channel, std::string address)
    : streams_(streams), task_(std::move(task)), channel_(std::move(channel)),
      address_(std::move(address)),
      decoder_(streams->options_.allocator, streams->compact_spec_,
               streams->view_received_slices_) {
  grpc::internal::ClientCallbackReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
      channel_.get(),
      grpc::internal::RpcMethod(kStreamStepsMethod, grpc::internal::RpcMethod::BIDI_STREAMING,
                                channel_),
      &context_, this);
}

void TaskStreamCall::StartLocked(const proto::ConsumerMessage& first) {
  // The hold keeps OnDone away while writes may still start from outside a reaction (the
  // credit thread); it is dropped once reading is over and no write is in flight.
  AddHold();
  write_buffer_ = EncodeConsumerMessage(first);
  writing_ = true;
  StartWrite(&write_buffer_);
  StartRead(&read_buffer_);
  StartCall();
}

void TaskStreamCall::WriteLocked() {
  if (writing_ || hold_released_) return;
  if (read_finished_) {
    hold_released_ = true;
    if (!write_failed_) StartWritesDone();
    RemoveHold();
    return;
  }
  if (write_failed_ || !(shm_answer_due_ || bulk_answer_due_ || streams_->GrantDueLocked(*task_))) {
    return;
  }
  proto::ConsumerMessage grant = streams_->TakeGrantLocked(task_.get());
  if (ring_ != nullptr) {
    grant.mutable_credit()->set_shm_ready(true);
    grant.mutable_credit()->set_shm_released(ring_->released());
  } else if (shm_declined_) {
    grant.mutable_credit()->set_shm_declined(true);
  }
  if (job_reader_ != nullptr) {
    grant.mutable_credit()->set_job_shm_mapped(true);
    job_released_.clear();
    job_reader_->TakeReleased(kMaxJobReleasesPerGrant, &job_released_);
    grant.mutable_credit()->mutable_job_shm_released()->Add(job_released_.begin(),
                                                            job_released_.end());
  }
  if (bulk_ != nullptr) grant.mutable_credit()->set_bulk_ready(true);
  if (bulk_answer_due_ && bulk_ == nullptr) grant.mutable_credit()->set_bulk_declined(true);
  bulk_answer_due_ = false;
  shm_answer_due_ = false;
  write_buffer_ = EncodeConsumerMessage(grant);
  writing_ = true;
  StartWrite(&write_buffer_);  // a broken call is noticed by the read
}

void TaskStreamCall::OnWriteDone(bool ok) {
  absl::MutexLock lock(&streams_->mu_);
  writing_ = false;
  if (!ok) write_failed_ = true;
  WriteLocked();
}

void TaskStreamCall::FinishReadingLocked() {
  read_finished_ = true;
  TaskStream* task = task_.get();
  task->calling = false;
  task->raised = false;
  streams_->SetOutstandingLocked(task, 0);  // nothing more arrives on this call
  if (!ended_ && (result_.code() == absl::StatusCode::kDataLoss || bulk_failed_)) {
    context_.TryCancel();
  }
  WriteLocked();  // the half-close, now or when the write in flight completes
}

void TaskStreamCall::OnReadDone(bool ok) {
  if (bulk_inband_) {
    // The frames come on the socket (ReceiveInband): this read only ends with the call.
    absl::MutexLock lock(&streams_->mu_);
    grpc_read_ended_ = true;
    if (ok && bulk_ != nullptr) {
      frame_on_grpc_ = true;  // a frame here breaks the protocol: the thread fails the call
      bulk_->Abort();
    }
    return;
  }
  if (read_ahead_ != nullptr) {
    // With a bulk socket the frame's bytes may take long to come (a stalled worker): handled
    // on the call's own thread, gRPC's is free at once, and the next header is read meanwhile.
    // The call lives on until this reaction returns, whatever the thread does meanwhile.
    grpc::ByteBuffer frame;
    frame.Swap(&read_buffer_);
    read_ahead_->OnReadDone(ok, [this, ok, frame]() mutable { HandleHandedOver(ok, &frame); });
    return;
  }
  if (!ok) {
    absl::MutexLock lock(&streams_->mu_);
    FinishReadingLocked();
    return;
  }
  HandleFrame(&read_buffer_);
}

void TaskStreamCall::HandleHandedOver(bool ok, grpc::ByteBuffer* buffer) {
  {
    absl::MutexLock lock(&streams_->mu_);
    if (!ok || read_finished_) {  // the stream ended, or reading ended on an earlier frame
      if (!read_finished_) FinishReadingLocked();
      read_ahead_->FrameHandled();
      return;
    }
  }
  HandleFrame(buffer);
  absl::MutexLock lock(&streams_->mu_);
  read_ahead_->FrameHandled();
}

void TaskStreamCall::HandleFrame(grpc::ByteBuffer* buffer) {
  // Decoded with no lock held: the copy into the allocator's buffers is the bulk of the work.
  // A frame beyond the credit granted is refused before anything is allocated for it (a
  // worker must not make this trainer allocate what it did not ask for): DATA_LOSS, naming
  // the task and the worker (OnDone).
  const FrameCreditLimit limit{task_->credit.load(std::memory_order_relaxed),
                               streams_->window_ + 1};
  absl::Status s = decoder_.Decode(*buffer, &frame_, limit);
  buffer->Clear();
  NoteBulkFailure(s);
  if (s.ok() && !shm_tried_ && decoder_.last_shm_accept() != nullptr) {
    shm_tried_ = true;
    TakeSharedMemory(*decoder_.last_shm_accept());
  }
  // (Not on the task's last frame: the stream ends, and its token with it.) The connect, and
  // every frame after it, on the call's own thread.
  if (s.ok() && !bulk_tried_ && decoder_.last_bulk_accept() != nullptr && !frame_.end_of_task &&
      frame_.status.ok()) {
    bulk_tried_ = true;
    absl::StatusOr<std::unique_ptr<BulkReceiveThread>> thread = BulkReceiveThread::Create(
        absl::StrCat("task ", task_->task_id, " from worker ", address_));
    if (!thread.ok()) {
      // Without a thread of its own for the socket, this call declines the channel and stays
      // on gRPC, as when the port cannot be reached (TakeBulkChannel): the worker waits for
      // the answer.
      LogEvent(LogLevel::kWarning, "client",
               absl::StrCat(thread.status().message(), "; this call stays on gRPC"));
      {
        absl::MutexLock lock(&streams_->mu_);
        bulk_answer_due_ = true;
        WriteLocked();
      }
      QueueFrame(std::move(s));
      return;
    }
    receive_thread_ = *std::move(thread);
    const proto::BulkAccept& accept = *decoder_.last_bulk_accept();
    const bool inband = accept.inband_headers() && streams_->options_.bulk_inband_headers;
    if (!inband) {
      read_ahead_ = std::make_unique<FrameReadAhead>(FrameReadAhead::Env{
          .mu = &streams_->mu_,
          .start_read = [this] { StartRead(&read_buffer_); },
          .hand_over = [thread = receive_thread_.get()](
                           std::function<void()> task) { thread->Run(std::move(task)); },
          .reading_finished = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return read_finished_; },
          .TEST_after_hand_over = nullptr});
    }
    receive_thread_->Run([this, accept, inband] {
      TakeBulkChannel(accept);
      // bulk_ is this thread's to set: read without the lock. Set before the next read starts
      // (QueueFrame starts none with in-band headers), so that reaction sees it.
      bulk_inband_ = inband && bulk_ != nullptr;
      QueueFrame(absl::OkStatus());
      if (bulk_inband_) {
        ReceiveInband();
      } else if (read_ahead_ != nullptr) {
        absl::MutexLock lock(&streams_->mu_);
        read_ahead_->ReadAhead();
      }  // else declined: QueueFrame read on, and the frames are handled on gRPC's thread
    });
    return;
  }
  QueueFrame(std::move(s));
}

// Packs wire step `w` (its pieces moved out) into `out`: one Element per local replica, its
// composite tensors checked. DATA_LOSS naming the task step when it does not match the spec.
static absl::Status PackStep(const ServiceStepSourceOptions& options, WireStep* w,
                             TaskStream::Queued* out) {
  if (static_cast<int64_t>(w->pieces.size()) != options.num_local_replicas) {
    return absl::DataLossError(absl::StrCat("task step ", w->task_step, " has ",
                                            w->pieces.size(), " pieces for ",
                                            options.num_local_replicas, " local replicas"));
  }
  out->cost = static_cast<int64_t>(StepCreditBytes(*w));
  out->replicas.reserve(w->pieces.size());
  for (size_t r = 0; r < w->pieces.size(); ++r) {
    absl::StatusOr<Element> e = Element::Pack(options.per_replica_spec, std::move(w->pieces[r]));
    // A SparseTensor's or RaggedTensor's components from a peer must agree (row_splits
    // monotone, indices inside dense_shape, ...): sluice/composite_tensor.h; and a piece cut
    // from a batch has as many rows in its composites as in its other components.
    if (e.ok() && options.per_replica_spec.HasComposite()) {
      const std::string what = absl::StrCat("received piece for local replica ", r);
      if (absl::Status c = CheckComposites(*e, what); !c.ok()) {
        e = c;
      } else if (options.pieces_are_cut) {
        if (absl::Status rows = CheckSameRows(*e, what); !rows.ok()) e = rows;
      }
    }
    if (!e.ok()) {
      return absl::DataLossError(
          absl::StrCat("task step ", w->task_step, ": ", e.status().message()));
    }
    out->replicas.push_back(*std::move(e));
  }
  return absl::OkStatus();
}

void TaskStreamCall::QueueFrame(absl::Status decoded) {
  const ServiceStepSourceOptions& options = streams_->options_;
  StepFrame& frame = frame_;
  TaskStream* task = task_.get();
  // The frame's steps are checked and packed with no lock held: this is per-step work (a few
  // allocations per step), and the trainer's GetNext takes the same lock to pop steps. Only
  // the sequence check and the queueing need the lock (next_step is the queue's).
  std::vector<TaskStream::Queued> steps;
  steps.reserve(frame.steps.size());
  absl::Status packed = std::move(decoded);
  size_t to_check = 0;  // the steps whose sequence is checked: those packed and a failed one
  for (WireStep& w : frame.steps) {
    if (!packed.ok()) break;
    ++to_check;
    packed = PackStep(options, &w, &steps.emplace_back());
    if (!packed.ok()) steps.pop_back();
  }
  absl::MutexLock lock(&streams_->mu_);
  // The first error in the frame's order: a step out of sequence before a step that did not
  // pack is reported as out of sequence (as when each step was checked in turn).
  absl::Status s = absl::OkStatus();
  int64_t expected = task->next_step;
  for (size_t i = 0; i < to_check && !options.independent; ++i, ++expected) {
    if (frame.steps[i].task_step != expected) {
      s = absl::DataLossError(absl::StrCat("expected task step ", expected, ", received ",
                                           frame.steps[i].task_step));
      break;
    }
  }
  if (s.ok()) {
    s = std::move(packed);
    if (options.independent) expected += static_cast<int64_t>(steps.size());
  }
  if (!s.ok()) {
    result_ = s;
    ended_early_ = false;
    FinishReadingLocked();
    return;
  }
  for (TaskStream::Queued& step : steps) {
    streams_->ReceivedLocked(task, step.cost);
    task->queue.push_back(std::move(step));
  }
  if (!steps.empty()) progress_ = true;
  task->next_step = expected;
  streams_->cv_.SignalAll();
  if (!frame.status.ok()) {
    result_ = frame.status;
    ended_early_ = false;
    FinishReadingLocked();
    return;
  }
  if (frame.end_of_task) {
    task->ended = true;
    streams_->completed_.insert(task->task_id);
    ended_ = true;
    result_ = absl::OkStatus();
    FinishReadingLocked();
    // From now on only the worker's status is awaited: the monitor cancels the call end_grace
    // later if it does not come (a worker frozen after sending the end).
    task->end_received = absl::Now();
    return;
  }
  // Else read_ahead_ reads on, or the frames come on the bulk socket (ReceiveInband).
  if (read_ahead_ == nullptr && !bulk_inband_) StartRead(&read_buffer_);
}

void TaskStreamCall::NoteBulkFailure(const absl::Status& s) {
  // A frame whose bytes the bulk socket did not bring (it ended, failed or timed out): the
  // call is broken; cancelled and made again, it resends what this one did not queue.
  if (s.ok() || bulk_ == nullptr || s.code() != absl::StatusCode::kUnavailable) return;
  bulk_failed_ = true;
  CountBulkFailure();
  LogEvent(LogLevel::kWarning, "client",
           absl::StrCat("task ", task_->task_id, " on worker ", address_, ": ", s.message(),
                        "; the call is made again"));
}

void TaskStreamCall::ReceiveInband() {
  {
    absl::MutexLock lock(&streams_->mu_);
    if (read_finished_) return;
  }
  // Only the call's end (the worker's status) comes on gRPC now; it is awaited meanwhile so
  // that a worker whose call ended but whose socket stays silent is given up on.
  StartRead(&read_buffer_);
  const size_t limit = static_cast<size_t>(streams_->ReceiveLimit());
  const std::function<bool()> give_up = [this] {
    absl::MutexLock lock(&streams_->mu_);
    return grpc_read_ended_;
  };
  for (;;) {
    absl::Status s = bulk_->ReceiveFrame(limit, give_up, &inband_frame_);
    bool frame_on_grpc = false;
    {
      absl::MutexLock lock(&streams_->mu_);
      frame_on_grpc = frame_on_grpc_;
    }
    if (frame_on_grpc) {
      s = absl::DataLossError(
          "a frame on gRPC after the bulk socket took the frames (BulkAccept.inband_headers)");
    } else if (absl::IsOutOfRange(s)) {
      // The socket ended between frames: the worker's stream ended (its status explains).
      absl::MutexLock lock(&streams_->mu_);
      if (!read_finished_) FinishReadingLocked();
      return;
    }
    if (s.ok()) {
      HandleFrame(&inband_frame_);
    } else {
      NoteBulkFailure(s);
      QueueFrame(std::move(s));
    }
    absl::MutexLock lock(&streams_->mu_);
    if (read_finished_) return;
  }
}

absl::StatusOr<std::shared_ptr<ShmSegment>> TaskStreamCall::MapSegment(
    const proto::ShmAccept& accept) {
  ShmMappingCache& mappings = ProcessShmMappingCache();
  if (accept.dropped_segment_ids_size() > 0) {
    mappings.Drop(address_, std::vector<uint64_t>(accept.dropped_segment_ids().begin(),
                                                  accept.dropped_segment_ids().end()));
  }
  // A warm segment this process still maps: its mapping, no hand-over (the worker withdraws
  // the token on shm_ready).
  if (accept.warm()) {
    std::shared_ptr<ShmSegment> kept = mappings.Find(address_, accept.socket_name(),
                                                     accept.segment_id(), accept.segment_bytes());
    if (kept != nullptr) {
      shm_segment_id_ = accept.segment_id();
      return kept;
    }
  }
  ASSIGN_OR_RETURN(UniqueFd fd, ReceiveShmFd(accept.socket_name(), accept.token(),
                                             kSharedMemoryHandOverTimeout));
  ASSIGN_OR_RETURN(std::shared_ptr<ShmSegment> segment,
                   ShmSegment::Map(std::move(fd), accept.segment_bytes(), accept.warm()));
  if (accept.segment_id() != 0) {
    mappings.Put(address_, accept.socket_name(), accept.segment_id(), segment);
    shm_segment_id_ = accept.segment_id();
  }
  return segment;
}

absl::StatusOr<std::shared_ptr<JobShmReader>> TaskStreamCall::MapJobSegment(
    const proto::ShmAccept& accept) {
  const proto::JobShmAccept& job = accept.job_segment();
  JobShmReaders& readers = ProcessJobShmReaders();
  std::shared_ptr<JobShmReader> reader =
      readers.Find(address_, accept.socket_name(), job.segment_id(), job.segment_bytes());
  if (reader != nullptr) return reader;  // mapped by another call of this process
  ASSIGN_OR_RETURN(UniqueFd fd, ReceiveShmFd(accept.socket_name(), job.token(),
                                             kSharedMemoryHandOverTimeout));
  ASSIGN_OR_RETURN(std::shared_ptr<ShmSegment> segment,
                   ShmSegment::Map(std::move(fd), job.segment_bytes()));
  reader = std::make_shared<JobShmReader>(std::move(segment), job.segment_id());
  readers.Put(address_, accept.socket_name(), reader);
  return reader;
}

void TaskStreamCall::TakeSharedMemory(const proto::ShmAccept& accept) {
  // A shared job's segment: steps written once for every co-located trainer. A failure leaves
  // this call's steps on its own ring or TCP.
  std::shared_ptr<JobShmReader> job_reader;
  if (accept.has_job_segment()) {
    absl::StatusOr<std::shared_ptr<JobShmReader>> mapped = MapJobSegment(accept);
    if (mapped.ok()) {
      job_reader = *std::move(mapped);
      decoder_.set_job_payload(job_reader.get());
    }
  }
  // The worker waits for the answer either way: a grant saying shm_ready once mapped, or
  // shm_declined (any other grant does not end its wait).
  std::unique_ptr<ShmRingReader> ring;
  absl::StatusOr<std::shared_ptr<ShmSegment>> segment = MapSegment(accept);
  if (segment.ok()) {  // else another host or network namespace, say: TCP
    ring = std::make_unique<ShmRingReader>(*std::move(segment),
                                           streams_->options_.shared_memory_devices);
    decoder_.set_shared_payload(ring.get());
  }
  absl::MutexLock lock(&streams_->mu_);
  shm_declined_ = ring == nullptr;
  ring_ = std::move(ring);
  job_reader_ = std::move(job_reader);
  shm_answer_due_ = true;
  WriteLocked();  // now, or when the write in flight completes
}

void TaskStreamCall::TakeBulkChannel(const proto::BulkAccept& accept) {
  // The worker waits for the answer either way: a grant, saying bulk_ready once connected.
  const ServiceStepSourceOptions& options = streams_->options_;
  absl::StatusOr<std::unique_ptr<BulkReceiver>> bulk =
      BulkReceiver::Connect(address_, accept.port(), accept.token(),
                            options.bulk_connect_timeout, options.bulk_receive_timeout);
  if (bulk.ok()) decoder_.set_bulk_payload(bulk->get());
  absl::MutexLock lock(&streams_->mu_);
  if (bulk.ok()) {
    bulk_ = *std::move(bulk);
  } else if (bulk.status().code() == absl::StatusCode::kUnavailable &&
             streams_->bulk_unreachable_.insert(address_).second) {
    // A firewalled data port, say: this worker's calls stay on gRPC from now on.
    CountBulkFallback();
    LogEvent(LogLevel::kWarning, "client",
             absl::StrCat("bulk data channel to worker ", address_,
                          " unavailable, falling back to gRPC: ", bulk.status().message()));
  }
  // Ready or declined (this call stays on gRPC; a refused token is not a firewall, so the
  // worker's next call offers the channel again): the worker waits for it.
  bulk_answer_due_ = true;
  WriteLocked();  // now, or when the write in flight completes
}

void TaskStreamCall::OnDone(const grpc::Status& status) {
  TaskStreams* const streams = streams_;
  // A warm segment is kept only after a clean end (as the worker does): one whose worker died
  // goes once its last tensor does.
  if (!ended_ && shm_segment_id_ != 0) {
    ProcessShmMappingCache().Drop(address_, {shm_segment_id_});
  }
  {
    absl::MutexLock lock(&streams->mu_);
    TaskStream* task = task_.get();
    task->call = nullptr;
    if (task->calling) {
      task->calling = false;
      task->raised = false;
      streams->SetOutstandingLocked(task, 0);
    }
    if (progress_) {
      task->last_progress = absl::Now();
      task->backoff->Reset();
      task->deterministic_retries = 0;
    }
    // A failure the worker reported in a frame (or a bad frame) is more telling than the
    // call's status; a stream that just ended is explained by the call's status, if it has one.
    absl::Status outcome;
    if (ended_) {
      outcome = absl::OkStatus();
    } else if (!ended_early_) {
      outcome = result_;
    } else {
      absl::Status finish = FromGrpcStatus(status);
      outcome = finish.ok() ? result_ : finish;
    }
    if (outcome.ok() || streams->shutdown_) {
      task->done = true;  // the end of the task, or the consumer is going away
    } else if (!Retryable(outcome) && task->deterministic_retries < kDeterministicRetries &&
               absl::Now() - task->last_progress <= streams->options_.retry_deadline) {
      // The worker reports the error to the coordinator at once, which moves the task when
      // the error may be local to that worker, or fails the job (its error then comes from
      // the coordinator's answer): ask it again after a backoff (while within retry_deadline
      // of the last progress, so that the error keeps its code).
      ++task->deterministic_retries;
      task->last_error = absl::Status(outcome.code(), absl::StrCat("on worker ", address_, ": ",
                                                                   outcome.message()));
      task->last_address = address_;
      streams->RetryLaterLocked(task_);
    } else if (!Retryable(outcome)) {
      streams->FailLocked(task, absl::Status(outcome.code(),
                                             absl::StrCat(streams->TaskName(*task), " on worker ",
                                                          address_, ": ", outcome.message())));
    } else {
      task->last_error = outcome;
      task->last_address = address_;
      streams->RetryLaterLocked(task_);
    }
    streams->cv_.SignalAll();
  }
  delete this;
  streams->CallGone();  // the last touch of TaskStreams: Shutdown may return after it
}

}  // namespace sluice
