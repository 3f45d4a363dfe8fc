// adversarial_runner: runs one pipeline as a trainer would, for the adversarial suite
// (adversarial_test.cc), in its own process so that a crash, a hang or a runaway allocation in
// the client library or the in-process executor is observed by the test instead of killing it.
//
//   adversarial_runner --pipeline_file=P [--coordinator=HOST:PORT] [--steps=N]
//                      [--memory_limit=768MiB] [--max_element_bytes=192MiB] [--retry_deadline_s=15]
//                      [--num_tasks=N]
//
// Reads the pipeline expression from P (a file: hostile pipelines exceed the 128 KiB a single
// command-line argument may hold). With --coordinator it first registers the expression as text
// (RegisterDataset, so that the coordinator's parser sees every case, even one the client
// library would refuse), then reads it through the service with the client library
// (DistributeDatasetFromService, 2 CPU replicas); without, it runs it in this process
// (MirroredStrategy::ExperimentalDistributeDataset, 2 CPU replicas) under the memory limits
// given. It reads at most N steps (default 4).
//
// Output on stdout: one line per step (sluicectl run --format=json's object, cut at 4096
// characters; {"step": N, "values": V, "elided": true} for a step of over 4096 values), then a line "STATUS <CODE>" (absl's name: OK, INVALID_ARGUMENT, ...) and the
// status message on the lines after it. Exit code 0 whenever it got that far; 2 for bad usage.
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/data/memory_budget.h"
#include "core/format/json_format.h"
#include "grpcpp/grpcpp.h"
#include "proto/coordinator.grpc.pb.h"
#include "sluice/dataset.h"
#include "sluice/service.h"
#include "sluice/strategy.h"

namespace sluice {
namespace {

struct RunnerArgs {
  std::string pipeline_file;
  std::string coordinator;
  int64_t steps = 4;
  std::string memory_limit;
  std::string max_element_bytes;
  int64_t retry_deadline_s = 15;
  int64_t num_tasks = 0;
};

bool ParseArgs(int argc, char** argv, RunnerArgs* args) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](absl::string_view flag, std::string* out) {
      const std::string prefix = absl::StrCat("--", flag, "=");
      if (!absl::StartsWith(a, prefix)) return false;
      *out = a.substr(prefix.size());
      return true;
    };
    std::string v;
    if (value("pipeline_file", &args->pipeline_file) || value("coordinator", &args->coordinator) ||
        value("memory_limit", &args->memory_limit) ||
        value("max_element_bytes", &args->max_element_bytes)) {
      continue;
    }
    if (value("steps", &v) && absl::SimpleAtoi(v, &args->steps)) continue;
    if (value("retry_deadline_s", &v) && absl::SimpleAtoi(v, &args->retry_deadline_s)) continue;
    if (value("num_tasks", &v) && absl::SimpleAtoi(v, &args->num_tasks)) continue;
    std::cerr << "adversarial_runner: unknown or bad argument '" << a << "'\n";
    return false;
  }
  return !args->pipeline_file.empty();
}

// The coordinator's verdict on the expression as text, as any client (sluicectl register) gets
// it.
absl::Status RegisterText(const std::string& coordinator, const std::string& pipeline) {
  auto stub = proto::CoordinatorService::NewStub(
      grpc::CreateChannel(coordinator, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
  proto::RegisterDatasetRequest request;
  request.set_wire_version(proto::WIRE_VERSION_1);
  request.set_pipeline(pipeline);
  proto::RegisterDatasetResponse response;
  grpc::Status s = stub->RegisterDataset(&context, request, &response);
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat("RegisterDataset: ", s.error_message()));
}

absl::Status Run(const RunnerArgs& args, const std::string& pipeline) {
  if (!args.coordinator.empty()) {
    absl::Status registered = RegisterText(args.coordinator, pipeline);
    if (!registered.ok()) return registered;
  } else {
    absl::Status limits =
        ConfigureProcessMemoryBudget(args.memory_limit, args.max_element_bytes);
    if (!limits.ok()) return limits;
  }
  absl::StatusOr<Dataset> dataset = Dataset::Parse(pipeline);
  if (!dataset.ok()) return dataset.status();
  absl::StatusOr<MirroredStrategy> strategy = MirroredStrategy::Create({"CPU:0", "CPU:1"});
  if (!strategy.ok()) return strategy.status();
  absl::StatusOr<DistributedDataset> dist;
  if (args.coordinator.empty()) {
    dist = strategy->ExperimentalDistributeDataset(*dataset);
  } else {
    ServiceOptions options;
    options.coordinator_address = args.coordinator;
    options.retry_deadline = absl::Seconds(args.retry_deadline_s);
    options.fetch_to_device = false;
    options.num_tasks = args.num_tasks;
    dist = DistributeDatasetFromService(*strategy, *dataset, options);
  }
  if (!dist.ok()) return dist.status();
  absl::StatusOr<DistributedIterator> it = dist->MakeIterator();
  if (!it.ok()) return it.status();
  for (int64_t step = 0; step < args.steps; ++step) {
    absl::StatusOr<PerReplica<Element>> x = it->GetNext();
    if (absl::IsOutOfRange(x.status())) break;
    if (!x.ok()) return x.status();
    // Formatting a step of millions of values would take longer than the case's deadline;
    // such a step is only counted.
    int64_t values = 0;
    for (const Element& e : x->values()) {
      for (const Tensor& t : e.Flatten()) values += t.num_elements();
    }
    std::string line = values <= 4096 ? FormatRunStepJson(step, *x)
                                      : absl::StrCat("{\"step\": ", step, ", \"values\": ",
                                                     values, ", \"elided\": true}");
    if (line.size() > 4096) line = absl::StrCat(line.substr(0, 4096), "...");
    std::cout << line << "\n";
    std::cout.flush();
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace sluice

int main(int argc, char** argv) {
  sluice::RunnerArgs args;
  if (!sluice::ParseArgs(argc, argv, &args)) {
    std::cerr << "usage: adversarial_runner --pipeline_file=P [--coordinator=HOST:PORT] "
                 "[--steps=N] [--memory_limit=B] [--max_element_bytes=B] [--retry_deadline_s=S] "
                 "[--num_tasks=N]\n";
    return 2;
  }
  std::ifstream in(args.pipeline_file, std::ios::binary);
  if (!in) {
    std::cerr << "adversarial_runner: cannot read " << args.pipeline_file << "\n";
    return 2;
  }
  std::stringstream text;
  text << in.rdbuf();
  const absl::Status status = sluice::Run(args, text.str());
  std::cout << "STATUS " << absl::StatusCodeToString(status.code()) << "\n"
            << status.message() << "\n";
  std::cout.flush();
  return 0;
}
