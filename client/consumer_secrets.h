// ProcessConsumerSecrets: the consumer secrets this process holds (ClientHeartbeatResponse.
// consumer_secret), by (coordinator, job, consumer index), so that every iterator of one
// consumer in this process speaks as the holder of its index, not only the first
// (server/consumer_claims.h), and so that the process can release its place in the job
// (client/consumer_release.h). A few entries per job read; never shrinks (a process reads few
// jobs).
//
// Thread safety: thread-safe.
#ifndef SLUICE_CLIENT_CONSUMER_SECRETS_H_
#define SLUICE_CLIENT_CONSUMER_SECRETS_H_

#include <cstdint>
#include <string>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace sluice {

class ProcessConsumerSecrets {
 public:
  // The process's one instance (never destroyed).
  static ProcessConsumerSecrets& Get();
  // The secret held for the consumer; 0 when none (no heartbeat answered yet).
  uint64_t Find(const std::string& coordinator, int64_t job, int64_t index);
  void Set(const std::string& coordinator, int64_t job, int64_t index, uint64_t secret);

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<std::tuple<std::string, int64_t, int64_t>, uint64_t> secrets_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice

#endif  // SLUICE_CLIENT_CONSUMER_SECRETS_H_
