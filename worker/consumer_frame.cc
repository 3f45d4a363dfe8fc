#include "worker/consumer_frame.h"

#include <algorithm>
#include <utility>

namespace sluice {

void ConsumerFrameViews(const std::vector<std::shared_ptr<const TaskStep>>& steps,
                        bool coordinated, int64_t consumer, int64_t replicas,
                        std::vector<WireStepView>* out) {
  out->clear();
  for (const auto& step : steps) {
    size_t begin = 0;
    size_t stop = step->pieces.size();
    if (coordinated) {
      begin = std::min(step->pieces.size(), static_cast<size_t>(consumer * replicas));
      stop = std::min(step->pieces.size(), begin + static_cast<size_t>(replicas));
    }
    // A step encoded once for all its streams, when this consumer sends it whole.
    const SharedStepPayload* shared =
        begin == 0 && stop == step->pieces.size() ? step->shared_payload.get() : nullptr;
    out->push_back(WireStepView{step->task_step, step->global_step, step->num_real_pieces,
                                step->pieces.data() + begin, stop - begin, shared});
  }
}

size_t ConsumerStepCost(const TaskStep& step, bool coordinated, int64_t consumer,
                        int64_t replicas) {
  size_t begin = 0;
  size_t stop = step.pieces.size();
  if (coordinated) {
    begin = std::min(step.pieces.size(), static_cast<size_t>(consumer * replicas));
    stop = std::min(step.pieces.size(), begin + static_cast<size_t>(replicas));
  }
  size_t bytes = kStepCreditOverheadBytes;
  for (size_t p = begin; p < stop; ++p) {
    for (const Tensor& t : step.pieces[p]) bytes += t.payload_bytes();
  }
  return bytes;
}

grpc::ByteBuffer ErrorFrame(const absl::Status& status) {
  StepFrame frame;
  frame.status = status;
  grpc::ByteBuffer bb;
  (void)EncodeStepFrame(frame, &bb);  // a frame without tensors always encodes
  return bb;
}

bool UseBufferHint(bool first_write, bool end_of_task, bool next_ready) {
  return !first_write && !end_of_task && next_ready;
}

}  // namespace sluice
