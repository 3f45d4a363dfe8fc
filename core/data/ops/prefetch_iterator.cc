#include "core/data/ops/prefetch_iterator.h"

#include <algorithm>
#include <utility>

namespace sluice {

PrefetchIterator::PrefetchIterator(std::unique_ptr<Iterator> input, int64_t buffer_size,
                                   std::string label)
    : input_(std::move(input)),
      buffer_size_(std::max<int64_t>(buffer_size, 1)),
      held_(std::move(label)) {}

PrefetchIterator::~PrefetchIterator() {
  {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    not_full_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

absl::Status PrefetchIterator::GetNext(Element* out, bool* end_of_sequence) {
  absl::MutexLock lock(&mu_);
  if (!started_) {
    started_ = true;
    thread_ = std::thread([this] { Produce(); });
  }
  while (queue_.empty() && !finished_) not_empty_.Wait(&mu_);
  if (!queue_.empty()) {
    *out = std::move(queue_.front());
    queue_.pop_front();
    held_.Shrink(footprints_.front());
    footprints_.pop_front();
    *end_of_sequence = false;
    not_full_.Signal();
    return absl::OkStatus();
  }
  *end_of_sequence = final_status_.ok();
  return final_status_;
}

int64_t PrefetchIterator::max_queued() const {
  absl::MutexLock lock(&mu_);
  return max_queued_;
}

void PrefetchIterator::Produce() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      while (!cancelled_ && static_cast<int64_t>(queue_.size()) >= buffer_size_) {
        not_full_.Wait(&mu_);
      }
      if (cancelled_) {
        finished_ = true;
        return;
      }
    }
    Element e;
    bool end = false;
    absl::Status s = input_->GetNext(&e, &end);
    const int64_t footprint = s.ok() && !end ? ElementFootprint(e) : 0;
    absl::MutexLock lock(&mu_);
    if (s.ok() && !end) s = held_.Grow(footprint);
    if (!s.ok() || end) {
      final_status_ = s;
      finished_ = true;
      not_empty_.Signal();
      return;
    }
    queue_.push_back(std::move(e));
    footprints_.push_back(footprint);
    max_queued_ = std::max<int64_t>(max_queued_, static_cast<int64_t>(queue_.size()));
    not_empty_.Signal();
  }
}

}  // namespace sluice
