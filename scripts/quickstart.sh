#!/usr/bin/env bash
# Sluice quick start. On a fresh Debian 12 machine: installs the Debian packages that are
# missing and builds everything into build/; runs the seed's five examples in-process; then
# starts a Sluice service on loopback (a sluice-coordinator and two sluice-workers,
# deploy/local/start_local_cluster.sh) and runs the seed's `__iter__` and for-loop example
# pipelines through it with `sluicectl run --coordinator`, printing the per-replica batches, a
# job read by two trainer processes in lockstep, and `sluicectl status`. Finally it stops every
# process with SIGTERM and checks that each exited 0.
#
# Nothing is left running, even when a step fails: a trap stops the cluster on exit.
# Without a GPU the "GPU:i" devices use host memory; a one-time warning on stderr says so.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
sluice_install_deps
sluice_build

section() { printf '\n=== %s\n' "$*"; }
CTL=build/bin/sluicectl

section "In-process (local mode): the seed's five examples, as C++ programs"
for example in seed_for_loop seed_explicit_iterator seed_input_signature seed_element_spec seed_iter; do
  echo "--- examples/${example}.cc"
  "build/examples/${example}"
done

section "Starting a Sluice service on loopback: sluice-coordinator + 2 sluice-workers"
source deploy/local/start_local_cluster.sh
SLUICE_BIN_DIR=build/bin sluice_cluster_start 2
COORD="--coordinator=${SLUICE_COORDINATOR}"

ITER_PIPELINE='from_tensor_slices([1, 2, 3, 4]).repeat().batch(4)'
section "sluicectl register ${COORD} --pipeline='${ITER_PIPELINE}'"
"$CTL" register "$COORD" --pipeline="$ITER_PIPELINE"

section "The seed's __iter__ example through the service (print(next(iter(dist_dataset))))"
echo "sluicectl run ${COORD} --job=seed-iter --pipeline='${ITER_PIPELINE}' --devices=GPU:0,GPU:1 --steps=1"
"$CTL" run "$COORD" --job=seed-iter --pipeline="$ITER_PIPELINE" --devices=GPU:0,GPU:1 --steps=1

FOR_PIPELINE='from_tensors(([1.],[1.])).repeat(4).batch(4)'
section "The seed's for-loop example through the service (for x in dist_dataset: print(x))"
echo "sluicectl run ${COORD} --job=seed-for-loop --pipeline='${FOR_PIPELINE}' --devices=GPU:0,GPU:1"
"$CTL" run "$COORD" --job=seed-for-loop --pipeline="$FOR_PIPELINE" --devices=GPU:0,GPU:1

SPEC_PIPELINE='from_tensors(([1.],[2])).repeat(100).batch(16)'
section "element_spec, answered by the coordinator over RPC"
echo "sluicectl element-spec ${COORD} --pipeline='${SPEC_PIPELINE}' --devices=GPU:0,GPU:1"
"$CTL" element-spec "$COORD" --pipeline="$SPEC_PIPELINE" --devices=GPU:0,GPU:1

section "One job, two trainer processes x 2 replicas, coordinated: range(10).batch(4)"
echo "(global batch 4 over 4 replicas; the partial last step gives size-0 batches to the replicas"
echo " without data, and both processes end at the same step)"
OUT_DIR=$(mktemp -d "${TMPDIR:-/tmp}/sluice-quickstart.XXXXXX")
consumer_pids=()
for c in 0 1; do
  "$CTL" run "$COORD" --job=two-trainers --pipeline='range(10).batch(4)' --devices=CPU:0,CPU:1 \
    --consumer_index=$c --num_consumers=2 --sharding_policy=DATA --retry_deadline=60s \
    >"$OUT_DIR/consumer-$c.txt" 2>"$OUT_DIR/consumer-$c.log" &
  consumer_pids+=($!)
  sluice_cluster_track $!  # killed by the exit trap if this script stops early
done
for c in 0 1; do
  if ! wait "${consumer_pids[c]}"; then
    echo "consumer $c failed:" >&2
    cat "$OUT_DIR/consumer-$c.log" >&2
    exit 1
  fi
done
for c in 0 1; do
  echo "--- trainer process $c (sluicectl run --consumer_index=$c --num_consumers=2)"
  cat "$OUT_DIR/consumer-$c.txt"
done
rm -rf "$OUT_DIR"

section "sluicectl status ${COORD}"
sleep 1  # let the workers report their finished tasks (heartbeats)
"$CTL" status "$COORD"

section "Stopping the service (SIGTERM; every process must exit 0)"
sluice_cluster_stop
trap - EXIT INT TERM

section "done: see README.md for more (./scripts/test.sh runs the test suite)"
