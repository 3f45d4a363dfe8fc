"""1 KiB steps through the client API a trainer uses, co-located worker (issue 28, small steps).

    python3 bench/small_step_bench.py [--build=build] [--seconds=5] [--size=1024] [--reps=3]
        [--devices=CPU:0,GPU:0] [--shared_memory=1] [--pipeline=EXPR] [--worker_nice=N]
        [--worker_flags="--memory_limit=128MiB ..."] [--warmup_steps=1000]

Starts a sluice-coordinator and one sluice-worker on loopback (bench/sluice_cluster.py) and runs
`sluicectl bench --coordinator` (DistributeDatasetFromService, DistributedIterator::GetNext in
a loop, each step dropped before the next call) on
`from_tensors(tf.constant(0, dtype=tf.uint8, shape=[size])).repeat()` (or --pipeline, e.g.
`range(1 << 40).batch(128)`: 1 KiB of int64 per step from a batch op): the worker runs the
pipeline and streams the steps, through shared memory when --shared_memory=1 (the default, as
users get it on one host). --devices=GPU:0 adds the device prefetcher (host memory standing in
without a GPU). Per run it reports steps/s and the CPU each process spent per step:
  - consumer: sluicectl's own CPU over the measured steps (its JSON process_cpu_seconds_per_gb
    times the bytes), i.e. the trainer's whole cost of receiving and handing out a step;
  - worker: the sluice-worker's user + system CPU (/proc/PID/stat) from the bench's start to
    its end, divided by the measured steps (so it also counts the warm-up's steps, the
    job's start and its end: an upper bound), and its threads' context switches per step
    (/proc/PID/task/*/status: each is a thread hand-off, a futex sleep or a preemption);
    and its minor page faults per step (/proc/PID/stat, the same span: memory faulted in
    afresh, e.g. a large step's buffer);
  - steps/frame: measured steps over the frames this consumer decoded from shared memory
    (over TCP: not counted).
--worker_nice=-10 (root) raises the worker's threads' priority: on a loaded machine it stands
in for a quiet one, where the worker outruns its consumer (a steps/frame above the frame's 64
then says that steps went by TCP instead of the ring). --worker_flags go to sluice-worker.
The budget at 1,000,000 steps/s is 1 us of wall time per step; on a 2-core machine the two
processes' CPU per step must add up to at most 2 us. Prints one Markdown row per run with the
1-minute load average at its start and end (a loaded machine's wall figures are noise; the CPU
per step is the steadier figure).
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice_cluster import SluiceCluster  # noqa: E402


def cpu_seconds(pid):
    """User + system CPU seconds of process `pid` so far (/proc/PID/stat fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def minor_faults(pid):
    """Minor page faults of process `pid` so far (/proc/PID/stat field 10)."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])


def context_switches(pid):
    """Voluntary + involuntary context switches of every thread of process `pid` so far (threads
    that have exited are not counted)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--devices", default="CPU:0,GPU:0")
    ap.add_argument("--shared_memory", default="1")
    ap.add_argument("--pipeline", default="",
                    help="another pipeline expression (default: the from_tensors one above)")
    ap.add_argument("--worker_nice", type=int, default=None,
                    help="set the worker's threads' nice value (negative needs root)")
    ap.add_argument("--worker_flags", default="", help="extra sluice-worker flags")
    ap.add_argument("--warmup_steps", type=int, default=1000,
                    help="steps before the measured ones (fewer for large steps)")
    args = ap.parse_args()
    expr = args.pipeline or (
        f"from_tensors(tf.constant(0, dtype=tf.uint8, shape=[{args.size}])).repeat()")
    print("| devices | shm | steps/s | consumer CPU us/step | worker CPU us/step | "
          "worker switches/step | worker minor faults/step | steps/frame | load (1-min) start / end |")
    print("|---|---|---|---|---|---|---|---|---|")
    with SluiceCluster(args.build, num_workers=1,
                       worker_flags=args.worker_flags.split()) as cluster:
        worker_pid = cluster.procs[1].pid
        if args.worker_nice is not None:  # its threads now; those it starts later inherit it
            for tid in os.listdir(f"/proc/{worker_pid}/task"):
                os.setpriority(os.PRIO_PROCESS, int(tid), args.worker_nice)
        for _ in range(args.reps):
            for devices in args.devices.split(","):
                load0 = os.getloadavg()[0]
                w0 = cpu_seconds(worker_pid)
                s0 = context_switches(worker_pid)
                f0 = minor_faults(worker_pid)
                r = cluster.bench(expr, devices=devices, seconds=args.seconds, warmup_steps=args.warmup_steps,
                                  extra=[f"--shared_memory={args.shared_memory == '1'}".lower()])
                w1 = cpu_seconds(worker_pid)
                s1 = context_switches(worker_pid)
                f1 = minor_faults(worker_pid)
                load1 = os.getloadavg()[0]
                steps = max(r["steps"], 1)
                gb = r["bytes"] / 1e9
                per_gb = (r.get("wire") or {}).get("process_cpu_seconds_per_gb") or 0
                consumer_us = per_gb * gb / steps * 1e6
                worker_us = (w1 - w0) / steps * 1e6
                frames = r["parameters"].get("shared_memory_frames") or 0
                per_frame = f"{steps / frames:.1f}" if frames else "- (TCP)"
                print(f"| {devices} | {args.shared_memory} | {r['steps_per_second']:.0f} | "
                      f"{consumer_us:.2f} | {worker_us:.2f} | {(s1 - s0) / steps:.3f} | {(f1 - f0) / steps:.1f} | "
                      f"{per_frame} | {load0:.2f} / {load1:.2f} |", flush=True)
                time.sleep(0.5)


if __name__ == "__main__":
    main()
