// num_parallel_calls of map() and interleave() resolved to a thread count.
#ifndef SLUICE_CORE_DATA_OPS_PARALLEL_CALLS_H_
#define SLUICE_CORE_DATA_OPS_PARALLEL_CALLS_H_

#include <cstdint>

#include "core/data/executor.h"
#include "core/data/ops/map_iterator.h"

namespace sluice {

// `n` itself, except -1 (AUTOTUNE): options.autotune_parallel_calls when positive, else the
// number of CPU cores (AutotuneParallelism()).
inline int64_t ResolveParallelCalls(int64_t n, const ExecutorOptions& options) {
  if (n != -1) return n;
  return options.autotune_parallel_calls > 0 ? int64_t{options.autotune_parallel_calls}
                                             : AutotuneParallelism();
}

}  // namespace sluice

#endif  // SLUICE_CORE_DATA_OPS_PARALLEL_CALLS_H_
