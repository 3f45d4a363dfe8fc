// Command-line flags of the benchmarks that do not use Abseil's flags (stream_bench,
// step_frame_bench, budget_bench): `--name=value`, looked up by name.
#ifndef SLUICE_BENCH_BENCH_FLAGS_H_
#define SLUICE_BENCH_BENCH_FLAGS_H_

#include <cstring>
#include <string>

namespace sluice {

// The value of the first `--name=value` among argv[1..argc), or `def` when there is none.
inline std::string Flag(int argc, char** argv, const std::string& name, const std::string& def) {
  const std::string prefix = "--" + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) return argv[i] + prefix.size();
  }
  return def;
}

}  // namespace sluice

#endif  // SLUICE_BENCH_BENCH_FLAGS_H_
