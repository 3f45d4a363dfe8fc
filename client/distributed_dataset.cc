#include "sluice/distributed_dataset.h"

#include <utility>

namespace sluice {
namespace {

// What TF's OutOfRangeError says at the end of a sequence.
absl::Status EndOfSequence() { return absl::OutOfRangeError("End of sequence"); }

}  // namespace

DistributedIterator::DistributedIterator(std::unique_ptr<StepSource> source,
                                         DistributedElementSpec spec)
    : source_(std::move(source)), spec_(std::move(spec)) {}

absl::StatusOr<PerReplica<Element>> DistributedIterator::GetNext() {
  if (finished_ || source_ == nullptr) return EndOfSequence();
  std::vector<Element> replicas;
  bool end = false;
  absl::Status s = source_->GetNextStep(&replicas, &end);
  if (!s.ok()) return s;
  if (end) {
    finished_ = true;
    return EndOfSequence();
  }
  return PerReplica<Element>(std::move(replicas));
}

absl::StatusOr<std::optional<PerReplica<Element>>> DistributedIterator::GetNextAsOptional() {
  if (finished_ || source_ == nullptr) return std::optional<PerReplica<Element>>();
  std::vector<Element> replicas;
  bool end = false;
  absl::Status s = source_->GetNextStepPadded(&replicas, &end);
  if (!s.ok()) {
    // The contract: never OUT_OF_RANGE here (a source's own end-of-data travels in `end`).
    if (absl::IsOutOfRange(s)) return absl::InternalError(s.message());
    return s;
  }
  if (end) {
    finished_ = true;
    return std::optional<PerReplica<Element>>();
  }
  return std::optional<PerReplica<Element>>(PerReplica<Element>(std::move(replicas)));
}

DistributedDataset::DistributedDataset(DistributedElementSpec spec, StepSourceFactory factory)
    : spec_(std::move(spec)),
      factory_(std::move(factory)),
      last_status_(std::make_shared<absl::Status>()) {}

absl::StatusOr<DistributedIterator> DistributedDataset::MakeIterator() const {
  if (!factory_) return absl::FailedPreconditionError("DistributedDataset has no step source");
  absl::StatusOr<std::unique_ptr<StepSource>> source = factory_();
  if (!source.ok()) return source.status();
  return DistributedIterator(*std::move(source), spec_);
}

DistributedDataset::RangeIterator DistributedDataset::begin() const {
  *last_status_ = absl::OkStatus();
  absl::StatusOr<DistributedIterator> it = MakeIterator();
  if (!it.ok()) {
    *last_status_ = it.status();
    return RangeIterator();
  }
  return RangeIterator(std::make_shared<DistributedIterator>(*std::move(it)), last_status_);
}

DistributedDataset::RangeIterator DistributedDataset::end() const { return RangeIterator(); }

absl::Status DistributedDataset::iteration_status() const { return *last_status_; }

DistributedDataset::RangeIterator::RangeIterator(std::shared_ptr<DistributedIterator> it,
                                                 std::shared_ptr<absl::Status> status)
    : it_(std::move(it)), status_(std::move(status)) {
  Advance();
}

DistributedDataset::RangeIterator& DistributedDataset::RangeIterator::operator++() {
  Advance();
  return *this;
}

void DistributedDataset::RangeIterator::Advance() {
  if (it_ == nullptr) return;
  absl::StatusOr<PerReplica<Element>> next = it_->GetNext();
  if (next.ok()) {
    current_ = *std::move(next);
    return;
  }
  if (!absl::IsOutOfRange(next.status())) *status_ = next.status();
  it_ = nullptr;
  current_ = PerReplica<Element>();
}

}  // namespace sluice
