#include "worker/grpc_worker_service.h"

#include <algorithm>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/rpc/grpc_status.h"
#include "grpcpp/impl/rpc_service_method.h"
#include "grpcpp/support/method_handler.h"
#include "core/rpc/step_frame.h"

namespace sluice {
namespace {

using Stream = grpc::ServerReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>;

// What the call's reader thread learns from the consumer.
struct ConsumerSide {
  absl::Mutex mu;
  absl::CondVar cv;
  int64_t credits ABSL_GUARDED_BY(mu) = 0;
  bool closed ABSL_GUARDED_BY(mu) = false;  // the consumer half-closed or went away
  absl::Status error ABSL_GUARDED_BY(mu);   // a malformed consumer message
};

void ReadCredits(Stream* stream, ConsumerSide* side) {
  grpc::ByteBuffer bb;
  while (stream->Read(&bb)) {
    proto::ConsumerMessage m;
    absl::Status s = DecodeConsumerMessage(bb, &m);
    if (!s.ok()) s = absl::InvalidArgumentError(absl::StrCat("StreamSteps: ", s.message()));
    if (s.ok() && !m.has_credit()) {
      s = absl::InvalidArgumentError("StreamSteps: only CreditGrants may follow the StreamRequest");
    }
    absl::MutexLock lock(&side->mu);
    if (!s.ok()) {
      side->error = s;
      side->closed = true;
      side->cv.SignalAll();
      break;
    }
    side->credits += std::max<int64_t>(m.credit().steps(), 0);
    side->cv.SignalAll();
  }
  absl::MutexLock lock(&side->mu);
  side->closed = true;
  side->cv.SignalAll();
}

grpc::ByteBuffer ErrorFrame(const absl::Status& status) {
  StepFrame frame;
  frame.status = status;
  grpc::ByteBuffer bb;
  (void)EncodeStepFrame(frame, &bb);  // a frame without tensors always encodes
  return bb;
}

}  // namespace

GrpcWorkerService::GrpcWorkerService(TaskLookup* tasks, WorkerServiceOptions options)
    : tasks_(tasks), options_(options), auth_(options.token) {
  AddMethod(new grpc::internal::RpcServiceMethod(
      kStreamStepsMethod, grpc::internal::RpcMethod::BIDI_STREAMING,
      new grpc::internal::BidiStreamingHandler<GrpcWorkerService, grpc::ByteBuffer,
                                               grpc::ByteBuffer>(
          [](GrpcWorkerService* service, grpc::ServerContext* context, Stream* stream) {
            return service->StreamSteps(context, stream);
          },
          this)));
}

grpc::Status GrpcWorkerService::StreamSteps(grpc::ServerContext* context, Stream* stream) {
  if (grpc::Status a = auth_.Check(*context); !a.ok()) return a;
  grpc::ByteBuffer first;
  if (!stream->Read(&first)) {
    return grpc::Status(grpc::StatusCode::CANCELLED, "StreamSteps: no StreamRequest received");
  }
  proto::ConsumerMessage message;
  absl::Status s = DecodeConsumerMessage(first, &message);
  if (!s.ok()) {
    // Bad framing or bytes that are no ConsumerMessage: the caller's bad input.
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("StreamSteps: ", s.message()));
  }
  if (!message.has_request()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "StreamSteps: the first message must be a StreamRequest");
  }
  const proto::StreamRequest& request = message.request();
  if (request.wire_version() != proto::WIRE_VERSION_1 &&
      request.wire_version() != proto::WIRE_VERSION_UNSPECIFIED) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat("StreamSteps: consumer wire version ", request.wire_version(),
                                     ", worker wire version ", proto::WIRE_VERSION_1));
  }
  absl::StatusOr<std::shared_ptr<TaskRunner>> runner =
      tasks_->FindTask(request.job_id(), request.task_id());
  if (!runner.ok()) return ToGrpcStatus(runner.status());
  const proto::JobOptions& job = (*runner)->task().job();
  const bool coordinated = job.read_mode() == proto::READ_MODE_COORDINATED;
  const int64_t replicas = job.replicas_per_consumer();
  const int64_t consumer = request.consumer_index();
  if (coordinated && (consumer < 0 || consumer >= job.num_consumers())) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("StreamSteps: consumer_index ", consumer, " out of range [0, ",
                                     job.num_consumers(), ") for job ", request.job_id()));
  }
  absl::StatusOr<std::unique_ptr<StepReader>> reader =
      (*runner)->OpenReader(coordinated ? consumer : 0, request.start_step());
  if (!reader.ok()) return ToGrpcStatus(reader.status());

  ConsumerSide side;
  {
    absl::MutexLock lock(&side.mu);
    side.credits = std::max<int64_t>(request.initial_credits(), 0);
  }
  std::thread credit_reader([stream, &side] { ReadCredits(stream, &side); });

  absl::Status result;
  bool first_write = true;
  bool wrote_last = false;
  std::vector<std::shared_ptr<const TaskStep>> steps;
  while (true) {
    int64_t credits = 0;
    {
      absl::MutexLock lock(&side.mu);
      while (side.credits == 0 && !side.closed && !context->IsCancelled()) {
        side.cv.WaitWithTimeout(&side.mu, options_.poll_interval);
      }
      if (!side.error.ok()) {
        result = side.error;
        break;
      }
      if (side.closed || context->IsCancelled()) {
        result = absl::CancelledError("StreamSteps: the consumer went away");
        break;
      }
      credits = side.credits;
    }
    bool end = false;
    absl::Status next = (*reader)->Next(
        std::min<size_t>(static_cast<size_t>(credits), options_.max_frame_steps),
        options_.max_frame_bytes, absl::Now() + options_.poll_interval, &steps, &end);
    if (!next.ok()) {
      stream->Write(ErrorFrame(next));
      wrote_last = true;
      result = next;
      break;
    }
    if (steps.empty() && !end) continue;  // nothing yet: check the call and wait again

    StepFrame frame;
    frame.end_of_task = end;
    frame.steps.reserve(steps.size());
    for (const auto& step : steps) {
      WireStep w;
      w.task_step = step->task_step;
      w.global_step = step->global_step;
      w.num_real_pieces = step->num_real_pieces;
      if (coordinated) {
        const size_t begin = static_cast<size_t>(consumer * replicas);
        const size_t stop = std::min(step->pieces.size(), begin + static_cast<size_t>(replicas));
        for (size_t p = begin; p < stop; ++p) w.pieces.push_back(step->pieces[p]);
      } else {
        w.pieces = step->pieces;
      }
      frame.steps.push_back(std::move(w));
    }
    grpc::ByteBuffer bb;
    absl::Status encoded = EncodeStepFrame(frame, &bb);
    if (!encoded.ok()) {
      stream->Write(ErrorFrame(encoded));
      wrote_last = true;
      result = encoded;
      break;
    }
    int64_t left = 0;
    {
      absl::MutexLock lock(&side.mu);
      side.credits -= static_cast<int64_t>(steps.size());
      left = side.credits;
    }
    grpc::WriteOptions write_options;
    if (!first_write && !end && left > 0 && (*reader)->Ready()) write_options.set_buffer_hint();
    const int64_t frame_bytes = static_cast<int64_t>(bb.Length());
    if (!stream->Write(bb, write_options)) {
      result = absl::CancelledError("StreamSteps: the consumer went away");
      break;
    }
    (*runner)->RecordDelivered(static_cast<int64_t>(steps.size()), frame_bytes);
    first_write = false;
    if (end) {
      wrote_last = true;
      break;
    }
  }

  // Let the consumer half-close (it does after the last frame), then stop the credit reader.
  if (wrote_last) {
    absl::MutexLock lock(&side.mu);
    const absl::Time deadline = absl::Now() + options_.close_grace;
    while (!side.closed && !context->IsCancelled() && absl::Now() < deadline) {
      side.cv.WaitWithDeadline(&side.mu, std::min(deadline, absl::Now() + options_.poll_interval));
    }
  }
  bool closed;
  {
    absl::MutexLock lock(&side.mu);
    closed = side.closed;
  }
  if (!closed) context->TryCancel();
  credit_reader.join();
  return ToGrpcStatus(result);
}

}  // namespace sluice
