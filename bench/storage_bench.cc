// TFRecord read throughput through the file systems: the pipeline tf_record_dataset(files)
// (sequential reader, read-ahead as the file system does it) over local files and over the same
// files on an S3-compatible server, interleaved reps. bench/storage_bench.sh sets it up (moto on
// loopback, credentials in the environment) and runs it.
//
//   storage_bench --write=DIR [--files=4] [--mb=64]       writes DIR/part-i.tfrecord (1 KiB
//                                                         records)
//   storage_bench --reps=3 --files=4 LOCAL_DIR S3_PREFIX  reads LOCAL_DIR/part-i.tfrecord and
//                                                         S3_PREFIX/part-i.tfrecord
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sluice/dataset.h"
#include "core/data/executor.h"
#include "core/io/tfrecord_writer.h"

namespace sluice {
namespace {

using Clock = std::chrono::steady_clock;

int Write(const std::string& dir, int files, int64_t mb) {
  std::filesystem::create_directories(dir);
  const int64_t per_file = mb * 1024 / files;  // 1 KiB records
  for (int f = 0; f < files; ++f) {
    std::string bytes;
    std::string record(1024, '\0');
    for (int64_t i = 0; i < per_file; ++i) {
      for (size_t j = 0; j < record.size(); ++j) record[j] = static_cast<char>(i * 31 + j + f);
      AppendTFRecord(record, &bytes);
    }
    FILE* out = std::fopen(absl::StrCat(dir, "/part-", f, ".tfrecord").c_str(), "wb");
    if (out == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), out) != bytes.size()) return 1;
    std::fclose(out);
  }
  return 0;
}

// MB/s of record bytes reading `files` once.
double ReadOnce(const std::vector<std::string>& files) {
  absl::StatusOr<std::unique_ptr<Iterator>> it = MakeIterator(Dataset::TFRecord(files));
  if (!it.ok()) std::exit(1);
  int64_t bytes = 0;
  const auto t0 = Clock::now();
  for (;;) {
    Element e;
    bool end = false;
    absl::Status s = (*it)->GetNext(&e, &end);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
      std::exit(1);
    }
    if (end) break;
    bytes += static_cast<int64_t>(e.leaf().string_at(0).size());
  }
  return bytes / 1e6 / std::chrono::duration<double>(Clock::now() - t0).count();
}

int Main(int argc, char** argv) {
  int files = 4, reps = 3;
  int64_t mb = 64;
  std::string write_dir;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--files=", 0) == 0) files = std::atoi(a.c_str() + 8);
    else if (a.rfind("--reps=", 0) == 0) reps = std::atoi(a.c_str() + 7);
    else if (a.rfind("--mb=", 0) == 0) mb = std::atoll(a.c_str() + 5);
    else if (a.rfind("--write=", 0) == 0) write_dir = a.substr(8);
    else positional.push_back(a);
  }
  if (!write_dir.empty()) return Write(write_dir, files, mb);
  if (positional.size() != 2) {
    std::fprintf(stderr, "usage: storage_bench [--reps=3] [--files=4] LOCAL_DIR S3_PREFIX\n");
    return 2;
  }
  std::vector<std::string> local, remote;
  for (int f = 0; f < files; ++f) {
    local.push_back(absl::StrCat(positional[0], "/part-", f, ".tfrecord"));
    remote.push_back(absl::StrCat(positional[1], "/part-", f, ".tfrecord"));
  }
  std::vector<double> l, r;
  for (int i = 0; i < reps; ++i) {
    l.push_back(ReadOnce(local));
    r.push_back(ReadOnce(remote));
    std::printf("rep %d: local %.1f MB/s, s3 %.1f MB/s\n", i, l.back(), r.back());
  }
  std::sort(l.begin(), l.end());
  std::sort(r.begin(), r.end());
  const double lm = l[l.size() / 2], rm = r[r.size() / 2];
  std::printf("median: local %.1f MB/s, s3 %.1f MB/s, s3/local %.2f\n", lm, rm, rm / lm);
  return 0;
}

}  // namespace
}  // namespace sluice

int main(int argc, char** argv) { return sluice::Main(argc, argv); }
