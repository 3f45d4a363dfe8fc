#include "core/util/malloc_retention.h"

#include <cstdlib>
#include <initializer_list>

#include "absl/strings/str_split.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace sluice {

namespace {

// Whether the GLIBC_TUNABLES value `tunables` sets one of `names`.
bool TunablesSet(absl::string_view tunables, std::initializer_list<absl::string_view> names) {
  for (absl::string_view entry : absl::StrSplit(tunables, ':')) {
    absl::string_view name = entry.substr(0, entry.find('='));
    for (absl::string_view n : names) {
      if (name == n) return true;
    }
  }
  return false;
}

}  // namespace

bool TunablesSetMallocThresholds(absl::string_view tunables) {
  return TunablesSet(tunables, {"glibc.malloc.trim_threshold", "glibc.malloc.mmap_threshold"});
}

bool TunablesSetMallocFastbins(absl::string_view tunables) {
  return TunablesSet(tunables, {"glibc.malloc.mxfast"});
}

bool RetainFreedMemory(const MallocRetentionOptions& options) {
#if defined(__GLIBC__)
  const char* retention = std::getenv("SLUICE_MALLOC_RETENTION");
  if (retention != nullptr && absl::string_view(retention) == "off") return false;
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && TunablesSetMallocThresholds(tunables)) return false;
  if (std::getenv("MALLOC_TRIM_THRESHOLD_") != nullptr ||
      std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr) {
    return false;
  }
  if (!options.fastbins && (tunables == nullptr || !TunablesSetMallocFastbins(tunables))) {
    mallopt(M_MXFAST, 0);  // before the first free that a fastbin would have taken
  }
  // mallopt takes an int; both values are far below INT_MAX in any sane configuration.
  return mallopt(M_MMAP_THRESHOLD, static_cast<int>(options.mmap_threshold)) == 1 &&
         mallopt(M_TRIM_THRESHOLD, static_cast<int>(options.trim_threshold)) == 1;
#else
  (void)options;
  return false;
#endif
}

}  // namespace sluice
