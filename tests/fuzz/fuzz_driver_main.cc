// A standalone driver for the libFuzzer targets of this folder, for builds without libFuzzer
// (and for CI): runs LLVMFuzzerTestOneInput on every seed (files, or every file of a folder,
// given as arguments), then on --mutations=N (default 3000) deterministic mutations of them
// (bit flips, byte overwrites with edge values, insertions, deletions, truncations, splices),
// from a fixed --seed=S. A crash or abort fails the test; exit code 0 otherwise.
//
//   tfrecord_reader_fuzz_driver tests/fuzz/corpus/tfrecord_reader --mutations=3000
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

uint64_t Next(uint64_t* s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::string Read(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void Run(const std::string& input) {
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
}

std::string Mutate(const std::vector<std::string>& seeds, uint64_t* rng) {
  std::string s = seeds[Next(rng) % seeds.size()];
  const int rounds = 1 + static_cast<int>(Next(rng) % 4);
  static const uint8_t kEdge[] = {0x00, 0x01, 0x7f, 0x80, 0xff, 0xfe, 0x0a, 0x12, 0x1a, 0x08};
  for (int r = 0; r < rounds; ++r) {
    const uint64_t op = Next(rng) % 7;
    const size_t at = s.empty() ? 0 : Next(rng) % s.size();
    switch (op) {
      case 0:  // flip a bit
        if (!s.empty()) s[at] = static_cast<char>(s[at] ^ (1 << (Next(rng) % 8)));
        break;
      case 1:  // an edge value
        if (!s.empty()) s[at] = static_cast<char>(kEdge[Next(rng) % sizeof(kEdge)]);
        break;
      case 2:  // insert bytes
        s.insert(at, std::string(1 + Next(rng) % 8, static_cast<char>(Next(rng))));
        break;
      case 3:  // delete bytes
        if (!s.empty()) s.erase(at, 1 + Next(rng) % 8);
        break;
      case 4:  // truncate
        s.resize(at);
        break;
      case 5: {  // splice another seed's tail
        const std::string& other = seeds[Next(rng) % seeds.size()];
        size_t from = other.empty() ? 0 : Next(rng) % other.size();
        s = s.substr(0, at) + other.substr(from);
        break;
      }
      default:  // overwrite 8 bytes with a random little-endian number
        if (s.size() >= 8) {
          uint64_t v = Next(rng) >> (Next(rng) % 64);
          std::memcpy(&s[at > s.size() - 8 ? s.size() - 8 : at], &v, 8);
        }
        break;
    }
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t mutations = 3000;
  uint64_t seed = 1;
  std::vector<std::string> seeds;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--mutations=", 0) == 0) {
      mutations = std::strtoll(a.c_str() + 12, nullptr, 10);
    } else if (a.rfind("--seed=", 0) == 0) {
      seed = std::strtoull(a.c_str() + 7, nullptr, 10);
    } else if (std::filesystem::is_directory(a)) {
      for (const auto& e : std::filesystem::directory_iterator(a)) {
        if (e.is_regular_file()) seeds.push_back(Read(e.path()));
      }
    } else {
      seeds.push_back(Read(a));
    }
  }
  seeds.push_back("");
  for (const std::string& s : seeds) Run(s);
  uint64_t rng = seed;
  for (int64_t i = 0; i < mutations; ++i) Run(Mutate(seeds, &rng));
  std::printf("ran %zu seeds and %lld mutations\n", seeds.size(),
              static_cast<long long>(mutations));
  return 0;
}
