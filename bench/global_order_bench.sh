#!/usr/bin/env bash
# Global-order read throughput through a real local cluster (a coordinator and W workers on
# loopback): one trainer process reads an epoch of TFRecord Examples (parse_example, batch B)
# under SHARDING_DATA (sequential reads, one task per worker) and SHARDING_RANGES with
# --shuffle=none, block and full (random access: one pread per record for full). Prints one
# line per mode: steps, seconds, records/s and MB/s of record bytes.
#
#   bench/global_order_bench.sh [WORKERS=2] [FILES=8] [RECORDS_PER_FILE=2048] [IMAGE_BYTES=3072]
#
# Needs a build in build/ (or SLUICE_BIN_DIR). Results go in bench/RESULTS.md by hand, with the
# machine they were measured on.
set -euo pipefail
cd "$(dirname "$0")/.."
WORKERS=${1:-2}
FILES=${2:-8}
RECORDS=${3:-2048}
IMAGE_BYTES=${4:-3072}
BATCH=256
BIN=${SLUICE_BIN_DIR:-build/bin}
export SLUICE_BIN_DIR=$BIN

DATA_DIR=$(mktemp -d)
source deploy/local/start_local_cluster.sh
trap 'sluice_cluster_stop >/dev/null 2>&1 || true; rm -rf "$DATA_DIR"' EXIT

"$BIN/sluicectl" gen --format=tfrecord --out="$DATA_DIR" --num_files="$FILES" \
  --records_per_file="$RECORDS" --image_bytes="$IMAGE_BYTES" >/dev/null
files=$(ls "$DATA_DIR"/*.tfrecord | sed "s/.*/'&'/" | paste -sd, -)
pipeline="tf_record_dataset([$files]).map(parse_example({'label': FixedLenFeature([], tf.int64)})).batch($BATCH)"
total_records=$((FILES * RECORDS))
total_mb=$(awk "BEGIN { printf \"%.1f\", $total_records * $IMAGE_BYTES / 1e6 }")
# Record indexes are built once per file and cached next to it: build them before timing.
"$BIN/sluicectl" index "$DATA_DIR"/*.tfrecord >/dev/null

sluice_cluster_start "$WORKERS" >/dev/null
echo "workers=$WORKERS records=$total_records record_bytes=$IMAGE_BYTES (~${total_mb} MB) batch=$BATCH"
for mode in DATA RANGES:none RANGES:block RANGES:full; do
  policy=${mode%%:*}
  shuffle=${mode#*:}
  [[ "$policy" == "$mode" ]] && shuffle=none
  start=$(date +%s.%N)
  steps=$("$BIN/sluicectl" run --coordinator="$SLUICE_COORDINATOR" --pipeline="$pipeline" \
    --devices=CPU:0 --sharding_policy="$policy" --shuffle="$shuffle" --seed=7 \
    --format=json | wc -l)
  end=$(date +%s.%N)
  awk -v m="$mode" -v s="$steps" -v a="$start" -v b="$end" -v n="$total_records" \
      -v mb="$total_mb" 'BEGIN { t = b - a; printf "%-13s steps=%d  %.2f s  %.0f records/s  %.1f MB/s\n", m, s, t, n / t, mb / t }'
done
