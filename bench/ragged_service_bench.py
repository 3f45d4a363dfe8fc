"""Ragged batches through the service vs dense batches of the same values (issue 31 target:
ragged >= 0.8x the dense rate). One sluice-coordinator and one sluice-worker on loopback
(bench/sluice_cluster.py), `sluicectl bench --coordinator` on each pipeline in turn, ROUNDS
times alternating; the medians of the value bytes per second (the row_splits excluded, so both
sides count the same payload) and the load average.

    python3 bench/ragged_service_bench.py [build_dir] [seconds]
"""
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice_cluster import SluiceCluster  # noqa: E402

ROWS = 64          # rows per batch
MEAN_LENGTH = 256  # int32 values per row on average: 64 KiB of values per batch
ROUNDS = 3


def pipelines():
    # Ragged: row lengths MEAN_LENGTH -/+ 128, alternating; dense: every row MEAN_LENGTH long.
    ragged_rows = [[i % 97] * (MEAN_LENGTH + (128 if i % 2 else -128)) for i in range(ROWS)]
    dense_rows = [[i % 97] * MEAN_LENGTH for i in range(ROWS)]
    ragged = (f"from_tensor_slices(tf.ragged.constant({ragged_rows})).repeat()"
              f".ragged_batch({ROWS})")
    dense = f"from_tensor_slices({dense_rows}).repeat().batch({ROWS})"
    return ragged, dense


def main():
    build_dir = sys.argv[1] if len(sys.argv) > 1 else "build"
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 3.0
    ragged, dense = pipelines()
    value_bytes = ROWS * MEAN_LENGTH * 4
    rates = {"ragged": [], "dense": []}
    with SluiceCluster(build_dir, num_workers=1) as cluster:
        for _ in range(ROUNDS):
            for name, pipeline in (("ragged", ragged), ("dense", dense)):
                r = cluster.bench(pipeline, devices="CPU:0", seconds=seconds, warmup_steps=20)
                rates[name].append(r["steps_per_second"] * value_bytes)
    load = os.getloadavg()
    ragged_rate = statistics.median(rates["ragged"])
    dense_rate = statistics.median(rates["dense"])
    print(f"value bytes/s, median of {ROUNDS}: ragged {ragged_rate / 1e6:.1f} MB/s, "
          f"dense {dense_rate / 1e6:.1f} MB/s, ratio {ragged_rate / dense_rate:.2f}; "
          f"runs ragged {[round(x / 1e6, 1) for x in rates['ragged']]} dense "
          f"{[round(x / 1e6, 1) for x in rates['dense']]}; load average "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
