// The seed's __iter__ example:
//
//   strategy = tf.distribute.MirroredStrategy(["GPU:0", "GPU:1"])
//   dataset = tf.data.Dataset.from_tensor_slices([1, 2, 3, 4]).repeat().batch(global_batch_size)
//   distributed_iterator = iter(strategy.experimental_distribute_dataset(dataset))
//   print(next(distributed_iterator))
#include <cstdint>
#include <iostream>

#include "sluice/per_replica_format.h"
#include "core/util/status_macros.h"
#include "sluice/strategy.h"

namespace {

absl::Status Main() {
  using namespace sluice;
  const int64_t global_batch_size = 4;
  ASSIGN_OR_RETURN(MirroredStrategy strategy, MirroredStrategy::Create({"GPU:0", "GPU:1"}));
  Dataset dataset = Dataset::FromTensorSlices(Tensor::FromVector<int32_t>({1, 2, 3, 4}))
                        .Repeat()
                        .Batch(global_batch_size);
  // The values are printed on the host: keep them in host memory.
  InputOptions options;
  options.experimental_fetch_to_device = false;
  ASSIGN_OR_RETURN(DistributedDataset dist_dataset,
                   strategy.ExperimentalDistributeDataset(dataset, options));
  ASSIGN_OR_RETURN(DistributedIterator distributed_iterator, dist_dataset.MakeIterator());
  ASSIGN_OR_RETURN(PerReplica<Element> x, distributed_iterator.GetNext());
  std::cout << FormatPerReplica(x) << "\n";
  return absl::OkStatus();
}

}  // namespace

int main() {
  absl::Status status = Main();
  if (!status.ok()) {
    std::cerr << "seed_iter: " << status << "\n";
    return 1;
  }
  return 0;
}
