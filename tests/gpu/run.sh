#!/usr/bin/env bash
# The GPU check: builds Sluice with CUDA, runs the `gpu`-labelled tests and the host -> device
# prefetch benchmark. Fits in 10 minutes on an H200 machine (16 cores): the build is the long
# part; the tests take seconds and the benchmark well under a minute.
#
#   tests/gpu/run.sh [BUILD_DIR]          (default: build-gpu, under the repository root)
#
# Environment: JOBS (parallel build jobs, default nproc), BENCH_ARGS (extra prefetch_bench
# flags), OUT (if set, logs are copied there).
#
# A machine that has the CUDA toolkit but not Sluice's build dependencies (Abseil, gRPC,
# protobuf, GoogleTest) cannot configure the project. Then, if a prebuilt bundle made by
# tests/gpu/make_bundle.sh is present (.gpu-bundle/ in the repository root, or GPU_BUNDLE), its
# binaries run instead: the same tests (by their gtest names) and the same benchmark. The
# bundle is ~12 MB; to send it to a lent GPU machine, build here (CUDA toolkit, benchmarks on),
# run `tests/gpu/make_bundle.sh BUILD_DIR .gpu-bundle`, keep `.gpu-bundle/` out of git
# (`echo /.gpu-bundle/ >> .git/info/exclude`) and name it in the device tool's `carry`.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
BUILD=${1:-build-gpu}
JOBS=${JOBS:-$(nproc)}
BUNDLE=${GPU_BUNDLE:-$ROOT/.gpu-bundle}
LOGDIR=${OUT:-$ROOT/$BUILD}
mkdir -p "$LOGDIR"
status=0

echo "== GPU"
nvidia-smi -L 2>/dev/null || echo "(nvidia-smi: none; the gpu tests will skip)"

run_bundle() {
  echo "== running the prebuilt bundle in $BUNDLE"
  export LD_LIBRARY_PATH="$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  (cd "$ROOT" && SLUICE_BUILD_DIR="$BUNDLE" "$BUNDLE/gpu_tests" --gtest_brief=0) \
    2>&1 | tee "$LOGDIR/gpu_tests.log" || status=1
  echo "== prefetch benchmark"
  # shellcheck disable=SC2086
  "$BUNDLE/prefetch_bench" ${BENCH_ARGS:-} 2>&1 | tee "$LOGDIR/prefetch_bench.log" || status=1
  exit $status
}

echo "== configure ($BUILD)"
if ! cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DSLUICE_ENABLE_CUDA=ON \
      -DSLUICE_BUILD_TESTS=ON -DSLUICE_BUILD_BENCHMARKS=ON >"$LOGDIR/configure.log" 2>&1; then
  tail -20 "$LOGDIR/configure.log"
  if [ -x "$BUNDLE/gpu_tests" ]; then
    echo "configure failed (missing build dependencies?); falling back to the bundle"
    run_bundle
  fi
  echo "configure failed and there is no prebuilt bundle"
  exit 1
fi
if ! grep -q "CUDA toolkit .* found" "$LOGDIR/configure.log"; then
  echo "CMake did not find the CUDA toolkit: this check needs it (set CUDAToolkit_ROOT)"
  exit 1
fi

echo "== build (gpu_tests, prefetch_bench; -j$JOBS)"
if ! cmake --build "$BUILD" -j"$JOBS" --target sluice_cuda gpu_tests prefetch_bench \
      >"$LOGDIR/build.log" 2>&1; then
  grep -E "error|Error" "$LOGDIR/build.log" | head -40
  exit 1
fi

echo "== ctest -L gpu"
(cd "$BUILD" && ctest -L gpu --output-on-failure --timeout 600) 2>&1 | tee "$LOGDIR/ctest.log" \
  || status=1

echo "== prefetch benchmark"
# shellcheck disable=SC2086
"$BUILD/bench/prefetch_bench" ${BENCH_ARGS:-} 2>&1 | tee "$LOGDIR/prefetch_bench.log" || status=1
exit $status
