// The C++ side of bench/python_overhead_bench.py: iterates a local distributed dataset (the
// pipeline expression the script passes) with the public C++ API and prints the time per step,
// so that the script can subtract it from the same loop written in Python.
//
//   build/bench/python_overhead_bench --expression="..." --replicas=1 --reps=3
//
// Prints one JSON line per repetition: {"replicas": R, "steps": N, "ns_per_step": X}.
#include <chrono>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "core/util/status_macros.h"
#include "sluice/strategy.h"

ABSL_FLAG(std::string, expression, "", "The pipeline (required)");
ABSL_FLAG(int64_t, replicas, 1, "Local replicas (each gets 1 KiB per step)");
ABSL_FLAG(int, reps, 3, "Repetitions");

namespace {

absl::Status Main() {
  using namespace sluice;
  const int64_t replicas = absl::GetFlag(FLAGS_replicas);
  std::vector<std::string> devices;
  for (int64_t r = 0; r < replicas; ++r) devices.push_back("CPU:" + std::to_string(r));
  ASSIGN_OR_RETURN(MirroredStrategy strategy, MirroredStrategy::Create(devices));
  ASSIGN_OR_RETURN(Dataset ds, Dataset::Parse(absl::GetFlag(FLAGS_expression)));
  InputOptions options;
  options.experimental_fetch_to_device = false;
  ASSIGN_OR_RETURN(DistributedDataset dist, strategy.ExperimentalDistributeDataset(ds, options));
  for (int rep = 0; rep < absl::GetFlag(FLAGS_reps); ++rep) {
    ASSIGN_OR_RETURN(DistributedIterator it, dist.MakeIterator());
    int64_t n = 0;
    int64_t checksum = 0;
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      absl::StatusOr<PerReplica<Element>> x = it.GetNext();
      if (absl::IsOutOfRange(x.status())) break;
      RETURN_IF_ERROR(x.status());
      checksum += (*x)[0].leaf().data<int32_t>()[0];  // touch the data, as the Python loop does
      ++n;
    }
    const double ns = std::chrono::duration<double, std::nano>(
                          std::chrono::steady_clock::now() - start).count();
    std::cout << "{\"replicas\": " << replicas << ", \"steps\": " << n
              << ", \"ns_per_step\": " << ns / static_cast<double>(n)
              << ", \"checksum\": " << checksum << "}" << std::endl;
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  absl::Status s = Main();
  if (!s.ok()) {
    std::cerr << "python_overhead_bench: " << s << "\n";
    return 1;
  }
  return 0;
}
