#include "client/end_of_data_agreement.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/step_iterator.h"

namespace sluice {

EndOfDataAgreement::EndOfDataAgreement(std::unique_ptr<StepSource> inner, Collective* collective,
                                       ElementSpec per_replica_spec, int64_t num_local_replicas)
    : inner_(std::move(inner)),
      collective_(collective),
      per_replica_spec_(std::move(per_replica_spec)),
      num_local_replicas_(num_local_replicas) {}

absl::Status EndOfDataAgreement::GetNextStep(std::vector<Element>* replicas, bool* end_of_data) {
  return Next(/*padded=*/false, replicas, end_of_data);
}

absl::Status EndOfDataAgreement::GetNextStepPadded(std::vector<Element>* replicas,
                                                   bool* end_of_data) {
  return Next(/*padded=*/true, replicas, end_of_data);
}

absl::Status EndOfDataAgreement::Next(bool padded, std::vector<Element>* replicas,
                                      bool* end_of_data) {
  if (!status_.ok()) return status_;
  if (finished_) {
    *end_of_data = true;
    return absl::OkStatus();
  }
  std::vector<Element> mine;
  absl::Status local;
  if (!inner_ended_) {
    bool ended = false;
    local = padded ? inner_->GetNextStepPadded(&mine, &ended) : inner_->GetNextStep(&mine, &ended);
    if (local.ok() && ended) inner_ended_ = true;
  }
  const bool has_data = local.ok() && !inner_ended_;
  int64_t votes[2] = {has_data ? 1 : 0, local.ok() ? 0 : 1};
  absl::Status agreed = collective_->AllReduceSum(votes);
  if (!agreed.ok()) {
    status_ = agreed;
    return status_;
  }
  if (!local.ok()) {
    status_ = local;
    return status_;
  }
  if (votes[1] > 0) {
    status_ = absl::UnavailableError(absl::StrCat(
        "end-of-data agreement: the input of ", votes[1], " other process(es) of ",
        collective_->size(), " failed (see their logs); rank ", collective_->rank(),
        " stops at the same step"));
    return status_;
  }
  if (votes[0] == 0) {
    finished_ = true;
    *end_of_data = true;
    return absl::OkStatus();
  }
  *end_of_data = false;
  if (has_data) {
    *replicas = std::move(mine);
    ++real_steps_;
  } else {
    replicas->assign(static_cast<size_t>(num_local_replicas_), DummyElement(per_replica_spec_));
    ++dummy_steps_;
  }
  return absl::OkStatus();
}

}  // namespace sluice
