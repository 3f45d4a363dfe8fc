#!/usr/bin/env bash
# Packs the GPU check's binaries (gpu_tests, prefetch_bench) and the shared libraries they need
# beyond glibc into a folder, for a GPU machine that has the CUDA driver but not Sluice's build
# dependencies; tests/gpu/run.sh runs such a bundle when it cannot configure the project.
#
#   tests/gpu/make_bundle.sh BUILD_DIR [BUNDLE_DIR]     (default bundle: .gpu-bundle)
#
# BUILD_DIR must have been configured with CUDA and benchmarks on, and both targets built.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:?usage: make_bundle.sh BUILD_DIR [BUNDLE_DIR]}
BUNDLE=${2:-.gpu-bundle}
rm -rf "$BUNDLE"
mkdir -p "$BUNDLE/lib"
for bin in "$BUILD/tests/gpu/gpu_tests" "$BUILD/bench/prefetch_bench"; do
  [ -x "$bin" ] || { echo "missing $bin: build gpu_tests and prefetch_bench first" >&2; exit 1; }
  cp "$bin" "$BUNDLE/"
  strip --strip-debug "$BUNDLE/$(basename "$bin")"
  # Every resolved library except glibc's own (the target machine's glibc is newer).
  ldd "$bin" | awk '/=> \// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libcuda.so*) ;;
      *) cp -Ln "$lib" "$BUNDLE/lib/" ;;
    esac
  done
done
strip --strip-unneeded "$BUNDLE"/lib/*.so* 2>/dev/null || true
du -sh "$BUNDLE"
