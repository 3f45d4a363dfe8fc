#include "core/data/element_draws.h"

#include "absl/random/random.h"

namespace sluice {
namespace {

thread_local ElementDrawKey current_key;
thread_local int64_t repeat_epoch = 0;
thread_local bool repeat_active = false;

// splitmix64's finalizer: mixes nested repeat epochs.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

ElementDrawKey CurrentElementDrawKey() { return current_key; }

ScopedElementDrawKey::ScopedElementDrawKey(ElementDrawKey key) : saved_(current_key) {
  current_key = key;
}
ScopedElementDrawKey::~ScopedElementDrawKey() { current_key = saved_; }

int64_t CurrentRepeatEpoch() { return repeat_epoch; }

ScopedRepeatEpoch::ScopedRepeatEpoch(int64_t epoch)
    : saved_epoch_(repeat_epoch), saved_active_(repeat_active) {
  repeat_epoch = repeat_active
                     ? static_cast<int64_t>(Mix(static_cast<uint64_t>(repeat_epoch) ^
                                                Mix(static_cast<uint64_t>(epoch))))
                     : epoch;
  repeat_active = true;
}
ScopedRepeatEpoch::~ScopedRepeatEpoch() {
  repeat_epoch = saved_epoch_;
  repeat_active = saved_active_;
}

std::mt19937_64 ElementGenerator(const std::optional<int64_t>& seed, DrawingOp op) {
  if (!seed.has_value()) {
    thread_local absl::BitGen bits;
    return std::mt19937_64(absl::Uniform<uint64_t>(bits));
  }
  const auto s = static_cast<uint64_t>(*seed);
  const auto e = static_cast<uint64_t>(current_key.epoch);
  const auto p = static_cast<uint64_t>(current_key.position);
  std::seed_seq seq{static_cast<uint32_t>(s), static_cast<uint32_t>(s >> 32),
                    static_cast<uint32_t>(op), static_cast<uint32_t>(e),
                    static_cast<uint32_t>(e >> 32), static_cast<uint32_t>(p),
                    static_cast<uint32_t>(p >> 32)};
  return std::mt19937_64(seq);
}

int64_t DrawUpTo(std::mt19937_64& gen, int64_t n) {
  return static_cast<int64_t>(gen() % (static_cast<uint64_t>(n) + 1));
}

double DrawUniform(std::mt19937_64& gen, double lo, double hi) {
  const double unit = static_cast<double>(gen() >> 11) * 0x1.0p-53;
  return lo + (hi - lo) * unit;
}

}  // namespace sluice
