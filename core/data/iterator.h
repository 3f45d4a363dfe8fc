// Iterator: pulls the elements of a dataset one at a time.
#ifndef SLUICE_CORE_ITERATOR_H_
#define SLUICE_CORE_ITERATOR_H_

#include <memory>

#include "absl/status/status.h"
#include "sluice/element.h"

namespace sluice {

// Not thread-safe: one caller at a time (an iterator may run threads of its own inside).
class Iterator {
 public:
  virtual ~Iterator() = default;

  // Sets *end_of_sequence and, when false, *out to the next element. Errors are those of the
  // failing op (INVALID_ARGUMENT, NOT_FOUND for a missing file, ...), naming it; after an error
  // or the end of the sequence, further calls repeat it.
  virtual absl::Status GetNext(Element* out, bool* end_of_sequence) = 0;
};

}  // namespace sluice

#endif  // SLUICE_CORE_ITERATOR_H_
