#include "worker/grpc_worker_service.h"

#include <algorithm>
#include <limits>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/rpc/grpc_status.h"
#include "grpcpp/impl/rpc_service_method.h"
#include "grpcpp/support/method_handler.h"
#include "core/rpc/step_frame.h"
#include "worker/consumer_credits.h"
#include "worker/consumer_frame.h"
#include "worker/stream_request.h"

namespace sluice {
namespace {

using Stream = grpc::ServerReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>;

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

void GrpcWorkerService::Coalesce(StepReader* reader, const StepLimits& limits, int64_t credit,
                                 std::vector<std::shared_ptr<const TaskStep>>* steps,
                                 bool* end) const {
  if (options_.coalesce_wait <= absl::ZeroDuration()) return;
  size_t cost = 0;
  for (const auto& step : *steps) cost += limits.cost(*step);
  // What the frame may still take: the credit left (the first step may have exceeded it) and
  // the frame's size.
  const size_t cap = std::min(static_cast<size_t>(std::max<int64_t>(credit, 0)),
                              options_.max_frame_bytes);
  const absl::Time until = absl::Now() + options_.coalesce_wait;
  std::vector<std::shared_ptr<const TaskStep>> more;
  while (cost < options_.coalesce_bytes && cost < cap && steps->size() < options_.max_frame_steps) {
    StepLimits room = limits;
    room.max_steps = options_.max_frame_steps - steps->size();
    room.max_cost = cap - cost;
    room.first_max = cap - cost;
    bool more_end = false;
    // An error is left for the sending loop's next Next(), which returns it again.
    if (!reader->Next(room, until, &more, &more_end, nullptr).ok()) return;
    if (more_end) {
      *end = true;  // the end rides on this frame
      return;
    }
    if (more.empty()) return;  // the bound passed, or the next step needs more credit
    for (auto& step : more) {
      cost += limits.cost(*step);
      steps->push_back(std::move(step));
    }
  }
}

grpc::Status GrpcWorkerService::StreamSteps(grpc::ServerContext* context, Stream* stream) {
  if (grpc::Status a = auth_.Check(*context); !a.ok()) return a;
  grpc::ByteBuffer first;
  if (!stream->Read(&first)) {
    return grpc::Status(grpc::StatusCode::CANCELLED, "StreamSteps: no StreamRequest received");
  }
  absl::StatusOr<proto::StreamRequest> request = ParseStreamRequest(first);
  if (!request.ok()) return ToGrpcStatus(request.status());
  absl::StatusOr<std::shared_ptr<TaskRunner>> runner =
      tasks_->FindTask(request->job_id(), request->task_id());
  if (!runner.ok()) return ToGrpcStatus(runner.status());
  const proto::JobOptions& job = (*runner)->task().job();
  const bool coordinated = job.read_mode() == proto::READ_MODE_COORDINATED;
  const int64_t replicas = job.replicas_per_consumer();
  const int64_t consumer = request->consumer_index();
  if (coordinated && (consumer < 0 || consumer >= job.num_consumers())) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("StreamSteps: consumer_index ", consumer, " out of range [0, ",
                                     job.num_consumers(), ") for job ", request->job_id()));
  }
  absl::StatusOr<std::unique_ptr<StepReader>> reader =
      // Independent reads key the consumer by its id (steps kept until acknowledged).
      (*runner)->OpenReader(coordinated ? consumer : static_cast<int64_t>(request->consumer_id()),
                            request->start_step());
  if (!reader.ok()) return ToGrpcStatus(reader.status());

  ConsumerCredits credits(request->initial_credit_bytes(), request->window_bytes());
  StepReader* step_reader = reader->get();
  std::thread credit_reader([stream, &credits, step_reader, coordinated] {
    credits.ReadFrom(stream, coordinated ? std::function<void(int64_t)>()
                                         : [step_reader](int64_t received) {
                                             step_reader->Acknowledge(received);
                                           });
  });

  // What one frame may take: steps whose costs fit the credit and the frame size; the first
  // step whatever its cost once the credit reaches CreditForAnyStep (a step larger than the
  // window still flows).
  StepLimits limits;
  limits.max_steps = options_.max_frame_steps;
  limits.cost = [coordinated, consumer, replicas](const TaskStep& step) {
    return ConsumerStepCost(step, coordinated, consumer, replicas);
  };
  auto set_credit = [&limits, &credits, this](int64_t credit) {
    const size_t c = static_cast<size_t>(std::max<int64_t>(credit, 0));
    limits.first_max = credit >= CreditForAnyStep(credits.window())
                           ? std::numeric_limits<size_t>::max()
                           : c;
    limits.max_cost = std::min(c, options_.max_frame_bytes);
  };

  absl::Status result;
  bool first_write = true;
  bool wrote_last = false;
  bool wrote_end = false;  // the end-of-task frame went out
  int64_t need = 1;        // the credit the next frame needs (the blocked step's cost)
  std::vector<std::shared_ptr<const TaskStep>> steps;
  while (true) {
    absl::StatusOr<int64_t> available = credits.Wait(context, options_.poll_interval, need);
    if (!available.ok()) {
      result = available.status();
      break;
    }
    set_credit(*available);
    bool end = false;
    size_t blocked_cost = 0;
    absl::Status next = (*reader)->Next(limits, absl::Now() + options_.poll_interval, &steps,
                                        &end, &blocked_cost);
    if (!next.ok()) {
      stream->Write(ErrorFrame(next));
      wrote_last = true;
      result = next;
      break;
    }
    if (steps.empty() && !end) {
      // Nothing yet (check the call and wait again), or a step that needs more credit.
      need = blocked_cost > 0 ? static_cast<int64_t>(blocked_cost) : 1;
      continue;
    }
    need = 1;
    if (!end) Coalesce(reader->get(), limits, *available, &steps, &end);

    grpc::ByteBuffer bb;
    absl::Status encoded =
        EncodeStepFrame(ConsumerFrame(steps, end, coordinated, consumer, replicas), &bb);
    if (!encoded.ok()) {
      stream->Write(ErrorFrame(encoded));
      wrote_last = true;
      result = encoded;
      break;
    }
    int64_t cost = 0;
    for (const auto& step : steps) cost += static_cast<int64_t>(limits.cost(*step));
    const int64_t left = credits.Spend(cost);
    set_credit(left);
    grpc::WriteOptions write_options;
    // The next frame follows at once only with credit left (the loop waits for >= 1 byte).
    if (UseBufferHint(first_write, end, left > 0 && (*reader)->ReadyWithin(limits))) {
      write_options.set_buffer_hint();
    }
    const int64_t frame_bytes = static_cast<int64_t>(bb.Length());
    if (!stream->Write(bb, write_options)) {
      result = absl::CancelledError("StreamSteps: the consumer went away");
      break;
    }
    (*runner)->RecordDelivered(static_cast<int64_t>(steps.size()), frame_bytes);
    first_write = false;
    if (end) {
      wrote_last = true;
      wrote_end = true;
      break;
    }
  }

  // Let the consumer half-close (it does after the last frame), then stop the credit reader.
  const bool closed = wrote_last ? credits.WaitForClose(context, options_.close_grace,
                                                        options_.poll_interval)
                                 : credits.closed();
  // The consumer half-closes only once it has read the end frame: now its end counts (for the
  // task's drained(), hence the worker's finished report).
  if (wrote_end && credits.ClosedCleanly(context)) (*reader)->ConfirmEnd();
  if (!closed) context->TryCancel();
  credit_reader.join();
  return ToGrpcStatus(result);
}

}  // namespace sluice
