// TaskStreamCall: one StreamSteps call of a TaskStreams task, on gRPC's callback API (a
// ClientBidiReactor: no thread of its own until it has a bulk socket, see below). See
// client/task_streams.h for the protocol.
//
// Contract: created by the connector under TaskStreams::mu with the task's call slot empty and
// the TaskStreams' live-call count already incremented; StartLocked sends the StreamRequest,
// starts the first read and the call. From then on the call reads one frame at a time until the
// task's end, an error or the call's end (one read outstanding), queues the steps on the task
// and writes credit grants (WriteLocked, one write in flight at a time). Once reading is over it
// half-closes and drops its hold, so that OnDone comes when the worker's status arrives (or the
// call is cancelled: CancelLocked). OnDone clears the task's call slot, decides what the task
// does next (done, failed, or back to the connector), deletes the call and only then decrements
// the live-call count: nothing touches the call or TaskStreams after that.
//
// The bulk data channel: once a frame offers it, the call handles its frames on a
// BulkReceiveThread of its own (connect, receive the socket bytes, decode, queue): OnReadDone
// only hands the read frame over, so a worker that stalls between a header and its bytes holds
// that thread, not gRPC's callback threads that every other stream needs. Reads stay one at a
// time, but the next one starts as soon as a frame is handed over while at most
// FrameReadAhead::kFramesAhead frames wait for the thread (the header of frame N+1 arrives
// while N's bytes are received; what is read ahead is what the worker sent within its credit,
// so no memory beyond it). Frames reach the thread in the order read (client/frame_read_ahead.h
// says why that takes care: the socket's bytes follow that order). The thread handles frames
// in order, so the decoder and frame are used by one thread at
// a time; a frame handed over after reading ended (an error, the end) is dropped, its steps
// never queued (the next call asks for them again). OnDone (scheduled by gRPC, never on the
// receive thread: the hold is dropped from outside a reaction there, and reads complete on
// gRPC's threads) joins the thread by deleting the call.
//
// Every member is guarded by the owning TaskStreams' mu, except the buffers gRPC reads into
// and writes from, which only the one read or write in flight uses.
#ifndef SLUICE_CLIENT_TASK_STREAM_CALL_H_
#define SLUICE_CLIENT_TASK_STREAM_CALL_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "client/frame_read_ahead.h"
#include "client/task_streams.h"
#include "core/rpc/bulk_channel.h"
#include "core/rpc/job_shm_reader.h"
#include "core/rpc/shm_ring.h"
#include "core/rpc/step_frame.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/client_callback.h"
#include "proto/worker.pb.h"

namespace sluice {

class TaskStreamCall final : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  // Creates the call on `channel` (not started yet).
  TaskStreamCall(TaskStreams* streams, std::shared_ptr<TaskStream> task,
                 std::shared_ptr<grpc::Channel> channel, std::string address);

  // Writes `first` (the StreamRequest), starts the first read and the call.
  void StartLocked(const proto::ConsumerMessage& first);
  // Writes a credit grant if one is due and no write is in flight; once reading is over,
  // half-closes (if writing still works) and drops the hold instead.
  void WriteLocked();
  // Cancels the call; OnDone follows.
  void CancelLocked() {
    if (bulk_ != nullptr) bulk_->Abort();  // a receive in progress returns at once
    context_.TryCancel();
  }
  bool writing_locked() const { return writing_; }

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  // Reading is over (the end, an error, or the stream ended): no more credit for this call.
  void FinishReadingLocked();
  // Decodes `buffer` (the frame just read, cleared once decoded; on gRPC's thread, or on
  // receive_thread_ once the call has a bulk socket) and hands it to QueueFrame.
  void HandleFrame(grpc::ByteBuffer* buffer);
  // Queues the decoded frame's steps (or ends reading on `decoded`'s error, the frame's error or
  // the end of the task); without a receive thread, starts the next read.
  void QueueFrame(absl::Status decoded);
  // On receive_thread_: the frame a read brought (`ok`) or the end of reading (!ok).
  void HandleHandedOver(bool ok, grpc::ByteBuffer* buffer);
  // With in-band headers (BulkAccept.inband_headers), on receive_thread_ once the socket is up:
  // receives, decodes and queues every frame from the socket until reading ends (the end of
  // the task, an error, a broken socket, or the socket's end between frames: the worker's end
  // of the call, whose status then explains it). gRPC's read meanwhile awaits the call's end.
  void ReceiveInband();
  // Counts and logs `s` when it is the bulk socket's failure (UNAVAILABLE with a socket): the
  // call is then cancelled and made again (FinishReadingLocked).
  void NoteBulkFailure(const absl::Status& s);
  // Shared memory: takes the segment the frame just decoded offers (on the read's thread,
  // without mu: a local socket round trip), so that later frames decode from it. Any failure
  // leaves the call on TCP.
  void TakeSharedMemory(const proto::ShmAccept& accept);
  // The segment `accept` names: this process's kept mapping of a warm one, else received over
  // the worker's socket and mapped (and kept, core/rpc/shm_mapping_cache.h). Errors as
  // ReceiveShmFd and ShmSegment::Map.
  absl::StatusOr<std::shared_ptr<ShmSegment>> MapSegment(const proto::ShmAccept& accept);
  // The job segment `accept` names (a shared job's, core/rpc/job_shm_reader.h): this process's
  // reader of it, else received over the worker's socket, mapped and registered. Errors as
  // ReceiveShmFd and ShmSegment::Map.
  absl::StatusOr<std::shared_ptr<JobShmReader>> MapJobSegment(const proto::ShmAccept& accept);
  // The bulk data channel: connects to the port the frame just decoded offers (on the read's
  // thread, without mu), so that later frames receive their numeric bytes on it. A port that
  // cannot be reached leaves the call on gRPC and is not offered again by this worker.
  void TakeBulkChannel(const proto::BulkAccept& accept);

  TaskStreams* const streams_;
  const std::shared_ptr<TaskStream> task_;
  const std::shared_ptr<grpc::Channel> channel_;
  const std::string address_;
  grpc::ClientContext context_;
  grpc::ByteBuffer read_buffer_;
  // Decodes the frames (only the one read in flight uses it), keeping its header message and
  // the decoded frame's vectors from frame to frame.
  StepFrameDecoder decoder_;
  StepFrame frame_;
  grpc::ByteBuffer write_buffer_;
  // Shared memory: the ring of the segment the worker handed over (set under mu once mapped;
  // the decoder borrows it), whether the worker waits for the answer to its offer (a grant,
  // with shm_ready when mapped, shm_declined when not: it sends nothing more until then),
  // whether the offer could not be taken (set under mu; every later grant says so), and
  // whether an offer was tried (one per call).
  std::unique_ptr<ShmRingReader> ring_;
  bool shm_answer_due_ = false;
  bool shm_declined_ = false;
  bool shm_tried_ = false;
  uint64_t shm_segment_id_ = 0;  // the worker's id of the segment mapped (0: none)
  // The job segment's reader (a shared job; set under mu once mapped; the decoder borrows
  // it): every grant says job_shm_mapped and carries the offsets its regions released.
  std::shared_ptr<JobShmReader> job_reader_;
  std::vector<uint64_t> job_released_;  // WriteLocked's scratch
  // The bulk data channel's socket (set under mu once connected; the decoder borrows it;
  // CancelLocked aborts it), whether an offer was tried (one per call), and whether the last
  // frame failed on it (the call is then cancelled and made again).
  std::unique_ptr<BulkReceiver> bulk_;
  bool bulk_tried_ = false;
  bool bulk_failed_ = false;
  // The worker waits for the answer to its offer (bulk_ready, or bulk_declined).
  bool bulk_answer_due_ = false;
  // In-band headers: every frame comes on the socket (set on receive_thread_ before the read
  // that follows it starts), where ReceiveInband reads it into inband_frame_; whether gRPC's
  // read ended (the call's end), and whether it brought a frame instead (a broken protocol).
  bool bulk_inband_ = false;
  grpc::ByteBuffer inband_frame_;
  bool grpc_read_ended_ = false;
  bool frame_on_grpc_ = false;
  // With a receive thread: the reads ahead of it and the frames handed over to it, in the
  // order read (client/frame_read_ahead.h; created with receive_thread_).
  std::unique_ptr<FrameReadAhead> read_ahead_;

  bool writing_ = false;        // a write (request or grant) is in flight
  bool write_failed_ = false;   // a write failed: the call is broken, write nothing more
  bool read_finished_ = false;  // no more reads (FinishReadingLocked ran)
  bool hold_released_ = false;  // the half-close is sent (or skipped) and the hold dropped
  bool progress_ = false;       // a step arrived on this call
  // How reading ended. Until a frame says otherwise: the stream ended early (no end, no error
  // from the worker), explained by the call's status if it has one.
  absl::Status result_ = absl::UnavailableError("the stream ended before the end of the task");
  bool ended_early_ = true;
  bool ended_ = false;  // the end of the task arrived
  // Where the frames are handled from the bulk offer on (created on the read that brought the
  // offer, before any use off gRPC's thread). Declared last: destroyed (joined) first.
  std::unique_ptr<BulkReceiveThread> receive_thread_;
};

}  // namespace sluice

#endif  // SLUICE_CLIENT_TASK_STREAM_CALL_H_
