#include "sluice/distributed_dataset.h"

#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace sluice {
namespace {

// What TF's OutOfRangeError says at the end of a sequence.
absl::Status EndOfSequence() { return absl::OutOfRangeError("End of sequence"); }

constexpr absl::string_view kCheckpointMagic = "sluice-iterator/1";

}  // namespace

std::string IteratorCheckpoint::Serialize() const {
  return absl::StrCat(kCheckpointMagic, " ", job_key, " ", step, " ", epoch, " ", step_in_epoch);
}

absl::StatusOr<IteratorCheckpoint> IteratorCheckpoint::Parse(absl::string_view bytes) {
  const std::vector<absl::string_view> parts =
      absl::StrSplit(absl::StripTrailingAsciiWhitespace(bytes), ' ');
  if (parts.size() != 5 || parts[0] != kCheckpointMagic) {
    return absl::InvalidArgumentError(
        absl::StrCat("not an iterator checkpoint (expected '", kCheckpointMagic,
                     " <job_key> <step> <epoch> <step_in_epoch>'): '",
                     bytes.substr(0, 120), "'"));
  }
  IteratorCheckpoint c;
  c.job_key = std::string(parts[1]);
  if (c.job_key.empty() || !absl::SimpleAtoi(parts[2], &c.step) ||
      !absl::SimpleAtoi(parts[3], &c.epoch) || !absl::SimpleAtoi(parts[4], &c.step_in_epoch) ||
      c.step < 0 || c.epoch < -1 || c.step_in_epoch < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("iterator checkpoint '", bytes.substr(0, 120),
                     "': the job key must be non-empty, the step non-negative and the epoch "
                     "and step in epoch -1 or more"));
  }
  return c;
}

absl::StatusOr<IteratorCheckpoint> StepSource::CheckpointAfter(int64_t) const {
  return absl::UnimplementedError("this step source has no resumable order");
}

absl::StatusOr<IteratorCheckpoint> DistributedIterator::Checkpoint() const {
  if (source_ == nullptr) return absl::FailedPreconditionError("iterator has no step source");
  absl::StatusOr<IteratorCheckpoint> c = source_->CheckpointAfter(steps_returned_);
  if (absl::IsUnimplemented(c.status())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this iterator cannot be checkpointed: only service datasets in a deterministic order "
        "(sharding policy RANGES or DATA, coordinated reads) can (", c.status().message(),
        ")"));
  }
  return c;
}

DistributedIterator::DistributedIterator(std::unique_ptr<StepSource> source,
                                         DistributedElementSpec spec, PerReplicaWrapping wrapping)
    : source_(std::move(source)), spec_(std::move(spec)), wrapping_(wrapping) {}

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
  ++steps_returned_;
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
  ++steps_returned_;
  return std::optional<PerReplica<Element>>(PerReplica<Element>(std::move(replicas)));
}

DistributedDataset::DistributedDataset(DistributedElementSpec spec, StepSourceFactory factory,
                                       PerReplicaWrapping wrapping)
    : spec_(std::move(spec)),
      factory_(std::move(factory)),
      wrapping_(wrapping),
      last_status_(std::make_shared<absl::Status>()) {}

absl::StatusOr<DistributedIterator> DistributedDataset::MakeIterator() const {
  if (!factory_) return absl::FailedPreconditionError("DistributedDataset has no step source");
  absl::StatusOr<std::unique_ptr<StepSource>> source = factory_();
  if (!source.ok()) return source.status();
  return DistributedIterator(*std::move(source), spec_, wrapping_);
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
