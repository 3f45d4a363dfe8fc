// The seed's for-loop example:
//
//   strategy = tf.distribute.MirroredStrategy(["GPU:0", "GPU:1"])
//   dataset = tf.data.Dataset.from_tensors(([1.],[1.])).repeat(4).batch(global_batch_size)
//   dist_dataset = strategy.experimental_distribute_dataset(dataset)
//   @tf.function
//   def train_step(input):
//     features, labels = input
//     return labels - 0.3 * features
//   for x in dist_dataset:
//     loss = strategy.run(train_step, args=(x,))
//     print("Loss is", loss)
#include <cstdint>
#include <iostream>

#include "sluice/per_replica_format.h"
#include "core/util/status_macros.h"
#include "sluice/strategy.h"

namespace {

using sluice::Element;
using sluice::Tensor;

// labels - 0.3 * features, elementwise in float32 as TF computes it.
Element TrainStep(const Element& input) {
  const Tensor& features = input.children()[0].leaf();
  const Tensor& labels = input.children()[1].leaf();
  Tensor out = Tensor::Allocate(sluice::DType::kFloat32, labels.shape());
  const float* f = features.data<float>();
  const float* l = labels.data<float>();
  float* o = out.mutable_data<float>();
  for (int64_t i = 0; i < out.num_elements(); ++i) o[i] = l[i] - 0.3f * f[i];
  return out;
}

absl::Status Main() {
  using namespace sluice;
  const int64_t global_batch_size = 4;
  ASSIGN_OR_RETURN(MirroredStrategy strategy, MirroredStrategy::Create({"GPU:0", "GPU:1"}));
  Dataset dataset = Dataset::FromTensors(Element::Tuple({Tensor::FromVector<float>({1.f}),
                                                         Tensor::FromVector<float>({1.f})}))
                        .Repeat(4)
                        .Batch(global_batch_size);
  // train_step runs on the host here: keep the batches in host memory.
  InputOptions options;
  options.experimental_fetch_to_device = false;
  ASSIGN_OR_RETURN(DistributedDataset dist_dataset,
                   strategy.ExperimentalDistributeDataset(dataset, options));
  for (const PerReplica<Element>& x : dist_dataset) {
  PerReplica<Element> loss = strategy.Run(TrainStep, x);
    std::cout << "Loss is " << FormatPerReplica(loss) << "\n";
  }
  return dist_dataset.iteration_status();
}

}  // namespace

int main() {
  absl::Status status = Main();
  if (!status.ok()) {
    std::cerr << "seed_for_loop: " << status << "\n";
    return 1;
  }
  return 0;
}
