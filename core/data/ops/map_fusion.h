// Map fusion: consecutive map() ops that run as one map with one fn, so that an element is
// written once instead of once per map.
//
//   .map(random_resized_crop([224, 224], seed=1), key='jpg')
//   .map(random_flip_left_right(seed=2), key='jpg')
//   .map(normalize(mean=[...], std=[...]), key='jpg')
//
// runs as one map whose fn decodes the box, resizes it straight into the mirrored position
// when the flip draws one, and normalizes each value as it writes it: one float32 tensor per
// element instead of three, no pass of its own for the flip or the normalize.
//
// Which maps fuse: op i and the maps right after it that select the same component (the same
// key, the same index, or none), are sequential or as parallel as op i (the fused map runs with
// op i's num_parallel_calls and deterministic, so the work of the later maps runs in op i's
// parallel map: `.map(random_resized_crop(...), num_parallel_calls=-1).map(flip).map(normalize)`
// fuses), and whose fns the fn so far takes over (ComponentFn::FuseWith: today random_resized_crop takes over one
// random_flip_left_right and one normalize, in either order). What stays the same: every
// element's values bit for bit (the fused kernel runs the same float operations in the same
// order), its draws (the fused map draws under the same (epoch, position) key as each of the
// maps would), its errors (only random_resized_crop can fail on a value the others accept; the
// message names it as the unfused map does, under op i's label), outputs, order and specs.
// What differs: the per-op profile (core/data/op_profile.h) has one line for the run, op i's.
// ExecutorOptions::fuse_maps = false turns fusion off.
//
// Thread safety: plain functions.
#ifndef SLUICE_CORE_MAP_FUSION_H_
#define SLUICE_CORE_MAP_FUSION_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/data/map_fns.h"
#include "proto/dataset.pb.h"

namespace sluice {

// How many of the ops right after def.ops(i) (a map) fuse into it, 0 when none does or op i is
// not a map. `input` is op i's input spec. Requires a graph InferElementSpecs() accepted.
int FusableMaps(const proto::DatasetDef& def, int i, const ElementSpec& input);

// The fn of `first` followed by each of `next` (maps that FusableMaps accepted), fused, for
// elements of `input`; errors as MakeMapFunction's, INVALID_ARGUMENT naming the fn when one of
// `next` does not fuse.
absl::StatusOr<std::shared_ptr<const MapFunction>> MakeFusedMapFunction(
    const proto::MapOp& first, const std::vector<proto::OpDef>& next, const ElementSpec& input);

}  // namespace sluice

#endif  // SLUICE_CORE_MAP_FUSION_H_
