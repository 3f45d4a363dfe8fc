"""CPU per GB of a co-located consumer's pipeline, both processes, A/B across builds (issue 28).

    python3 bench/peer/colocated_cpu_bench.py --builds=build,/work/main/build
        [--sizes=65536,1048576,16777216] [--reps=2] [--seconds=3]

For each step size S and repetition, for each build in turn (alternating, so that the builds
share the machine's load): a fresh SluiceCluster (coordinator + one worker, bench/sluice_cluster.py)
and `sluicectl bench --coordinator` on `fixed_length_record_dataset([f], S).repeat()
.map(decode_raw(tf.uint8))` over a file of random bytes (64 MiB, at least 4 records), with
`perf stat` counting sluicectl's CPU time and page faults and /proc/PID/stat the worker's (all
its threads, also those started after the bench began). Prints steps/s,
GB/s, and per GB (bytes = (steps + warmup) x S: what the worker produced during its count)
the CPU-seconds of each process, and the worker's page faults per step, with the load average.

Needs `perf` (linux-perf); every process is stopped on exit, every wait bounded.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from sluice_cluster import SluiceCluster  # noqa: E402

WARMUP_STEPS = 20


def random_file(folder, size):
    path = os.path.join(folder, f"random_{size}.bin")
    with open(path, "wb") as f:
        for _ in range(max(4, min(256, (64 << 20) // size))):
            f.write(os.urandom(size))
    return path


def counter(path, name):
    """A perf stat counter's value (task-clock in seconds)."""
    text = open(path).read()
    m = re.search(r"([\d.,]+)\s+(msec\s+)?" + re.escape(name), text)
    if m is None:
        raise RuntimeError(f"no {name} in {path}: {text}")
    value = float(m.group(1).replace(",", ""))
    return value / 1e3 if m.group(2) else value


def proc_cpu_faults(pid):
    """(CPU seconds, page faults) of process `pid` so far, all its threads, those gone included
    (/proc/PID/stat: utime + stime, minflt + majflt)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is field 3 (state): minflt is field 10, majflt 12, utime 14, stime 15.
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks, int(fields[7]) + int(fields[9])


def run(build, pipeline, seconds, folder):
    """One measured bench: (result JSON, worker (CPU-s, faults), sluicectl stat file).

    The worker is measured from /proc/PID/stat, not `perf stat -p`, which counts only the
    threads alive when it attaches: the pool threads a pipeline starts later (prefetch,
    parallel maps, read-ahead) would go uncounted."""
    cs = os.path.join(folder, "sluicectl.stat")
    with SluiceCluster(build, num_workers=1) as cluster:
        worker_pid = cluster.procs[1].pid
        before = proc_cpu_faults(worker_pid)
        cmd = ["perf", "stat", "-e", "page-faults,task-clock", "-o", cs, "--",
               os.path.join(os.path.abspath(build), "bin", "sluicectl"), "bench",
               f"--pipeline={pipeline}", "--devices=CPU:0",
               f"--warmup_steps={WARMUP_STEPS}", f"--seconds={seconds}",
               f"--coordinator={cluster.coordinator}"]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120 + 2 * seconds)
        after = proc_cpu_faults(worker_pid)
        if out.returncode != 0:
            raise RuntimeError(f"sluicectl bench failed: {out.stderr.strip()}")
    return json.loads(out.stdout), (after[0] - before[0], after[1] - before[1]), cs


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--builds", default="build", help="comma-separated CMake build folders")
    parser.add_argument("--sizes", default="65536,1048576,16777216")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sluice-colocated-") as folder:
        for size in [int(s) for s in args.sizes.split(",") if s]:
            f = random_file(folder, size)
            pipeline = (f"fixed_length_record_dataset([{f!r}], {size}).repeat()"
                        ".map(decode_raw(tf.uint8))")
            for _ in range(args.reps):
                for build in args.builds.split(","):
                    r, (worker_cpu, worker_faults), cs = run(build, pipeline, args.seconds,
                                                             folder)
                    steps = r["steps"] + WARMUP_STEPS
                    gb = steps * size / 1e9
                    print(f"{size:>9} {build:<20} load {os.getloadavg()[0]:5.2f} steps/s "
                          f"{r['steps_per_second']:9.0f} GB/s {r['bytes_per_second'] / 1e9:5.2f} "
                          f"worker CPU-s/GB {worker_cpu / gb:.3f} "
                          f"faults/step {worker_faults / steps:7.1f} "
                          f"sluicectl CPU-s/GB {counter(cs, 'task-clock') / gb:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
