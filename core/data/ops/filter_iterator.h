// filter(predicate): keeps the elements for which a built-in predicate holds.
//
//   filter(less(5))                      x < 5 for a scalar element x
//   filter(value_in([0, 1]), key=1)      the label of (image, label) is 0 or 1
//   filter(not_empty(), key='text')      the dict entry has at least one element; for a string
//                                        scalar: it is not ""
//
// Predicates: equal(v), not_equal(v), less(v), less_equal(v), greater(v), greater_equal(v),
// value_in([v, ...]) (alias label_in), not_empty(). Every predicate but not_empty reads a
// scalar; numbers compare by value across dtypes (integers exactly, otherwise as doubles;
// NaN compares false, not_equal true), strings compare bytewise and only with strings, bools
// with bools.
//
// The component is chosen as in map (key='name' for a dict, key=N for a tuple); without one the
// element must be a single tensor. Thread safety: plain functions; the iterator is not
// thread-safe.
#ifndef SLUICE_CORE_FILTER_ITERATOR_H_
#define SLUICE_CORE_FILTER_ITERATOR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "sluice/element.h"
#include "core/data/iterator.h"
#include "proto/dataset.pb.h"

namespace sluice {

// Checks `filter` against the input spec (the component exists; operands fit its dtype; a
// comparison reads a scalar). Returns the input spec unchanged, or INVALID_ARGUMENT.
absl::StatusOr<ElementSpec> InferFilterSpec(const proto::FilterOp& filter,
                                            const ElementSpec& input);

// "less", "value_in", ...; "unset" when empty.
std::string FilterPredicateName(proto::FilterOp::Predicate p);

// The filter iterator; requires InferFilterSpec to have accepted `filter`. A predicate that
// cannot be evaluated on an element (a non-scalar where a scalar is needed) is an element
// error naming the predicate and the element's dtype and shape.
std::unique_ptr<Iterator> NewFilterIterator(std::string label, std::unique_ptr<Iterator> input,
                                            proto::FilterOp filter);

}  // namespace sluice

#endif  // SLUICE_CORE_FILTER_ITERATOR_H_
