// The seed's explicit-iterator example:
//
//   strategy = tf.distribute.MirroredStrategy(["GPU:0", "GPU:1"])
//   train_dataset = tf.data.Dataset.from_tensors(([1.],[1.])).repeat(50).batch(global_batch_size)
//   train_dist_dataset = strategy.experimental_distribute_dataset(train_dataset)
//   @tf.function
//   def distributed_train_step(dataset_inputs):
//     def train_step(input):
//       loss = tf.constant(0.1)
//       return loss
//     per_replica_losses = strategy.run(train_step, args=(dataset_inputs,))
//     return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses,axis=None)
//   EPOCHS = 2
//   STEPS = 3
//   for epoch in range(EPOCHS):
//     total_loss = 0.0
//     num_batches = 0
//     dist_dataset_iterator = iter(train_dist_dataset)
//     for _ in range(STEPS):
//       total_loss += distributed_train_step(next(dist_dataset_iterator))
//       num_batches += 1
//     average_train_loss = total_loss / num_batches
//     template = ("Epoch {}, Loss: {:.4f}")
//     print (template.format(epoch+1, average_train_loss))
#include <cstdint>
#include <iostream>

#include "absl/strings/str_format.h"
#include "core/util/status_macros.h"
#include "sluice/strategy.h"

namespace {

using namespace sluice;

// strategy.run(train_step) then strategy.reduce(SUM): float32 arithmetic, as in TF.
float DistributedTrainStep(const MirroredStrategy& strategy,
                           const PerReplica<Element>& dataset_inputs) {
  auto train_step = [](const Element& /*input*/) { return Tensor::Scalar<float>(0.1f); };
  PerReplica<Tensor> per_replica_losses = strategy.Run(train_step, dataset_inputs);
  float sum = 0.0f;
  for (const Tensor& loss : per_replica_losses) sum += *loss.data<float>();
  return sum;
}

absl::Status Main() {
  const int64_t global_batch_size = 4;
  ASSIGN_OR_RETURN(MirroredStrategy strategy, MirroredStrategy::Create({"GPU:0", "GPU:1"}));
  Dataset train_dataset = Dataset::FromTensors(Element::Tuple({Tensor::FromVector<float>({1.f}),
                                                               Tensor::FromVector<float>({1.f})}))
                              .Repeat(50)
                              .Batch(global_batch_size);
  ASSIGN_OR_RETURN(DistributedDataset train_dist_dataset,
                   strategy.ExperimentalDistributeDataset(train_dataset));
  const int kEpochs = 2;
  const int kSteps = 3;
  for (int epoch = 0; epoch < kEpochs; ++epoch) {
    float total_loss = 0.0f;
    int num_batches = 0;
    ASSIGN_OR_RETURN(DistributedIterator dist_dataset_iterator, train_dist_dataset.MakeIterator());
    for (int step = 0; step < kSteps; ++step) {
      ASSIGN_OR_RETURN(PerReplica<Element> inputs, dist_dataset_iterator.GetNext());
      total_loss += DistributedTrainStep(strategy, inputs);
      num_batches += 1;
    }
    float average_train_loss = total_loss / static_cast<float>(num_batches);
    std::cout << absl::StrFormat("Epoch %d, Loss: %.4f\n", epoch + 1, average_train_loss);
  }
  return absl::OkStatus();
}

}  // namespace

int main() {
  absl::Status status = Main();
  if (!status.ok()) {
    std::cerr << "seed_explicit_iterator: " << status << "\n";
    return 1;
  }
  return 0;
}
