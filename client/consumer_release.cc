#include "client/consumer_release.h"

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/consumer_secrets.h"
#include "core/rpc/grpc_status.h"
#include "proto/coordinator.grpc.pb.h"

namespace sluice {

ConsumerRelease::ConsumerRelease(Options options) : options_(std::move(options)) {}

ConsumerRelease::~ConsumerRelease() {
  const absl::Status s = Release();
  if (!s.ok()) {
    std::fprintf(stderr, "sluice: could not release consumer %lld of job %lld (it ends by the "
                 "coordinator's consumer_timeout instead): %s\n",
                 static_cast<long long>(options_.consumer_index),
                 static_cast<long long>(options_.job_id), s.ToString().c_str());
  }
}

absl::Status ConsumerRelease::Release() {
  absl::MutexLock lock(&mu_);
  if (sent_) return status_;
  sent_ = true;
  const uint64_t secret = ProcessConsumerSecrets::Get().Find(
      options_.coordinator_address, options_.job_id, options_.consumer_index);
  if (secret == 0) return status_;  // it never read: nothing to release
  proto::ReleaseConsumerRequest request;
  request.set_wire_version(proto::WIRE_VERSION_1);
  request.set_job_id(options_.job_id);
  request.set_consumer_index(options_.consumer_index);
  request.set_consumer_secret(secret);
  proto::ReleaseConsumerResponse response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + options_.deadline));
  auto stub = proto::CoordinatorService::NewStub(options_.channel);
  const absl::Status s = FromGrpcStatus(stub->ReleaseConsumer(&context, request, &response));
  if (!s.ok()) {
    status_ = absl::Status(s.code(), absl::StrCat("ReleaseConsumer to coordinator ",
                                                  options_.coordinator_address, ": ",
                                                  s.message()));
  }
  return status_;
}

}  // namespace sluice
