#!/bin/bash
# Issue 14's executor benchmark, one command: Sluice in-process (build/bench/executor_bench)
# next to TensorFlow's tf.data in-process (bench/tf_executor_reference.py, skipped when the
# TensorFlow venv is absent) on range(N).batch(B) and TFRecord .map(parse_example).batch(256).
#
#   bench/executor_bench.sh [BUILD_DIR] [TF_PYTHON]
#
# Writes 4 files of 16,384 Examples of ~3 KB (sluicectl gen) into a temporary folder, removed
# at exit. Environment: RANGE_ELEMENTS (default 33554432), REPS (3), PARALLEL (2), IMAGES (the
# folder of WebDataset shards bench/image_bench wrote, e.g. /tmp/sluice-image-bench: adds the
# image pipeline's rows, sequential, PARALLEL calls and AUTOTUNE; default none).
set -euo pipefail
build=${1:-build}
tf_python=${2:-/work/tfvenv/bin/python}
range_elements=${RANGE_ELEMENTS:-33554432}
reps=${REPS:-3}
parallel=${PARALLEL:-2}
images=${IMAGES:-}
here=$(cd "$(dirname "$0")" && pwd)
records=$(mktemp -d)
trap 'rm -rf "$records"' EXIT

"$build/bin/sluicectl" gen --format=tfrecord --out="$records" --num_files=4 \
  --records_per_file=16384 --image_bytes=3072 > /dev/null
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"
echo
"$build/bench/executor_bench" --range_elements="$range_elements" --records="$records" \
  --parallel="$parallel" --reps="$reps" --maps=sequential,parallel,autotune,batched \
  ${images:+--images="$images"}
echo
if [[ -x "$tf_python" ]] && "$tf_python" -c 'import tensorflow' 2> /dev/null; then
  "$tf_python" "$here/tf_executor_reference.py" --range_elements="$range_elements" \
    --records="$records" --parallel="$parallel" --reps="$reps"
else
  echo "(TensorFlow not found at $tf_python: tf.data rows skipped)"
fi
echo
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
