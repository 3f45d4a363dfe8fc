// ConsumerClaims: which process speaks for each consumer of a job. The first ClientHeartbeat
// of (job, consumer_index) is handed a random 64-bit secret (ClientHeartbeatResponse.
// consumer_secret); once a heartbeat has carried it back (the claim is confirmed), only
// heartbeats carrying it are that consumer's reports (completed_task_ids), so that another
// caller cannot end a consumer's tasks, and with them its job, by heartbeating as its index.
// docs/SERVICE.md, "Identity and roles".
//
//   (job 4, index 1) first heartbeat, no secret   -> holder, secret S handed out
//   (job 4, index 1) heartbeat with S             -> holder; the claim is confirmed
//   no secret, claim not yet confirmed            -> holder, S handed out again (a client that
//                                                    predates secrets never confirms: it works
//                                                    as before, unprotected)
//   no secret or a wrong one, claim confirmed     -> not the holder: answered (it may read),
//                                                    but its reports are not heeded
//   no heartbeat of the holder for `expiry`       -> the claim lapses; the next caller takes it
//                                                    (a restarted consumer, after its old
//                                                    process went quiet)
//   a caller with a secret and no claim           -> its secret is adopted, confirmed (the
//                                                    coordinator restarted: claims are not
//                                                    journaled)
//
// Thread safety: none; the Coordinator calls it under its mutex.
#ifndef SLUICE_SERVER_CONSUMER_CLAIMS_H_
#define SLUICE_SERVER_CONSUMER_CLAIMS_H_

#include <cstdint>
#include <functional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"

namespace sluice {

class ConsumerClaims {
 public:
  // `draw_secret` returns a fresh secret (never 0 is used; 0 draws again); the default reads
  // the system's entropy source for each secret, so that one secret says nothing of another.
  explicit ConsumerClaims(std::function<uint64_t()> draw_secret = nullptr);

  struct Verdict {
    bool holder = false;  // the caller speaks for the consumer: heed its reports
    uint64_t secret = 0;  // what to hand back (0 when not the holder)
  };
  // A heartbeat of consumer `index` of job `job` carrying `secret` (0: none) at `now`; claims
  // silent for `expiry` lapse.
  Verdict Check(int64_t job, int64_t index, uint64_t secret, absl::Time now,
                absl::Duration expiry);

  // Drops the job's claims (the job was removed).
  void ForgetJob(int64_t job);

  size_t size() const { return claims_.size(); }

 private:
  struct Claim {
    uint64_t secret = 0;
    absl::Time last_seen;
    bool confirmed = false;  // a heartbeat carried the secret back
  };
  std::function<uint64_t()> draw_secret_;
  absl::flat_hash_map<std::pair<int64_t, int64_t>, Claim> claims_;
};

}  // namespace sluice

#endif  // SLUICE_SERVER_CONSUMER_CLAIMS_H_
