// A seeded random sequence for test generators (tests/conformance, tests/adversarial):
// splitmix64, fixed and portable, so that a printed seed reproduces the same cases on every
// machine and standard library. Not thread-safe; not for anything but tests.
#ifndef SLUICE_TESTS_SEEDED_RNG_H_
#define SLUICE_TESTS_SEEDED_RNG_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sluice {

class SeededRng {
 public:
  explicit SeededRng(uint64_t seed)
      : state_(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [lo, hi].
  int64_t In(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(Next() % static_cast<uint64_t>(hi - lo + 1));
  }
  bool Chance(int percent) { return In(0, 99) < percent; }
  // One of `v` (not empty).
  template <typename T>
  const T& Pick(const std::vector<T>& v) {
    return v[static_cast<size_t>(In(0, static_cast<int64_t>(v.size()) - 1))];
  }

 private:
  uint64_t state_;
};

}  // namespace sluice

#endif  // SLUICE_TESTS_SEEDED_RNG_H_
