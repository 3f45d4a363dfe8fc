#!/usr/bin/env python3
"""Autoscaling steady run (issue 30, docs/AUTOSCALING.md): a coordinator, a `sluicectl pool`
and one trainer (`sluicectl run` on an infinite pipeline whose map sleeps per element, the
trainer sleeping a fixed time per step) for --seconds (default 300). Samples the coordinator's
desired workers, live workers and the job's wait every --scaling_interval, and prints when the
wait first fell under the target, the decision intervals that took from the first input-bound
decision, and every change of the desired count after that (oscillation: a change back to a
count seen before, after the wait target was reached).

  python3 bench/autoscale_steady.py --build build --seconds 300

Needs the build's sluice-coordinator, sluice-worker, sluicectl and the test plugin
tests/integration/plugins/libsluice_slow_map_plugin.so.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice_cluster import wait_port  # noqa: E402


def status(sluicectl, coordinator):
    out = subprocess.run([sluicectl, "status", f"--coordinator={coordinator}", "--format=json"],
                         capture_output=True, text=True, timeout=30)
    return json.loads(out.stdout) if out.returncode == 0 else None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default="build")
    p.add_argument("--seconds", type=int, default=300)
    p.add_argument("--scaling_interval", type=float, default=2.0)
    p.add_argument("--cooldown", type=float, default=20.0)
    p.add_argument("--map_us", type=int, default=4000)
    p.add_argument("--step_ms", type=float, default=6.0)
    p.add_argument("--target", type=float, default=0.05)
    p.add_argument("--max_workers", type=int, default=6)
    a = p.parse_args()
    bindir = os.path.join(a.build, "bin")
    plugin = os.path.abspath(os.path.join(a.build, "tests/integration/plugins/libsluice_slow_map_plugin.so"))
    tmp = tempfile.mkdtemp(prefix="autoscale_steady.")
    procs = []
    try:
        port_file = os.path.join(tmp, "port")
        coord = subprocess.Popen(
            [os.path.join(bindir, "sluice-coordinator"), "--port=0", f"--port_file={port_file}",
             f"--plugin={plugin}", f"--scaling_interval={a.scaling_interval}s",
             f"--scale_in_cooldown={a.cooldown}s", "--min_workers=1",
             f"--max_workers={a.max_workers}", f"--target_wait_fraction={a.target}",
             f"--shrink_wait_fraction={a.target / 4}", "--log_level=warning"],
            stderr=open(os.path.join(tmp, "coordinator.log"), "w"))
        procs.append(coord)
        coordinator = f"127.0.0.1:{wait_port(port_file, coord, 'coordinator')}"
        sluicectl = os.path.join(bindir, "sluicectl")
        pool = subprocess.Popen(
            [sluicectl, "pool", f"--coordinator={coordinator}",
             f"--worker_flag=--plugin={plugin},--heartbeat_interval=200ms",
             "--pool_interval=500ms", f"--pool_max_workers={a.max_workers}"],
            stderr=open(os.path.join(tmp, "pool.log"), "w"))
        procs.append(pool)
        sleep_file = os.path.join(tmp, "step_sleep")
        with open(sleep_file, "w") as f:
            f.write(f"{a.step_ms}ms\n")
        time.sleep(2)
        trainer = subprocess.Popen(
            [sluicectl, "run", f"--coordinator={coordinator}", f"--plugin={plugin}",
             f"--pipeline=range(1000000000).map(plugin('slow_identity', us={a.map_us})).batch(4)",
             "--devices=CPU:0", "--format=json", "--job=steady", "--sharding_policy=RANGES",
             "--range_steps=32", f"--step_sleep_file={sleep_file}"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "trainer.log"), "w"))
        procs.append(trainer)
        start = time.time()
        samples = []
        while time.time() - start < a.seconds:
            time.sleep(a.scaling_interval)
            s = status(sluicectl, coordinator)
            if s is None:
                continue
            job = next((j for j in s["jobs"] if "load" in j), None)
            samples.append((time.time() - start, s["scaling"]["desired_workers"],
                            sum(1 for w in s["workers"] if w["alive"]),
                            job["load"]["wait_fraction"] if job else None,
                            job["load"]["bound"] if job else "",
                            job["load"]["steps_per_second"] if job else None))
        load = os.getloadavg()
        first_input_bound = next((t for t, d, n, w, b, r in samples if b == "input-bound"), None)
        reached = next((t for t, d, n, w, b, r in samples
                        if w is not None and w < a.target and b not in ("unmeasured", "input-bound")
                        and n >= 2), None)
        # The target counts from when enough workers exist: the first sample, after the first
        # input-bound decision, in which the pool had grown and every desired worker was alive.
        workers_up = next((t for t, d, n, w, b, r in samples
                           if first_input_bound is not None and t >= first_input_bound
                           and d > 1 and n >= d), None)
        changes_after = []
        seen = set()
        prev_short = False
        prev = None
        oscillations = 0
        for t, d, n, w, b, r in samples:
            if reached is not None and t >= reached:
                if prev is not None and d != prev:
                    changes_after.append((round(t, 1), prev, d))
                    if d in seen:
                        oscillations += 1
                seen.add(d)
            prev = d
        print(json.dumps({
            "seconds": a.seconds, "scaling_interval_s": a.scaling_interval,
            "cooldown_s": a.cooldown, "map_us": a.map_us, "trainer_step_ms": a.step_ms,
            "target_wait": a.target,
            "first_input_bound_s": first_input_bound, "wait_target_reached_s": reached,
            "intervals_to_target": (None if reached is None or first_input_bound is None else
                                    round((reached - first_input_bound) / a.scaling_interval, 1)),
            "final_desired": samples[-1][1] if samples else None,
            "workers_up_s": workers_up,
            "intervals_from_workers_up_to_target": (None if reached is None or workers_up is None
                                                    else round((reached - workers_up) /
                                                               a.scaling_interval, 1)),
            "changes_after_target": changes_after, "oscillations": oscillations,
            "waits_after_target": [round(w, 4) for t, d, n, w, b, r in samples
                                   if reached is not None and t >= reached and w is not None][-10:],
            # Each sample: seconds, desired, alive, wait, bound, steps/s per consumer.
            "samples": [(round(t, 1), d, n, None if w is None else round(w, 4), b,
                         None if r is None else round(r, 1)) for t, d, n, w, b, r in samples],
            "load_average": load, "logs": tmp}))
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in reversed(procs):
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == "__main__":
    main()
