#include "server/consumer_claims.h"

#include <random>


namespace sluice {
namespace {

uint64_t EntropySecret() {
  std::random_device device;
  return (uint64_t{device()} << 32) ^ device();
}

}  // namespace

ConsumerClaims::ConsumerClaims(std::function<uint64_t()> draw_secret)
    : draw_secret_(draw_secret != nullptr ? std::move(draw_secret) : EntropySecret) {}

ConsumerClaims::Verdict ConsumerClaims::Check(int64_t job, int64_t index, uint64_t secret,
                                              absl::Time now, absl::Duration expiry) {
  auto [it, inserted] = claims_.try_emplace({job, index});
  Claim& claim = it->second;
  if (!inserted) {
    const bool holder = secret != 0 ? secret == claim.secret : !claim.confirmed;
    if (holder) {
      claim.confirmed = claim.confirmed || secret != 0;
      claim.last_seen = now;
      return {true, claim.secret};
    }
    if (now - claim.last_seen < expiry) return {false, 0};
  }
  // Unclaimed or lapsed: the caller takes it, keeping the secret it carries (the claim of a
  // coordinator before a restart) or drawing one.
  claim.secret = secret;
  claim.confirmed = secret != 0;
  while (claim.secret == 0) claim.secret = draw_secret_();
  claim.last_seen = now;
  return {true, claim.secret};
}

void ConsumerClaims::ForgetJob(int64_t job) {
  absl::erase_if(claims_, [job](const auto& entry) { return entry.first.first == job; });
}

}  // namespace sluice
