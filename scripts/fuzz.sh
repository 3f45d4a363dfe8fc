#!/usr/bin/env bash
# Runs the libFuzzer targets of tests/fuzz for a while each: configures a Clang build in
# build-fuzz with -DSLUICE_LIBFUZZER=ON (needs clang and its libFuzzer runtime; Debian:
# apt-get install clang libclang-rt-dev or clang-14), builds them and fuzzes from the seed
# corpora. CI runs the standalone drivers instead (ctest -L fuzz), which need no Clang.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET]   (default 60)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
cxx="$(command -v clang++ || command -v clang++-14 || true)"
cc="$(command -v clang || command -v clang-14 || true)"
if [[ -z "$cxx" || -z "$cc" ]]; then
  echo "fuzz.sh: clang not found (apt-get install clang)" >&2
  exit 1
fi
cmake -S . -B build-fuzz -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSLUICE_LIBFUZZER=ON -DSLUICE_BUILD_BENCHMARKS=OFF
# Every target in tests/fuzz (<name>_fuzz.cc).
targets=()
for f in tests/fuzz/*_fuzz.cc; do
  name="$(basename "$f" _fuzz.cc)"
  targets+=("$name")
done
cmake --build build-fuzz -j"$(nproc)" --target "${targets[@]/%/_libfuzzer}"
for target in "${targets[@]}"; do
  work="build-fuzz/fuzz-corpus/$target"
  mkdir -p "$work"
  "build-fuzz/tests/fuzz/${target}_libfuzzer" -max_total_time="$seconds" -rss_limit_mb=2048 \
    "$work" "tests/fuzz/corpus/$target"
done
