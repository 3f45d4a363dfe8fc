// ConsumerRelease: gives a consumer's place in its job back to the coordinator
// (CoordinatorService.ReleaseConsumer, docs/SERVICE.md "Consumers that release their job") when
// this process is done with it, so that the job, and the steps its workers buffered for it,
// are freed at once instead of consumer_timeout later.
//
// DistributeDatasetFromService makes one per job it joins and shares it (std::shared_ptr)
// between the dataset's iterator factory and every iterator's step source: the place is
// released when the last of them goes away (the dataset and its iterators destroyed, Python's
// objects collected, `sluicectl bench` / `run` returning), never while the process can still
// make an iterator of the job (a second iterator of one dataset reads on, docs/SERVICE.md "One
// process per consumer_index"). A broken call, a reconnect or a failed iterator is not a
// release. The release is best effort and bounded: one call with a short deadline; if it
// fails (the coordinator is down or refuses it) one line on stderr says so and the job ends by the coordinator's consumer_timeout instead.
//
//   auto release = std::make_shared<ConsumerRelease>(ConsumerRelease::Options{...});
//   source_options.release = release;   // each iterator's source holds it too
//
// Thread safety: Release() may be called from any thread, once or more (only the first call
// sends); the destructor calls it.
#ifndef SLUICE_CLIENT_CONSUMER_RELEASE_H_
#define SLUICE_CLIENT_CONSUMER_RELEASE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"

namespace sluice {

class ConsumerRelease {
 public:
  struct Options {
    std::string coordinator_address;  // as the consumer's heartbeats name it
    int64_t job_id = 0;
    int64_t consumer_index = 0;
    // The coordinator's channel (made with the consumer's security); must not be null.
    std::shared_ptr<grpc::Channel> channel;
    // The call's deadline: a dead coordinator delays the trainer's exit this long at most.
    absl::Duration deadline = absl::Seconds(2);
  };
  explicit ConsumerRelease(Options options);
  ConsumerRelease(const ConsumerRelease&) = delete;
  ConsumerRelease& operator=(const ConsumerRelease&) = delete;
  ~ConsumerRelease();  // Release(), its error logged

  // Sends ReleaseConsumer with the secret this process holds for the consumer
  // (client/consumer_secrets.h), the first time only; later calls return the first's status.
  // OK without a call when the process holds no secret (no heartbeat of it was answered: it
  // never read; such a job ends by the coordinator's idle_job_ttl). Else the call's error
  // naming the coordinator.
  absl::Status Release();

 private:
  const Options options_;
  absl::Mutex mu_;
  bool sent_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice

#endif  // SLUICE_CLIENT_CONSUMER_RELEASE_H_
