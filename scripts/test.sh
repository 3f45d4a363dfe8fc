#!/usr/bin/env bash
# Builds Sluice and runs the whole test suite through CTest. Works on a fresh Debian 12 machine:
# installs what is missing first. Extra arguments go to ctest (e.g. -L core, -R Seed).
#
#   scripts/test.sh [--sanitize=address|thread] [ctest args...]
#
# --sanitize builds the same suite with ASan+UBSan (address) or TSan (thread) into build-asan /
# build-tsan and runs it there: slower, for developers (CI runs the plain build).
#
# Under CI=true (as CI runners set it) a test dependency this script installs (the Debian
# packages, slurm-wlm and munge, moto[server] for the storage tests) that it could not install
# is an error, not a line on stderr: the tests that need it would skip, and CI would look green.
# The tests check the same themselves (python/tests/dependencies.py, tests/storage/), and a
# CTest run that finds no test at all fails (--no-tests=error).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
in_ci() { case "${CI:-}" in [Tt][Rr][Uu][Ee] | 1 | [Yy][Ee][Ss]) return 0 ;; esac; return 1; }
# A test dependency that could not be installed: an error under CI=true, else a warning.
missing_test_dependency() {
  if in_ci; then
    echo "sluice: $1; CI=true requires it" >&2
    exit 1
  fi
  echo "sluice: $1" >&2
}
sluice_install_deps
# slurm-wlm and munge: only for the Slurm end-to-end test (ctest -L slurm), which skips without them.
sluice_install_deps slurm-wlm munge ||
  missing_test_dependency "slurm-wlm/munge not installed; the slurm test will skip"
cmake_args=()
SLUICE_BUILD=build
if [[ "${1:-}" == --sanitize=* ]]; then
  kind="${1#--sanitize=}"
  shift
  case "$kind" in
    address) SLUICE_BUILD=build-asan ;;
    thread) SLUICE_BUILD=build-tsan ;;
    *) echo "test.sh: --sanitize must be address or thread, not '$kind'" >&2; exit 2 ;;
  esac
  cmake_args=(-DSLUICE_SANITIZE="$kind" -DSLUICE_BUILD_BENCHMARKS=OFF)
  # Leaks of the gRPC and protobuf singletons at exit are not ours; the rest halts the test.
  export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1}"
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
  # gRPC, protobuf and Abseil are Debian's uninstrumented libraries: they synchronise with
  # atomics TSan cannot see, so the libc calls they make (recvmsg, memcpy, calloc...) would be
  # reported against each other; ignore_noninstrumented_modules drops the accesses of calls made
  # from them (Abseil's locks are annotated instead: cmake/tsan_absl_sync.cc). scripts/tsan.supp
  # holds the remaining third-party false positives, each with why.
  export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:ignore_noninstrumented_modules=1:suppressions=$PWD/scripts/tsan.supp}"
fi
export SLUICE_BUILD
sluice_build "${cmake_args[@]}"
# moto[server] from PyPI for the storage tests (ctest -L storage), which skip without it.
sluice_install_storage_server() {
  local venv="$SLUICE_BUILD/storage-venv"
  [[ -x $venv/bin/moto_server ]] && return 0
  sluice_install_deps python3-venv || return 1
  python3 -m venv "$venv" && "$venv/bin/pip" install -q 'moto[server]'
}
sluice_install_storage_server ||
  missing_test_dependency "could not install moto[server] into $SLUICE_BUILD/storage-venv; the storage tests will skip"
ctest --test-dir "$SLUICE_BUILD" --output-on-failure --no-tests=error -j"$(nproc)" --timeout 600 "$@"
