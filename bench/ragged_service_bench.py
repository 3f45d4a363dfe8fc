"""Sparse and ragged batches through the service vs dense batches of the same values (issue 31
target: >= 0.8x the dense rate of the same bytes). One sluice-coordinator and one sluice-worker
on loopback (bench/sluice_cluster.py), `sluicectl bench --coordinator --steps=STEPS` on each
pipeline in turn, ROUNDS times alternating.

Like for like: every pipeline is 64 rows of int32 values per batch, 256 values per row on
average (64 KiB of values per batch), from_tensor_slices of a 16-row constant, repeated, batched
by 64 (every batch joins four blocks of the source, one copy of its values on all three sides;
a 64-row constant would not fit one command-line argument as a SparseTensor literal):
  dense   rows of 256 values, batch(64);
  ragged  rows of 128 and 384 values alternating, ragged_batch(64) (a RaggedTensor);
  sparse  the ragged rows as a SparseTensor [16, 384] (indices [4096, 2]), batch(64).
Measured: wall-clock value bytes per second, and value bytes per CPU-second of the whole service
(the worker's and the coordinator's CPU time from /proc, plus the sluicectl client's from
getrusage), the row_splits and indices not counted, so every side counts the same payload;
and the same rates counting every component's bytes (values plus row_splits, or plus indices
and dense_shape: what the service moves, "all bytes"); medians over the rounds, with the load
average.

    python3 bench/ragged_service_bench.py [build_dir] [steps]
"""
import os
import resource
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice_cluster import SluiceCluster  # noqa: E402

ROWS = 64          # rows per batch
SOURCE_ROWS = 16   # rows of the constant each pipeline repeats
MEAN_LENGTH = 256  # int32 values per row on average: 64 KiB of values per batch
ROUNDS = 3
TICKS = os.sysconf("SC_CLK_TCK")


def lengths():
    return [MEAN_LENGTH + (128 if i % 2 else -128) for i in range(SOURCE_ROWS)]


def pipelines():
    ragged_rows = [[i % 97] * n for i, n in enumerate(lengths())]
    dense_rows = [[i % 97] * MEAN_LENGTH for i in range(SOURCE_ROWS)]
    indices = [[i, j] for i, n in enumerate(lengths()) for j in range(n)]
    values = [i % 97 for i, n in enumerate(lengths()) for _ in range(n)]
    sparse = (f"tf.sparse.SparseTensor(indices={indices}, values={values}, "
              f"dense_shape=[{SOURCE_ROWS}, {max(lengths())}])")
    return {
        "dense": f"from_tensor_slices({dense_rows}).repeat().batch({ROWS})",
        "ragged": f"from_tensor_slices(tf.ragged.constant({ragged_rows})).repeat()"
                  f".ragged_batch({ROWS})",
        "sparse": f"from_tensor_slices({sparse}).repeat().batch({ROWS})",
    }


def component_bytes(name):
    """Bytes of every component of one batch: what the service moves per step."""
    values = ROWS * MEAN_LENGTH * 4
    if name == "ragged":
        return values + (ROWS + 1) * 8                 # int64 row_splits
    if name == "sparse":
        return values + ROWS * MEAN_LENGTH * 2 * 8 + 2 * 8  # int64 indices [N, 2], dense_shape
    return values


def cpu_seconds(pids):
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICKS


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main():
    build_dir = sys.argv[1] if len(sys.argv) > 1 else "build"
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
    value_bytes = ROWS * MEAN_LENGTH * 4
    wall = {name: [] for name in pipelines()}
    per_cpu = {name: [] for name in pipelines()}
    with SluiceCluster(build_dir, num_workers=1) as cluster:
        pids = [p.pid for p in cluster.procs]
        for _ in range(ROUNDS):
            for name, pipeline in pipelines().items():
                service0, client0 = cpu_seconds(pids), children_cpu()
                r = cluster.bench(pipeline, devices="CPU:0", steps=steps, warmup_steps=20)
                cpu = cpu_seconds(pids) - service0 + children_cpu() - client0
                wall[name].append(r["steps_per_second"] * value_bytes)
                # The steps the client counted (warmup too) over the CPU of the whole run.
                per_cpu[name].append((steps + 20) * value_bytes / cpu)
    load = os.getloadavg()
    dense_wall = statistics.median(wall["dense"])
    dense_cpu = statistics.median(per_cpu["dense"])
    for name in pipelines():
        w, c = statistics.median(wall[name]), statistics.median(per_cpu[name])
        scale = component_bytes(name) / value_bytes  # all bytes per value byte
        print(f"{name}: values {w / 1e6:.0f} MB/s wall ({w / dense_wall:.2f}x dense), "
              f"{c / 1e6:.0f} MB/CPU-s ({c / dense_cpu:.2f}x dense); all bytes "
              f"{w * scale / 1e6:.0f} MB/s wall ({w * scale / dense_wall:.2f}x dense), "
              f"{c * scale / 1e6:.0f} MB/CPU-s ({c * scale / dense_cpu:.2f}x dense); runs wall "
              f"{[round(x / 1e6) for x in wall[name]]} MB/s, per CPU-s "
              f"{[round(x / 1e6) for x in per_cpu[name]]} MB")
    print(f"{steps} steps of {value_bytes} value bytes per run, medians of {ROUNDS}; "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
