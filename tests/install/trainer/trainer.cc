// A trainer built out of tree against an installed Sluice (find_package(Sluice), sluice::client):
// only the public headers. Reads range(8).batch(4) over two replicas and prints each step.
//
//   trainer local                 # the pipeline runs in this process
//   trainer service HOST:PORT     # the pipeline runs on the coordinator's workers
//
// Exit status 0 after printing every step; 1 with the error on stderr otherwise.
#include <iostream>
#include <string>

#include "sluice/per_replica_format.h"
#include "sluice/service.h"
#include "sluice/strategy.h"

namespace {

absl::Status Run(int argc, char** argv) {
  using namespace sluice;
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "local" && !(mode == "service" && argc > 2)) {
    return absl::InvalidArgumentError("usage: trainer local | trainer service HOST:PORT");
  }
  absl::StatusOr<MirroredStrategy> strategy = MirroredStrategy::Create({"CPU:0", "CPU:1"});
  if (!strategy.ok()) return strategy.status();
  absl::StatusOr<Dataset> dataset = Dataset::Parse("range(8).batch(4)");
  if (!dataset.ok()) return dataset.status();
  absl::StatusOr<DistributedDataset> dist;
  if (mode == "local") {
    dist = strategy->ExperimentalDistributeDataset(*dataset);
  } else {
    ServiceOptions options;
    options.coordinator_address = argv[2];
    options.fetch_to_device = false;
    dist = DistributeDatasetFromService(*strategy, *dataset, options);
  }
  if (!dist.ok()) return dist.status();
  for (const PerReplica<Element>& x : *dist) std::cout << FormatPerReplica(x) << "\n";
  return dist->iteration_status();
}

}  // namespace

int main(int argc, char** argv) {
  absl::Status status = Run(argc, argv);
  if (!status.ok()) {
    std::cerr << "trainer: " << status << "\n";
    return 1;
  }
  return 0;
}
