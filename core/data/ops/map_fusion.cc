#include "core/data/ops/map_fusion.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

// Whether `later` may run in the map of `first`: the same component, and no more parallel than
// it (sequential, or the same num_parallel_calls), so that fusing never takes parallelism from
// the work of `later`. Its order mode does not matter: the fused map keeps `first`'s, and with
// either mode the output is one that the unfused maps may give (a map's deterministic=False
// allows any order, and a deterministic one keeps the order of its input).
bool RunsIn(const proto::MapOp& first, const proto::MapOp& later) {
  if (first.component_case() != later.component_case()) return false;
  if (first.component_case() == proto::MapOp::kKey && first.key() != later.key()) return false;
  if (first.component_case() == proto::MapOp::kIndex && first.index() != later.index()) {
    return false;
  }
  return later.num_parallel_calls() == first.num_parallel_calls() ||
         later.num_parallel_calls() == 0 || later.num_parallel_calls() == 1;
}

// `fn` followed by the fn of `next` when it fuses; null otherwise.
std::unique_ptr<ComponentFn> FuseOne(const ComponentFn& fn, const proto::MapOp& first,
                                     const proto::OpDef& next) {
  if (!next.has_map() || !RunsIn(first, next.map())) return nullptr;
  absl::StatusOr<std::unique_ptr<ComponentFn>> next_fn = MakeComponentFn(next.map());
  if (!next_fn.ok()) return nullptr;
  return fn.FuseWith(**next_fn);
}

}  // namespace

int FusableMaps(const proto::DatasetDef& def, int i, const ElementSpec& input) {
  if (!def.ops(i).has_map()) return 0;
  const proto::MapOp& first = def.ops(i).map();
  absl::StatusOr<std::unique_ptr<ComponentFn>> fn = MakeComponentFn(first);
  if (!fn.ok()) return 0;
  std::unique_ptr<ComponentFn> fused = std::move(*fn);
  int count = 0;
  for (int j = i + 1; j < def.ops_size(); ++j) {
    std::unique_ptr<ComponentFn> more = FuseOne(*fused, first, def.ops(j));
    if (more == nullptr) break;
    fused = std::move(more);
    ++count;
  }
  if (count == 0) return 0;
  // The fused fn must accept what op i accepts (it does when each part does; checked anyway).
  if (!MakeMapFunctionOf(std::move(fused), first, input).ok()) return 0;
  return count;
}

absl::StatusOr<std::shared_ptr<const MapFunction>> MakeFusedMapFunction(
    const proto::MapOp& first, const std::vector<proto::OpDef>& next, const ElementSpec& input) {
  ASSIGN_OR_RETURN(std::unique_ptr<ComponentFn> fused, MakeComponentFn(first));
  for (const proto::OpDef& op : next) {
    std::unique_ptr<ComponentFn> more = FuseOne(*fused, first, op);
    if (more == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(fused->Describe(), " cannot take over the map after it (map fusion)"));
    }
    fused = std::move(more);
  }
  return MakeMapFunctionOf(std::move(fused), first, input);
}

}  // namespace sluice
