// Record reading throughput: TFRecord read, read + parse_example, on one and two threads, and
// the executor pipeline tf_record_dataset(files).map(parse_example(...)). Writes a synthetic
// dataset of tf.train.Examples ('image' bytes + 'label' int64, as `sluicectl gen` does) into a
// temporary folder first. Prints one line per case: records/s and MB/s of record bytes.
// Then the serial part of a parallel map over the files (its read lock): framing blocks of 256
// records of the mapped files, one ReadRecordView per record against one FrameMappedRecords
// per block, in CPU ns per record of the framing thread (each file's pages faulted in ahead,
// off the clock, as the map's checks do; the files' bytes out of the CPU caches, as the other
// files were read since), alternating the two --frame_rounds times.
//
//   record_bench [--records=40000] [--image_bytes=3072] [--files=4] [--frame_rounds=5]
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "sluice/dataset.h"
#include "core/data/ops/example_parser.h"
#include "core/data/executor.h"
#include "core/io/tfrecord_reader.h"
#include "core/io/tfrecord_writer.h"
#include "proto/example.pb.h"

namespace sluice {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kSpec =
    "{'image': FixedLenFeature([], tf.string), "
    "'label': FixedLenFeature([], tf.int64, default_value=0)}";

std::string MakeExample(int64_t i, int64_t image_bytes) {
  proto::Example ex;
  auto& f = *ex.mutable_features()->mutable_feature();
  std::string image(static_cast<size_t>(image_bytes), '\0');
  for (int64_t j = 0; j < image_bytes; ++j) image[static_cast<size_t>(j)] = static_cast<char>(i + j * 7);
  f["image"].mutable_bytes_list()->add_value(std::move(image));
  f["label"].mutable_int64_list()->add_value(i % 10);
  return ex.SerializeAsString();
}

struct Totals {
  int64_t records = 0;
  int64_t bytes = 0;
};

// Reads (and parses, when `parser` is set) every record of `files`.
Totals ReadFiles(const std::vector<std::string>& files, const ExampleParser* parser) {
  Totals t;
  std::string record;
  for (const std::string& f : files) {
    auto r = TFRecordReader::Open(f);
    if (!r.ok()) std::abort();
    for (;;) {
      absl::Status s = (*r)->ReadRecord(&record);
      if (absl::IsOutOfRange(s)) break;
      if (!s.ok()) std::abort();
      if (parser != nullptr && !parser->ParseSingle(record).ok()) std::abort();
      ++t.records;
      t.bytes += static_cast<int64_t>(record.size());
    }
  }
  return t;
}

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// Frames every record of `files` in blocks of 256, as a parallel map's read lock does: one
// ReadRecordView per record, or one FrameMappedRecords per block (`bulk`). Returns the CPU
// seconds of the framing alone; *records counts them.
double FrameFiles(const std::vector<std::string>& files, bool bulk, int64_t* records) {
  constexpr int64_t kBlock = 256;
  double cpu = 0;
  std::vector<TFRecordReader::FramedRecord> framed;
  for (const std::string& f : files) {
    auto r = TFRecordReader::Open(f);
    if (!r.ok() || !(*r)->mapped()) std::abort();
    std::shared_ptr<const void> owner;
    for (bool end = false; !end;) {
      if (auto ahead = (*r)->TakePagesAhead()) TFRecordReader::FaultIn(*ahead);
      const double start = ThreadCpuSeconds();
      int64_t n = 0;
      if (bulk) {
        framed.clear();
        int64_t bytes = 0;
        absl::Status s = (*r)->FrameMappedRecords(kBlock, int64_t{1} << 40, &framed, &bytes,
                                                  &owner);
        if (!s.ok() && !absl::IsOutOfRange(s)) std::abort();
        end = !s.ok();
        n = static_cast<int64_t>(framed.size());
      } else {
        for (; n < kBlock; ++n) {
          absl::string_view data;
          TFRecordReader::UncheckedData unchecked;
          absl::Status s = (*r)->ReadRecordView(&data, &unchecked, &owner);
          if (absl::IsOutOfRange(s)) {
            end = true;
            break;
          }
          if (!s.ok()) std::abort();
        }
      }
      cpu += ThreadCpuSeconds() - start;
      *records += n;
    }
  }
  return cpu;
}

void Report(const char* name, Totals t, Clock::duration d) {
  double s = std::chrono::duration<double>(d).count();
  std::printf("| %-44s | %10.0f | %8.1f |\n", name, t.records / s, t.bytes / s / 1e6);
}

int Main(int argc, char** argv) {
  int64_t records = 40000, image_bytes = 3072, num_files = 4, frame_rounds = 5;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* flag) { return std::strtoll(a.c_str() + std::strlen(flag), nullptr, 10); };
    if (a.rfind("--records=", 0) == 0) records = value("--records=");
    if (a.rfind("--image_bytes=", 0) == 0) image_bytes = value("--image_bytes=");
    if (a.rfind("--files=", 0) == 0) num_files = value("--files=");
    if (a.rfind("--frame_rounds=", 0) == 0) frame_rounds = value("--frame_rounds=");
  }
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              ("sluice_record_bench_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::vector<std::string> files;
  for (int64_t f = 0; f < num_files; ++f) {
    files.push_back((dir / ("data-" + std::to_string(f) + ".tfrecord")).string());
    auto w = TFRecordWriter::Open(files.back());
    if (!w.ok()) std::abort();
    for (int64_t i = f; i < records; i += num_files) {
      if (!(*w)->Write(MakeExample(i, image_bytes)).ok()) std::abort();
    }
    if (!(*w)->Close().ok()) std::abort();
  }
  size_t pos = 0;
  auto fn = ExampleParser::ParseFeatureSpec(kSpec, &pos);
  auto parser = ExampleParser::Create(*fn);
  if (!parser.ok()) std::abort();
  std::printf("records=%lld image_bytes=%lld files=%lld\n", static_cast<long long>(records),
              static_cast<long long>(image_bytes), static_cast<long long>(num_files));
  std::printf("| case | records/s | MB/s |\n|---|---|---|\n");
  ReadFiles(files, nullptr);  // warm the page cache

  auto t0 = Clock::now();
  Totals read1 = ReadFiles(files, nullptr);
  Report("read, 1 thread", read1, Clock::now() - t0);

  t0 = Clock::now();
  Totals parse1 = ReadFiles(files, &*parser);
  Report("read + parse_example, 1 thread", parse1, Clock::now() - t0);

  const ExampleParser* const with_parser = &*parser;
  for (const ExampleParser* p : {static_cast<const ExampleParser*>(nullptr), with_parser}) {
    std::vector<std::string> half[2];
    for (size_t i = 0; i < files.size(); ++i) half[i % 2].push_back(files[i]);
    Totals parts[2];
    t0 = Clock::now();
    std::thread a([&] { parts[0] = ReadFiles(half[0], p); });
    std::thread b([&] { parts[1] = ReadFiles(half[1], p); });
    a.join();
    b.join();
    Totals sum{parts[0].records + parts[1].records, parts[0].bytes + parts[1].bytes};
    Report(p == nullptr ? "read, 2 threads (files split)" : "read + parse_example, 2 threads",
           sum, Clock::now() - t0);
  }

  // The executor: tf_record_dataset + map(parse_example) + batch, sequential and 2 calls.
  for (int calls : {0, 2}) {
    proto::DatasetDef def = Dataset::TFRecord(files).def();
    proto::OpDef* map = def.add_ops();
    *map->mutable_map()->mutable_parse_example() = *fn;
    map->mutable_map()->set_num_parallel_calls(calls);
    def.add_ops()->mutable_batch()->set_batch_size(64);
    auto ds = Dataset::FromDef(def);
    if (!ds.ok()) {
      std::printf("| executor: %s |\n", std::string(ds.status().message()).c_str());
      break;
    }
    auto it = MakeIterator(*ds);
    if (!it.ok()) std::abort();
    Totals t;
    t0 = Clock::now();
    for (;;) {
      Element e;
      bool end = false;
      absl::Status s = (*it)->GetNext(&e, &end);
      if (!s.ok()) {
        std::printf("| executor error: %s |\n", std::string(s.message()).c_str());
        break;
      }
      if (end) break;
      const Tensor& image = e.children()[0].leaf();
      t.records += image.num_elements();
      t.bytes += static_cast<int64_t>(image.payload_bytes());
    }
    Report(calls == 0 ? "pipeline map(parse_example).batch(64), sequential"
                      : "pipeline map(parse_example, num_parallel_calls=2).batch(64)",
           t, Clock::now() - t0);
  }
  std::printf("\n| round | framing, CPU ns per record: ReadRecordView per record | "
              "FrameMappedRecords per block |\n|---|---|---|\n");
  for (int64_t round = 0; round < frame_rounds; ++round) {
    int64_t per_record_n = 0, bulk_n = 0;
    const double per_record = FrameFiles(files, false, &per_record_n);
    const double bulk = FrameFiles(files, true, &bulk_n);
    if (per_record_n != bulk_n) std::abort();
    std::printf("| %lld | %.1f | %.1f |\n", static_cast<long long>(round),
                1e9 * per_record / static_cast<double>(per_record_n),
                1e9 * bulk / static_cast<double>(bulk_n));
  }
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace sluice

int main(int argc, char** argv) { return sluice::Main(argc, argv); }
