// The seed's second element_spec example:
//
//   strategy = tf.distribute.MirroredStrategy(["GPU:0", "GPU:1"])
//   dataset = tf.data.Dataset.from_tensors(([1.],[2])).repeat(100).batch(global_batch_size)
//   dist_dataset = strategy.experimental_distribute_dataset(dataset)
//   dist_dataset.element_spec
//
// (evaluated at the interactive prompt, which shows the spec's repr).
#include <cstdint>
#include <iostream>

#include "sluice/per_replica_format.h"
#include "core/util/status_macros.h"
#include "sluice/strategy.h"

namespace {

absl::Status Main() {
  using namespace sluice;
  const int64_t global_batch_size = 16;
  ASSIGN_OR_RETURN(MirroredStrategy strategy, MirroredStrategy::Create({"GPU:0", "GPU:1"}));
  Dataset dataset = Dataset::FromTensors(Element::Tuple({Tensor::FromVector<float>({1.f}),
                                                         Tensor::FromVector<int32_t>({2})}))
                        .Repeat(100)
                        .Batch(global_batch_size);
  ASSIGN_OR_RETURN(DistributedDataset dist_dataset, strategy.ExperimentalDistributeDataset(dataset));
  std::cout << FormatPerReplicaSpec(dist_dataset.element_spec()) << "\n";
  return absl::OkStatus();
}

}  // namespace

int main() {
  absl::Status status = Main();
  if (!status.ok()) {
    std::cerr << "seed_element_spec: " << status << "\n";
    return 1;
  }
  return 0;
}
