// Text -> tokenize -> pack throughput: MB of raw text (the JSON strings' bytes) per CPU-second
// and per wall second, for
//   jsonl_dataset(F, keys=['text']).map(tokenize(M), key='text', num_parallel_calls=T).pack(L)
// and for jsonl_dataset alone. CPU-seconds are the process's user + system time (getrusage), so
// the figure does not depend on how loaded the machine is. With --dump_ids=PATH, also writes
// the ids of the first --dump_count texts, one line of space-separated ids each, for comparing
// with bench/tf_text_reference.py (bench/text_bench.sh does both). With --random_access=1, also
// jsonl_dataset through random access, as a SHARDING_RANGES worker reads it: the line index's
// build, every element in order (SHUFFLE_NONE ranges) and --random_count elements in a seeded
// random order (SHUFFLE_FULL); --model may then be left out (no tokenize pass).
//
//   text_bench --jsonl=corpus.jsonl --model=spm.model [--length=2048] [--threads=1]
//              [--dump_ids=ids.txt --dump_count=1000] [--random_access=1 --random_count=20000]
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "bench/bench_flags.h"
#include "core/data/executor.h"
#include "core/data/ops/random_access_source.h"
#include "sluice/dataset.h"

namespace sluice {
namespace {

double CpuSeconds() {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

struct Run {
  int64_t elements = 0;
  int64_t text_bytes = 0;  // the sum of the 'text' strings' lengths (jsonl pass only)
  double cpu = 0;
  double wall = 0;
};

// Element `i` of `source`, its text's length; exits on an error.
int64_t TextBytesAt(RandomAccessSource& source, int64_t i) {
  absl::StatusOr<Element> e = source.Get(i);
  if (!e.ok()) {
    std::fprintf(stderr, "element %lld: %s\n", static_cast<long long>(i),
                 e.status().ToString().c_str());
    std::exit(1);
  }
  return static_cast<int64_t>(e->children()[0].leaf().string_at(0).size());
}

void RandomAccessRuns(const std::string& jsonl, int64_t random_count) {
  auto ds = Dataset::Parse(absl::StrCat("jsonl_dataset('", jsonl, "', keys=['text'])"));
  if (!ds.ok()) std::exit(1);
  double cpu0 = CpuSeconds();
  auto source = RandomAccessSource::Open(ds->def().source());
  if (!source.ok()) {
    std::fprintf(stderr, "%s\n", source.status().ToString().c_str());
    std::exit(1);
  }
  const int64_t n = (*source)->size();
  std::printf("random access: line index of %lld lines built in %.2f CPU-s\n",
              static_cast<long long>(n), CpuSeconds() - cpu0);
  cpu0 = CpuSeconds();
  int64_t bytes = 0;
  for (int64_t i = 0; i < n; ++i) bytes += TextBytesAt(**source, i);
  double cpu = CpuSeconds() - cpu0;
  std::printf("random access in order: %lld elements, %.2f CPU-s: %.1f MB/CPU-s\n",
              static_cast<long long>(n), cpu, static_cast<double>(bytes) / 1e6 / cpu);
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(2024);  // fixed seed
  std::shuffle(order.begin(), order.end(), rng);
  order.resize(static_cast<size_t>(std::min(n, random_count)));
  cpu0 = CpuSeconds();
  bytes = 0;
  for (int64_t i : order) bytes += TextBytesAt(**source, i);
  cpu = CpuSeconds() - cpu0;
  std::printf("random access shuffled: %zu elements, %.2f CPU-s: %.0f elements/CPU-s, "
              "%.1f MB/CPU-s\n",
              order.size(), cpu, static_cast<double>(order.size()) / cpu,
              static_cast<double>(bytes) / 1e6 / cpu);
}

Run Drain(const std::string& expression, bool count_text) {
  auto ds = Dataset::Parse(expression);
  if (!ds.ok()) {
    std::fprintf(stderr, "%s: %s\n", expression.c_str(), ds.status().ToString().c_str());
    std::exit(1);
  }
  auto it = MakeIterator(*ds);
  if (!it.ok()) {
    std::fprintf(stderr, "%s\n", it.status().ToString().c_str());
    std::exit(1);
  }
  Run r;
  const double cpu0 = CpuSeconds();
  const auto wall0 = std::chrono::steady_clock::now();
  while (true) {
    Element e;
    bool end = false;
    absl::Status s = (*it)->GetNext(&e, &end);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      std::exit(1);
    }
    if (end) break;
    ++r.elements;
    if (count_text) r.text_bytes += static_cast<int64_t>(e.children()[0].leaf().string_at(0).size());
  }
  r.cpu = CpuSeconds() - cpu0;
  r.wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  return r;
}

void DumpIds(const std::string& jsonl, const std::string& model, int64_t count,
             const std::string& path) {
  auto ds = Dataset::Parse(absl::StrCat("jsonl_dataset('", jsonl, "', keys=['text']).take(", count,
                                        ").map(tokenize('", model, "'), key='text')"));
  auto it = ds.ok() ? MakeIterator(*ds) : ds.status();
  if (!it.ok()) std::exit(1);
  FILE* out = std::fopen(path.c_str(), "w");
  if (out == nullptr) std::exit(1);
  while (true) {
    Element e;
    bool end = false;
    if (!(*it)->GetNext(&e, &end).ok()) std::exit(1);
    if (end) break;
    const Tensor& t = e.children()[0].leaf();
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      std::fprintf(out, i == 0 ? "%d" : " %d", t.data<int32_t>()[i]);
    }
    std::fprintf(out, "\n");
  }
  std::fclose(out);
}

int Main(int argc, char** argv) {
  const std::string jsonl = Flag(argc, argv, "jsonl", "");
  const std::string model = Flag(argc, argv, "model", "");
  const int64_t length = std::atoll(Flag(argc, argv, "length", "2048").c_str());
  const int64_t threads = std::atoll(Flag(argc, argv, "threads", "1").c_str());
  const bool random_access = Flag(argc, argv, "random_access", "0") == "1";
  if (jsonl.empty() || (model.empty() && !random_access)) {
    std::fprintf(stderr, "usage: text_bench --jsonl=F --model=M [--length=2048] [--threads=1]\n");
    return 2;
  }
  const std::string dump = Flag(argc, argv, "dump_ids", "");
  if (!dump.empty()) {
    DumpIds(jsonl, model, std::atoll(Flag(argc, argv, "dump_count", "1000").c_str()), dump);
  }
  const Run read = Drain(absl::StrCat("jsonl_dataset('", jsonl, "', keys=['text'])"), true);
  const double mb = static_cast<double>(read.text_bytes) / 1e6;
  std::printf("jsonl_dataset alone: %lld lines, %.1f MB of text, %.2f CPU-s, %.2f s: "
              "%.1f MB/CPU-s, %.1f MB/s\n",
              static_cast<long long>(read.elements), mb, read.cpu, read.wall, mb / read.cpu,
              mb / read.wall);
  if (random_access) {
    RandomAccessRuns(jsonl, std::atoll(Flag(argc, argv, "random_count", "20000").c_str()));
  }
  if (model.empty()) return 0;
  const std::string parallel = threads > 1 ? absl::StrCat(", num_parallel_calls=", threads) : "";
  const Run full = Drain(absl::StrCat("jsonl_dataset('", jsonl, "', keys=['text']).map(tokenize('",
                                      model, "'), key='text'", parallel, ").pack(", length, ")"),
                         false);
  std::printf("jsonl -> tokenize -> pack(%lld), %lld thread(s): %lld rows, %.2f CPU-s, %.2f s: "
              "%.1f MB/CPU-s, %.1f MB/s\n",
              static_cast<long long>(length), static_cast<long long>(threads),
              static_cast<long long>(full.elements), full.cpu, full.wall, mb / full.cpu,
              mb / full.wall);
  return 0;
}

}  // namespace
}  // namespace sluice

int main(int argc, char** argv) { return sluice::Main(argc, argv); }
