// Which SentencePiece call encodes cheapest: MB of text per CPU-second (getrusage, so the load
// does not change it) to encode every line of a file, one call a line, with each public API of
// the library (Debian's libsentencepiece 0.1.97), each checked to give the ids of
// Encode(text, std::vector<int>*). Linked to libsentencepiece alone, like the module
// (core/data/ops/sentencepiece_module.cc): no Abseil or protobuf of Sluice's here.
//
//   spm_api_bench MODEL TEXT_FILE [REPS=1]
#include <sentencepiece_processor.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace {

double CpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: spm_api_bench MODEL TEXT_FILE [REPS]\n");
    return 2;
  }
  sentencepiece::SentencePieceProcessor sp;
  if (const auto s = sp.Load(argv[1]); !s.ok()) {
    std::fprintf(stderr, "%s: %s\n", argv[1], s.ToString().c_str());
    return 1;
  }
  std::ifstream in(argv[2]);
  std::vector<std::string> lines;
  size_t bytes = 0;
  for (std::string line; std::getline(in, line);) {
    bytes += line.size();
    lines.push_back(line);
  }
  const int reps = argc > 3 ? std::max(1, std::atoi(argv[3])) : 1;
  std::vector<std::vector<int>> want(lines.size());
  for (size_t i = 0; i < lines.size(); ++i) sp.Encode(lines[i], &want[i]).IgnoreError();
  auto run = [&](const char* name, auto encode_matches) {
    const double cpu0 = CpuSeconds();
    size_t mismatches = 0;
    for (int r = 0; r < reps; ++r) {
      for (size_t i = 0; i < lines.size(); ++i) mismatches += encode_matches(i) ? 0 : 1;
    }
    const double cpu = CpuSeconds() - cpu0;
    std::printf("%-48s %7.2f MB/CPU-s (%.2f CPU-s, %zu mismatches)\n", name,
                static_cast<double>(bytes) * reps / 1e6 / cpu, cpu, mismatches);
  };
  run("Encode(text, vector<int>*), a fresh vector", [&](size_t i) {
    std::vector<int> ids;
    sp.Encode(lines[i], &ids).IgnoreError();
    return ids == want[i];
  });
  std::vector<int> reused;
  run("Encode(text, vector<int>*), one reused vector", [&](size_t i) {
    reused.clear();
    sp.Encode(lines[i], &reused).IgnoreError();
    return reused == want[i];
  });
  run("EncodeAsIds(text)", [&](size_t i) { return sp.EncodeAsIds(lines[i]) == want[i]; });
  run("EncodeAsImmutableProto(text)", [&](size_t i) {
    const auto t = sp.EncodeAsImmutableProto(lines[i]);
    if (t.pieces_size() != want[i].size()) return false;
    for (size_t k = 0; k < t.pieces_size(); ++k) {
      if (static_cast<int>(t.pieces(k).id()) != want[i][k]) return false;
    }
    return true;
  });
  std::vector<std::string> pieces;
  run("Encode(text, vector<string>*) (pieces)", [&](size_t i) {
    pieces.clear();
    sp.Encode(lines[i], &pieces).IgnoreError();
    return pieces.size() == want[i].size();
  });
  return 0;
}
