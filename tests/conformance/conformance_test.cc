// The differential conformance test (issue 12, CTest label `conformance`): seeded random
// pipelines (tests/conformance/pipeline_generator.h) read through a real coordinator and
// workers (an in-process cluster on port 0, one for all cases) and in-process, which must give
// the same per-replica values, shapes, dtypes, steps and element_spec. A pipeline both reject
// must be rejected alike (code and message, service_vs_local.h), and at most
// kMaxRejectedPercent of the cases may end so: a generator of mostly invalid pipelines, or a
// parser regression that fails valid expressions on both sides, fails the test.
//
// SLUICE_CONFORMANCE_CASES (default 150) and SLUICE_CONFORMANCE_SEED (the first seed, default
// 1) choose the cases: seeds SEED, SEED+1, ... A failure prints the seed, the layout and the
// pipeline, and both outputs; rerun one case with SLUICE_CONFORMANCE_SEED=<seed>
// SLUICE_CONFORMANCE_CASES=1.
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/conformance/pipeline_generator.h"
#include "tests/conformance/service_vs_local.h"
#include "tests/worker/in_process_cluster.h"

namespace sluice {
namespace {

// The generator draws valid pipelines; a few are rejected on purpose by both sides (an
// unbatch().batch() with drop_remainder that leaves nothing, ...). 2 of the default 150 were.
constexpr int64_t kMaxRejectedPercent = 10;

int64_t EnvInt(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long long parsed = std::strtoll(v, &end, 10);
  return (end != nullptr && *end == '\0' && parsed >= 0) ? parsed : fallback;
}

TEST(ConformanceTest, ServiceEqualsInProcessOnRandomPipelines) {
  const int64_t cases = EnvInt("SLUICE_CONFORMANCE_CASES", 150);
  const int64_t first_seed = EnvInt("SLUICE_CONFORMANCE_SEED", 1);
  const GeneratorOptions generator = WriteConformanceFiles(::testing::TempDir());
  Cluster cluster(3);
  int failures = 0;
  int64_t rejected = 0;  // pipelines in-process mode rejects (the service must too, alike)
  int64_t run = 0;
  for (int64_t i = 0; i < cases && failures < 5; ++i) {
    ++run;
    const uint64_t seed = static_cast<uint64_t>(first_seed + i);
    const ConformanceCase c = GenerateCase(seed, generator);
    bool both_rejected = false;
    const std::string why = CompareServiceWithLocal(
        cluster.address(), c, absl::StrCat("conformance-", seed), &both_rejected);
    if (both_rejected && ++rejected <= 5) {
      std::cout << "conformance: rejected by both: " << c.Describe() << "\n";
    }
    if (!why.empty()) {
      ++failures;
      ADD_FAILURE() << c.Describe() << "\n" << why;
    }
  }
  std::cout << "conformance: seeds " << first_seed << ".." << first_seed + cases - 1 << ", "
            << failures << " failure(s)" << (failures >= 5 ? " (stopped at 5)" : "") << ", "
            << rejected << " of " << run << " pipeline(s) rejected by both ("
            << (run > 0 ? 100 * rejected / run : 0) << "%, at most " << kMaxRejectedPercent
            << "% allowed)\n";
  EXPECT_LE(rejected * 100, run * kMaxRejectedPercent)
      << rejected << " of " << run << " cases fail on both sides: the generator draws invalid "
      << "pipelines, or valid ones fail (the first few are printed above)";
}

}  // namespace
}  // namespace sluice
