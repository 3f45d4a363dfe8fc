"""A worker's page faults, CPU and resident memory per step over jobs of one pipeline (issue 28,
"bigfault": large steps' memory faulted in afresh).

    python3 bench/worker_memory_bench.py [--build=build] [--pipeline=EXPR] [--seconds=8]
        [--jobs=1] [--shared_memory=0] [--worker_flags="..."] [--coordinator_flags="..."]
        [--gone_wait=10]

Starts a sluice-coordinator and one sluice-worker on loopback (bench/sluice_cluster.py) and runs
`sluicectl bench --coordinator` on the pipeline --jobs times in a row (each a new job on the same
worker), sampling the worker's /proc/PID/stat and status every second. Per job it prints the
worker's minor faults per step over the whole job and over its second half (the steady state,
assuming an even step rate), its user + system CPU per step over the whole job (warm-up, start
and end included), and its resident memory (VmRSS) at most and at the end. --shared_memory=0
(the default) streams over TCP / the bulk channel, where steps are built in heap memory; with 1
the worker builds into the shared-memory ring instead. Each job's consumer exits cleanly when
its bench ends: it releases the job, which ends at once (issue 28, part release); a build
without the release leaves it for the coordinator's --consumer_timeout (default 60 s;
--coordinator_flags=--consumer_timeout=2s ends it 2 s later, issue 28, part jobfree). After
each bench the script waits (at most --gone_wait seconds) until the worker holds no task
(its /metrics, sluice_worker_tasks) and reports that time from the bench's exit ("task gone
s", ">N" when it did not happen) and the worker's resident memory then: what abandoned jobs
still hold.
"""
import argparse
import os
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice_cluster import SluiceCluster  # noqa: E402


def sample(pid):
    """(minor faults, CPU seconds, VmRSS MiB) of process `pid` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) // 1024
    return int(fields[7]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), rss


def worker_tasks(port):
    """The tasks the worker holds (sluice_worker_tasks, every state), from its /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("sluice_worker_tasks{") or line.startswith("sluice_worker_tasks "))


def wait_tasks_gone(port, limit):
    """Seconds until the worker holds no task (polled every 10 ms), or None after `limit`."""
    start = time.monotonic()
    while time.monotonic() - start < limit:
        if worker_tasks(port) == 0:
            return time.monotonic() - start
        time.sleep(0.01)
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--pipeline", default="range(1099511627776).batch(2097152)")
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--shared_memory", default="0")
    ap.add_argument("--worker_flags", default="", help="extra sluice-worker flags")
    ap.add_argument("--coordinator_flags", default="", help="extra sluice-coordinator flags")
    ap.add_argument("--gone_wait", type=float, default=10.0,
                    help="seconds to wait after each bench for the worker to hold no task")
    args = ap.parse_args()
    print("| job | steps | steps/s | worker faults/step (whole / 2nd half) | worker CPU ms/step | "
          "worker RSS MiB max / end | task gone s | worker RSS MiB then | load (1-min) |")
    print("|---|---|---|---|---|---|---|---|---|")
    metrics_dir = tempfile.TemporaryDirectory(prefix="sluice-memory-bench-")
    port_file = os.path.join(metrics_dir.name, "worker.metrics")
    worker_flags = args.worker_flags.split() + ["--metrics_port=0",
                                                f"--metrics_port_file={port_file}"]
    with SluiceCluster(args.build, num_workers=1, worker_flags=worker_flags,
                       coordinator_flags=args.coordinator_flags.split()) as cluster, metrics_dir:
        pid = cluster.procs[1].pid
        deadline = time.monotonic() + 30
        while not os.path.exists(port_file) or not open(port_file).read().strip():
            if time.monotonic() > deadline:
                raise RuntimeError("the worker wrote no metrics port file")
            time.sleep(0.05)
        port = int(open(port_file).read())
        for job in range(args.jobs):
            samples = [sample(pid)]
            done = threading.Event()

            def sampler():
                # Bounded: the bench's seconds plus its start and end.
                deadline = time.time() + args.seconds + 60
                while not done.wait(1.0) and time.time() < deadline:
                    samples.append(sample(pid))

            thread = threading.Thread(target=sampler)
            thread.start()
            try:
                r = cluster.bench(args.pipeline, devices="CPU:0", seconds=args.seconds,
                                  warmup_steps=5,
                                  extra=[f"--shared_memory={args.shared_memory == '1'}".lower()])
            finally:
                done.set()
                thread.join()
            samples.append(sample(pid))
            gone = wait_tasks_gone(port, args.gone_wait)
            then = sample(pid)[2]
            steps = max(r["steps"], 1)
            half = len(samples) // 2
            late_steps = steps * (len(samples) - 1 - half) / max(len(samples) - 1, 1)
            whole = (samples[-1][0] - samples[0][0]) / steps
            late = (samples[-1][0] - samples[half][0]) / max(late_steps, 1)
            cpu_ms = (samples[-1][1] - samples[0][1]) / steps * 1e3
            print(f"| {job} | {r['steps']} | {r['steps_per_second']:.0f} | {whole:.1f} / {late:.1f} | "
                  f"{cpu_ms:.3f} | {max(s[2] for s in samples)} / {samples[-1][2]} | "
                  f"{'>%g' % args.gone_wait if gone is None else '%.3f' % gone} | {then} | "
                  f"{os.getloadavg()[0]:.2f} |", flush=True)


if __name__ == "__main__":
    main()
