#include "core/data/step_iterator.h"

#include <utility>

#include "core/tensor/row_pieces.h"

namespace sluice {

bool KeepShardedStep(int64_t global_step, int64_t skip_steps, int64_t num_tasks,
                     int64_t task_index) {
  if (global_step < skip_steps) return false;
  return (global_step - skip_steps) % num_tasks == task_index;
}

Element DummyElement(const ElementSpec& spec) {
  return EmptyRows(spec, /*zero_rows=*/false);  // a size-0 batch where dimension 0 is unknown
}

StepIterator::StepIterator(std::unique_ptr<Iterator> pieces, int64_t pieces_per_step,
                           ElementSpec piece_spec)
    : pieces_(std::move(pieces)),
      pieces_per_step_(pieces_per_step),
      piece_spec_(std::move(piece_spec)) {}

absl::Status StepIterator::GetNextStep(std::vector<Element>* step, int64_t* num_real,
                                       bool* end_of_sequence) {
  if (!status_.ok()) return status_;
  if (done_) {
    *end_of_sequence = true;
    return absl::OkStatus();
  }
  step->clear();
  step->reserve(static_cast<size_t>(pieces_per_step_));
  bool end = false;
  while (static_cast<int64_t>(step->size()) < pieces_per_step_) {
    Element piece;
    absl::Status s = pieces_->GetNext(&piece, &end);
    if (!s.ok()) {
      status_ = s;
      return s;
    }
    if (end) break;
    step->push_back(std::move(piece));
  }
  *num_real = static_cast<int64_t>(step->size());
  if (step->empty()) {
    done_ = true;
    *end_of_sequence = true;
    return absl::OkStatus();
  }
  if (end) {
    // The last, partial step: TF completes it with empty batches and ends after it.
    done_ = true;
    while (static_cast<int64_t>(step->size()) < pieces_per_step_) {
      step->push_back(DummyElement(piece_spec_));
    }
  }
  *end_of_sequence = false;
  return absl::OkStatus();
}

}  // namespace sluice
