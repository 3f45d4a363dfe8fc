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

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sluice/element.h"
#include "sluice/per_replica.h"

namespace sluice {

// Where an iterator stands in its job's sequence of global steps, to be saved with a model
// checkpoint and passed back as ServiceOptions::resume_from (sluice/service.h) after a restart:
// the resumed iterator returns exactly the steps this one had not returned yet, whatever the
// number of input workers then. A few bytes; only service datasets in a deterministic order
// (SHARDING_RANGES, or SHARDING_DATA) have one.
struct IteratorCheckpoint {
  // Which sequence: the dataset's id and the order options that fix its steps.
  std::string job_key;
  // The next global step to return, counted from the start of the sequence.
  int64_t step = 0;
  // step = epoch * steps_per_epoch + step_in_epoch when the job knows its epoch length; both
  // -1 otherwise.
  int64_t epoch = -1;
  int64_t step_in_epoch = -1;

  // "sluice-iterator/1 <job_key> <step> <epoch> <step_in_epoch>".
  std::string Serialize() const;
  // INVALID_ARGUMENT naming what is wrong for anything Serialize() did not write.
  static absl::StatusOr<IteratorCheckpoint> Parse(absl::string_view bytes);

  bool operator==(const IteratorCheckpoint& o) const {
    return job_key == o.job_key && step == o.step && epoch == o.epoch &&
           step_in_epoch == o.step_in_epoch;
  }
};

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
  // Resumable sources: the checkpoint of an iterator that has handed `steps_returned` of this
  // source's steps to its caller (a wrapper that reads ahead forwards the caller's count).
  // UNIMPLEMENTED for sources without a deterministic global order. Thread-safe.
  virtual absl::StatusOr<IteratorCheckpoint> CheckpointAfter(int64_t steps_returned) const;
};

// Makes a fresh StepSource: one per iterator (each iter() starts a new pass, as in TF).
using StepSourceFactory = std::function<absl::StatusOr<std::unique_ptr<StepSource>>()>;

class DistributedIterator {
 public:
  // `wrapping`: see per_replica.h; kPlainElement requires one replica per leaf of `spec`.
  DistributedIterator(std::unique_ptr<StepSource> source, DistributedElementSpec spec,
                      PerReplicaWrapping wrapping = PerReplicaWrapping::kPerReplica);
  DistributedIterator(DistributedIterator&&) = default;
  DistributedIterator& operator=(DistributedIterator&&) = default;

  // The next step's per-replica values; OUT_OF_RANGE ("End of sequence") at the end of data,
  // and again on every later call. Other errors come from the input pipeline or the service.
  absl::StatusOr<PerReplica<Element>> GetNext();
  // A value while any replica has data, std::nullopt at the end. Errors as GetNext, but never
  // OUT_OF_RANGE.
  absl::StatusOr<std::optional<PerReplica<Element>>> GetNextAsOptional();

  const DistributedElementSpec& element_spec() const { return spec_; }
  // Whether TF gives PerReplica values for this iterator or the plain element (per_replica.h).
  PerReplicaWrapping wrapping() const { return wrapping_; }

  // Where this iterator stands: the step after the last one GetNext / GetNextAsOptional
  // returned. FAILED_PRECONDITION for datasets without a resumable order (local pipelines,
  // independent reads, sharding policies other than RANGES and DATA).
  absl::StatusOr<IteratorCheckpoint> Checkpoint() const;

 private:
  std::unique_ptr<StepSource> source_;
  DistributedElementSpec spec_;
  PerReplicaWrapping wrapping_;
  bool finished_ = false;
  int64_t steps_returned_ = 0;
};

class DistributedDataset {
 public:
  // `wrapping`: what TF hands out for this strategy (per_replica.h: WrappingFor); the default
  // wraps. kPlainElement requires one replica per leaf of `spec`.
  DistributedDataset(DistributedElementSpec spec, StepSourceFactory factory,
                     PerReplicaWrapping wrapping = PerReplicaWrapping::kPerReplica);

  // iter(dist_dataset): a new iterator starting a new pass over the data.
  absl::StatusOr<DistributedIterator> MakeIterator() const;
  // The element's structure with a PerReplicaSpec per leaf, whatever wrapping() says (with
  // kPlainElement each holds the one replica's spec: TF's element_spec is then that TensorSpec).
  const DistributedElementSpec& element_spec() const { return spec_; }
  // Whether TF gives PerReplica values and PerReplicaSpecs here, or the plain element and
  // TensorSpecs (one device on one worker); the printers take it (per_replica_format.h).
  PerReplicaWrapping wrapping() const { return wrapping_; }

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
  PerReplicaWrapping wrapping_;
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
