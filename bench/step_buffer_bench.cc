// The coordinated StepBuffer's cost per step per consumer against the number of consumers
// (worker/step_buffer.h): one thread pushes a step, then each of N consumers reads it (checking
// readiness and registering its wake-up for the next step first, as a reactor stream does), so
// every step is released by the last read. With O(1) work per step on the cursors the time per
// step per consumer is flat in N; a scan of every cursor on each read makes it grow with N.
//
//   build/bench/step_buffer_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only
//
// The counter ns_per_step_consumer is the figure to compare across N (bench/RESULTS.md).
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/time/time.h"
#include "benchmark/benchmark.h"
#include "worker/step_buffer.h"

namespace sluice {
namespace {

void BM_CoordinatedPushAndRead(benchmark::State& state) {
  const int64_t consumers = state.range(0);
  StepBuffer buffer({.max_bytes = size_t{1} << 30, .num_consumers = consumers});
  std::vector<int64_t> gen(static_cast<size_t>(consumers));
  for (int64_t c = 0; c < consumers; ++c) gen[static_cast<size_t>(c)] = *buffer.Attach(c, 0);
  int64_t woken = 0;
  std::vector<std::shared_ptr<const TaskStep>> steps;
  steps.reserve(1);
  bool end = false;
  int64_t next = 0;
  for (auto _ : state) {
    auto step = std::make_shared<TaskStep>();
    step->task_step = next++;
    step->bytes = 1024;
    if (!buffer.Push(std::move(step)).ok()) {
      state.SkipWithError("push failed");
      break;
    }
    for (int64_t c = 0; c < consumers; ++c) {
      const int64_t g = gen[static_cast<size_t>(c)];
      if (!buffer.Next(c, g, 1, size_t{1} << 20, absl::InfinitePast(), &steps, &end).ok() ||
          steps.size() != 1) {
        state.SkipWithError("read failed");
        break;
      }
      buffer.NotifyWhenReady(c, g, [&woken] { ++woken; });
    }
  }
  benchmark::DoNotOptimize(woken);
  const double reads = static_cast<double>(state.iterations()) * static_cast<double>(consumers);
  state.SetItemsProcessed(static_cast<int64_t>(reads));
  state.counters["ns_per_step_consumer"] =
      benchmark::Counter(reads, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["buffered_steps"] = static_cast<double>(buffer.buffered_steps());
}
BENCHMARK(BM_CoordinatedPushAndRead)->Arg(1)->Arg(16)->Arg(256)->Arg(1024);

}  // namespace
}  // namespace sluice

BENCHMARK_MAIN();
