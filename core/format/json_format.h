// The JSON written by `sluicectl --format=json`: one JSON document per line (JSON Lines), in
// Python json.dumps style (separators ", " and ": ", no spaces inside brackets, members in the
// order given here). Read it back with ParseJson (core/util/json_value.h).
//
// Tensor:   {"dtype": "float32", "shape": [2, 1], "values": [[1.0], [1.0]]}
//   "values" nests lists by the shape; a scalar's is a bare value; a dimension of size 0 gives
//   an empty list ([[], []] for shape [2, 0]).
//   - floats: the shortest digits that read back to the same value of the tensor's own type,
//     in Python repr layout, so they always look like floats: 1.0, 0.7, 1e-05, 1.5e+20
//     (float32 0.7 prints as 0.7, not 0.699999988079071). float16 and bfloat16 values are
//     widened to float32 first and printed as float32 (bfloat16 0.1 prints as 0.100097656).
//     NaN and infinities, which JSON lacks, are the strings "NaN", "Infinity", "-Infinity".
//   - integers as JSON integers (uint64 values above 2^63 too); bools as true/false.
//   - strings (tf.string bytes) as JSON strings through JsonQuote: valid UTF-8 is kept, and
//     every byte that is not valid UTF-8 is written as \u00XX.
//   A tensor in device memory has "values": null (copy it to the host first).
// Element: a tuple or a list is an array, a dict an object (keys in insertion order), a leaf
//   the tensor object.
// Run step: {"step": 0, "per_replica": [E0, E1]} with Ei replica i's element; where TF gives the
//   plain element (PerReplicaWrapping::kPlainElement, one device on one worker: see
//   sluice/per_replica.h) {"step": 0, "value": E}.
// Distributed element spec: the element's structure with each leaf
//   {"per_replica": [{"dtype": "float32", "shape": [null, 1]}, ...]} (null: unknown dimension);
//   with kPlainElement TF's spec is the dataset's own, each leaf {"dtype": ..., "shape": ...}.
// (The goldens in tests/testdata/distribute/ are TF's output in these formats.)
//
// Nothing here ends with a newline; the caller writes one per line.
//
// Thread safety: all functions are pure.
#ifndef SLUICE_CORE_JSON_FORMAT_H_
#define SLUICE_CORE_JSON_FORMAT_H_

#include <cstdint>
#include <string>

#include "sluice/per_replica.h"
#include "sluice/element.h"
#include "sluice/tensor.h"

namespace sluice {

std::string TensorToJson(const Tensor& t);
std::string ElementToJson(const Element& e);
// {"dtype": "float32", "shape": [null, 1]}
std::string TensorSpecToJson(const TensorSpec& spec);
// The same layout as ElementToJson with TensorSpecToJson at each leaf.
std::string ElementSpecToJson(const ElementSpec& spec);

// {"step": 0, "per_replica": [V0, V1]}, or {"step": 0, "value": V0} for kPlainElement and one
// replica.
std::string FormatRunStepJson(int64_t step, const PerReplica<Element>& values,
                              PerReplicaWrapping wrapping = PerReplicaWrapping::kPerReplica);

// The element structure with {"per_replica": [spec0, spec1, ...]} at each leaf, or with
// kPlainElement the leaf of one replica's spec as it is.
std::string FormatElementSpecJson(const DistributedElementSpec& spec,
                                  PerReplicaWrapping wrapping = PerReplicaWrapping::kPerReplica);

}  // namespace sluice

#endif  // SLUICE_CORE_JSON_FORMAT_H_
