"""Shared jobs (docs/SERVICE.md, "Shared jobs") against separate jobs, issue 29's target:
4 trainers reading the TFRecord parse pipeline through one shared job should cost the worker
<= 0.3x the CPU per trainer-step of 4 separate jobs, and each trainer's throughput should stay
within 10% of a job of its own.

    python3 bench/shared_job_bench.py BUILD_DIR [SECONDS] [TRAINERS] [STEP_INTERVAL]

With STEP_INTERVAL (seconds, e.g. 0.01), every trainer is paced as one whose training step
takes that long (`sluicectl bench --step_interval`), below the worker's rate: then "a trainer's
throughput within 10% of a job of its own" is measurable on a small machine, comparing the
slowest shared trainer's steps/s (and GetNext wait p99) with a paced trainer of its own job.

Each configuration runs on a fresh cluster (one coordinator, one worker): a job of its own (1
trainer), TRAINERS separate jobs side by side, and one job shared by TRAINERS trainers
(`sluicectl bench --trainer_id`). The worker's CPU seconds (utime + stime from /proc) over
the run are divided by the steps all trainers read; the load average is printed next to every
figure (the machine may be shared: prefer the CPU ratio to the rates). Each row also shows the
worker's `sluice_worker_job_segment_*` counters (docs/SERVICE.md "One copy per step": steps
written once into the job segment, frames naming them, steps without room), null for a build
without them.
"""
import json
import os
import sys
import threading
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice_cluster import (SluiceCluster, run_sluicectl_bench,  # noqa: E402
                            scratch_dir, tfrecord_parse_pipeline)

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def load():
    return open("/proc/loadavg").read().split()[0]


def job_segment_counters(port_file):
    """The worker's sluice_worker_job_segment_* counters (docs/SERVICE.md "One copy per step"),
    its metrics port in `port_file`; None when its build has none."""
    try:
        port = int(open(port_file).read().strip())
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    except (OSError, ValueError):
        return None
    out = {}
    for line in text.decode().splitlines():
        if line.startswith("sluice_worker_job_segment_"):
            name, value = line.rsplit(" ", 1)
            out[name.replace("sluice_worker_job_segment_", "")] = float(value)
    return out or None


def run_trainers(cluster, pipeline, seconds, jobs, step_interval=0.0):
    """`sluicectl bench` once per (job, trainer_id) in `jobs`, side by side; their results and
    the worker's CPU seconds over the run."""
    worker = cluster.procs[1].pid
    results = [None] * len(jobs)
    errors = []

    def one(i, job, trainer):
        extra = [f"--coordinator={cluster.coordinator}", f"--job={job}"]
        if trainer:
            extra.append(f"--trainer_id={trainer}")
        else:
            extra.append("--read_mode=independent")
        if step_interval > 0:
            extra.append(f"--step_interval={step_interval}")
        try:
            results[i] = run_sluicectl_bench(cluster.build_dir, pipeline, seconds=seconds,
                                             warmup_steps=5, extra=extra)
        except Exception as e:  # reported below
            errors.append(e)

    before = cpu_seconds(worker)
    threads = [threading.Thread(target=one, args=(i, j, t)) for i, (j, t) in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results, cpu_seconds(worker) - before


def main():
    build = sys.argv[1]
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 10
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    step_interval = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    pipeline = tfrecord_parse_pipeline(build, scratch_dir("shared-job-rec-"))
    configs = [("own job", [("own", "")]),
               (f"{n} separate jobs", [(f"separate-{i}", "") for i in range(n)]),
               (f"{n} trainers, shared job", [("shared", f"trainer-{i}") for i in range(n)])]
    rows = {}
    for name, jobs in configs:
        metrics_port_file = os.path.join(scratch_dir("shared-job-metrics-"), "port")
        with SluiceCluster(build, num_workers=1, worker_flags=[
                "--metrics_port=0", f"--metrics_port_file={metrics_port_file}"]) as cluster:
            la = load()
            results, cpu = run_trainers(cluster, pipeline, seconds, jobs, step_interval)
            steps = sum(r["steps"] + 5 for r in results)  # the warm-up steps cost the worker too
            rates = [r["steps_per_second"] for r in results]
            rows[name] = {"worker_cpu_s": cpu, "trainer_steps": steps,
                          "cpu_ms_per_trainer_step": 1000 * cpu / max(steps, 1),
                          "steps_per_second": rates,
                          "wait_p99_ms": [1000 * r["wait_seconds"]["p99"] for r in results],
                          "step_interval": step_interval,
                          "load_before": la, "load_after": load(),
                          "job_segment": job_segment_counters(metrics_port_file)}
            print(json.dumps({name: rows[name]}), flush=True)
    sep = rows[f"{n} separate jobs"]["cpu_ms_per_trainer_step"]
    shared = rows[f"{n} trainers, shared job"]["cpu_ms_per_trainer_step"]
    own = rows["own job"]["steps_per_second"][0]
    slowest = min(rows[f"{n} trainers, shared job"]["steps_per_second"])
    print(json.dumps({"cpu_per_trainer_step_shared_over_separate": shared / sep,
                      "target_cpu_ratio": 0.3,
                      "slowest_shared_trainer_over_own_job": slowest / own,
                      "target_throughput_ratio": 0.9}))


if __name__ == "__main__":
    main()
