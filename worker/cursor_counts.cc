#include "worker/cursor_counts.h"

namespace sluice {

void CursorCounts::Insert(int64_t cursor) {
  ++size_;
  ++ops_;
  if (counts_.empty()) {
    base_ = cursor;
    counts_.push_back(1);
    return;
  }
  if (cursor < base_) {
    if (base_ - cursor > kMaxGap) {
      SpillToFar();
      base_ = cursor;
      counts_.push_back(1);
      return;
    }
    while (base_ > cursor) {
      counts_.push_front(0);
      --base_;
      ++ops_;
    }
    ++counts_.front();
    return;
  }
  const int64_t end = base_ + static_cast<int64_t>(counts_.size());
  if (cursor < end) {
    ++counts_[static_cast<size_t>(cursor - base_)];
  } else if (cursor - end >= kMaxGap) {
    ++far_[cursor];
  } else {
    GrowBackTo(cursor);
    ++counts_.back();
  }
}

void CursorCounts::Erase(int64_t cursor) {
  --size_;
  ++ops_;
  const int64_t end = base_ + static_cast<int64_t>(counts_.size());
  if (cursor >= base_ && cursor < end) {
    --counts_[static_cast<size_t>(cursor - base_)];
  } else {
    auto it = far_.find(cursor);
    if (--it->second == 0) far_.erase(it);
  }
  Normalize();
}

void CursorCounts::Move(int64_t from, int64_t to) {
  if (from == to) return;
  // Insert first: erasing the last cursor at the minimum first would rebase for nothing.
  Insert(to);
  Erase(from);
}

void CursorCounts::GrowBackTo(int64_t cursor) {
  for (int64_t end = base_ + static_cast<int64_t>(counts_.size()); end <= cursor; ++end) {
    uint32_t n = 0;
    if (!far_.empty() && far_.begin()->first == end) {
      n = far_.begin()->second;
      far_.erase(far_.begin());
    }
    counts_.push_back(n);
    ++ops_;
  }
}

void CursorCounts::Normalize() {
  while (!counts_.empty() && counts_.front() == 0) {
    counts_.pop_front();
    ++base_;
    ++ops_;
  }
  while (!counts_.empty() && counts_.back() == 0) {
    counts_.pop_back();
    ++ops_;
  }
  if (counts_.empty() && !far_.empty()) {
    base_ = far_.begin()->first;
    counts_.push_back(far_.begin()->second);
    far_.erase(far_.begin());
    ++ops_;
  }
}

void CursorCounts::SpillToFar() {
  for (size_t i = 0; i < counts_.size(); ++i) {
    if (counts_[i] != 0) far_[base_ + static_cast<int64_t>(i)] += counts_[i];
    ++ops_;
  }
  counts_.clear();
}

}  // namespace sluice
