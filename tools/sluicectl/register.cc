// sluicectl register --coordinator=HOST:PORT --pipeline=EXPR: registers the pipeline and
// prints its dataset id ("ds-" + 16 hex digits).
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/rpc/coordinator_call.h"
#include "proto/coordinator.grpc.pb.h"
#include "tools/sluicectl/commands.h"
#include "tools/sluicectl/security.h"

namespace sluice {
namespace {

int RegisterMain(const std::vector<std::string>& positional) {
  if (!positional.empty()) {
    return ReportUsageError("register", absl::StrCat("unexpected argument '", positional[0],
                                                     "' (flags take the form --name=value)"));
  }
  const std::string coordinator = absl::GetFlag(FLAGS_coordinator);
  if (coordinator.empty()) return ReportUsageError("register", "--coordinator is required");
  const std::string pipeline = absl::GetFlag(FLAGS_pipeline);
  if (pipeline.empty()) return ReportUsageError("register", "--pipeline is required");
  // The coordinator parses the expression: a malformed one comes back as its INVALID_ARGUMENT.
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = SluicectlChannel(coordinator);
  if (!channel.ok()) return ReportError(channel.status());
  auto stub = proto::CoordinatorService::NewStub(*channel);
  proto::RegisterDatasetRequest request;
  request.set_wire_version(proto::WIRE_VERSION_1);
  request.set_pipeline(pipeline);
  proto::RegisterDatasetResponse response;
  absl::Status s = CallCoordinator(coordinator, kRpcDeadline,
                                   absl::GetFlag(FLAGS_retry_deadline), "RegisterDataset",
                                   [&](grpc::ClientContext* c) {
                                     return stub->RegisterDataset(c, request, &response);
                                   });
  if (!s.ok()) return ReportError(s);
  std::cout << response.dataset_id() << "\n";
  return kExitOk;
}

}  // namespace

SLUICECTL_REGISTER_COMMAND({
    .name = "register",
    .synopsis = "register --coordinator=HOST:PORT --pipeline=EXPR",
    .help = "Registers the pipeline with the coordinator, which parses and validates it, and\n"
            "prints its dataset id (the same pipeline always gets the same id).",
    .flags = {"coordinator", "pipeline", "retry_deadline"},
    .run = &RegisterMain,
});

}  // namespace sluice
