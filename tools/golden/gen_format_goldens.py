#!/usr/bin/env python3
"""Generates the golden files for Sluice's TF-compatible printing (core/format/tensor_format.h,
include/sluice/per_replica_format.h), using TensorFlow itself as the oracle.

Developer tooling only: the build and the tests never run TensorFlow. Run it with the TF venv:

  /tmp/tfvenv/bin/python tools/golden/gen_format_goldens.py tests/testdata/format

Writes:
  tensors.txt      one case per tensor: how to rebuild it (dtype, shape, exact values) and
                   what str(tensor) and repr(tensor) print.
  per_replica.txt  one case per distributed value / element_spec: the text that print() shows.

tensors.txt format (line oriented; a case never contains a line starting with '@'):
  @case <name>
  @dtype <tf dtype name>
  @shape <d0> <d1> ...            (nothing after '@shape' for a scalar)
  @values <v> <v> ...             row-major; see below
  @str                            followed by the lines of str(tensor)
  @repr                           followed by the lines of repr(tensor)
  @end
Values: integers in decimal; bool as 0/1; float16/bfloat16/float32/float64 as the hex of their
bit pattern (exact); strings as the hex of their bytes ('-' for the empty string).
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

BITS = {
    "float16": np.uint16,
    "bfloat16": np.uint16,
    "float32": np.uint32,
    "float64": np.uint64,
}


def encode_values(t):
  arr = t.numpy()
  arr = np.asarray(arr)
  name = t.dtype.name
  flat = arr.reshape(-1)
  if name in BITS:
    return [format(int(b), "x") for b in flat.view(BITS[name])]
  if name == "bool":
    return ["1" if b else "0" for b in flat]
  if name == "string":
    return [b.hex() if b else "-" for b in flat]
  return [str(int(v)) for v in flat]


def tensor_case(out, name, t):
  text_str = str(t)
  text_repr = repr(t)
  out.append("@case " + name)
  out.append("@dtype " + t.dtype.name)
  out.append(("@shape " + " ".join(str(d) for d in t.shape)).rstrip())
  out.append(("@values " + " ".join(encode_values(t))).rstrip())
  out.append("@str")
  out.extend(text_str.split("\n"))
  out.append("@repr")
  out.extend(text_repr.split("\n"))
  out.append("@end")


def c(values, dtype):
  return tf.constant(values, dtype=dtype)


def tensor_cases():
  nan, inf = float("nan"), float("inf")
  cases = []
  add = lambda name, t: cases.append((name, t))  # noqa: E731

  # Scalars of every dtype.
  add("scalar_bool_true", c(True, tf.bool))
  add("scalar_bool_false", c(False, tf.bool))
  add("scalar_int8", c(-5, tf.int8))
  add("scalar_int16", c(-300, tf.int16))
  add("scalar_int32", c(1, tf.int32))
  add("scalar_int64", c(-7, tf.int64))
  add("scalar_int64_min", c(-2**63, tf.int64))
  add("scalar_uint8", c(255, tf.uint8))
  add("scalar_uint16", c(65535, tf.uint16))
  add("scalar_uint32", c(2**32 - 1, tf.uint32))
  add("scalar_uint64", c(2**64 - 1, tf.uint64))
  for v, n in [(1.0, "1"), (0.7, "0p7"), (1e-5, "1em5"), (1e20, "1e20"), (1e16, "1e16"),
               (9.999e15, "9p999e15"), (-0.0, "negzero"), (nan, "nan"), (inf, "inf"),
               (-inf, "neginf"), (123456.7, "123456p7"), (0.0001, "1em4"),
               (0.00009999, "9p999em5"), (1.5e-7, "1p5em7"), (-2.5e30, "m2p5e30"),
               (16777216.0, "2p24"), (3.4028235e38, "fmax"), (1e-45, "denorm")]:
    add("scalar_float32_" + n, c(v, tf.float32))
  for v, n in [(0.1, "0p1"), (1 / 3, "third"), (1e-300, "1em300"), (1e100, "1e100"),
               (2.0, "2"), (123456789012345.6, "big"), (-1.0, "m1")]:
    add("scalar_float64_" + n, c(v, tf.float64))
  for v, n in [(0.1, "0p1"), (1.0, "1"), (65504.0, "max"), (1e-5, "1em5"), (nan, "nan")]:
    add("scalar_float16_" + n, c(v, tf.float16))
  for v, n in [(0.1, "0p1"), (1.0, "1"), (1e20, "1e20"), (-3.0, "m3"), (nan, "nan"),
               (-inf, "neginf"), (1234567.0, "1234567"), (1e-5, "1em5")]:
    add("scalar_bfloat16_" + n, c(v, tf.bfloat16))
  for v, n in [(b"a", "a"), (b"it's", "squote"), (b'a"b', "dquote"), (b"a\"b'c", "both"),
               (b"\xff", "ff"), (b"", "empty"), (b"\n\t\r\\\x00\x7f", "ctrl"),
               ("é".encode(), "utf8")]:
    add("scalar_string_" + n, c(v, tf.string))

  # Vectors.
  add("vec_int32", c([1, 2], tf.int32))
  add("vec_int32_neg", c([-1, 10, 100], tf.int32))
  add("vec_int64", c([1, 2], tf.int64))
  add("vec_int8", c([-128, 127], tf.int8))
  add("vec_uint8", c([1, 2, 255], tf.uint8))
  add("vec_uint16", c([1, 65535], tf.uint16))
  add("vec_uint32", c([7, 2**32 - 1], tf.uint32))
  add("vec_uint64", c([0, 2**64 - 1], tf.uint64))
  add("vec_int16", c([-3, 4], tf.int16))
  add("vec_bool", c([True, False], tf.bool))
  add("vec_bool_all_true", c([True, True], tf.bool))
  add("vec_bool_all_false", c([False, False], tf.bool))
  add("vec_float32", c([1.5, 2.0], tf.float32))
  add("vec_float32_neg", c([-1.5, 2.0, 0.25], tf.float32))
  add("vec_float32_zeros", c([0.0, 0.0], tf.float32))
  add("vec_float32_negzero", c([-0.0, 1.0], tf.float32))
  add("vec_float32_thirds", c([1 / 3, 2 / 3], tf.float32))
  add("vec_float64_thirds", c([1 / 3, 2 / 3], tf.float64))
  add("vec_float64", c([0.1, 0.123456789012], tf.float64))
  add("vec_float64_plain", c([1.0, 2.5], tf.float64))
  add("vec_float16", c([1.0, 2.5], tf.float16))
  add("vec_float16_mixed", c([0.1, 1e-5, 3.0], tf.float16))
  add("vec_float16_big", c([60000.0, 1.0], tf.float16))
  add("vec_bfloat16", c([1.0, 2.5, 0.1, 1e20, -3.0], tf.bfloat16))
  add("vec_bfloat16_special", c([nan, inf, -inf, -0.0, 0.0], tf.bfloat16))
  add("vec_string", c([b"a", b"bb"], tf.string))
  add("vec_string_mixed", c([b"it's", b'a"b', b"\n\t\\", "é".encode(), b""], tf.string))

  # Scientific notation and non-finite values.
  add("sci_small", c([1e-5, 1.0], tf.float32))
  add("sci_big", c([1e8, 1.0], tf.float32))
  add("sci_just_below_1e8", c([99999990.0, 1.0], tf.float64))
  add("sci_ratio_1001", c([1.0, 1001.0], tf.float32))
  add("sci_ratio_1000", c([1.0, 1000.0], tf.float32))
  add("sci_zero_and_small", c([0.0, 1e-5], tf.float32))
  add("sci_mixed_sign", c([1.5e-10, -2.25e12], tf.float64))
  add("sci_exp3", c([1e-300, 1.0], tf.float64))
  add("sci_exp3_big", c([1e200, -1e-200, 3.0], tf.float64))
  add("sci_long_mantissa", c([1.2345678901e-7, 1.0], tf.float64))
  add("sci_float32_long", c([0.1, 1e-9, 3.3333333], tf.float32))
  add("sci_2p24", c([16777216.0, 1.0], tf.float32))
  add("nan_inf_mixed", c([nan, 1.0, -inf], tf.float32))
  add("nan_only", c([nan], tf.float32))
  add("inf_nan", c([inf, nan], tf.float32))
  add("nan_sci", c([nan, 1e-5, 1.0], tf.float32))
  add("neginf_sci", c([-inf, 1e10], tf.float32))
  add("nonfinite_matrix", c([[nan, inf], [-inf, nan]], tf.float64))
  add("nan_positional_frac", c([nan, 0.125, 10.5], tf.float32))
  add("precision_round", c([0.123456789, 1.0], tf.float64))
  add("precision_round_up", c([0.999999999, 0.5], tf.float64))
  add("precision_round_carry", c([9.999999999, 1.0], tf.float64))
  add("precision_float32_round", c([0.1234567891, 2.0], tf.float32))

  # Matrices and higher rank.
  add("seed_loss", c([[0.7], [0.7]], tf.float32))
  add("seed_four", c([[4.0], [4.0]], tf.float32))
  add("mat_int32", c([[1, 2], [3, 4]], tf.int32))
  add("mat_int64_wide", c([[1, -200], [30000, 4]], tf.int64))
  add("mat_float32", c([[1.0], [1.0]], tf.float32))
  add("mat_float64", c([[1.5, -2.0], [3.25, 4.0]], tf.float64))
  add("mat_bool", c([[True, False], [False, True]], tf.bool))
  add("mat_string", c([[b"a", b"bb"], [b"ccc", b"d"]], tf.string))
  add("rank3_int32", c([[[1, 2], [3, 4]], [[5, 6], [7, 8]]], tf.int32))
  add("rank3_float32", tf.reshape(tf.range(12, dtype=tf.float32) / 4, [2, 3, 2]))
  add("rank4_int32", tf.reshape(tf.range(16), [2, 2, 2, 2]))
  add("rank3_string", c([[[b"x"]], [[b"y"]]], tf.string))
  add("row_vector", c([[1, 2, 3]], tf.int32))
  add("col_1x1", c([[7.5]], tf.float32))

  # Empty tensors.
  add("empty_float32", tf.zeros([0], tf.float32))
  add("empty_float64", tf.zeros([0], tf.float64))
  add("empty_int64", tf.zeros([0], tf.int64))
  add("empty_int32_0x1", tf.zeros([0, 1], tf.int32))
  add("empty_float32_0x1", tf.zeros([0, 1], tf.float32))
  add("empty_float32_2x0x3", tf.zeros([2, 0, 3], tf.float32))
  add("empty_bool", tf.zeros([0], tf.bool))
  add("empty_string", tf.zeros([0], tf.string))
  add("empty_string_3x0", tf.zeros([3, 0], tf.string))

  # Long rows that wrap.
  add("wrap_int32_40", tf.range(40, dtype=tf.int32))
  add("wrap_int64_100", tf.range(100, dtype=tf.int64) * 1000)
  add("wrap_float32_30", tf.range(30, dtype=tf.float32) * 1.1)
  add("wrap_float64_30", tf.range(30, dtype=tf.float64) / 7)
  add("wrap_bool_30", tf.constant([i % 3 == 0 for i in range(30)]))
  add("wrap_string_40", tf.constant([("s%d" % i).encode() for i in range(40)]))
  add("wrap_matrix_float32", tf.reshape(tf.range(60, dtype=tf.float32) / 3, [3, 20]))
  add("wrap_rank3_int32", tf.reshape(tf.range(120) * 12345, [2, 3, 20]))
  add("wrap_bfloat16_40", tf.cast(tf.range(40, dtype=tf.float32) / 3, tf.bfloat16))
  add("wrap_repr_dtype_newline", c([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0,
                                    12.0, 13.5], tf.float32))

  # More than 1000 elements: summarised with '...'.
  add("sum_range_2000", tf.range(2000, dtype=tf.int32))
  add("sum_range_1001_int64", tf.range(1001, dtype=tf.int64))
  add("sum_range_1000_int64", tf.range(1000, dtype=tf.int64))
  add("sum_matrix_20x100", tf.reshape(tf.range(2000, dtype=tf.float32), [20, 100]))
  add("sum_rank3_10x10x20", tf.reshape(tf.range(2000, dtype=tf.int32), [10, 10, 20]))
  add("sum_3x1000", tf.reshape(tf.range(3000, dtype=tf.int32), [3, 1000]))
  add("sum_1000x2", tf.reshape(tf.range(2000, dtype=tf.float64) / 8, [1000, 2]))
  add("sum_bool_1200", tf.constant([i % 2 == 0 for i in range(1200)]))
  add("sum_string_1100", tf.constant([("v%d" % i).encode() for i in range(1100)]))
  add("sum_float32_tail_small", tf.concat([tf.ones([1000]), tf.constant([1e-7, 2.0])], 0))

  # Random values across magnitudes, to cover the float formatting rules broadly.
  rng = np.random.default_rng(1234)
  for i in range(120):
    dtype = [tf.float32, tf.float64, tf.float16][i % 3]
    n = int(rng.integers(1, 12))
    scale = 10.0 ** rng.integers(-6, 10)
    vals = rng.standard_normal(n) * scale
    if i % 7 == 0:
      vals = np.round(vals, int(rng.integers(0, 4)))
    if i % 11 == 0:
      vals[0] = [np.nan, np.inf, -np.inf][i % 3]
    shape = [n] if i % 4 else [1, n]
    add("random_%d" % i, tf.reshape(c(vals, dtype), shape))
  for i in range(20):
    dtype = [tf.int8, tf.int32, tf.int64, tf.uint16][i % 4]
    lo, hi = {tf.int8: (-128, 128), tf.int32: (-10**6, 10**6), tf.int64: (-10**12, 10**12),
              tf.uint16: (0, 65536)}[dtype]
    n = int(rng.integers(1, 40))
    add("random_int_%d" % i, c(rng.integers(lo, hi, n), dtype))
  return cases


def make_strategy():
  cpus = tf.config.list_physical_devices("CPU")
  tf.config.set_logical_device_configuration(
      cpus[0], [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])
  return tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"])


def per_replica_cases(strategy):
  """Distributed values and specs. The C++ test rebuilds each one by name."""
  out = []

  def add(name, text):
    out.append("@case " + name)
    out.extend(text.split("\n"))
    out.append("@end")

  def first(ds):
    dist = strategy.experimental_distribute_dataset(ds)
    return next(iter(dist)), dist.element_spec

  # Seed: from_tensor_slices([1,2,3,4]).repeat().batch(4): replica 0 [1 2], replica 1 [3 4].
  v, spec = first(tf.data.Dataset.from_tensor_slices([1, 2, 3, 4]).repeat().batch(4))
  add("leaf_int32", str(v))
  add("leaf_int32_repr", repr(v))
  add("leaf_int32_spec", repr(spec))
  # Seed: ([1.],[2]) tuples.
  v, spec = first(tf.data.Dataset.from_tensors(([1.0], [2])).repeat(4).batch(4))
  add("tuple_f32_i32", str(v))
  add("tuple_f32_i32_spec", repr(spec))
  v, spec = first(tf.data.Dataset.from_tensors({"b": [1.0], "a": ([2],)}).repeat(4).batch(4))
  add("dict_b_a", str(v))
  add("dict_b_a_spec", repr(spec))
  v, spec = first(tf.data.Dataset.from_tensors(([7],)).repeat(4).batch(4))
  add("tuple1", str(v))
  v, spec = first(tf.data.Dataset.from_tensors([[4.0]]).repeat(4).batch(4))
  add("leaf_seed_four", str(v))
  v, spec = first(tf.data.Dataset.from_tensors(b"x").repeat(4).batch(4))
  add("leaf_string", str(v))
  return out


def stress_cases(n, seed):
  """Many random float/int tensors; for a developer's local run, not committed."""
  rng = np.random.default_rng(seed)
  cases = []
  for i in range(n):
    dtype = [tf.float32, tf.float64, tf.float16, tf.bfloat16, tf.int64][i % 5]
    shape = [int(d) for d in rng.integers(1, 9, int(rng.integers(1, 4)))]
    size = int(np.prod(shape))
    scale = 10.0 ** rng.integers(-12, 14)
    vals = rng.standard_normal(size) * scale
    mode = i % 6
    if mode == 1:
      vals = np.round(vals, int(rng.integers(0, 6)))
    elif mode == 2:
      vals = vals * 10.0 ** rng.integers(-3, 4, size)
    elif mode == 3:
      vals[rng.integers(0, size)] = [np.nan, np.inf, -np.inf, 0.0][i % 4]
    if dtype == tf.int64:
      vals = np.clip(vals, -9e18, 9e18).astype(np.int64)
    cases.append(("stress_%d" % i, tf.reshape(c(vals, dtype), shape)))
  return cases


def main():
  if len(sys.argv) > 1 and sys.argv[1] == "--stress":
    # --stress N FILE: N random cases in tensors.txt format, to check locally with
    # SLUICE_FORMAT_GOLDEN_FILE=FILE build/.../core_tests --gtest_filter=TensorFormat*.
    lines = []
    for name, t in stress_cases(int(sys.argv[2]), 99):
      tensor_case(lines, name, t)
    with open(sys.argv[3], "w") as f:
      f.write("\n".join(lines) + "\n")
    return
  outdir = sys.argv[1] if len(sys.argv) > 1 else "tests/testdata/format"
  os.makedirs(outdir, exist_ok=True)
  strategy = make_strategy()  # before any op runs: logical devices are set once
  lines = ["# Generated by tools/golden/gen_format_goldens.py with TensorFlow %s, numpy %s."
           % (tf.__version__, np.__version__)]
  for name, t in tensor_cases():
    tensor_case(lines, name, t)
  with open(os.path.join(outdir, "tensors.txt"), "w") as f:
    f.write("\n".join(lines) + "\n")
  lines = ["# Generated by tools/golden/gen_format_goldens.py with TensorFlow %s." %
           tf.__version__]
  lines.extend(per_replica_cases(strategy))
  with open(os.path.join(outdir, "per_replica.txt"), "w") as f:
    f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
  main()
