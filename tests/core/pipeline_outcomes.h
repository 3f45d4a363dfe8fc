// Test helpers for pipelines built from an in-memory source and a chain of ops in expression
// syntax, and what a consumer sees of them (map_fusion_test, output_slot_test).
#ifndef SLUICE_TESTS_CORE_PIPELINE_OUTCOMES_H_
#define SLUICE_TESTS_CORE_PIPELINE_OUTCOMES_H_

#include <turbojpeg.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/data/executor.h"
#include "core/data/op_iterator.h"
#include "gtest/gtest.h"
#include "sluice/dataset.h"
#include "tests/seeded_rng.h"

namespace sluice {
namespace pipeline_outcomes {

// A JPEG of smooth gradients and noise (so that boxes differ from pixel to pixel), of a random
// size and chroma subsampling, from `rng`.
inline std::string RandomJpeg(SeededRng& rng) {
  const int w = static_cast<int>(rng.In(16, 420)), h = static_cast<int>(rng.In(16, 420));
  const int subsampling = static_cast<int>(rng.Pick(std::vector<int64_t>{
      TJSAMP_420, TJSAMP_422, TJSAMP_444, TJSAMP_GRAY}));
  std::vector<unsigned char> rgb(static_cast<size_t>(w * h * 3));
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int k = 0; k < 3; ++k) {
        const int v = (x * (k + 1) + y * (3 - k)) % 256 + static_cast<int>(rng.In(-30, 30));
        rgb[static_cast<size_t>((y * w + x) * 3 + k)] =
            static_cast<unsigned char>(std::clamp(v, 0, 255));
      }
    }
  }
  tjhandle tj = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;
  const int quality = static_cast<int>(rng.In(50, 95));
  const int flags = rng.Chance(20) ? TJFLAG_PROGRESSIVE : 0;
  EXPECT_EQ(tjCompress2(tj, rgb.data(), w, 0, h, TJPF_RGB, &out, &size, subsampling, quality,
                        flags),
            0)
      << tjGetErrorStr2(tj);
  std::string jpeg(reinterpret_cast<char*>(out), size);
  tjFree(out);
  tjDestroy(tj);
  return jpeg;
}

inline Tensor Strings(const std::vector<std::string>& v) {
  absl::StatusOr<Tensor> t =
      Tensor::TryFromStrings(v, Shape({static_cast<int64_t>(v.size())}), "test");
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : Tensor();
}

// Every element's status and bytes, in order: what a consumer of the pipeline sees, element
// errors included (iteration goes on after them).
inline std::vector<std::string> Outcomes(const Dataset& ds, bool fuse) {
  ExecutorOptions options;
  options.fuse_maps = fuse;
  absl::StatusOr<std::unique_ptr<Iterator>> it = MakeIterator(ds, options);
  EXPECT_TRUE(it.ok()) << it.status();
  std::vector<std::string> out;
  if (!it.ok()) return out;
  for (int i = 0; i < 10000; ++i) {
    Element e;
    bool end = false;
    absl::Status s = (*it)->GetNext(&e, &end);
    if (s.ok() && end) break;
    if (!s.ok()) {
      out.push_back(s.ToString());
      if (!IsElementError(s)) break;
      continue;
    }
    std::string bytes;
    for (const Tensor& t : e.Flatten()) {
      absl::StrAppend(&bytes, t.shape().ToString(), ":",
                      absl::string_view(static_cast<const char*>(t.raw_data()), t.byte_size()),
                      "|");
    }
    out.push_back(std::move(bytes));
  }
  return out;
}

inline Dataset Parse(const std::string& expr) {
  absl::StatusOr<Dataset> ds = Dataset::Parse(expr);
  EXPECT_TRUE(ds.ok()) << expr << ": " << ds.status();
  return ds.ok() ? *ds : Dataset::Range(0);
}

// `source` followed by the maps of `fns` (each `.map(fn<args>)`) and `tail`.
inline Dataset Pipeline(const Dataset& source, const std::vector<std::string>& fns,
                 const std::string& args, const std::string& tail) {
  std::string ops;
  for (const std::string& fn : fns) absl::StrAppend(&ops, ".map(", fn, args, ")");
  const Dataset chain = Parse(absl::StrCat("from_tensors('x')", ops, tail));
  proto::DatasetDef def = source.def();
  for (const proto::OpDef& op : chain.def().ops()) *def.add_ops() = op;
  absl::StatusOr<Dataset> out = Dataset::FromDef(std::move(def));
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : source;
}

}  // namespace pipeline_outcomes
}  // namespace sluice

#endif  // SLUICE_TESTS_CORE_PIPELINE_OUTCOMES_H_
