#include "core/util/jitter.h"

#include <algorithm>
#include <memory>
#include <random>

namespace sluice {

RandomSource SeededRandomSource(uint64_t seed) {
  auto engine = std::make_shared<std::mt19937_64>(seed);
  return [engine] { return (*engine)(); };
}

RandomSource EntropyRandomSource() {
  std::random_device device;
  return SeededRandomSource((uint64_t{device()} << 32) ^ device());
}

absl::Duration UniformDuration(absl::Duration lo, absl::Duration hi, const RandomSource& random) {
  const int64_t a = absl::ToInt64Nanoseconds(lo);
  const int64_t b = absl::ToInt64Nanoseconds(hi);
  if (b <= a) return lo;
  const uint64_t span = static_cast<uint64_t>(b - a) + 1;
  return absl::Nanoseconds(a + static_cast<int64_t>(random() % span));
}

absl::Duration Jittered(absl::Duration d, double fraction, const RandomSource& random) {
  fraction = std::clamp(fraction, 0.0, 1.0);
  if (fraction == 0.0 || d <= absl::ZeroDuration()) return d;
  return UniformDuration(d * (1.0 - fraction), d * (1.0 + fraction), random);
}

}  // namespace sluice
