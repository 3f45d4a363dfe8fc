// TF's bilinear resize (tf.image.resize(method='bilinear', antialias=False): half-pixel centers)
// of a window of uint8 pixels into float32, separable and in the same float operations as TF's
// kernel, so the values are TF's bit for bit when the window is read at full size:
//   top    = tl + (tr - tl) * x_lerp        (per source row, once: a horizontal pass)
//   bottom = bl + (br - bl) * x_lerp
//   out    = top + (bottom - top) * y_lerp  (a vertical pass over whole rows: vectorizes)
// The horizontal pass of a source row is computed once and kept while consecutive output rows
// use it. No allocation: the caller passes the taps and a scratch of 2 * out_w * channels floats.
//
// Fused steps (map fusion, core/data/ops/map_fusion.h): a mirrored output is the same call with
// taps_x reversed (each output value is computed exactly as without the mirror, only written
// elsewhere), and a per-channel normalize, (v - mean) / std, is applied to each value v as the
// vertical pass writes it, in the same float operations as normalize() applies them afterwards:
// the values are bit for bit those of resize, then flip, then normalize.
//
// Where the CPU has AVX2 (__builtin_cpu_supports, checked once) the horizontal pass runs with
// AVX2 gathers and the vertical pass (with the normalize) 8 values at a time, else both are
// scalar; each value is computed with the same float operations either way (no fused
// multiply-add), so the values are the same bit for bit on every x86-64 CPU.
//
// Thread safety: plain functions on caller-owned memory (each thread keeps its own gather
// plan).
#ifndef SLUICE_CORE_BILINEAR_RESIZE_H_
#define SLUICE_CORE_BILINEAR_RESIZE_H_

#include <cstdint>

namespace sluice {

// The two source pixels one output coordinate reads, and the weight of the second.
struct BilinearTap {
  int64_t lower = 0;
  int64_t upper = 0;
  float lerp = 0;
};

// The taps of `out_size` outputs over a window of `extent` source pixels (extent > 0) whose first
// pixel is source index `base`, as TF computes them for an input of `extent` pixels:
// in = offset + (i + 0.5) * scale - 0.5 with scale = float(extent_scaled) / float(out_size),
// clamped to [0, extent - 1], plus `base`. `offset` (in [0, 1)) and `extent_scaled` place a
// window that starts and ends between source pixels (a DCT-scaled decode): a window at full size
// has offset 0 and extent_scaled == extent, TF's own taps.
void ComputeBilinearTaps(int64_t out_size, int64_t base, int64_t extent, float offset,
                         float extent_scaled, BilinearTap* taps);

// out[y][x][k] from the source rows taps_y[y].lower/upper and columns taps_x[x].lower/upper of
// `src` (row r at src + r * row_stride bytes, `channels` interleaved uint8 values a pixel).
// `scratch` holds 2 * out_w * channels floats. With `normalize` set (arrays of out_w * channels
// floats: the channel's mean and std repeated for every pixel of a row), each value written is
// (v - mean[j]) / std[j] instead of v.
struct RowNormalize {
  const float* mean = nullptr;
  const float* std = nullptr;
};
void ResizeBilinearU8(const uint8_t* src, int64_t row_stride, int64_t channels,
                      const BilinearTap* taps_y, int64_t out_h, const BilinearTap* taps_x,
                      int64_t out_w, float* out, float* scratch,
                      const RowNormalize* normalize = nullptr);

// Whether ResizeBilinearU8 takes the AVX2 passes: the CPU has AVX2 and
// TEST_ForceScalarBilinearResize(true) is not in effect.
bool BilinearResizeUsesAvx2();
// Tests and benchmarks only: makes both passes scalar (true) or back to the CPU's
// choice (false), process-wide, for the calls that start afterwards.
void TEST_ForceScalarBilinearResize(bool scalar);

}  // namespace sluice

#endif  // SLUICE_CORE_BILINEAR_RESIZE_H_
