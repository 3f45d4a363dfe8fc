"""CPU samples of the worker and the client for bench/ragged_service_bench.py's dense and ragged
pipelines, A against B: on a loaded machine the bench's rates spread wider than a change, while
the samples `perf record` takes of each process (its CPU time, at a fixed rate) stay comparable.
Rounds alternate A dense, A ragged, B dense, B ragged, each on a fresh one-worker cluster
(bench/sluice_cluster.py); prints each run and the medians, and the ragged/dense ratios (dense
samples over ragged samples: what ragged_service_bench's "x dense" by CPU estimates).

    python3 bench/ragged_service_samples.py BUILD_A BUILD_B [rounds] [steps]

Needs `perf` (Debian's linux-perf) and permission to record other processes.
"""
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ragged_service_bench import pipelines  # noqa: E402
from sluice_cluster import SluiceCluster  # noqa: E402

NAMES = ("dense", "ragged")


def samples(data):
    out = subprocess.run(["perf", "report", "-i", data, "--no-children", "-n", "--sort", "sym",
                          "--stdio"], capture_output=True, text=True, timeout=300).stdout
    return sum(int(m.group(1)) for m in re.finditer(r"^\s*[\d.]+%\s+(\d+)\s", out, re.M))


def run(build, name, steps, tmp):
    """(worker samples, client samples) of one bench run of `name` on `build`."""
    worker_data, client_data = os.path.join(tmp, "worker.data"), os.path.join(tmp, "client.data")
    with SluiceCluster(build, num_workers=1) as cluster:
        recorder = subprocess.Popen(["perf", "record", "-F", "1999", "-o", worker_data, "-p",
                                     str(cluster.procs[1].pid)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        cmd = [os.path.join(os.path.abspath(build), "bin", "sluicectl"), "bench",
               f"--pipeline={pipelines()[name]}", "--devices=CPU:0", "--warmup_steps=20",
               f"--steps={steps}", f"--coordinator={cluster.coordinator}"]
        subprocess.run(["perf", "record", "-F", "1999", "-o", client_data] + cmd,
                       capture_output=True, timeout=600, check=True)
        recorder.send_signal(2)
        recorder.wait(timeout=60)
    return samples(worker_data), samples(client_data)


def main():
    builds = sys.argv[1:3]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    steps = int(sys.argv[4]) if len(sys.argv) > 4 else 40000
    got = {}
    with tempfile.TemporaryDirectory(prefix="sluice-samples-") as tmp:
        for _ in range(rounds):
            for build in builds:
                for name in NAMES:
                    w, c = run(build, name, steps, tmp)
                    got.setdefault((build, name), []).append((w, c))
                    print(f"{build} {name}: worker {w} client {c}", flush=True)
    for build in builds:
        worker = {n: statistics.median(w for w, _ in got[(build, n)]) for n in NAMES}
        both = {n: statistics.median(w + c for w, c in got[(build, n)]) for n in NAMES}
        print(f"{build}: medians worker {worker}, worker + client {both}; ragged/dense by CPU: "
              f"worker {worker['dense'] / worker['ragged']:.2f}, "
              f"worker + client {both['dense'] / both['ragged']:.2f}")
    print(f"{steps} steps a run, {rounds} rounds; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
