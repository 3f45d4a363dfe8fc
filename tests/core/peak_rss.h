// The process's peak resident set size so far, for tests that show a large input was never held
// (the growth of the peak across a read, far below the input's size).
#ifndef SLUICE_TESTS_CORE_PEAK_RSS_H_
#define SLUICE_TESTS_CORE_PEAK_RSS_H_

#include <sys/resource.h>

#include <cstdint>

namespace sluice {

inline int64_t PeakRssBytes() {
  struct rusage u {};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;
}

}  // namespace sluice

#endif  // SLUICE_TESTS_CORE_PEAK_RSS_H_
