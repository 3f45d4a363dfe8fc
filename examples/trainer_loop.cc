// A trainer's loop over a Sluice DistributedDataset: linear regression by synchronous SGD on two
// replicas, written as one would with tf.distribute:
//
//   - the input is a finite, shuffled, batched dataset, distributed with
//     experimental_distribute_dataset (each step's global batch is split between the replicas);
//   - every epoch makes a new iterator and reads it with GetNextAsOptional() until it is empty,
//     so the partial last step (where a replica may get a size-0 batch) needs no special case;
//   - each replica computes its gradient on its own piece, the gradients are summed across
//     replicas (the all-reduce) and the shared weights take one step.
//
// Run: build/examples/trainer_loop [GPU:0,GPU:1]
#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/util/status_macros.h"
#include "sluice/strategy.h"

namespace {

using namespace sluice;

constexpr int64_t kNumExamples = 50;
constexpr int64_t kGlobalBatchSize = 8;
constexpr int kEpochs = 5;
constexpr float kLearningRate = 0.5f;

// y = 2 x0 - 3 x1 + 1, on a fixed grid of inputs.
Element MakeExamples() {
  std::vector<float> features;
  std::vector<float> labels;
  for (int64_t i = 0; i < kNumExamples; ++i) {
    float x0 = static_cast<float>(i % 7) / 7.0f;
    float x1 = static_cast<float>(i % 5) / 5.0f;
    features.push_back(x0);
    features.push_back(x1);
    labels.push_back(2.0f * x0 - 3.0f * x1 + 1.0f);
  }
  return Element::Tuple({Tensor::FromVector<float>(features, Shape({kNumExamples, 2})),
                         Tensor::FromVector<float>(labels)});
}

struct Weights {
  float w0 = 0, w1 = 0, b = 0;
};

// One replica's share of a step: the summed squared error and its gradient over its examples.
struct ReplicaResult {
  int64_t examples = 0;
  double loss_sum = 0;
  double grad[3] = {0, 0, 0};
};

ReplicaResult ReplicaStep(const Weights& w, const Element& batch) {
  const Tensor& x = batch.children()[0].leaf();
  const Tensor& y = batch.children()[1].leaf();
  ReplicaResult r;
  r.examples = y.num_elements();  // 0 for a replica's dummy batch at the end of an epoch
  const float* xs = x.data<float>();
  const float* ys = y.data<float>();
  for (int64_t i = 0; i < r.examples; ++i) {
    double err = w.w0 * xs[2 * i] + w.w1 * xs[2 * i + 1] + w.b - ys[i];
    r.loss_sum += err * err;
    r.grad[0] += 2 * err * xs[2 * i];
    r.grad[1] += 2 * err * xs[2 * i + 1];
    r.grad[2] += 2 * err;
  }
  return r;
}

absl::Status Main(const std::vector<std::string>& devices) {
  ASSIGN_OR_RETURN(MirroredStrategy strategy, MirroredStrategy::Create(devices));
  Dataset dataset = Dataset::FromTensorSlices(MakeExamples())
                        .Shuffle(/*buffer_size=*/kNumExamples, /*seed=*/42)
                        .Batch(kGlobalBatchSize);
  // The step runs on the host: keep the batches in host memory.
  InputOptions options;
  options.experimental_fetch_to_device = false;
  ASSIGN_OR_RETURN(DistributedDataset dist_dataset,
                   strategy.ExperimentalDistributeDataset(dataset, options));
  std::cout << "replicas in sync: " << strategy.num_replicas_in_sync() << "\n";

  Weights w;
  for (int epoch = 1; epoch <= kEpochs; ++epoch) {
    ASSIGN_OR_RETURN(DistributedIterator it, dist_dataset.MakeIterator());
    int64_t steps = 0;
    int64_t examples = 0;
    double loss_sum = 0;
    for (;;) {
      ASSIGN_OR_RETURN(std::optional<PerReplica<Element>> x, it.GetNextAsOptional());
      if (!x.has_value()) break;
      PerReplica<ReplicaResult> per_replica =
          strategy.Run([&w](const Element& batch) { return ReplicaStep(w, batch); }, *x);
      // All-reduce (SUM) across replicas, then one SGD step on the mean gradient.
      ReplicaResult total;
      for (const ReplicaResult& r : per_replica) {
        total.examples += r.examples;
        total.loss_sum += r.loss_sum;
        for (int k = 0; k < 3; ++k) total.grad[k] += r.grad[k];
      }
      if (total.examples > 0) {
        const double n = static_cast<double>(total.examples);
        w.w0 -= kLearningRate * static_cast<float>(total.grad[0] / n);
        w.w1 -= kLearningRate * static_cast<float>(total.grad[1] / n);
        w.b -= kLearningRate * static_cast<float>(total.grad[2] / n);
      }
      ++steps;
      examples += total.examples;
      loss_sum += total.loss_sum;
    }
    std::cout << absl::StrFormat("epoch %d: %d steps, %d examples, mean loss %.4f\n", epoch,
                                 steps, examples, examples > 0 ? loss_sum / examples : 0.0);
  }
  std::cout << absl::StrFormat("weights: w0=%.3f w1=%.3f b=%.3f (target 2, -3, 1)\n", w.w0,
                               w.w1, w.b);
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> devices = {"GPU:0", "GPU:1"};
  if (argc > 1) devices = absl::StrSplit(argv[1], ',', absl::SkipEmpty());
  absl::Status status = Main(devices);
  if (!status.ok()) {
    std::cerr << "trainer_loop: " << status << "\n";
    return 1;
  }
  return 0;
}
