#include "worker/step_stream.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "core/rpc/trainer_id.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "core/rpc/grpc_status.h"
#include "core/rpc/bulk_channel.h"
#include "core/rpc/job_shm_segment.h"
#include "core/rpc/shm_ring.h"
#include "worker/step_placement.h"
#include "core/tensor/host_memory.h"
#include "core/rpc/step_frame.h"
#include "core/rpc/wire_compression.h"
#include "core/util/logging.h"
#include "core/util/status_macros.h"
#include "grpcpp/alarm.h"
#include "worker/consumer_credits.h"
#include "worker/consumer_frame.h"
#include "worker/stream_request.h"
#include "worker/task_runner.h"

namespace sluice {
namespace {

using Reactor = grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>;

absl::Status ConsumerWentAway() {
  return absl::CancelledError("StreamSteps: the consumer went away");
}

// The most step bytes (credit cost) the frame offering a segment carries: it goes inline, as a
// gRPC message (two kernel copies and the consumer's copy out of gRPC's buffers, into memory it
// faults in), while every step after it takes the ring. A whole small job (a few KiB) still
// rides on the offer, as before, and needs no round trip; a larger first step waits for the
// consumer's answer (a loopback round trip, under a millisecond) and goes through the ring:
// one 16 MiB step inline cost ~10 ms of CPU, a third of a 128 MiB stream's (bench/RESULTS.md,
// shmstart).
constexpr size_t kOfferFrameInlineBytes = size_t{64} << 10;

class StepStream final : public Reactor {
 public:
  StepStream(grpc::CallbackServerContext* context, const StepStreamEnv& env)
      : context_(context), env_(env), options_(*env.options), link_(std::make_shared<Link>()) {
    link_->stream = this;
    absl::MutexLock lock(&mu_);
    if (grpc::Status a = env_.auth->Check(*context_); !a.ok()) {
      phase_ = Phase::kFinished;
      Finish(a);
      return;
    }
    StartRead(&read_);
  }

  void OnReadDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    switch (phase_) {
      case Phase::kOpening:
        if (!ok) {
          phase_ = Phase::kFinished;
          Finish(grpc::Status(grpc::StatusCode::CANCELLED,
                              "StreamSteps: no StreamRequest received"));
          return;
        }
        // Finding the task may build a replay of it: not on gRPC's thread, nor on the pump
        // pool (the other streams' wake-ups), nor under this stream's lock (OnCancel takes
        // it). No OnDone can come before this stream calls Finish, so `this` stays valid.
        env_.open->Schedule([this, first = read_] { Open(first); });
        return;
      case Phase::kStreaming:
      case Phase::kClosing:
        if (!ok) {
          credits_->OnClosed();
        } else {
          int64_t received = 0;
          if (credits_->OnMessage(read_, &received).ok()) {
            // Acknowledgements release what the worker kept for a reconnect (independent
            // reads: the steps handed to this consumer; coordinated: its in-flight steps).
            if (received > 0) reader_->Acknowledge(received);
            if (job_sink_ != nullptr) job_sink_->Acknowledge(received);
            awaiting_ack_ = false;
            // Only the consumer's answer to the offer ends that wait: a grant it wrote before
            // it read the offer (a credit raise while it waited for its first step) is none,
            // and frames sent on it would all go inline.
            if (credits_->shm_ready() || credits_->shm_declined()) awaiting_shm_answer_ = false;
            ApplyJobSegmentGrant();
            ApplySharedMemoryGrant();
            ApplyBulkGrant();
            if (credits_->bulk_answered()) awaiting_bulk_answer_ = false;
            if (!credits_->closed()) StartRead(&read_);
          }
        }
        if (phase_ == Phase::kStreaming) {
          Pump();
        } else if (credits_->closed()) {
          Complete();
        }
        return;
      case Phase::kFinished:
        return;
    }
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    write_.Clear();
    if (WriteDone(ok)) Pump();
  }

  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    if (phase_ == Phase::kStreaming && !writing_) {
      coalescing_ = false;  // the frame being filled is dropped: the consumer is gone
      frame_.clear();
      Pump();  // ends the stream
    } else if (phase_ == Phase::kClosing) {
      Complete();
    }
    // kOpening: Open() sees cancelled_; a write in flight fails and ends the stream.
  }

  void OnDone() override {
    {
      absl::MutexLock lock(&link_->mu);
      link_->stream = nullptr;
    }
    // A thread that called Finish() under mu_ (Open() refusing a stream, Pump() ending one)
    // may still hold it: gRPC runs OnDone on its own thread once Finish completes, so wait for
    // that holder to let go before the mutex goes (found by the control-plane soak: a worker
    // aborted in ~MutexLock after Open() finished a stream whose task it did not have yet).
    {
      absl::MutexLock lock(&mu_);
      StopPlacingSteps();  // a stream that ended without Complete()
    }
    if (reader_ != nullptr) reader_->CancelNotify();
    // The segment goes with the stream (and with the consumer's mapping, if it took it).
    if (!shm_token_.empty()) env_.shm_fds->Withdraw(shm_token_);
    if (!job_token_.empty()) env_.shm_fds->Withdraw(job_token_);
    if (!bulk_token_.empty()) env_.bulk->Withdraw(bulk_token_);
    // Joins the sender's thread (a write in progress is cut short); its error callback finds
    // the link cleared.
    bulk_sender_.reset();
    delete this;
  }

 private:
  enum class Phase { kOpening, kStreaming, kClosing, kFinished };

  // How work from outside gRPC's reactions reaches the stream: OnDone() clears `stream`, and
  // whoever holds the link runs under `mu` only while the stream exists.
  struct Link {
    absl::Mutex mu;
    StepStream* stream ABSL_GUARDED_BY(mu) = nullptr;
  };

  // Runs fn(stream) on the pump pool, under the stream's lock, if the stream still exists.
  void Post(std::function<void(StepStream*)> fn) {
    std::shared_ptr<Link> link = link_;
    env_.pump->Schedule([link, fn = std::move(fn)] {
      absl::MutexLock link_lock(&link->mu);
      StepStream* s = link->stream;
      if (s == nullptr) return;
      absl::MutexLock lock(&s->mu_);
      fn(s);
    });
  }

  // Arms a fresh alarm at `when`; on firing, fn(stream) runs as Post() runs it. The returned
  // sequence number tells the current alarm from older ones.
  uint64_t ArmAlarm(absl::Time when, std::function<void(StepStream*, uint64_t)> fn)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const uint64_t seq = ++alarm_seq_;
    std::shared_ptr<Link> link = link_;
    ThreadPool* pump = env_.pump;
    alarm_ = std::make_unique<grpc::Alarm>();
    alarm_->Set(absl::ToChronoTime(when), [link, pump, seq, fn = std::move(fn)](bool fired) {
      if (!fired) return;  // cancelled: a newer alarm, or the stream is gone
      pump->Schedule([link, seq, fn] {
        absl::MutexLock link_lock(&link->mu);
        StepStream* s = link->stream;
        if (s == nullptr) return;
        absl::MutexLock lock(&s->mu_);
        fn(s, seq);
      });
    });
    return seq;
  }

  // What Open() prepares without the stream's lock.
  struct Opened {
    proto::StreamRequest request;
    std::shared_ptr<TaskRunner> runner;
    std::unique_ptr<StepReader> reader;
    std::shared_ptr<const CompactSpec> spec;
    WireCompression compression = WireCompression::kNone;
    bool coordinated = true;
    bool shared_job = false;  // JobOptions.cross_trainer
    int64_t replicas = 1;
  };

  // The first message (on the open pool, without mu_): find the task, open the reader, then
  // start streaming under the lock.
  void Open(const grpc::ByteBuffer& first) ABSL_LOCKS_EXCLUDED(mu_) {
    Opened opened;
    absl::Status s = OpenReader(first, &opened);
    absl::MutexLock lock(&mu_);
    if (phase_ != Phase::kOpening) return;
    if (s.ok() && cancelled_) s = ConsumerWentAway();
    if (!s.ok()) {
      phase_ = Phase::kFinished;
      Finish(ToGrpcStatus(s));
      return;
    }
    runner_ = std::move(opened.runner);
    reader_ = std::move(opened.reader);
    coordinated_ = opened.coordinated;
    shared_job_ = opened.shared_job;
    replicas_ = opened.replicas;
    consumer_ = opened.request.consumer_index();
    encoder_.emplace(std::move(opened.spec), opened.compression);
    credits_.emplace(opened.request.initial_credit_bytes(), opened.request.window_bytes());
    // What one frame may take: steps whose costs fit the credit and the frame size; the first
    // step whatever its cost once the credit reaches CreditForAnyStep (a step larger than the
    // window still flows); no more unacknowledged steps than the window.
    max_frame_steps_ = options_.max_frame_steps;
    limits_.max_steps = max_frame_steps_;
    limits_.unacked_bytes = static_cast<size_t>(credits_->window());
    limits_.cost = [coordinated = coordinated_, consumer = consumer_,
                    replicas = replicas_](const TaskStep& step) {
      return ConsumerStepCost(step, coordinated, consumer, replicas);
    };
    // A stream the job compresses (a remote consumer, or compression forced on this host) stays
    // on TCP: shared memory would bypass the codec the job asked for.
    if (opened.compression == WireCompression::kNone) OfferSharedMemory(opened.request);
    // A consumer shared memory does not serve may take the bulk data channel (it carries raw
    // bytes only, so not with compression either).
    if (opened.compression == WireCompression::kNone && !accept_attached_) {
      OfferBulkChannel(opened.request);
    }
    phase_ = Phase::kStreaming;
    StartRead(&read_);
    Pump();
  }

  // A consumer on this host (its boot id is ours) gets a segment; its handle rides on the
  // first frame (ShmAccept), and frames use the ring once the consumer says it mapped it.
  // Anything that fails leaves the stream on TCP.
  void OfferSharedMemory(const proto::StreamRequest& request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (env_.shm_fds == nullptr || !request.has_shm_offer() || env_.boot_id.empty() ||
        request.shm_offer().boot_id() != env_.boot_id) {
      return;
    }
    const size_t want = static_cast<size_t>(std::min<int64_t>(credits_->window(), int64_t{1} << 40)) * 2;
    size_t bytes =
        std::clamp(want, options_.shm_min_segment_bytes,
                   std::max(options_.shm_min_segment_bytes, options_.shm_max_segment_bytes));
    // The segment must not crowd out the pipelines: at most a quarter of the memory budget's
    // room (and one allocation's limit); with less than 1 MiB there, TCP.
    // Segments the pool keeps are part of that room: it frees them for a fresh one.
    const MemoryLimits limits = ProcessMemoryBudget().limits();
    const int64_t room = std::min(
        (limits.process_bytes - ProcessMemoryBudget().in_use() +
         static_cast<int64_t>(env_.shm_pool->pooled_bytes())) / 4,
        limits.element_bytes);
    if (room < (int64_t{1} << 20)) return;
    bytes = std::min(bytes, static_cast<size_t>(room));
    const proto::ShmOffer& offer = request.shm_offer();
    const size_t job_room = static_cast<size_t>(room) - bytes;
    absl::StatusOr<ShmSegmentPool::Lease> lease = env_.shm_pool->Acquire(
        offer.consumer_key(),
        std::vector<uint64_t>(offer.idle_segment_ids().begin(),
                              offer.idle_segment_ids().begin() +
                                  std::min<int>(offer.idle_segment_ids_size(),
                                                ShmSegmentPool::kMaxIdleIds)),
        bytes);
    if (!lease.ok()) return;  // over the memory budget, say: TCP
    ring_ = std::make_shared<ShmRingWriter>(lease->segment);
    shm_token_ = env_.shm_fds->Offer(lease->segment);
    proto::ShmAccept accept;
    accept.set_socket_name(env_.shm_fds->name());
    accept.set_token(shm_token_);
    accept.set_segment_bytes(lease->segment->size());
    accept.set_segment_id(lease->id);
    accept.set_warm(lease->warm);
    for (uint64_t id : lease->dropped) accept.add_dropped_segment_ids(id);
    if (shared_job_) OfferJobSegment(request, job_room, &accept);
    encoder_->AttachToNextFrame(std::move(accept));
    accept_attached_ = true;
    // The task's steps go into the ring from now on, not from the consumer's answer: those
    // built while it maps the segment are then sent in place too (a round trip of steps: at
    // 16 MiB two of a 32-step stream's, built in ordinary memory and copied before). A decline
    // moves them back to ordinary memory (ApplySharedMemoryGrant).
    PlaceStepsInRing();
  }

  // A shared job: the task's job segment (every co-located trainer maps it, each step is
  // written there once) rides on the ShmAccept, for a consumer process that names itself
  // (consumer_key: the regions it receives are held for that process until it releases them or
  // exits; the process taking the hand-over is watched). A keyed consumer's frames are logged
  // from its start_step, so that its next call frees the holds of those it never received.
  void OfferJobSegment(const proto::StreamRequest& request, size_t room,
                       proto::ShmAccept* accept) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const std::string& consumer_key = request.shm_offer().consumer_key();
    if (consumer_key.empty() || consumer_key.size() > 64) return;
    std::shared_ptr<JobShmSegment> job =
        runner_->JobSegment(options_.shm_min_segment_bytes,
                            std::min(room, options_.shm_max_segment_bytes));
    if (job == nullptr) return;
    job_sink_ = std::make_unique<JobShmStreamSink>(job, consumer_key, request.consumer_id(),
                                                   request.start_step());
    job_token_ = env_.shm_fds->Offer(
        job->segment(), [weak = std::weak_ptr<JobShmSegment>(job), consumer_key](int pid) {
          if (std::shared_ptr<JobShmSegment> j = weak.lock()) j->WatchHolder(consumer_key, pid);
        });
    proto::JobShmAccept* offered = accept->mutable_job_segment();
    offered->set_segment_id(job->id());
    offered->set_segment_bytes(job->segment()->size());
    offered->set_token(job_token_);
  }

  // The job segment's fields of the grant just read: mapped (frames of one step go as a
  // header naming the step's region from now on) and the regions released. A grant mapping
  // or releasing with no job segment offered, or releasing what the consumer does not hold,
  // ends the stream (INVALID_ARGUMENT).
  void ApplyJobSegmentGrant() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (job_sink_ == nullptr) {
      if (credits_->job_shm_mapped() || !credits_->job_shm_released().empty()) {
        credits_->Refuse(absl::InvalidArgumentError(
            "StreamSteps: a job segment grant on a stream that was offered no job segment"));
      }
      return;
    }
    if (credits_->job_shm_mapped() && !job_on_) {
      job_on_ = true;
      env_.shm_fds->Withdraw(job_token_);  // taken, or never to be
      job_token_.clear();
      encoder_->set_job_payload(job_sink_.get());
      // A region holds one step: frames of one step (a header each).
      max_frame_steps_ = 1;
      limits_.max_steps = 1;
    }
    if (absl::Status s = job_sink_->segment()->Release(job_sink_->consumer_key(),
                                                       credits_->job_shm_released());
        !s.ok()) {
      credits_->Refuse(s);
    }
  }

  // The shared-memory fields of the grant just read: the consumer mapped the segment (frames
  // use the ring from now on) or could not (the segment is freed), and what it released. A
  // release the ring refuses, or a ready without a segment offered (or after a decline), ends
  // the stream (INVALID_ARGUMENT).
  void ApplySharedMemoryGrant() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (ring_ != nullptr && !shm_on_ && credits_->shm_declined()) {
      StopPlacingSteps();  // the steps placed since the offer go to ordinary memory
      env_.shm_fds->Withdraw(shm_token_);
      shm_token_.clear();
      ring_.reset();  // its memory goes back to the budget
    }
    if (ring_ == nullptr) {
      if (credits_->shm_ready() || credits_->shm_released() != 0) {
        credits_->Refuse(absl::InvalidArgumentError(
            "StreamSteps: a shared-memory grant on a stream that was offered no segment"));
      }
      return;
    }
    if (credits_->shm_ready() && !shm_on_) {
      shm_on_ = true;
      env_.shm_fds->Withdraw(shm_token_);  // taken, or never to be
      shm_token_.clear();
      encoder_->set_shared_payload(ring_.get());
      // A frame goes in place only if all its steps lie in the ring: steps built in ordinary
      // memory (before the offer, or finding no room) and steps built in the ring go in
      // frames of their own, or a frame of both would be copied, and with the ring's room
      // ahead held by the steps built there, go by TCP whole, those steps included (a short
      // job's every step, ServiceSharedMemoryTest.ANextJobReusesAWarmSegment... under load).
      // A step without numeric bytes goes with those built in the ring: their frame's numeric
      // bytes all still lie in the ring, and it goes in place.
      limits_.frame_kind = [ring = ring_](const TaskStep& step) {
        return StepRingResidence(*ring, step) == RingResidence::kOutsideRing ? 1 : 0;
      };
      if (placement_ == nullptr) PlaceStepsInRing();  // the runner had another at the offer
    }
    if (absl::Status s = ring_->Release(credits_->shm_released()); !s.ok()) credits_->Refuse(s);
  }

  // The bulk data channel (core/rpc/bulk_channel.h): a token for the consumer's socket rides
  // on the first frame (BulkAccept), and frames use the socket once the consumer says it is up.
  void OfferBulkChannel(const proto::StreamRequest& request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (env_.bulk == nullptr || !request.has_bulk_offer()) return;
    bulk_token_ = env_.bulk->Offer();
    proto::BulkAccept accept;
    accept.set_port(static_cast<uint32_t>(env_.bulk->port()));
    accept.set_token(bulk_token_);
    bulk_inband_ = request.bulk_offer().inband_headers();
    accept.set_inband_headers(bulk_inband_);
    encoder_->AttachToNextFrame(std::move(accept));
    bulk_accept_attached_ = true;
  }

  // The grant just read says the consumer's socket is up: frames send their numeric bytes
  // there from now on. A ready without an offer, or with no socket that presented the token,
  // ends the stream (INVALID_ARGUMENT).
  void ApplyBulkGrant() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!credits_->bulk_ready() || bulk_on_) return;
    bulk_on_ = true;
    absl::StatusOr<UniqueFd> socket =
        bulk_token_.empty() ? absl::NotFoundError("no bulk channel was offered")
                            : env_.bulk->Take(bulk_token_);
    bulk_token_.clear();
    if (!socket.ok()) {
      credits_->Refuse(absl::InvalidArgumentError(
          absl::StrCat("StreamSteps: bulk_ready, but ", socket.status().message())));
      return;
    }
    // A failed write ends the stream, as a broken call does: the consumer calls again and the
    // steps it did not queue are sent again (exactly once, docs/SERVICE.md). A sender whose
    // thread cannot start ends it with that RESOURCE_EXHAUSTED.
    absl::StatusOr<std::unique_ptr<BulkSender>> sender = BulkSender::Create(
        absl::StrCat("task ", runner_->task().task_id(), "'s stream"), *std::move(socket),
        [link = link_](const absl::Status& error) {
          absl::MutexLock link_lock(&link->mu);
          if (link->stream != nullptr) link->stream->context_->TryCancel();
          // A consumer that closed its socket left (info); a write that failed otherwise or
          // timed out is worth a warning.
          LogEvent(absl::IsCancelled(error) ? LogLevel::kInfo : LogLevel::kWarning, "worker",
                   absl::StrCat("StreamSteps: ", error.message(), "; the stream ends"));
        },
        options_.bulk_write_timeout, options_.bulk_min_bytes, TEST_BulkFaults(), bulk_inband_);
    if (!sender.ok()) {
      LogEvent(LogLevel::kWarning, "worker",
               absl::StrCat("StreamSteps: ", sender.status().message(), "; the stream ends"));
      credits_->Refuse(sender.status());
      return;
    }
    bulk_sender_ = *std::move(sender);
    encoder_->set_bulk_payload(bulk_sender_.get());
  }

  // Fault tests: what this stream's bulk sender is to suffer (WorkerServiceOptions TEST_).
  BulkSenderFaults TEST_BulkFaults() const {
    BulkSenderFaults faults{.cut_after_bytes = options_.TEST_bulk_cut_after_bytes};
    std::atomic<int>* stalls = options_.TEST_bulk_stalls.get();
    for (int left = stalls == nullptr ? 0 : stalls->load(); left > 0;) {
      if (stalls->compare_exchange_weak(left, left - 1)) {
        faults.stall_after_bytes = options_.TEST_bulk_stall_after_bytes;
        break;
      }
    }
    return faults;
  }

  // The worker batches straight into the ring (worker/step_placement.h) when this stream is
  // the task's one reader of whole steps: a job of one consumer, not shared across trainers
  // (a step several trainers read cannot live in one consumer's ring), not a private replay.
  // Steps produced before, and any other stream's, are copied as before.
  void PlaceStepsInRing() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const proto::JobOptions& job = runner_->task().job();
    if (job.num_consumers() != 1 || job.cross_trainer().enabled() || reader_->replaying()) {
      return;
    }
    auto placement = std::make_shared<StepPlacement>(ring_);
    if (runner_->AttachPlacement(placement)) placement_ = std::move(placement);
  }

  // Steps produced from now on stay in ordinary memory (those placed keep the segment mapped
  // until they go).
  void StopPlacingSteps() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (placement_ == nullptr) return;
    runner_->DetachPlacement(placement_.get());
    placement_.reset();
  }

  absl::Status OpenReader(const grpc::ByteBuffer& first, Opened* out) ABSL_LOCKS_EXCLUDED(mu_) {
    ASSIGN_OR_RETURN(out->request, ParseStreamRequest(first));
    const proto::StreamRequest& request = out->request;
    ASSIGN_OR_RETURN(out->runner, env_.tasks->FindTask(request.job_id(), request.task_id()));
    const proto::JobOptions& job = out->runner->task().job();
    out->coordinated = job.read_mode() == proto::READ_MODE_COORDINATED;
    out->replicas = job.replicas_per_consumer();
    const int64_t consumer = request.consumer_index();
    if (out->coordinated && (consumer < 0 || consumer >= job.num_consumers())) {
      return absl::InvalidArgumentError(
          absl::StrCat("StreamSteps: consumer_index ", consumer, " out of range [0, ",
                       job.num_consumers(), ") for job ", request.job_id()));
    }
    if (request.compact_headers()) {
      RETURN_IF_ERROR(CheckCompactSpecLeaves(request, out->runner->piece_leaves()));
      absl::StatusOr<CompactSpec> parsed = CompactSpec::FromProto(request.compact_spec());
      if (!parsed.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("StreamSteps: ", parsed.status().message()));
      }
      out->spec = std::make_shared<const CompactSpec>(*std::move(parsed));
    }
    // The job's codec, if this consumer decodes it and is remote (or the job forces it).
    out->compression =
        ChooseWireCompression(job, request.accepted_compression(), context_->peer());
    ReaderOptions open;
    // Coordinated reads: one process per consumer_index (independent reads key their consumers
    // by consumer_id; several processes may share an index there, each stealing steps).
    open.instance = out->coordinated ? request.consumer_instance() : 0;
    open.consumer_index = consumer;
    out->shared_job = job.cross_trainer().enabled();
    if (job.cross_trainer().enabled()) {
      // A shared job: the stream reads at its trainer's cursor, checked as client input here
      // as on the coordinator.
      RETURN_IF_ERROR(ValidateTrainerId(request.trainer_id(), "StreamRequest.trainer_id"));
      open.trainer_id = request.trainer_id();
      // A keyed consumer calling again: the frames naming job segment regions that its earlier
      // calls sent beyond what it received were lost; their holds go (a hostile count is
      // refused here, before the window hands anything back).
      if (request.consumer_id() != 0 && request.has_shm_offer()) {
        if (std::shared_ptr<JobShmSegment> segment = out->runner->ExistingJobSegment()) {
          RETURN_IF_ERROR(segment->Resume(request.shm_offer().consumer_key(),
                                          request.consumer_id(), request.start_step()));
        }
      }
    }
    open.replay_slots = env_.replays;
    ASSIGN_OR_RETURN(out->reader,
                     out->runner->OpenReader(
                         // Independent reads key the consumer by its id (steps kept until
                         // acknowledged).
                         out->coordinated ? consumer
                                          : static_cast<int64_t>(request.consumer_id()),
                         request.start_step(), open));
    return absl::OkStatus();
  }

  void SetCredit(int64_t credit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const size_t c = static_cast<size_t>(std::max<int64_t>(credit, 0));
    limits_.first_max = credit >= CreditForAnyStep(credits_->window())
                            ? std::numeric_limits<size_t>::max()
                            : c;
    limits_.max_cost = std::min(c, MaxFrameBytes());
    if (accept_attached_) limits_.first_max = std::min(limits_.first_max, MaxFrameBytes());
  }

  // Registers for a wake-up when a step (or the end) is there for this stream. False when
  // there is one already (call Next again).
  bool WaitForSteps() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // Called by the step buffer without its lock, maybe under another stream's: it only
    // schedules.
    return reader_->NotifyWhenReady(StepsReadyWakeUp());
  }

  // A wake-up that runs OnStepsReady on the pump pool if the stream still exists; it only
  // schedules, so it may run under another object's lock.
  std::function<void()> StepsReadyWakeUp() const {
    return [link = link_, pump = env_.pump] {
      pump->Schedule([link] {
        absl::MutexLock link_lock(&link->mu);
        StepStream* s = link->stream;
        if (s == nullptr) return;
        absl::MutexLock lock(&s->mu_);
        s->OnStepsReady();
      });
    };
  }

  // What a frame may hold: options_.max_frame_bytes, or bulk_max_frame_bytes once the bulk
  // socket is up (its frames cost a header and a wake-up each, whatever their size); the frame
  // offering a segment, kOfferFrameInlineBytes (a first step larger than that waits for the
  // ring: Pump sends the offer alone).
  size_t MaxFrameBytes() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (accept_attached_) return std::min(options_.max_frame_bytes, kOfferFrameInlineBytes);
    return bulk_sender_ == nullptr
               ? options_.max_frame_bytes
               : std::max(options_.max_frame_bytes, options_.bulk_max_frame_bytes);
  }

  // Opportunistic coalescing on the bulk data channel: while a frame waits in the socket's
  // sender behind the one it writes, a frame cut now could not start sooner, so the stream
  // cuts none and registers for a wake-up when the sender starts on the waiting frame; the
  // steps produced meanwhile then go out together (one header, one writev, up to
  // MaxFrameBytes()). A stream whose sender has nothing waiting sends what is ready at once:
  // no wait for a step that is not there. Nor does a stream whose steps fill a frame one by
  // one (two of the last frame's steps would not fit): waiting could add nothing to its frame
  // and would cost a wake-up per frame. True when the stream is to wait.
  bool WaitForBulkSender() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (bulk_sender_ == nullptr || 2 * last_step_cost_ > MaxFrameBytes()) return false;
    return bulk_sender_->NotifyWhenNoneWaiting(StepsReadyWakeUp());
  }

  void OnStepsReady() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (phase_ != Phase::kStreaming || writing_) return;  // the write's completion pumps
    if (coalescing_) {
      Coalesce();
    } else {
      Pump();
    }
  }

  // Sends what is ready while credit and steps allow, one write at a time; returns when the
  // stream waits (a write in flight, a frame filling, credit, steps) or ends.
  void Pump() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    while (phase_ == Phase::kStreaming && !writing_ && !coalescing_) {
      if (cancelled_ || credits_->closed()) {
        result_ = credits_->error().ok() ? ConsumerWentAway() : credits_->error();
        BeginClose();
        return;
      }
      if (awaiting_ack_) return;  // OnReadDone pumps again on the consumer's next message
      if (awaiting_shm_answer_) return;  // likewise: the answer to the segment offered
      if (awaiting_bulk_answer_) return;  // and to the bulk channel offered (not any grant)
      if (!credits_->HasCredit(need_)) return;  // OnReadDone pumps again on a grant
      if (WaitForBulkSender()) return;  // its wake-up pumps again
      SetCredit(credits_->credit());
      bool end = false;
      size_t blocked_cost = 0;
      absl::Status next =
          reader_->Next(limits_, absl::InfinitePast(), &frame_, &end, &blocked_cost);
      if (!next.ok()) {
        frame_.clear();
        WriteError(next);
        return;
      }
      if (frame_.empty() && !end) {
        if (blocked_cost == kBlockedOnAcknowledgement) {
          // Independent reads: this consumer has its window of steps unacknowledged.
          awaiting_ack_ = true;
          return;
        }
        if (blocked_cost > 0 && accept_attached_) {
          // The first step is larger than the offer may carry (or than the credit): the offer
          // goes alone, and the step through the ring once the consumer answers.
          SendFrame();
          continue;
        }
        if (blocked_cost > 0) {
          need_ = static_cast<int64_t>(blocked_cost);  // wait for credit
          continue;
        }
        need_ = 1;
        if (WaitForSteps()) return;
        continue;
      }
      need_ = 1;
      frame_end_ = end;
      frame_credit_ = credits_->credit();
      frame_cost_ = 0;
      for (const auto& step : frame_) frame_cost_ += limits_.cost(*step);
      if (!end && options_.coalesce_wait > absl::ZeroDuration() && !FrameFull()) {
        coalescing_ = true;
        coalesce_until_ = absl::Now() + options_.coalesce_wait;
        coalesce_timed_out_ = false;
        ArmAlarm(coalesce_until_,
                 [](StepStream* s, uint64_t seq) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                   if (s->coalescing_ && seq == s->alarm_seq_ && !s->writing_) {
                     s->coalesce_timed_out_ = true;
                     s->Coalesce();
                   }
                 });
        Coalesce();
        return;
      }
      SendFrame();
    }
  }

  // The frame's costs so far (kept as steps join: the coalescing loop asks once per step).
  size_t FrameCost() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return frame_cost_; }
  // What the frame may still take: the credit left before it (its first step may have exceeded
  // it) and the frame's size.
  size_t FrameCap() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return std::min(static_cast<size_t>(std::max<int64_t>(frame_credit_, 0)), MaxFrameBytes());
  }
  // Whether the frame is done filling (see WorkerServiceOptions::coalesce_bytes).
  bool FrameFull() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const size_t cost = FrameCost();
    return cost >= options_.coalesce_bytes || cost >= FrameCap() ||
           frame_.size() >= max_frame_steps_;
  }

  // Adds the steps ready now to the frame being filled; sends it once full, at the end, when
  // the next step needs more credit, or once coalesce_wait has passed; otherwise waits for
  // steps (or the alarm).
  void Coalesce() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<std::shared_ptr<const TaskStep>> more;
    while (!cancelled_ && !FrameFull()) {
      const size_t cost = FrameCost();
      StepLimits room = limits_;
      room.frame_first = frame_.empty() ? nullptr : frame_.front().get();
      room.max_steps = max_frame_steps_ - frame_.size();
      room.max_cost = FrameCap() - cost;
      room.first_max = FrameCap() - cost;
      bool more_end = false;
      size_t blocked_cost = 0;
      // An error is left for Pump's next Next(), which returns it again.
      if (!reader_->Next(room, absl::InfinitePast(), &more, &more_end, &blocked_cost).ok()) break;
      if (more_end) {
        frame_end_ = true;  // the end rides on this frame
        break;
      }
      if (more.empty()) {
        if (blocked_cost > 0) break;  // the next step needs more credit
        if (coalesce_timed_out_ || absl::Now() >= coalesce_until_) break;  // the bound passed
        if (WaitForSteps()) return;   // a step, or the alarm, continues the frame
        continue;
      }
      for (auto& step : more) {
        frame_cost_ += limits_.cost(*step);
        frame_.push_back(std::move(step));
      }
    }
    coalescing_ = false;
    alarm_.reset();  // cancels it
    if (cancelled_) {
      frame_.clear();
      Pump();  // ends the stream
      return;
    }
    SendFrame();
    Pump();
  }

  // A write of write_ completed (`ok`: it went out) or, with in-band headers, was queued on
  // the bulk socket (`ok`: the sender took it): ends the stream after the last frame or a
  // failed write; true when the stream may send on (Pump).
  bool WriteDone(bool ok) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (write_is_error_) {
      wrote_last_ = true;
      BeginClose();
      return false;
    }
    if (!ok) {
      result_ = ConsumerWentAway();
      BeginClose();
      return false;
    }
    first_write_ = false;
    if (write_end_) {
      wrote_last_ = true;
      wrote_end_ = true;
      BeginClose();
      return false;
    }
    return true;
  }

  // Sends write_: on gRPC (OnWriteDone follows), or with in-band headers on the bulk socket,
  // after the frames queued there (WriteDone at once: the sender's queue is bounded by the
  // credit, and the stream waits for the sender as for a write, WaitForBulkSender).
  void StartFrameWrite(grpc::WriteOptions options) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (bulk_inband_ && bulk_sender_ != nullptr) {
      const bool queued = bulk_sender_->SendFrame(write_);
      write_.Clear();
      // A sender that failed has cancelled the call (its on_error): the stream ends.
      WriteDone(queued);
      return;
    }
    writing_ = true;
    StartWrite(&write_, options);
  }

  // Writes frame_ (its steps and frame_end_).
  void SendFrame() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    grpc::ByteBuffer bb;
    ConsumerFrameViews(frame_, coordinated_, consumer_, replicas_, &views_);
    absl::Status encoded = encoder_->Encode(views_, frame_end_, absl::OkStatus(), &bb);
    if (!encoded.ok()) {
      frame_.clear();
      WriteError(encoded);
      return;
    }
    if (job_sink_ != nullptr) job_sink_->Sent(frame_.size());
    const int64_t cost = static_cast<int64_t>(FrameCost());
    const int64_t left = credits_->Spend(cost);
    SetCredit(left);
    grpc::WriteOptions write_options;
    // The next frame follows at once only with credit left (the stream waits for >= 1 byte).
    // A stream that is to wait for its bulk sender (WaitForBulkSender) follows with nothing
    // at once: a hint would hold this header in gRPC while the sender waits for the consumer
    // to read the frame that header announces.
    const bool bulk_backlog = bulk_sender_ != nullptr && bulk_sender_->has_waiting_frames();
    if (UseBufferHint(first_write_, frame_end_,
                      left > 0 && !bulk_backlog && reader_->ReadyWithin(limits_))) {
      write_options.set_buffer_hint();
    }
    // The frame offering a segment: nothing more until the consumer answers (its next grant),
    // so that the frames after it can take the ring (a consumer that took the offer maps it
    // first) instead of the whole first window going over TCP.
    if (accept_attached_) {
      accept_attached_ = false;
      awaiting_shm_answer_ = !frame_end_;
    }
    // Likewise for the bulk channel, but only its answer (bulk_ready or bulk_declined) ends
    // the wait: a grant of credit sent while the consumer connects would leave the first
    // window on gRPC.
    if (bulk_accept_attached_) {
      bulk_accept_attached_ = false;
      awaiting_bulk_answer_ = !frame_end_ && !credits_->bulk_answered();
    }
    if (!frame_.empty()) last_step_cost_ = FrameCost() / frame_.size();
    write_ = std::move(bb);
    write_steps_ = static_cast<int64_t>(frame_.size());
    write_bytes_ = static_cast<int64_t>(write_.Length() + encoder_->last_shared_bytes());
    write_end_ = frame_end_;
    write_is_error_ = false;
    // Counted now, not when the write completes: the consumer can receive this frame, confirm
    // the task's end and have the worker report the task finished before gRPC runs
    // OnWriteDone, and that report is the coordinator's last word on what the task delivered
    // (ServiceFinishReportTest saw 0 of 30 under load). A write that then fails stays counted,
    // as a redelivered step counts again: the counts are of frames written (monotonic, as the
    // metric's counter must be), not of steps a consumer kept.
    runner_->RecordDelivered(write_steps_, write_bytes_);
    frame_.clear();
    frame_end_ = false;
    StartFrameWrite(write_options);
  }

  // The stream's last frame: `status` (a pipeline or encoding error), which is also the call's.
  void WriteError(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    result_ = status;
    write_ = ErrorFrame(status);
    write_is_error_ = true;
    StartFrameWrite(grpc::WriteOptions());
  }

  // No more frames: let the consumer half-close (it does after the last frame) within
  // close_grace, then complete.
  void BeginClose() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    phase_ = Phase::kClosing;
    coalescing_ = false;
    reader_->CancelNotify();
    if (wrote_last_ && !credits_->closed() && !cancelled_) {
      ArmAlarm(absl::Now() + options_.close_grace,
               [](StepStream* s, uint64_t seq) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                 if (s->phase_ == Phase::kClosing && seq == s->alarm_seq_) s->Complete();
               });
      return;
    }
    Complete();
  }

  void Complete() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (phase_ == Phase::kFinished) return;
    phase_ = Phase::kFinished;
    alarm_.reset();
    const bool closed = credits_->closed();
    // The consumer half-closes only once it has read the end frame: now its end counts (for
    // the task's drained(), hence the worker's finished report). Confirmed before the runner
    // stops placing steps in the ring: the confirmation drops the steps kept for a reconnect
    // (up to a window of them), which StopPlacingSteps would otherwise copy out of the ring
    // into fresh memory (StepPlacement::Unplaced), only for them to be freed (bench/RESULTS.md,
    // shmbig: a sixth of a 16 MiB-step stream's bytes, copied again at its end).
    const bool clean_end =
        wrote_end_ && closed && credits_->error().ok() && !context_->IsCancelled();
    if (clean_end) reader_->ConfirmEnd();
    StopPlacingSteps();
    // Kept only after a clean end: a consumer that vanished never names it again.
    if (!clean_end && ring_ != nullptr) ShmSegmentPool::DoNotKeep(ring_->segment());
    if (!closed) context_->TryCancel();
    Finish(ToGrpcStatus(result_));
  }

  grpc::CallbackServerContext* const context_;
  const StepStreamEnv env_;
  const WorkerServiceOptions& options_;
  const std::shared_ptr<Link> link_;

  absl::Mutex mu_;
  Phase phase_ ABSL_GUARDED_BY(mu_) = Phase::kOpening;
  grpc::ByteBuffer read_ ABSL_GUARDED_BY(mu_);  // the message being read (one at a time)
  std::shared_ptr<TaskRunner> runner_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<StepReader> reader_;  // set in Open(); read without mu_ only in OnDone()
  std::optional<ConsumerCredits> credits_ ABSL_GUARDED_BY(mu_);
  // Frames in the form the consumer asked for; kept for its reused header (set in Open()).
  std::optional<StepFrameEncoder> encoder_ ABSL_GUARDED_BY(mu_);
  std::vector<WireStepView> views_ ABSL_GUARDED_BY(mu_);  // SendFrame's scratch
  // Shared memory: the ring (null: TCP only), the token of its segment's offer until taken,
  // whether the consumer mapped it. The encoder borrows ring_ once shm_on_.
  std::shared_ptr<ShmRingWriter> ring_ ABSL_GUARDED_BY(mu_);
  // Set while the task's runner builds its steps in ring_ (PlaceStepsInRing).
  std::shared_ptr<StepPlacement> placement_ ABSL_GUARDED_BY(mu_);
  std::string shm_token_;  // written under mu_; read in OnDone, after every other reaction
  bool shm_on_ ABSL_GUARDED_BY(mu_) = false;
  // A shared job's segment: this stream's sink (set when offered), the token of its offer
  // until taken (written under mu_, read in OnDone), whether the consumer mapped it.
  std::unique_ptr<JobShmStreamSink> job_sink_ ABSL_GUARDED_BY(mu_);
  std::string job_token_;
  bool job_on_ ABSL_GUARDED_BY(mu_) = false;
  bool shared_job_ ABSL_GUARDED_BY(mu_) = false;
  size_t max_frame_steps_ ABSL_GUARDED_BY(mu_) = 1;  // options_.max_frame_steps, or 1 (job_on_)
  // The bulk data channel: the token of its offer until taken (written under mu_, read in
  // OnDone), whether the consumer said its socket is up, and the socket's writer (the encoder
  // borrows it; reset in OnDone).
  std::string bulk_token_;
  bool bulk_on_ ABSL_GUARDED_BY(mu_) = false;
  // The consumer reads frame headers on the socket (BulkAccept.inband_headers): once the
  // sender is up, every frame goes there (StartFrameWrite), none on gRPC.
  bool bulk_inband_ ABSL_GUARDED_BY(mu_) = false;
  bool bulk_accept_attached_ ABSL_GUARDED_BY(mu_) = false;  // the next frame offers the socket
  bool awaiting_bulk_answer_ ABSL_GUARDED_BY(mu_) = false;  // it went out; no answer yet
  std::unique_ptr<BulkSender> bulk_sender_;
  bool accept_attached_ ABSL_GUARDED_BY(mu_) = false;      // the next frame offers the segment
  bool awaiting_shm_answer_ ABSL_GUARDED_BY(mu_) = false;  // it went out; no answer yet
  bool coordinated_ ABSL_GUARDED_BY(mu_) = true;
  int64_t consumer_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t replicas_ ABSL_GUARDED_BY(mu_) = 1;
  StepLimits limits_ ABSL_GUARDED_BY(mu_);
  int64_t need_ ABSL_GUARDED_BY(mu_) = 1;  // the credit the next frame needs
  // Independent reads: no step until the consumer acknowledges some (kBlockedOnAcknowledgement).
  bool awaiting_ack_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status result_ ABSL_GUARDED_BY(mu_);  // the call's status

  // The frame being filled.
  std::vector<std::shared_ptr<const TaskStep>> frame_ ABSL_GUARDED_BY(mu_);
  bool frame_end_ ABSL_GUARDED_BY(mu_) = false;
  int64_t frame_credit_ ABSL_GUARDED_BY(mu_) = 0;  // the credit before it
  size_t frame_cost_ ABSL_GUARDED_BY(mu_) = 0;     // FrameCost()
  size_t last_step_cost_ ABSL_GUARDED_BY(mu_) = 0;  // the last frame's cost per step
  bool coalescing_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time coalesce_until_ ABSL_GUARDED_BY(mu_);
  bool coalesce_timed_out_ ABSL_GUARDED_BY(mu_) = false;
  std::unique_ptr<grpc::Alarm> alarm_ ABSL_GUARDED_BY(mu_);
  uint64_t alarm_seq_ ABSL_GUARDED_BY(mu_) = 0;

  // The write in flight.
  grpc::ByteBuffer write_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool write_is_error_ ABSL_GUARDED_BY(mu_) = false;
  bool write_end_ ABSL_GUARDED_BY(mu_) = false;
  int64_t write_steps_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t write_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool first_write_ ABSL_GUARDED_BY(mu_) = true;
  bool wrote_last_ ABSL_GUARDED_BY(mu_) = false;
  bool wrote_end_ ABSL_GUARDED_BY(mu_) = false;  // the end-of-task frame went out
};

}  // namespace

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* NewStepStream(
    grpc::CallbackServerContext* context, const StepStreamEnv& env) {
  return new StepStream(context, env);
}

}  // namespace sluice
