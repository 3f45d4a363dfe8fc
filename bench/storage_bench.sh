#!/usr/bin/env bash
# TFRecord reading from local files vs the same files on a local S3-compatible server (moto in
# server mode from build/storage-venv, which scripts/test.sh installs), through Sluice's s3://
# file system with its defaults (4 MiB ranged GETs, 4 in flight). Results: bench/RESULTS.md.
#
#   bench/storage_bench.sh [MB=64] [REPS=3]
set -euo pipefail
cd "$(dirname "$0")/.."
mb=${1:-64}
reps=${2:-3}
venv=build/storage-venv/bin
[[ -x $venv/moto_server ]] || { echo "no $venv/moto_server (run scripts/test.sh first)" >&2; exit 1; }
work=$(mktemp -d)
log=$work/moto.log
"$venv/moto_server" -H 127.0.0.1 -p 0 >"$log" 2>&1 &
moto=$!
trap 'kill $moto 2>/dev/null; wait $moto 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 1 100); do
  grep -q "Running on http" "$log" && break
  sleep 0.1
done
endpoint=$(grep -o "http://127.0.0.1:[0-9]*" "$log" | head -1)
build/bench/storage_bench --write="$work/data" --files=4 --mb="$mb"
export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench AWS_REGION=us-east-1
export AWS_ENDPOINT_URL=$endpoint
"$venv/python" tests/storage/s3_fixture.py "$endpoint" upload bench "$work/data"
echo "load: $(uptime)"
# The server's own ceiling: plain curl GETs of the same objects, one after the other.
for i in 0 1 2 3; do
  curl -s -o /dev/null -w "curl GET part-$i: %{speed_download} B/s\n" "$endpoint/bench/part-$i.tfrecord"
done
build/bench/storage_bench --reps="$reps" --files=4 "$work/data" s3://bench
