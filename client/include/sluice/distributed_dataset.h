// DistributedDataset and DistributedIterator: tf.distribute.DistributedDataset in C++.
//
// A DistributedDataset supports exactly two uses, as in TF: iteration (each step yields a
// PerReplica<Element> with one element per local replica) and element_spec(). It is made by a
// strategy (strategy.h) from a local dataset, or by the service client from a coordinator.
//
//   for (const PerReplica<Element>& x : dist_dataset) { ... }       // range-for
//   ASSIGN_OR_RETURN(DistributedIterator it, dist_dataset.MakeIterator());
//   absl::StatusOr<PerReplica<Element>> x = it.GetNext();          // OUT_OF_RANGE at the end
//
// Thread safety: a DistributedDataset may be shared; each DistributedIterator is used by one
// thread at a time.
#ifndef SLUICE_CLIENT_DISTRIBUTED_DATASET_H_
#define SLUICE_CLIENT_DISTRIBUTED_DATASET_H_

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/element.h"
#include "sluice/per_replica.h"

namespace sluice {

// Where a DistributedIterator's steps come from: a local pipeline, or the service.
// Implementations live in client/ (internal); not thread-safe.
class StepSource {
 public:
  virtual ~StepSource() = default;
  // Sets *end_of_data, or fills *replicas with one element per local replica (size-0 dummies
  // for replicas without data at a partial last step). Errors: the pipeline's or the
  // transport's; OUT_OF_RANGE is never returned (end_of_data says it).
  virtual absl::Status GetNextStep(std::vector<Element>* replicas, bool* end_of_data) = 0;
  // What GetNextAsOptional() asks for. TF always pads a partial last step with dummies there,
  // even where its get_next() ends the iteration at a partial step instead (a finite local
  // dataset with fully static shapes, where TF turns partial-batch handling off). Sources
  // without that distinction need not override it.
  virtual absl::Status GetNextStepPadded(std::vector<Element>* replicas, bool* end_of_data) {
    return GetNextStep(replicas, end_of_data);
  }
};

// Makes a fresh StepSource: one per iterator (each iter() starts a new pass, as in TF).
using StepSourceFactory = std::function<absl::StatusOr<std::unique_ptr<StepSource>>()>;

class DistributedIterator {
 public:
  explicit DistributedIterator(std::unique_ptr<StepSource> source, DistributedElementSpec spec);
  DistributedIterator(DistributedIterator&&) = default;
  DistributedIterator& operator=(DistributedIterator&&) = default;

  // The next step's per-replica values; OUT_OF_RANGE ("End of sequence") at the end of data,
  // and again on every later call. Other errors come from the input pipeline or the service.
  absl::StatusOr<PerReplica<Element>> GetNext();
  // A value while any replica has data, std::nullopt at the end. Errors as GetNext, but never
  // OUT_OF_RANGE.
  absl::StatusOr<std::optional<PerReplica<Element>>> GetNextAsOptional();

  const DistributedElementSpec& element_spec() const { return spec_; }

 private:
  std::unique_ptr<StepSource> source_;
  DistributedElementSpec spec_;
  bool finished_ = false;
};

class DistributedDataset {
 public:
  DistributedDataset(DistributedElementSpec spec, StepSourceFactory factory);

  // iter(dist_dataset): a new iterator starting a new pass over the data.
  absl::StatusOr<DistributedIterator> MakeIterator() const;
  const DistributedElementSpec& element_spec() const { return spec_; }

  // Range-for support. Iteration stops at the end of data or at the first error; the error is
  // then available from iteration_status() (OK after a clean end). iteration_status() belongs
  // to the latest range-for: threads sharing a dataset should each use MakeIterator() instead.
  class RangeIterator;
  RangeIterator begin() const;
  RangeIterator end() const;
  absl::Status iteration_status() const;

 private:
  DistributedElementSpec spec_;
  StepSourceFactory factory_;
  std::shared_ptr<absl::Status> last_status_;  // written by the range-for iterator
};

class DistributedDataset::RangeIterator {
 public:
  const PerReplica<Element>& operator*() const { return current_; }
  const PerReplica<Element>* operator->() const { return &current_; }
  RangeIterator& operator++();
  bool operator==(const RangeIterator& other) const { return done() == other.done(); }
  bool operator!=(const RangeIterator& other) const { return !(*this == other); }

 private:
  friend class DistributedDataset;
  RangeIterator() = default;  // end()
  RangeIterator(std::shared_ptr<DistributedIterator> it, std::shared_ptr<absl::Status> status);
  bool done() const { return it_ == nullptr; }
  void Advance();

  std::shared_ptr<DistributedIterator> it_;
  std::shared_ptr<absl::Status> status_;
  PerReplica<Element> current_;
};

}  // namespace sluice

#endif  // SLUICE_CLIENT_DISTRIBUTED_DATASET_H_
