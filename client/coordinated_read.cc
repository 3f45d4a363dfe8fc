#include "client/coordinated_read.h"

namespace sluice {

TaskRotation::Turn CoordinatedRead::TakeTurnLocked() {
  Turn turn;
  TaskStream* t = rotation_[next_ % rotation_.size()];
  if (!t->queue.empty()) {
    turn.task = t;
    next_ = (next_ + 1) % rotation_.size();
  } else if (!t->error.ok()) {
    turn.error = t->error;
  } else if (t->ended) {
    const size_t at = next_ % rotation_.size();
    rotation_.erase(rotation_.begin() + static_cast<long>(at));
    next_ = rotation_.empty() ? 0 : at % rotation_.size();
    turn.look_again = true;
  } else {
    turn.waiting_for = t;
  }
  return turn;
}

}  // namespace sluice
