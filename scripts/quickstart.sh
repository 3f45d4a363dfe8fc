#!/usr/bin/env bash
# Sluice quick start. On a fresh Debian 12 machine: installs the Debian packages that are
# missing, builds everything into build/, then runs the seed's five examples (C++ programs that
# print what TensorFlow prints for them), a trainer loop, and `sluicectl` on a seed pipeline,
# printing its per-replica batches.
#
# Today the pipelines run in-process (local mode). Without a GPU the "GPU:i" devices use host
# memory; a one-time warning on stderr says so.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
sluice_install_deps
sluice_build

section() { printf '\n=== %s\n' "$*"; }

for example in seed_for_loop seed_explicit_iterator seed_input_signature seed_element_spec seed_iter; do
  section "examples/${example}.cc"
  "build/examples/${example}"
done

section "examples/trainer_loop.cc: SGD on two replicas, GetNextAsOptional to the end of each epoch"
build/examples/trainer_loop

PIPELINE='from_tensor_slices([1, 2, 3, 4]).repeat().batch(4)'
section "sluicectl run --pipeline='${PIPELINE}' --devices=GPU:0,GPU:1 --steps=2"
build/bin/sluicectl run --pipeline="${PIPELINE}" --devices=GPU:0,GPU:1 --steps=2

section "sluicectl run --pipeline='range(10).batch(4)' --devices=GPU:0,GPU:1 --format=json"
build/bin/sluicectl run --pipeline='range(10).batch(4)' --devices=GPU:0,GPU:1 --format=json

SPEC_PIPELINE='from_tensors(([1.],[2])).repeat(100).batch(16)'
section "sluicectl element-spec --pipeline='${SPEC_PIPELINE}' --devices=GPU:0,GPU:1"
build/bin/sluicectl element-spec --pipeline="${SPEC_PIPELINE}" --devices=GPU:0,GPU:1

section "done: see README.md for more (./scripts/test.sh runs the test suite)"
