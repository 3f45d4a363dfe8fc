// sluicectl gen: a synthetic TFRecord dataset of tf.train.Examples.
//
//   sluicectl gen --format=tfrecord --out=DIR --num_files=4 --records_per_file=1000
//       --image_bytes=3072 [--num_classes=10] [--seed=0] [--compression=GZIP]
#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/io/tfrecord_writer.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "proto/example.pb.h"
#include "tools/sluicectl/commands.h"

ABSL_FLAG(std::string, out, "", "gen: the folder to write the files into (created if needed).");
ABSL_FLAG(int64_t, num_files, 1, "gen: number of files.");
ABSL_FLAG(int64_t, records_per_file, 100, "gen: records (Examples) per file.");
ABSL_FLAG(int64_t, image_bytes, 3072, "gen: bytes of each Example's 'image' feature.");
ABSL_FLAG(int64_t, num_classes, 10, "gen: labels are in [0, num_classes).");
ABSL_FLAG(std::string, compression, "",
          "gen/inspect: TFRecord compression_type; save: the chunks' compression: '' (none), "
          "GZIP or ZLIB. run/bench with --coordinator: the job's wire compression: '' or none, "
          "lz4, zstd (used for workers on other hosts; --force_compression: on loopback too).");

namespace sluice {
namespace {

// splitmix64: a small, well-mixed, seedable generator (the output must not depend on the
// standard library's engines or distributions, which differ between implementations).
uint64_t SplitMix(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The Example of record `r` of file `f`: an 'image' of smooth, image-like bytes (a gradient
// plus noise, so it compresses as images do rather than as zeros) and a 'label'.
std::string SyntheticExample(uint64_t seed, int64_t f, int64_t r, int64_t image_bytes,
                             int64_t num_classes) {
  uint64_t state = seed * 0x100000001b3ULL ^ (static_cast<uint64_t>(f) << 32) ^
                   static_cast<uint64_t>(r);
  SplitMix(&state);
  const int64_t label = static_cast<int64_t>(SplitMix(&state) % static_cast<uint64_t>(
                                                                   num_classes));
  std::string image(static_cast<size_t>(image_bytes), '\0');
  const uint64_t base = SplitMix(&state);
  uint64_t noise = 0;
  for (int64_t i = 0; i < image_bytes; ++i) {
    if (i % 8 == 0) noise = SplitMix(&state);
    const int v = static_cast<int>((base >> (i % 7)) & 0x7f) + static_cast<int>(i % 97) +
                  static_cast<int>(noise & 0x1f) - 16;
    noise >>= 8;
    image[static_cast<size_t>(i)] = static_cast<char>(std::clamp(v, 0, 255));
  }
  proto::Example ex;
  auto& features = *ex.mutable_features()->mutable_feature();
  features["image"].mutable_bytes_list()->add_value(std::move(image));
  features["label"].mutable_int64_list()->add_value(label);
  // Deterministic serialization sorts the map's keys: the same bytes in every process.
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    ex.SerializeToCodedStream(&coded);
  }
  return out;
}

int GenMain(const std::vector<std::string>& args) {
  if (!args.empty()) return ReportUsageError("gen", "takes no positional arguments");
  const std::string format = absl::GetFlag(FLAGS_format);
  if (format != "tfrecord") {
    return ReportUsageError("gen", "--format=tfrecord is the only format gen writes");
  }
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) return ReportUsageError("gen", "--out=DIR is required");
  const int64_t num_files = absl::GetFlag(FLAGS_num_files);
  const int64_t per_file = absl::GetFlag(FLAGS_records_per_file);
  const int64_t image_bytes = absl::GetFlag(FLAGS_image_bytes);
  const int64_t num_classes = absl::GetFlag(FLAGS_num_classes);
  if (num_files <= 0 || per_file < 0 || image_bytes < 0 || num_classes <= 0) {
    return ReportUsageError("gen", "--num_files and --num_classes must be positive, "
                                   "--records_per_file and --image_bytes non-negative");
  }
  absl::StatusOr<Compression> compression = ParseCompressionType(absl::GetFlag(FLAGS_compression));
  if (!compression.ok()) return ReportUsageError("gen", std::string(compression.status().message()));
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec) {
    return ReportError(absl::UnavailableError(
        absl::StrCat("could not create folder ", out, ": ", ec.message())));
  }
  const uint64_t seed = static_cast<uint64_t>(absl::GetFlag(FLAGS_seed));
  int64_t bytes = 0;
  for (int64_t f = 0; f < num_files; ++f) {
    std::string name = absl::StrFormat("%s/data-%05d-of-%05d.tfrecord%s", out, f, num_files,
                                       *compression == Compression::kGzip   ? ".gz"
                                       : *compression == Compression::kZlib ? ".zlib"
                                                                            : "");
    absl::StatusOr<std::unique_ptr<TFRecordWriter>> w = TFRecordWriter::Open(name, *compression);
    if (!w.ok()) return ReportError(w.status());
    for (int64_t r = 0; r < per_file; ++r) {
      std::string ex = SyntheticExample(seed, f, r, image_bytes, num_classes);
      bytes += static_cast<int64_t>(ex.size());
      absl::Status s = (*w)->Write(ex);
      if (!s.ok()) return ReportError(s);
    }
    absl::Status s = (*w)->Close();
    if (!s.ok()) return ReportError(s);
    std::printf("%s\n", name.c_str());
  }
  std::printf("wrote %" PRId64 " files, %" PRId64 " Examples, %" PRId64
              " bytes of records; features: image (string, %" PRId64 " bytes), label (int64, "
              "0..%" PRId64 ")\n",
              num_files, num_files * per_file, bytes, image_bytes, num_classes - 1);
  return kExitOk;
}

}  // namespace

SLUICECTL_REGISTER_COMMAND({
    .name = "gen",
    .synopsis = "gen --format=tfrecord --out=DIR [--num_files=N] [--records_per_file=M] "
                "[--image_bytes=K] [--num_classes=C] [--seed=S] [--compression=GZIP|ZLIB]",
    .help = "Writes a synthetic dataset of tf.train.Examples: N TFRecord files\n"
            "DIR/data-0000i-of-0000N.tfrecord of M records, each with an 'image' (K image-like\n"
            "bytes) and a 'label' (int64 in [0, C)). The bytes are a pure function of the flags.",
    .flags = {"format", "out", "num_files", "records_per_file", "image_bytes", "num_classes",
              "seed", "compression"},
    .run = &GenMain,
});

}  // namespace sluice
