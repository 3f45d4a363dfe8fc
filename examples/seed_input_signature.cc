// The seed's element_spec / input_signature example:
//
//   mirrored_strategy = tf.distribute.MirroredStrategy(["GPU:0", "GPU:1"])
//   dataset = tf.data.Dataset.from_tensors(([2.])).repeat(100).batch(global_batch_size)
//   dist_dataset = mirrored_strategy.experimental_distribute_dataset(dataset)
//   @tf.function(input_signature=[dist_dataset.element_spec])
//   def train_step(per_replica_inputs):
//     def step_fn(inputs):
//       return tf.square(inputs)
//     return mirrored_strategy.run(step_fn, args=(per_replica_inputs,))
//   for _ in range(epochs):
//     iterator = iter(dist_dataset)
//     for _ in range(steps_per_epoch):
//       output = train_step(next(iterator))
//       print(output)
//
// The input signature is the dataset's element_spec: train_step checks each replica's input
// against it, as a tf.function with an input_signature does.
#include <cstdint>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "sluice/per_replica_format.h"
#include "core/util/status_macros.h"
#include "sluice/strategy.h"

namespace {

using namespace sluice;

// tf.square, elementwise in float32.
Element StepFn(const Element& inputs) {
  const Tensor& x = inputs.leaf();
  Tensor out = Tensor::Allocate(DType::kFloat32, x.shape());
  const float* in = x.data<float>();
  float* o = out.mutable_data<float>();
  for (int64_t i = 0; i < out.num_elements(); ++i) o[i] = in[i] * in[i];
  return out;
}

// A step function traced for `signature`: rejects inputs that do not match it.
class TrainStep {
 public:
  TrainStep(const MirroredStrategy& strategy, DistributedElementSpec signature)
      : strategy_(strategy), signature_(std::move(signature)) {}

  absl::StatusOr<PerReplica<Element>> operator()(const PerReplica<Element>& per_replica_inputs) const {
    const PerReplicaSpec& spec = signature_.leaf();
    if (spec.specs.size() != per_replica_inputs.num_replicas()) {
      return absl::InvalidArgumentError(absl::StrCat("train_step: expected ", spec.specs.size(),
                                                     " replicas, got ",
                                                     per_replica_inputs.num_replicas()));
    }
    for (size_t r = 0; r < per_replica_inputs.num_replicas(); ++r) {
      if (!spec.specs[r].IsCompatibleWith(per_replica_inputs[r].leaf())) {
        return absl::InvalidArgumentError(
            absl::StrCat("train_step: replica ", r, "'s input does not match ",
                         spec.specs[r].ToString()));
      }
    }
    return strategy_.Run(StepFn, per_replica_inputs);
  }

 private:
  const MirroredStrategy& strategy_;
  DistributedElementSpec signature_;
};

absl::Status Main() {
  const int64_t global_batch_size = 4;
  const int epochs = 1;
  const int steps_per_epoch = 1;
  ASSIGN_OR_RETURN(MirroredStrategy mirrored_strategy,
                   MirroredStrategy::Create({"GPU:0", "GPU:1"}));
  Dataset dataset = Dataset::FromTensors(Tensor::FromVector<float>({2.f}))
                        .Repeat(100)
                        .Batch(global_batch_size);
  // step_fn runs on the host here: keep the batches in host memory.
  InputOptions options;
  options.experimental_fetch_to_device = false;
  ASSIGN_OR_RETURN(DistributedDataset dist_dataset,
                   mirrored_strategy.ExperimentalDistributeDataset(dataset, options));
  TrainStep train_step(mirrored_strategy, dist_dataset.element_spec());
  for (int epoch = 0; epoch < epochs; ++epoch) {
    ASSIGN_OR_RETURN(DistributedIterator iterator, dist_dataset.MakeIterator());
    for (int step = 0; step < steps_per_epoch; ++step) {
      ASSIGN_OR_RETURN(PerReplica<Element> inputs, iterator.GetNext());
      ASSIGN_OR_RETURN(PerReplica<Element> output, train_step(inputs));
      std::cout << FormatPerReplica(output) << "\n";
    }
  }
  return absl::OkStatus();
}

}  // namespace

int main() {
  absl::Status status = Main();
  if (!status.ok()) {
    std::cerr << "seed_input_signature: " << status << "\n";
    return 1;
  }
  return 0;
}
