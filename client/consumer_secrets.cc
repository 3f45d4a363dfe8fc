#include "client/consumer_secrets.h"

namespace sluice {

ProcessConsumerSecrets& ProcessConsumerSecrets::Get() {
  static auto* secrets = new ProcessConsumerSecrets();
  return *secrets;
}

uint64_t ProcessConsumerSecrets::Find(const std::string& coordinator, int64_t job,
                                      int64_t index) {
  absl::MutexLock lock(&mu_);
  auto it = secrets_.find(std::make_tuple(coordinator, job, index));
  return it == secrets_.end() ? 0 : it->second;
}

void ProcessConsumerSecrets::Set(const std::string& coordinator, int64_t job, int64_t index,
                                 uint64_t secret) {
  absl::MutexLock lock(&mu_);
  secrets_[std::make_tuple(coordinator, job, index)] = secret;
}

}  // namespace sluice
