#include "client/independent_read.h"

namespace sluice {

TaskRotation::Turn IndependentRead::TakeTurnLocked() {
  Turn turn;
  // Whichever task has a step; else wait, unless every task is done or one failed.
  for (size_t i = 0; i < rotation_.size(); ++i) {
    TaskStream* t = rotation_[(next_ + i) % rotation_.size()];
    if (!t->queue.empty()) {
      turn.task = t;
      next_ = (next_ + 1) % rotation_.size();
      return turn;
    }
  }
  for (size_t i = 0; i < rotation_.size(); ++i) {
    if (!rotation_[i]->error.ok()) {
      turn.error = rotation_[i]->error;
      return turn;
    }
    if (rotation_[i]->ended) {
      rotation_.erase(rotation_.begin() + static_cast<long>(i));
      turn.look_again = true;
      return turn;
    }
  }
  return turn;
}

}  // namespace sluice
