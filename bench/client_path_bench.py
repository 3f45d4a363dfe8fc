"""The production client path against the raw wire, side by side (issue 13, item 6).

    python3 bench/client_path_bench.py [--build=build] [--seconds=3]
        [--sizes=1024,16384,262144,1048576,4194304,16777216]

Per per-replica size S (one replica, one uint8 tensor of S bytes per step):
  - client CPU:0 / client GPU:0: `sluicectl bench --coordinator=...` against a local
    sluice-coordinator and one sluice-worker process, pipeline
    `from_tensors(tf.constant(0, dtype=tf.uint8, shape=[S])).repeat()` (above 1 MiB a 1 MiB
    constant batched S / 1 MiB times, one more copy on the worker): the worker runs the
    pipeline and streams steps, the client receives them through ServiceStepSource and hands
    them out through DistributedIterator::GetNext; with --devices=GPU:0 also through the device
    prefetcher (host memory standing in when there is no GPU: one more copy per step);
  - raw stream and TCP: `build/bench/stream_bench --sizes=S --reps=1`, the worker's stream
    service and a consumer decoding frames in one process (no pipeline, no client library), and
    a plain TCP socket on loopback moving the same bytes: the ceiling.
Prints a Markdown table of GB/s (1e9 bytes/s) and the client / TCP ratio.
Needs the benchmarks built: cmake -DSLUICE_BUILD_BENCHMARKS=ON, targets stream_bench sluicectl
sluice-coordinator sluice-worker.
"""
import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice_cluster import SluiceCluster, fixed_size_pipelines  # noqa: E402


def stream_bench(build, size, total_bytes):
    """(raw stream GB/s, TCP GB/s) from stream_bench's table row for `size`."""
    exe = os.path.join(build, "bench", "stream_bench")
    if not os.access(exe, os.X_OK):
        raise SystemExit(f"{exe} is missing: configure with -DSLUICE_BUILD_BENCHMARKS=ON and "
                         "build the stream_bench target")
    out = subprocess.run([exe, f"--sizes={size}", f"--bytes={total_bytes}", "--reps=1"],
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"stream_bench failed: {out.stderr}")
    rows = [line for line in out.stdout.splitlines() if line.startswith("|")]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    for row in rows[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        if cells[0] == str(size):
            return (float(cells[header.index("raw GB/s")]),
                    float(cells[header.index("TCP GB/s")]))
    raise RuntimeError(f"no row for {size} in stream_bench's output:\n{out.stdout}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build", help="the CMake build folder")
    parser.add_argument("--seconds", type=float, default=3.0,
                        help="measured time of each sluicectl bench")
    parser.add_argument("--warmup_steps", type=int, default=20)
    parser.add_argument("--sizes", default="1024,16384,262144,1048576,4194304,16777216")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {args.seconds} s per "
          "client run; GB/s = 1e9 bytes/s\n")
    print("| per-replica bytes | client CPU:0 GB/s | client CPU:0 steps/s | client GPU:0 GB/s "
          "| client GPU:0 steps/s | raw stream GB/s | TCP GB/s | client CPU:0 / TCP "
          "| client GPU:0 / TCP |")
    print("|---|---|---|---|---|---|---|---|---|")
    for size in sizes:
        _, expr, _ = fixed_size_pipelines(size)
        # A fresh service per run: no earlier (endless) job is left on the worker.
        with SluiceCluster(args.build, num_workers=1) as cluster:
            cpu = cluster.bench(expr, devices="CPU:0", seconds=args.seconds,
                                warmup_steps=args.warmup_steps)
        with SluiceCluster(args.build, num_workers=1) as cluster:
            gpu = cluster.bench(expr, devices="GPU:0", seconds=args.seconds,
                                warmup_steps=args.warmup_steps)
        # The same amount of data as the client moved (at least 64 MiB, at most 1 GiB).
        total = int(min(max(cpu["bytes"], 64 << 20), 1 << 30))
        raw, tcp = stream_bench(args.build, size, total)
        c, g = cpu["bytes_per_second"] / 1e9, gpu["bytes_per_second"] / 1e9
        print(f"| {size} | {c:.3f} | {cpu['steps_per_second']:.0f} | {g:.3f} | "
              f"{gpu['steps_per_second']:.0f} | {raw:.2f} | {tcp:.2f} | {100 * c / tcp:.1f}% | "
              f"{100 * g / tcp:.1f}% |", flush=True)
    load = os.getloadavg()
    print(f"\nload average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
