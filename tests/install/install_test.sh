#!/usr/bin/env bash
# The install test (CTest label `install`): what a trainer outside this repository does.
#   1. cmake --install BUILD_DIR into a temporary prefix;
#   2. configure and build tests/install/trainer/ (find_package(Sluice), sluice::client) against it;
#   3. run the trainer with a local pipeline, then against the installed sluice-coordinator and
#      sluice-worker started on loopback (port 0), and compare both outputs with the expected steps.
# Every process started here is stopped on exit; every wait is bounded.
#
# Usage: install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice-install-test.XXXXXX")
pids=()
cleanup() {
  for pid in "${pids[@]}"; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT

fail() {
  echo "install_test: $*" >&2
  exit 1
}

# Waits (at most 60 s) until the server of pid $2 writes its port to file $1; prints the port.
wait_port() {
  local file=$1 pid=$2 name=$3
  for _ in $(seq 600); do
    if [[ -s $file ]] && [[ $(cat "$file") =~ ^[0-9]+$ ]]; then
      cat "$file"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || fail "$name exited before writing its port (log: $(cat "$tmp/$name.log"))"
    sleep 0.1
  done
  fail "$name wrote no port to $file within 60 s"
}

prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" > "$tmp/install.log" || fail "cmake --install failed: $(cat "$tmp/install.log")"
for f in bin/sluice-coordinator bin/sluice-worker bin/sluicectl include/sluice/strategy.h \
    lib/cmake/Sluice/SluiceConfig.cmake; do
  [[ -e $prefix/$f ]] || fail "the install has no $f"
done
# Installed headers stand alone: nothing but sluice/, the standard library and Abseil.
if grep -rhE '^#include "' "$prefix/include/sluice" | grep -vE '^#include "(sluice|absl)/'; then
  fail "an installed header includes something outside sluice/ and absl/"
fi

launcher=()
if command -v ccache > /dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S "$src/tests/install/trainer" -B "$tmp/trainer" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" "${launcher[@]}" > "$tmp/configure.log" 2>&1 ||
  fail "configuring the out-of-tree trainer failed: $(cat "$tmp/configure.log")"
cmake --build "$tmp/trainer" > "$tmp/build.log" 2>&1 ||
  fail "building the out-of-tree trainer failed: $(cat "$tmp/build.log")"

# range(8).batch(4) over two replicas: two steps, each global batch cut in two.
cat > "$tmp/expected.txt" <<'TXT'
PerReplica:{
  0: tf.Tensor([0 1], shape=(2,), dtype=int64),
  1: tf.Tensor([2 3], shape=(2,), dtype=int64)
}
PerReplica:{
  0: tf.Tensor([4 5], shape=(2,), dtype=int64),
  1: tf.Tensor([6 7], shape=(2,), dtype=int64)
}
TXT

"$tmp/trainer/trainer" local > "$tmp/local.txt" || fail "trainer local failed"
diff -u "$tmp/expected.txt" "$tmp/local.txt" || fail "trainer local printed other steps"

"$prefix/bin/sluice-coordinator" --port=0 --port_file="$tmp/coordinator.port" \
  > "$tmp/sluice-coordinator.log" 2>&1 &
pids+=($!)
coordinator_port=$(wait_port "$tmp/coordinator.port" "${pids[-1]}" sluice-coordinator)
"$prefix/bin/sluice-worker" --coordinator="127.0.0.1:$coordinator_port" --port=0 \
  --port_file="$tmp/worker.port" > "$tmp/sluice-worker.log" 2>&1 &
pids+=($!)
wait_port "$tmp/worker.port" "${pids[-1]}" sluice-worker > /dev/null

"$tmp/trainer/trainer" service "127.0.0.1:$coordinator_port" > "$tmp/service.txt" ||
  fail "trainer service failed (coordinator log: $(cat "$tmp/sluice-coordinator.log"))"
diff -u "$tmp/expected.txt" "$tmp/service.txt" || fail "trainer service printed other steps"
echo "install_test: installed, built out of tree, local and service runs match"
