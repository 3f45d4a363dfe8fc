// EndOfDataAgreement: a StepSource decorator that makes trainer processes reading
// independently (ServiceReadMode::kIndependent, or any per-process input) end at the same step,
// as TF's distributed iterator does with its has-data all-reduce across workers.
//
// Every step, each process all-reduces (int64 SUM over `collective`) whether its own source
// still has data. While the sum is positive every process returns a step: its own data, or, once
// its source has ended, one size-0 dummy per local replica (DummyElement of the per-replica
// spec: unknown dimensions 0). When the sum is 0 every process sees end_of_data at that same
// step, so no process waits in a collective that the others never reach. Example, 3 processes
// with 5, 3 and 0 steps of data: all three return 5 steps (process 1 dummies at steps 3 and 4,
// process 2 dummies at every step), then end_of_data together.
//
// A second value is all-reduced with has-data: whether the process's source failed. A failure
// anywhere fails every process at the same step (the failing one with its own error, the others
// with UNAVAILABLE saying how many processes failed), so none is left waiting for it.
//
// Costs one AllReduceSum of two int64 per step. Not thread-safe (as StepSource).
#ifndef SLUICE_CLIENT_END_OF_DATA_AGREEMENT_H_
#define SLUICE_CLIENT_END_OF_DATA_AGREEMENT_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "client/collective.h"
#include "sluice/element.h"
#include "sluice/distributed_dataset.h"

namespace sluice {

class EndOfDataAgreement : public StepSource {
 public:
  // `inner`: this process's steps. `collective`: spans every process reading; borrowed, must
  // outlive this object. `per_replica_spec`: the spec of one replica's value, for dummies;
  // `num_local_replicas` > 0 dummies per step.
  EndOfDataAgreement(std::unique_ptr<StepSource> inner, Collective* collective,
                     ElementSpec per_replica_spec, int64_t num_local_replicas);

  // Errors: the collective's (a peer gone, a timeout), this process's source's, or UNAVAILABLE
  // when another process's source failed. Errors are sticky.
  absl::Status GetNextStep(std::vector<Element>* replicas, bool* end_of_data) override;
  absl::Status GetNextStepPadded(std::vector<Element>* replicas, bool* end_of_data) override;

  // Steps this process returned with its own data / as dummies (for tests and metrics).
  int64_t real_steps() const { return real_steps_; }
  int64_t dummy_steps() const { return dummy_steps_; }

 private:
  absl::Status Next(bool padded, std::vector<Element>* replicas, bool* end_of_data);

  std::unique_ptr<StepSource> inner_;
  Collective* collective_;
  ElementSpec per_replica_spec_;
  int64_t num_local_replicas_;
  bool inner_ended_ = false;
  bool finished_ = false;
  absl::Status status_;
  int64_t real_steps_ = 0;
  int64_t dummy_steps_ = 0;
};

}  // namespace sluice

#endif  // SLUICE_CLIENT_END_OF_DATA_AGREEMENT_H_
