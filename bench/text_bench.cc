// Text -> tokenize -> pack throughput: MB of raw text (the JSON strings' bytes) per CPU-second
// and per wall second, for
//   jsonl_dataset(F, keys=['text']).map(tokenize(M), key='text', num_parallel_calls=T).pack(L)
// and for jsonl_dataset alone. CPU-seconds are the process's user + system time (getrusage), so
// the figure does not depend on how loaded the machine is. With --dump_ids=PATH, also writes
// the ids of the first --dump_count texts, one line of space-separated ids each, for comparing
// with bench/tf_text_reference.py (bench/text_bench.sh does both).
//
//   text_bench --jsonl=corpus.jsonl --model=spm.model [--length=2048] [--threads=1]
//              [--dump_ids=ids.txt --dump_count=1000]
#include <sys/resource.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "bench/bench_flags.h"
#include "core/data/executor.h"
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
  if (jsonl.empty() || model.empty()) {
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
