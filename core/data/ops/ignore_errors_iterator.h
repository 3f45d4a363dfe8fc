// ignore_errors(log_warning=False), as tf.data.Dataset.ignore_errors: drops the elements whose
// upstream failed with DATA_LOSS or INVALID_ARGUMENT (a corrupt record, a bad CSV field, a map
// fn that failed) and counts them.
//
// An element error (core/data/op_iterator.h) is skipped and iteration goes on with the next element.
// Any other DATA_LOSS / INVALID_ARGUMENT means the input cannot go on (a corrupt length in a
// record file, say): it is counted and the sequence ends there. Other codes pass through.
//
// Note: prefetch() makes every error final, so put ignore_errors() below a prefetch, not
// above it, to skip elements rather than end at the first error.
#ifndef SLUICE_CORE_IGNORE_ERRORS_ITERATOR_H_
#define SLUICE_CORE_IGNORE_ERRORS_ITERATOR_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "core/data/iterator.h"

namespace sluice {

// `ignored` (may be null) is incremented once per dropped element. With `log_warning` each dropped error is printed on stderr.
std::unique_ptr<Iterator> NewIgnoreErrorsIterator(std::string label,
                                                  std::unique_ptr<Iterator> input,
                                                  bool log_warning,
                                                  std::shared_ptr<std::atomic<int64_t>> ignored);

}  // namespace sluice

#endif  // SLUICE_CORE_IGNORE_ERRORS_ITERATOR_H_
