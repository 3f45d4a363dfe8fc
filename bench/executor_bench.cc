// The in-process executor on the pipelines of issue 14: range(N).batch(B) with the bulk path on
// and off, and TFRecord .map(parse_example).batch(256) with a sequential and a parallel map.
// bench/executor_bench.sh runs it next to TensorFlow's tf.data on the same pipelines.
//
//   executor_bench [--range_elements=33554432] [--batch_sizes=2048,131072,524288]
//                  [--records=DIR] [--parallel=2] [--reps=3] [--threads=0] [--rounds=0]
//                  [--maps=sequential,parallel,autotune,batched] [--images=DIR]
//                  [--passes=1] [--marks=FILE]
//
// --records: a folder of TFRecord files of Examples with 'image' (bytes) and 'label' (int64),
// as `sluicectl gen` writes; without it the TFRecord rows are skipped. --threads sizes the
// process's thread pool (0: the cores); --maps picks the TFRecord rows (--batch_sizes= with
// nothing after it skips the range rows, e.g. to profile one map). Each row is the best of --reps runs (the machine is
// shared; the best run is the least disturbed). "batched" is TF's best form,
// .batch(256).map(parse_example, AUTOTUNE). --images: the WebDataset shards bench/image_bench
// wrote (its --dir); adds image_bench's pipelines (decode_image -> random_crop, and
// random_resized_crop; then flip -> normalize -> batch(256)) with every map sequential, with
// --parallel calls and AUTOTUNE. Prints a Markdown table; "CPU µs/elem" is the
// process's user + system time per element and "cores" its CPU time over wall time, which show
// a parallel map's overhead and its use of the cores even on a loaded machine.
// --passes=K lists the --records files K times over in the source (K passes over the same
// data in one run, as a trainer's epochs would read them, without repeat() between source and
// map). --rounds also prints the "steady" part of each run (all but its first and last eighth
// of batches: see Result) and the first batch's latency. --marks=FILE appends each run's
// CLOCK_MONOTONIC start and end to FILE, to find the runs in `perf record -k mono` traces.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <sys/resource.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/data/executor.h"
#include "core/data/iterator.h"
#include "core/data/ops/batch_destinations.h"
#include "core/data/ops/map_iterator.h"
#include "core/data/ops/output_slot.h"
#include "core/util/thread_pool.h"
#include "core/util/malloc_retention.h"
#include "sluice/dataset.h"

namespace sluice {
namespace {

using Clock = std::chrono::steady_clock;

struct Result {
  int64_t elements = 0;  // rows of dimension 0 of the first leaf, summed over batches
  int64_t batches = 0;
  double seconds = 0;
  double cpu_seconds = 0;  // user + system time of the whole process during the run
  std::string autotuned;   // the parallelism AUTOTUNE chose per map at the end of the run
  BatchSlotCounts slots;   // batch()'s in-place rows and reused buffers during the run
  FusedBatchCounts fused;  // batches a fused map-and-batch handed out in place / concatenated
  // The same figures over the steady part of the run: from the end of batch n/8 to the end of
  // batch n - n/8 (n batches; the whole run when n < 8), which leaves out the start (opening
  // the first file, the pool's threads waking, AUTOTUNE climbing) and the end (the last
  // blocks, when fewer than all threads have work).
  int64_t steady_elements = 0;
  double steady_seconds = 0;
  double steady_cpu_seconds = 0;
  double first_batch_seconds = 0;  // from the start (incl. making the iterator) to batch 1
};

double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// The process's CPU time (all threads) at nanosecond resolution, for per-batch marks.
double ProcessCpuClock() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}

// CLOCK_MONOTONIC in seconds: the clock of `perf record -k mono`, to find a run in a trace.
double MonotonicSeconds() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}

// --marks=FILE: each run's CLOCK_MONOTONIC start and end and its expression's label appended
// to FILE, for reading a scheduler trace (perf record -k mono) run by run.
std::string marks_file;  // set in Main

// Drains `expression`; counts the rows of every batch.
Result Drain(const std::string& expression) {
  absl::StatusOr<Dataset> ds = Dataset::Parse(expression);
  if (!ds.ok()) {
    std::fprintf(stderr, "%s: %s\n", expression.c_str(), ds.status().ToString().c_str());
    std::exit(1);
  }
  Result r;
  const BatchSlotCounts slots_start = BatchSlotCountsSoFar();
  const FusedBatchCounts fused_start = FusedBatchCountsSoFar();
  const double mono_start = MonotonicSeconds();
  const Clock::time_point start = Clock::now();
  const double cpu_start = ProcessCpuSeconds();
  const double cpu_clock_start = ProcessCpuClock();
  // Wall and CPU time at the end of each batch (after it is counted), from the start.
  std::vector<std::pair<double, double>> marks;
  std::vector<int64_t> rows;
  marks.reserve(4096);
  rows.reserve(4096);
  absl::StatusOr<std::unique_ptr<Iterator>> it = MakeIterator(*ds);
  if (!it.ok()) {
    std::fprintf(stderr, "%s\n", it.status().ToString().c_str());
    std::exit(1);
  }
  while (true) {
    Element e;
    bool end = false;
    absl::Status s = (*it)->GetNext(&e, &end);
    if (!s.ok()) {
      std::fprintf(stderr, "%s: %s\n", expression.c_str(), s.ToString().c_str());
      std::exit(1);
    }
    if (end) break;
    const std::vector<Tensor> leaves = e.Flatten();
    const int64_t k =
        leaves.empty() || leaves[0].shape().rank() == 0 ? 1 : leaves[0].shape().dim(0);
    r.elements += k;
    ++r.batches;
    if (marks.size() < marks.capacity()) {
      rows.push_back(k);
      marks.emplace_back(std::chrono::duration<double>(Clock::now() - start).count(),
                         ProcessCpuClock() - cpu_clock_start);
    }
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  r.cpu_seconds = ProcessCpuSeconds() - cpu_start;
  if (!marks_file.empty()) {
    if (FILE* f = std::fopen(marks_file.c_str(), "a")) {
      std::fprintf(f, "%.9f %.9f %s\n", mono_start, MonotonicSeconds(), expression.c_str());
      std::fclose(f);
    }
  }
  if (!marks.empty()) {
    r.first_batch_seconds = marks[0].first;
    const size_t n = marks.size();
    const size_t skip = n >= 8 ? n / 8 : 0;
    const size_t from = skip, to = n - 1 - skip;  // marks: the ends of batches `from` and `to`
    if (to > from) {
      for (size_t i = from + 1; i <= to; ++i) r.steady_elements += rows[i];
      r.steady_seconds = marks[to].first - marks[from].first;
      r.steady_cpu_seconds = marks[to].second - marks[from].second;
    } else {
      r.steady_elements = r.elements;
      r.steady_seconds = r.seconds;
      r.steady_cpu_seconds = r.cpu_seconds;
    }
  }
  const BatchSlotCounts slots_end = BatchSlotCountsSoFar();
  r.slots.rows_in_place = slots_end.rows_in_place - slots_start.rows_in_place;
  r.slots.rows_copied = slots_end.rows_copied - slots_start.rows_copied;
  r.slots.buffers_reused = slots_end.buffers_reused - slots_start.buffers_reused;
  r.slots.buffers_allocated = slots_end.buffers_allocated - slots_start.buffers_allocated;
  const FusedBatchCounts fused_end = FusedBatchCountsSoFar();
  r.fused.in_place = fused_end.in_place - fused_start.in_place;
  r.fused.concatenated = fused_end.concatenated - fused_start.concatenated;
  for (const auto& [op, parallelism] : AutotunedMapParallelism()) {
    absl::StrAppend(&r.autotuned, r.autotuned.empty() ? "" : ", ", op, ": ", parallelism);
  }
  return r;
}

Result Best(const std::string& expression, int reps) {
  Result best;
  for (int i = 0; i < reps; ++i) {
    Result r = Drain(expression);
    if (i == 0 || r.seconds < best.seconds) best = r;
  }
  return best;
}

void Row(const std::string& name, const Result& r) {
  std::printf("| %-58s | %12.0f | %10.1f | %8.3f | %5.2f |\n", name.c_str(),
              r.elements / r.seconds, r.batches / r.seconds, 1e6 * r.cpu_seconds / r.elements,
              r.cpu_seconds / r.seconds);
  if (!r.autotuned.empty()) std::printf("  (AUTOTUNE chose %s)\n", r.autotuned.c_str());
  if (r.slots.rows_in_place + r.slots.rows_copied > 0) {
    std::printf("  (batch rows written in place %lld, copied %lld; batch buffers reused %lld, "
                "allocated %lld)\n",
                static_cast<long long>(r.slots.rows_in_place),
                static_cast<long long>(r.slots.rows_copied),
                static_cast<long long>(r.slots.buffers_reused),
                static_cast<long long>(r.slots.buffers_allocated));
  }
  if (r.fused.in_place + r.fused.concatenated > 0) {
    std::printf("  (map-and-batch fusion: batches written in place %lld, concatenated %lld)\n",
                static_cast<long long>(r.fused.in_place),
                static_cast<long long>(r.fused.concatenated));
  }
  std::fflush(stdout);
}

int64_t Flag(int argc, char** argv, const char* name, int64_t def) {
  const std::string prefix = absl::StrCat("--", name, "=");
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) {
      return std::strtoll(argv[i] + prefix.size(), nullptr, 10);
    }
  }
  return def;
}

std::string StringFlag(int argc, char** argv, const char* name, std::string def) {
  const std::string prefix = absl::StrCat("--", name, "=");
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) return argv[i] + prefix.size();
  }
  return def;
}

// The files in `dir` whose names end in `suffix`, sorted, each in quotes.
std::vector<std::string> QuotedFiles(const std::string& dir, const std::string& suffix) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().string();
    if (entry.is_regular_file() && name.size() >= suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      files.push_back(absl::StrCat("'", name, "'"));
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

// --rounds=N: the sequential map, AUTOTUNE with the map-and-batch fusion off and AUTOTUNE with
// it on, one run each per round, alternating, so that neighbouring runs see the same load on a
// shared machine; prints every round and the medians (CPU per element and the cores used are
// what the load disturbs least), for the whole run and for its steady part (Result): a trainer
// reads millions of records, so the steady rate is the one it sees, and the whole run's
// shows what starting and ending a pass costs on top of it (both are printed, neither hidden).
void AlternatingRounds(const std::string& seq, const std::string& autotune, int64_t rounds) {
  struct Mode {
    const char* name;
    const std::string* expression;
    bool fusion;
    std::vector<Result> results;
  };
  std::vector<Mode> modes = {{"sequential", &seq, true, {}},
                             {"AUTOTUNE, fusion off", &autotune, false, {}},
                             {"AUTOTUNE, fusion on", &autotune, true, {}}};
  std::printf("\n| round | mode | elements/s | CPU µs/elem | cores | steady elements/s | "
              "steady CPU µs/elem | steady cores | first batch ms | batches in place |\n"
              "|---|---|---|---|---|---|---|---|---|---|\n");
  for (int64_t r = 0; r < rounds; ++r) {
    for (Mode& m : modes) {
      SetMapBatchFusionEnabled(m.fusion);
      Result x = Drain(*m.expression);
      std::printf("| %lld | %s | %.0f | %.3f | %.2f | %.0f | %.3f | %.2f | %.2f | %lld of %lld |\n",
                  static_cast<long long>(r), m.name, x.elements / x.seconds,
                  1e6 * x.cpu_seconds / x.elements, x.cpu_seconds / x.seconds,
                  x.steady_elements / x.steady_seconds,
                  1e6 * x.steady_cpu_seconds / x.steady_elements,
                  x.steady_cpu_seconds / x.steady_seconds, 1e3 * x.first_batch_seconds,
                  static_cast<long long>(x.fused.in_place), static_cast<long long>(x.batches));
      m.results.push_back(std::move(x));
    }
    std::fflush(stdout);
  }
  SetMapBatchFusionEnabled(true);
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf("\n| mode (median of %lld rounds) | elements/s | CPU µs/elem | cores | "
              "steady elements/s | steady CPU µs/elem | steady cores |\n"
              "|---|---|---|---|---|---|---|\n", static_cast<long long>(rounds));
  std::vector<double> rates, steady_rates;
  for (const Mode& m : modes) {
    std::vector<double> rate, cpu, cores, srate, scpu, scores;
    for (const Result& x : m.results) {
      rate.push_back(x.elements / x.seconds);
      cpu.push_back(1e6 * x.cpu_seconds / x.elements);
      cores.push_back(x.cpu_seconds / x.seconds);
      srate.push_back(x.steady_elements / x.steady_seconds);
      scpu.push_back(1e6 * x.steady_cpu_seconds / x.steady_elements);
      scores.push_back(x.steady_cpu_seconds / x.steady_seconds);
    }
    rates.push_back(median(rate));
    steady_rates.push_back(median(srate));
    std::printf("| %s | %.0f | %.3f | %.2f | %.0f | %.3f | %.2f |\n", m.name, median(rate),
                median(cpu), median(cores), median(srate), median(scpu), median(scores));
  }
  std::printf("\nAUTOTUNE fusion on / sequential (medians): whole run %.2fx, steady %.2fx\n",
              rates[2] / rates[0], steady_rates[2] / steady_rates[0]);
}

// image_bench's pipelines on its shards (crop: decode_image -> random_crop; rrc:
// random_resized_crop on the JPEG bytes; then flip -> normalize -> batch(256)), every map
// sequential, with `parallel` calls, or AUTOTUNE.
template <typename Want>
void ImageRows(const std::string& dir, int reps, int64_t parallel, const Want& want) {
  const std::string source = absl::StrCat("webdataset_dataset([",
                                          absl::StrJoin(QuotedFiles(dir, ".tar"), ", "),
                                          "], keys=['cls', 'jpg'])");
  for (const std::string name : {"decode/crop", "rrc"}) {
    auto pipeline = [&](const std::string& calls) {
      const std::string crop =
          name == "rrc"
              ? absl::StrCat(".map(random_resized_crop([224, 224], seed=1), key='jpg'", calls, ")")
              : absl::StrCat(".map(decode_image(channels=3), key='jpg'", calls, ")",
                             ".map(random_crop([224, 224, 3], seed=1), key='jpg'", calls, ")");
      return absl::StrCat(source, crop, ".map(random_flip_left_right(seed=2), key='jpg'", calls,
                          ")",
                          ".map(normalize(mean=[123.7, 116.3, 103.5], std=[58.4, 57.1, 57.4]), "
                          "key='jpg'",
                          calls, ").batch(256)");
    };
    const std::string row = absl::StrCat("images ", name, "/flip/normalize, ");
    if (want("sequential")) Row(row + "sequential", Best(pipeline(""), reps));
    if (want("parallel")) {
      Row(absl::StrCat(row, "every map ", parallel, " calls"),
          Best(pipeline(absl::StrCat(", num_parallel_calls=", parallel)), reps));
    }
    if (want("autotune")) {
      Row(row + "every map AUTOTUNE", Best(pipeline(", num_parallel_calls=AUTOTUNE"), reps));
    }
  }
}

int Main(int argc, char** argv) {
  // The allocator as sluice-worker and sluicectl run it (core/util/malloc_retention.h): freed
  // batches stay resident (a freshly faulted page costs more than the copy into it,
  // PERF_NOTES.md).
  RetainFreedMemory();
  const int64_t range_elements = Flag(argc, argv, "range_elements", int64_t{1} << 25);
  const int reps = static_cast<int>(Flag(argc, argv, "reps", 3));
  const int64_t parallel = Flag(argc, argv, "parallel", 2);
  const int64_t threads = Flag(argc, argv, "threads", 0);
  const std::string records = StringFlag(argc, argv, "records", "");
  const std::string images = StringFlag(argc, argv, "images", "");
  const std::string sizes = StringFlag(argc, argv, "batch_sizes", "2048,131072,524288");
  const std::string maps = StringFlag(argc, argv, "maps", "sequential,parallel,autotune");
  marks_file = StringFlag(argc, argv, "marks", "");
  auto want = [&](absl::string_view m) {
    for (absl::string_view x : absl::StrSplit(maps, ',')) {
      if (x == m) return true;
    }
    return false;
  };
  if (threads > 0 && !SetProcessThreadPoolSize(static_cast<int>(threads)).ok()) return 1;

  std::printf("| %-58s | %12s | %10s | %8s | %5s |\n", "sluice pipeline", "elements/s",
              "batches/s", "CPU µs/elem", "cores");
  std::printf("|---|---|---|---|---|\n");
  for (absl::string_view b : absl::StrSplit(sizes, ',', absl::SkipEmpty())) {
    const int64_t batch = std::strtoll(std::string(b).c_str(), nullptr, 10);
    // A whole number of batches, at least 8.
    const int64_t n = std::max(range_elements / batch, int64_t{8}) * batch;
    const std::string p = absl::StrCat("range(", n, ").batch(", batch, ")");
    SetBulkPathsEnabled(true);
    Row(absl::StrCat(p, " [bulk]"), Best(p, reps));
    // The per-element path on a quarter of the elements (it is much slower).
    const int64_t n4 = std::max(n / 4 / batch, int64_t{2}) * batch;
    const std::string p4 = absl::StrCat("range(", n4, ").batch(", batch, ")");
    SetBulkPathsEnabled(false);
    Row(absl::StrCat("range(", n4, ").batch(", batch, ") [per-element]"), Best(p4, reps));
    SetBulkPathsEnabled(true);
  }
  if (!images.empty()) ImageRows(images, reps, parallel, want);
  if (records.empty()) return 0;
  const int64_t passes = std::max<int64_t>(1, Flag(argc, argv, "passes", 1));
  std::vector<std::string> files;
  const std::vector<std::string> pass = QuotedFiles(records, "");
  for (int64_t i = 0; i < passes; ++i) files.insert(files.end(), pass.begin(), pass.end());
  const std::string source = absl::StrCat("tf_record_dataset([", absl::StrJoin(files, ", "), "])");
  const std::string parse =
      "parse_example({'image': FixedLenFeature([], tf.string), "
      "'label': FixedLenFeature([], tf.int64, default_value=0)})";
  const std::string seq = absl::StrCat(source, ".map(", parse, ").batch(256)");
  if (want("sequential")) {
    Row("tfrecord .map(parse_example).batch(256), sequential", Best(seq, reps));
  }
  const std::string par =
      absl::StrCat(source, ".map(", parse, ", num_parallel_calls=", parallel, ").batch(256)");
  if (want("parallel")) {
    Row(absl::StrCat("tfrecord .map(parse_example, num_parallel_calls=", parallel,
                     ").batch(256)"),
        Best(par, reps));
  }
  const std::string autotune =
      absl::StrCat(source, ".map(", parse, ", num_parallel_calls=AUTOTUNE).batch(256)");
  if (want("autotune")) {
    Row("tfrecord .map(parse_example, AUTOTUNE).batch(256)", Best(autotune, reps));
  }
  const std::string batched =
      absl::StrCat(source, ".batch(256).map(", parse, ", num_parallel_calls=AUTOTUNE)");
  if (want("batched")) {
    Row("tfrecord .batch(256).map(parse_example, AUTOTUNE)", Best(batched, reps));
  }
  const int64_t rounds = Flag(argc, argv, "rounds", 0);
  if (rounds > 0) AlternatingRounds(seq, autotune, rounds);
  return 0;
}

}  // namespace
}  // namespace sluice

int main(int argc, char** argv) { return sluice::Main(argc, argv); }
