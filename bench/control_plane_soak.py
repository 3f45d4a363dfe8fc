#!/usr/bin/env python3
"""Control-plane soak (issue 32, "Done when"): a sluice-coordinator on its journal, several
sluice-workers and trainers (`sluicectl run`, 2 consumers x 2 replicas) of a DATA job and a
RANGES job, round after round for --minutes, under random faults:

  - a worker SIGKILLed (and a fresh one started),
  - the coordinator SIGKILLed and restarted on the same port and --work_dir (it replays its
    journal),
  - journal faults injected into the coordinator's file layer (the test-only environment
    variable SLUICE_TEST_JOURNAL_FAULTS, server/fault_injecting_journal_file.h): failed appends
    fail their request (the callers retry), a failed sync makes the coordinator exit (it is
    restarted here, as a supervisor would).

Each round ends with every job's output checked: across its consumers every element exactly
once. The coordinator's RSS (VmRSS) and CPU seconds are sampled every --sample_seconds; the
summary gives per coordinator process the first and last RSS and the overall trend (MiB per
hour, least squares over the samples of the longest-lived process).

    python3 bench/control_plane_soak.py --coordinator_bin=build/bin/sluice-coordinator \\
        --tools_dir=/path/to/bin --minutes=30 --seed=1

Prints progress lines to stderr and one JSON summary line on stdout; exits 1 if any round's
output was not exactly once (or a trainer failed), 0 otherwise. Every process it starts is
stopped on exit (SIGTERM, then SIGKILL after 10 s); every wait is bounded. Loopback only.
"""
import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice_cluster import wait_port  # noqa: E402


def log(msg):
    print(f"[soak {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def proc_stat(pid):
    """(VmRSS in KiB, CPU seconds) of a running process, or None."""
    try:
        with open(f"/proc/{pid}/status") as f:
            rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return rss, (int(fields[11]) + int(fields[12])) / ticks
    except (OSError, StopIteration, ValueError, IndexError):
        return None


class Soak:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.tmp = tempfile.TemporaryDirectory(prefix="sluice-soak-")
        if args.keep_logs:
            self.tmp._finalizer.detach()  # kept past the interpreter's exit too
        self.work_dir = os.path.join(self.tmp.name, "coordinator-work")
        self.start_failures = []  # injected faults that failed a coordinator's start
        self.coordinator = None  # Popen
        self.coordinator_started = 0.0
        self.port = 0
        self.workers = []  # Popen
        self.worker_count = 0
        self.coordinator_runs = 0
        self.samples = []  # (t, coordinator run, rss KiB, cpu s)
        self.faults = {"worker_kill": 0, "coordinator_kill": 0, "coordinator_exit_injected": 0}
        self.exit_reasons = []

    def _coordinator_cmd(self, port_flag):
        return [self.args.coordinator_bin, port_flag, f"--work_dir={self.work_dir}",
                f"--snapshot_every={self.args.snapshot_every}",
                f"--worker_timeout={self.args.worker_timeout}", "--ranges_per_worker=2",
                f"--finished_job_ttl={self.args.finished_job_ttl}", "--consumer_timeout=0",
                f"--dead_worker_ttl={self.args.dead_worker_ttl}"]

    def start_coordinator(self):
        """Starts a coordinator; a start failed by an injected fault (its journal's replay hit
        one) is retried, up to 20 times; any other failure (DATA_LOSS) raises, with its log."""
        for _ in range(20):
            try:
                return self._start_coordinator_once()
            except RuntimeError as e:
                log_path = os.path.join(self.tmp.name, f"coordinator{self.coordinator_runs}.log")
                with open(log_path) as f:
                    text = f.read()
                if "injected fault" not in text:
                    raise RuntimeError(f"{e}: {text[-1500:]}")
                self.start_failures.append(text.strip().splitlines()[-1][-300:])
                log(f"coordinator start failed on an injected fault, retrying: "
                    f"{self.start_failures[-1][-200:]}")
        raise RuntimeError("sluice-coordinator did not start in 20 tries")

    def _start_coordinator_once(self):
        self.coordinator_runs += 1
        log_path = os.path.join(self.tmp.name, f"coordinator{self.coordinator_runs}.log")
        env = dict(os.environ)
        if self.args.journal_faults:
            env["SLUICE_TEST_JOURNAL_FAULTS"] = (
                f"seed={self.args.seed * 1000 + self.coordinator_runs},{self.args.journal_faults}")
        port_file = os.path.join(self.tmp.name, f"coordinator{self.coordinator_runs}.port")
        flag = f"--port={self.port}" if self.port else "--port=0"
        out = open(log_path, "w")
        self.coordinator = subprocess.Popen(
            self._coordinator_cmd(flag) + [f"--port_file={port_file}"], stdout=out, stderr=out,
            env=env)
        self.coordinator_started = time.monotonic()
        self.port = wait_port(port_file, self.coordinator, "sluice-coordinator", timeout=60.0)

    def coordinator_address(self):
        return f"127.0.0.1:{self.port}"

    def check_coordinator(self):
        """Restarts a coordinator that exited by itself (an injected sync failure is fatal)."""
        if self.coordinator.poll() is None:
            return
        self.faults["coordinator_exit_injected"] += 1
        tail = ""
        try:
            with open(os.path.join(self.tmp.name, f"coordinator{self.coordinator_runs}.log")) as f:
                lines = [l for l in f.read().splitlines() if "exiting" in l or "injected" in l]
                tail = lines[-1] if lines else ""
        except OSError:
            pass
        self.exit_reasons.append(tail[-300:])
        log(f"coordinator exited ({self.coordinator.returncode}): {tail[-200:]}; restarting")
        self.start_coordinator()

    def kill_coordinator(self):
        self.faults["coordinator_kill"] += 1
        if self.coordinator.poll() is None:
            self.coordinator.send_signal(signal.SIGKILL)
            self.coordinator.wait(timeout=30)
        time.sleep(self.rng.uniform(0.1, 1.5))
        self.start_coordinator()

    def start_worker(self):
        self.worker_count += 1
        w = self.worker_count
        out = open(os.path.join(self.tmp.name, f"worker{w}.log"), "w")
        port_file = os.path.join(self.tmp.name, f"worker{w}.port")
        p = subprocess.Popen([os.path.join(self.args.tools_dir, "sluice-worker"),
                              f"--coordinator={self.coordinator_address()}", "--port=0",
                              f"--port_file={port_file}", "--heartbeat_interval=200ms",
                              "--buffer_bytes=4096"], stdout=out, stderr=out)
        self.workers.append(p)
        wait_port(port_file, p, f"sluice-worker {w}", timeout=60.0)

    def kill_worker(self):
        running = [p for p in self.workers if p.poll() is None]
        if not running:
            return
        victim = self.rng.choice(running)
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=30)
        self.workers.remove(victim)
        self.faults["worker_kill"] += 1
        self.start_worker()

    def sample(self):
        stat = proc_stat(self.coordinator.pid)
        if stat is not None:
            self.samples.append((time.monotonic(), self.coordinator_runs, stat[0], stat[1]))

    def start_trainers(self, job, policy_flags):
        procs = []
        for c in range(2):
            cmd = [os.path.join(self.args.tools_dir, "sluicectl"), "run",
                   f"--coordinator={self.coordinator_address()}", f"--job={job}",
                   f"--pipeline=range({self.args.elements}).batch(4)", "--devices=CPU:0,CPU:1",
                   f"--consumer_index={c}", "--num_consumers=2", "--read_mode=coordinated",
                   "--format=json", f"--retry_deadline={self.args.retry_deadline}"] + policy_flags
            out = tempfile.TemporaryFile(dir=self.tmp.name)
            err = tempfile.TemporaryFile(dir=self.tmp.name)
            procs.append((subprocess.Popen(cmd, stdout=out, stderr=err), out, err))
        return procs

    def check_exactly_once(self, job, trainers, deadline):
        """Waits for the trainers; returns None if every element came exactly once, else why."""
        counts = {}
        for i, (p, out, err) in enumerate(trainers):
            try:
                p.wait(timeout=max(deadline - time.monotonic(), 1))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                return f"{job}: trainer {i} did not finish in time"
            if p.returncode != 0:
                err.seek(0)
                return f"{job}: trainer {i} exited {p.returncode}: {err.read()[-600:]!r}"
            out.seek(0)
            for line in out.read().decode().splitlines():
                step = json.loads(line)
                for replica in step["per_replica"]:
                    for v in replica["values"]:
                        counts[v] = counts.get(v, 0) + 1
        want = set(range(self.args.elements))
        if set(counts) != want:
            return (f"{job}: missing {sorted(want - set(counts))[:10]}, "
                    f"unexpected {sorted(set(counts) - want)[:10]}")
        dup = [v for v, n in counts.items() if n != 1]
        if dup:
            return f"{job}: elements delivered more than once: {sorted(dup)[:10]}"
        return None

    def run(self):
        a = self.args
        log(f"seed {a.seed}, {a.minutes} min, {a.workers} workers, journal faults "
            f"'{a.journal_faults}', dir {self.tmp.name}")
        self.start_coordinator()
        for _ in range(a.workers):
            self.start_worker()
        end = time.monotonic() + a.minutes * 60
        last_sample = 0.0
        rounds, failures = 0, []
        started = time.monotonic()
        while time.monotonic() < end and not failures:
            jobs = {f"data{rounds}": ["--sharding_policy=DATA"],
                    f"ranges{rounds}": ["--sharding_policy=RANGES", f"--seed={a.seed}",
                                        "--shuffle=full", "--range_steps=8"]}
            trainers = {job: self.start_trainers(job, flags) for job, flags in jobs.items()}

            def running():
                return any(p.poll() is None for t in trainers.values() for p, _, _ in t)

            round_deadline = time.monotonic() + a.round_timeout
            while running() and time.monotonic() < round_deadline:
                time.sleep(self.rng.uniform(0.3, a.fault_interval))
                self.check_coordinator()
                if time.monotonic() - last_sample >= a.sample_seconds:
                    self.sample()
                    last_sample = time.monotonic()
                if not running():
                    break
                kind = self.rng.random()
                if kind < a.worker_kill_share:
                    self.kill_worker()
                elif kind < a.worker_kill_share + a.coordinator_kill_share:
                    self.kill_coordinator()
            for job, t in trainers.items():
                why = self.check_exactly_once(job, t, round_deadline + 60)
                if why is not None:
                    failures.append(f"round {rounds}: {why}")
            rounds += 1
            self.check_coordinator()
            if rounds % 5 == 0:
                log(f"{rounds} rounds, faults {self.faults}, "
                    f"rss {self.samples[-1][2] // 1024 if self.samples else '?'} MiB")
        wall = time.monotonic() - started
        return self.summary(rounds, failures, wall)

    def summary(self, rounds, failures, wall):
        per_run = {}
        for t, run, rss, cpu in self.samples:
            per_run.setdefault(run, []).append((t, rss, cpu))
        longest = max(per_run.values(), key=lambda s: s[-1][0] - s[0][0], default=[])
        slope = None
        if len(longest) >= 3:
            t0 = longest[0][0]
            xs = [(t - t0) / 3600 for t, _, _ in longest]
            ys = [rss / 1024 for _, rss, _ in longest]
            mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
            den = sum((x - mx) ** 2 for x in xs)
            slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else None
        rss_all = [rss for _, _, rss, _ in self.samples]
        return {
            "rounds": rounds,
            "jobs_checked_exactly_once": 2 * rounds - len(failures),
            "failures": failures,
            "wall_seconds": round(wall, 1),
            "faults": self.faults,
            "coordinator_processes": self.coordinator_runs,
            "coordinator_exit_reasons_sample": self.exit_reasons[:5],
            "coordinator_starts_failed_by_injected_faults": len(self.start_failures),
            "start_failures_sample": self.start_failures[:3],
            "rss_mib": {
                "samples": len(rss_all),
                "min": round(min(rss_all) / 1024, 1) if rss_all else None,
                "max": round(max(rss_all) / 1024, 1) if rss_all else None,
                "longest_process_seconds": round(longest[-1][0] - longest[0][0], 1) if longest else 0,
                "longest_process_first_last": [round(longest[0][1] / 1024, 1),
                                               round(longest[-1][1] / 1024, 1)] if longest else None,
                "longest_process_slope_mib_per_hour": round(slope, 2) if slope is not None else None,
            },
            "coordinator_cpu_seconds_longest_process": round(longest[-1][2], 2) if longest else None,
            "load_average_at_end": os.getloadavg(),
            "parameters": vars(self.args),
        }

    def close(self):
        procs = [p for p in self.workers] + ([self.coordinator] if self.coordinator else [])
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if not self.args.keep_logs:
            self.tmp.cleanup()
        else:
            log(f"logs kept in {self.tmp.name}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--coordinator_bin", default="build/bin/sluice-coordinator")
    ap.add_argument("--tools_dir", default="build/bin",
                    help="where sluice-worker and sluicectl are")
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--elements", type=int, default=400)
    ap.add_argument("--snapshot_every", type=int, default=50)
    ap.add_argument("--worker_timeout", default="2s")
    # Short: the TTL clocks restart with every coordinator process (they are not journaled),
    # so with a kill every few seconds longer TTLs never expire and the state grows.
    ap.add_argument("--finished_job_ttl", default="2s")
    ap.add_argument("--dead_worker_ttl", default="5s")
    ap.add_argument("--fault_interval", type=float, default=3.0,
                    help="most seconds between fault draws")
    ap.add_argument("--worker_kill_share", type=float, default=0.35,
                    help="share of fault draws that SIGKILL a worker")
    ap.add_argument("--coordinator_kill_share", type=float, default=0.15,
                    help="share of fault draws that SIGKILL the coordinator (lower it to "
                         "see one coordinator process's memory over a long run)")
    ap.add_argument("--journal_faults",
                    default="append=0.002,sync=0.0005,truncate=0.05,write_file=0.02,"
                            "rename=0.01,sync_dir=0.01",
                    help="SLUICE_TEST_JOURNAL_FAULTS for the coordinator (without seed=); "
                         "empty: none")
    ap.add_argument("--retry_deadline", default="300s")
    ap.add_argument("--round_timeout", type=float, default=600)
    ap.add_argument("--sample_seconds", type=float, default=2.0)
    ap.add_argument("--keep_logs", action="store_true")
    args = ap.parse_args()

    def on_term(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)  # stop every process started, as on Ctrl-C
    signal.signal(signal.SIGINT, on_term)  # also when started in the background
    soak = Soak(args)
    try:
        result = soak.run()
    finally:
        soak.close()
    print(json.dumps(result))
    return 1 if result["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
