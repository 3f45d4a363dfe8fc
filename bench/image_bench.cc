// ImageNet-style input pipeline throughput, images per CPU-second on one core: WebDataset tar
// shards of synthetic photos (by default 500x375, ~117 KB at quality 90; --size=2000x1500 for
// large photos), encoded here with libturbojpeg, then one of
//
//   crop (--pipeline=crop):
//     webdataset_dataset(shards, keys=['cls', 'jpg'])
//       .map(decode_image(channels=3), key='jpg')
//       .map(random_crop([224, 224, 3], seed=1), key='jpg')
//       .map(random_flip_left_right(seed=2), key='jpg')
//       .map(normalize(mean=[123.7, 116.3, 103.5], std=[58.4, 57.1, 57.4]), key='jpg')
//       .batch(256)
//   rrc (--pipeline=rrc): RandomResizedCrop, the ImageNet training transform: the crop window
//     decoded alone at the smallest DCT scale that keeps it >= 224 x 224 (issue 27)
//       .map(random_resized_crop([224, 224], seed=1), key='jpg') then flip, normalize, batch
//   rrc_exact (--pipeline=rrc_exact): the same with exact=True (window decoded at full size)
//   inception (--pipeline=inception): TF's best form written in Sluice, as
//     bench/tf_image_reference.py's rrc_best: the box from sample_distorted_bounding_box on the
//     header's size, decode_and_crop_jpeg of it, resize, then flip, normalize, batch
//       .map(sample_distorted_bounding_box(area_range=(0.08, 1.0),
//            aspect_ratio_range=(0.75, 1.3333334), max_attempts=10, seed=1), key='jpg')
//       .map(decode_and_crop_jpeg(channels=3), key='jpg').map(resize([224, 224]), key='jpg')
//
// run by the in-process executor with every map sequential (num_parallel_calls=0: one core).
// CPU time is the process's user + system time (getrusage), so it is the work whatever else
// loads the machine. Also writes the same JPEGs as a TFRecord file (one record of JPEG bytes
// each) for the TensorFlow reference, bench/tf_image_reference.py.
//
// rrc and rrc_exact run as one fused map (core/data/ops/map_fusion.h: random_resized_crop takes
// the flip and the normalize over, one pass into one tensor); --nofuse runs every map on its own.
//
//   image_bench [--images=1024] [--shards=4] [--dir=/tmp/sluice-image-bench] [--reps=3]
//               [--size=500x375] [--pipeline=crop|rrc|rrc_exact|inception|all]
//               [--reuse]   (read the shards a previous run wrote instead of writing them)
//               [--nofuse]  (ExecutorOptions::fuse_maps = false)
//               [--ab]      (fused and unfused passes alternating in one process; each one's
//                           median and best images per CPU-second)
//               [--ab_resize] (fused passes alternating between the AVX2 and the scalar
//                           horizontal resize pass, core/data/ops/bilinear_resize.h)
#include <sys/resource.h>
#include <turbojpeg.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sluice/dataset.h"
#include "core/data/executor.h"
#include "core/data/ops/bilinear_resize.h"
#include "core/io/tfrecord_writer.h"
#include "core/util/malloc_retention.h"

namespace sluice {
namespace {

using Clock = std::chrono::steady_clock;

// A 500x375 RGB picture with smooth structure and noise, so that quality-90 JPEG lands near the
// ~110 KB of an average ImageNet training image.
std::string MakeJpeg(int index, int w, int h, tjhandle tj) {
  std::vector<unsigned char> rgb(static_cast<size_t>(w * h * 3));
  std::mt19937 gen(static_cast<unsigned>(index));
  std::uniform_int_distribution<int> noise(-40, 40);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int k = 0; k < 3; ++k) {
        int v = (x * (k + 1) + y * (3 - k) + index * 17) % 256 + noise(gen);
        rgb[static_cast<size_t>((y * w + x) * 3 + k)] =
            static_cast<unsigned char>(std::clamp(v, 0, 255));
      }
    }
  }
  unsigned char* out = nullptr;
  unsigned long size = 0;
  if (tjCompress2(tj, rgb.data(), w, 0, h, TJPF_RGB, &out, &size, TJSAMP_420, 90, 0) != 0) {
    std::fprintf(stderr, "tjCompress2: %s\n", tjGetErrorStr2(tj));
    std::exit(1);
  }
  std::string jpeg(reinterpret_cast<char*>(out), size);
  tjFree(out);
  return jpeg;
}

// One ustar member.
void AppendTarMember(const std::string& name, const std::string& data, std::string* tar) {
  char h[512] = {};
  std::snprintf(h, 100, "%s", name.c_str());
  std::snprintf(h + 100, 8, "%07o", 0644);
  std::snprintf(h + 108, 8, "%07o", 0);
  std::snprintf(h + 116, 8, "%07o", 0);
  std::snprintf(h + 124, 12, "%011lo", static_cast<unsigned long>(data.size()));
  std::snprintf(h + 136, 12, "%011o", 0);
  h[156] = '0';
  std::memcpy(h + 257, "ustar", 6);
  std::memcpy(h + 263, "00", 2);
  std::memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  std::snprintf(h + 148, 8, "%06o", sum);
  tar->append(h, 512);
  tar->append(data);
  tar->append((512 - data.size() % 512) % 512, '\0');
}

void WriteFile(const std::string& path, const std::string& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) std::exit(1);
  std::fclose(f);
}

void WriteShards(const std::string& dir, int images, int width, int height,
                 const std::vector<std::string>& names);
void RunPipeline(const std::vector<std::string>& names, const std::string& pipeline, int reps);

bool fuse_maps = true;  // --nofuse clears it
bool ab = false;        // --ab: fused and unfused passes alternate
bool ab_resize = false; // --ab_resize: AVX2 and scalar horizontal resize passes alternate

int Main(int argc, char** argv) {
  // The allocator as sluice-worker runs it (core/util/malloc_retention.h): decoded images'
  // memory stays resident (PERF_NOTES.md: page faults, not the work, dominate otherwise).
  RetainFreedMemory();
  int images = 1024, shards = 4, reps = 3;
  std::string dir = "/tmp/sluice-image-bench";
  bool reuse = false;
  int width = 500, height = 375;
  std::string pipeline = "crop";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* flag) { return a.substr(std::strlen(flag)); };
    if (a.rfind("--images=", 0) == 0) images = std::atoi(value("--images=").c_str());
    if (a.rfind("--shards=", 0) == 0) shards = std::atoi(value("--shards=").c_str());
    if (a.rfind("--reps=", 0) == 0) reps = std::atoi(value("--reps=").c_str());
    if (a.rfind("--dir=", 0) == 0) dir = value("--dir=");
    if (a == "--reuse") reuse = true;
    if (a == "--nofuse") fuse_maps = false;
    if (a == "--ab") ab = true;
    if (a == "--ab_resize") ab_resize = true;
    if (a.rfind("--pipeline=", 0) == 0) pipeline = value("--pipeline=");
    if (a.rfind("--size=", 0) == 0 &&
        std::sscanf(value("--size=").c_str(), "%dx%d", &width, &height) != 2) {
      std::fprintf(stderr, "--size=WIDTHxHEIGHT\n");
      return 1;
    }
  }
  std::filesystem::create_directories(dir);
  std::vector<std::string> names;
  for (int s = 0; s < shards; ++s) names.push_back(absl::StrCat(dir, "/shard-", s, ".tar"));
  if (!reuse) WriteShards(dir, images, width, height, names);
  for (const char* p : {"crop", "rrc", "rrc_exact", "inception"}) {
    if (pipeline == p || pipeline == "all") RunPipeline(names, p, reps);
  }
  return 0;
}

void WriteShards(const std::string& dir, int images, int width, int height,
                 const std::vector<std::string>& names) {
  const int shards = static_cast<int>(names.size());
  tjhandle tj = tjInitCompress();
  std::vector<std::string> tars(static_cast<size_t>(shards));
  std::string tfrecords;
  int64_t jpeg_bytes = 0;
  for (int i = 0; i < images; ++i) {
    const std::string jpeg = MakeJpeg(i, width, height, tj);
    jpeg_bytes += static_cast<int64_t>(jpeg.size());
    const std::string key = absl::StrCat("n", 100000 + i);
    std::string& tar = tars[static_cast<size_t>(i % shards)];
    AppendTarMember(key + ".cls", std::to_string(i % 1000), &tar);
    AppendTarMember(key + ".jpg", jpeg, &tar);
    AppendTFRecord(jpeg, &tfrecords);
  }
  tjDestroy(tj);
  for (int s = 0; s < shards; ++s) {
    tars[static_cast<size_t>(s)].append(1024, '\0');
    WriteFile(names[static_cast<size_t>(s)], tars[static_cast<size_t>(s)]);
  }
  WriteFile(dir + "/images.tfrecord", tfrecords);
  std::printf("%d images of %dx%d, mean JPEG %.1f KB, %d shards in %s\n", images, width,
              height, jpeg_bytes / 1024.0 / images, shards, dir.c_str());
}

// The process's CPU time (user + system), seconds.
double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

void RunPipeline(const std::vector<std::string>& names, const std::string& pipeline, int reps) {
  std::string files;
  for (const std::string& n : names) {
    absl::StrAppend(&files, files.empty() ? "" : ", ", "'", n, "'");
  }
  std::string crop;
  if (pipeline == "crop") {
    crop = ".map(decode_image(channels=3), key='jpg')"
           ".map(random_crop([224, 224, 3], seed=1), key='jpg')";
  } else if (pipeline == "inception") {
    crop = ".map(sample_distorted_bounding_box(area_range=(0.08, 1.0), "
           "aspect_ratio_range=(0.75, 1.3333334), max_attempts=10, seed=1), key='jpg')"
           ".map(decode_and_crop_jpeg(channels=3), key='jpg').map(resize([224, 224]), key='jpg')";
  } else {
    crop = absl::StrCat(".map(random_resized_crop([224, 224], seed=1",
                        pipeline == "rrc_exact" ? ", exact=True" : "", "), key='jpg')");
  }
  const std::string expr = absl::StrCat(
      "webdataset_dataset([", files, "], keys=['cls', 'jpg'])", crop,
      ".map(random_flip_left_right(seed=2), key='jpg')"
      ".map(normalize(mean=[123.7, 116.3, 103.5], std=[58.4, 57.1, 57.4]), key='jpg')"
      ".batch(256)");
  std::printf("pipeline %s%s\n", pipeline.c_str(), fuse_maps ? "" : " (maps not fused)");
  absl::StatusOr<Dataset> ds = Dataset::Parse(expr);
  if (!ds.ok()) {
    std::fprintf(stderr, "%s\n", std::string(ds.status().message()).c_str());
    std::exit(1);
  }
  // One pass over the shards: images, wall seconds, CPU seconds.
  auto pass = [&](bool fuse, double* wall, double* cpu) {
    ExecutorOptions options;
    options.fuse_maps = fuse;
    auto it = MakeIterator(*ds, options);
    if (!it.ok()) std::exit(1);
    int64_t n = 0;
    const auto t0 = Clock::now();
    const double c0 = CpuSeconds();
    for (;;) {
      Element e;
      bool end = false;
      absl::Status s = (*it)->GetNext(&e, &end);
      if (!s.ok()) {
        std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
        std::exit(1);
      }
      if (end) break;
      n += e.children()[1].leaf().shape().dim(0);  // dict order: __key__, cls, jpg
    }
    *wall = std::chrono::duration<double>(Clock::now() - t0).count();
    *cpu = CpuSeconds() - c0;
    return n;
  };
  // --ab: fused and unfused passes alternate in this process, so that both meet the same load;
  // the best pass of each is the figure least disturbed by other processes.
  // --ab_resize: the same with the scalar horizontal resize pass instead of AVX2's.
  struct Variant {
    bool fuse;
    bool scalar_resize;
    const char* name;
  };
  std::vector<Variant> variants = {{fuse_maps, false, fuse_maps ? "" : " (not fused)"}};
  if (ab) variants = {{true, false, ""}, {false, false, " (not fused)"}};
  if (ab_resize) variants = {{fuse_maps, false, ""}, {fuse_maps, true, " (scalar resize)"}};
  std::vector<std::vector<double>> rates(variants.size()), cpu_rates(variants.size());
  for (int r = 0; r < reps; ++r) {
    for (size_t v = 0; v < variants.size(); ++v) {
      double wall = 0, cpu = 0;
      TEST_ForceScalarBilinearResize(variants[v].scalar_resize);
      const int64_t n = pass(variants[v].fuse, &wall, &cpu);
      rates[v].push_back(static_cast<double>(n) / wall);
      cpu_rates[v].push_back(static_cast<double>(n) / cpu);
      std::printf("rep %d%s: %lld images, %.0f images/s, %.0f images per CPU-second\n", r,
                  variants[v].name, static_cast<long long>(n), rates[v].back(),
                  cpu_rates[v].back());
    }
  }
  for (size_t v = 0; v < variants.size(); ++v) {
    std::sort(rates[v].begin(), rates[v].end());
    std::sort(cpu_rates[v].begin(), cpu_rates[v].end());
    std::printf("sluice %s%s median: %.0f images/s on one core, %.0f images per CPU-second "
                "(best %.0f)\n",
                pipeline.c_str(), variants[v].name, rates[v][rates[v].size() / 2],
                cpu_rates[v][cpu_rates[v].size() / 2], cpu_rates[v].back());
  }
}

}  // namespace
}  // namespace sluice

int main(int argc, char** argv) { return sluice::Main(argc, argv); }
