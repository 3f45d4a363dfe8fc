// parse_example as a map() function (core/data/map_fns.h): the ComponentFn that wraps
// core/data/ops/example_parser.h's ExampleParser.
//
//   map(parse_example({'image': FixedLenFeature([], tf.string),
//                      'label': FixedLenFeature([], tf.int64, default_value=0)}))
//
// On a string scalar it is tf.io.parse_single_example, on a 1-D string tensor (map after batch)
// tf.io.parse_example; the result is a dict (keys in TF's order, see example_parser.h).
//
// Thread safety: the ComponentFn is immutable and may be applied from many threads.
#ifndef SLUICE_CORE_PARSE_EXAMPLE_H_
#define SLUICE_CORE_PARSE_EXAMPLE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "core/data/map_fns.h"
#include "proto/dataset.pb.h"

namespace sluice {

// INVALID_ARGUMENT naming the feature for a bad spec (ExampleParser::Create).
absl::StatusOr<std::unique_ptr<ComponentFn>> MakeParseExampleComponentFn(
    const proto::ParseExampleFn& fn);

}  // namespace sluice

#endif  // SLUICE_CORE_PARSE_EXAMPLE_H_
