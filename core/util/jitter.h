// Jitter for periodic and retried requests: a random source that tests can replace, and a
// duration spread uniformly around its nominal value, so that many processes started
// together (10,000 consumers heartbeating the coordinator every 200 ms) drift apart instead
// of arriving in waves (docs/SERVICE.md, "Scale of the control plane").
//
// The mapping from random numbers to durations is this file's own arithmetic (not a standard
// library distribution, whose output differs across implementations), so a fixed source gives
// the same durations everywhere.
//
// Thread safety: a RandomSource is called by one thread at a time unless it says otherwise;
// the functions are pure.
#ifndef SLUICE_CORE_UTIL_JITTER_H_
#define SLUICE_CORE_UTIL_JITTER_H_

#include <cstdint>
#include <functional>

#include "absl/time/time.h"

namespace sluice {

// Uniform 64-bit random numbers.
using RandomSource = std::function<uint64_t()>;

// A pseudo-random source seeded with `seed` (deterministic), or from the system's entropy.
RandomSource SeededRandomSource(uint64_t seed);
RandomSource EntropyRandomSource();

// Uniform in [lo, hi] (nanosecond steps) from one draw of `random`. Requires lo <= hi.
absl::Duration UniformDuration(absl::Duration lo, absl::Duration hi, const RandomSource& random);

// `d` spread uniformly over [d * (1 - fraction), d * (1 + fraction)]; fraction is clamped to
// [0, 1]. fraction 0: `d` itself, without drawing.
absl::Duration Jittered(absl::Duration d, double fraction, const RandomSource& random);

}  // namespace sluice

#endif  // SLUICE_CORE_UTIL_JITTER_H_
