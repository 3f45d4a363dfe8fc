"""Sluice against the tf.data service as its users deploy it, side by side (issues 13 and 28).

    /tmp/tfvenv/bin/python bench/peer/peer_bench.py [--build=build] [--seconds=3]
        [--sizes=1024,65536,262144,1048576,4194304,16777216] [--first_step_runs=10]
        [--devices=CPU:0]

Per pipeline, one after the other on the same machine, each side on a fresh service:
  - tf.data service: a DispatchServer and a WorkerServer, each in a process of its own, and one
    consumer in a third process iterating `dataset.apply(tf.data.experimental.service.distribute(
    "parallel_epochs", ..., compression=C, target_workers="ANY"))` in Python: the steps cross
    gRPC between processes, as they do for users (no in-process local-worker shortcut). Run
    once with compression=None and once with "AUTO" (TF's default), each on its own service;
  - Sluice: a local sluice-coordinator and one sluice-worker process, and
    `sluicectl bench --coordinator=...` (DistributeDatasetFromService, the trainer's path).
Each side is warmed up (--warmup_steps), then measured for --seconds. The sides alternate
within each row, --rounds times (tf.data None, tf.data AUTO, Sluice, tf.data None, ...), each
measurement on its fresh service, and each side reports its best round: a change of the
machine's load lands on every side, not on whichever ran a minute apart. Step pipelines: one uint8
tensor of each --sizes per step, read from a file of random (incompressible) bytes,
`fixed_length_record_dataset([f], S).repeat().map(decode_raw(tf.uint8))` and TF's same
(compression cannot help either side); then `range(N).batch(1024)` and TFRecord +
parse_example + batch(256) over files made by `sluicectl gen`. The ratio is Sluice over the
better of tf.data's two compression settings.

Time to first step (--first_step_runs, median): on a warm service (processes started, one job
read before), a new job's first step: tf.data: `distribute` + `iter` + `next` on
range(10).batch(2); Sluice: `sluicectl bench --first_step_runs` (register, create the job, first
GetNext), and the job's turnaround (the same plus releasing it). The sides alternate there
too, --rounds times; each reports the median of its rounds' medians.

TensorFlow is developer tooling only (never needed by the build or the tests): without it the
script says why and exits 0.
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TF's start-up chatter off stdout/stderr
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from sluice_cluster import SluiceCluster  # noqa: E402

RANGE_N = 1 << 40  # effectively endless at any rate measured here
RANGE_BATCH = 1024
RECORD_BATCH = 256
IMAGE_BYTES = 3072
FIRST_STEP_PIPELINE = ("range(10).batch(2)", "tf.data.Dataset.range(10).batch(2)")
SERVER_LIFETIME_S = 3600  # a TF server left behind by a crash of this script exits by then


def random_file(folder, size):
    """A file of random bytes holding a few records of `size` bytes (at least 64 MiB in all
    below 16 MiB records, so that the page cache, not a single record, is read)."""
    records = max(4, min(256, (64 << 20) // size))
    path = os.path.join(folder, f"random_{size}.bin")
    with open(path, "wb") as f:
        for _ in range(records):
            f.write(os.urandom(size))
    return path


def pipelines(sizes, folder, record_files):
    """(name, sluice expression, TF builder source) for every pipeline compared."""
    out = []
    for s in sizes:
        f = random_file(folder, s)
        out.append((f"random {s} B",
                    f"fixed_length_record_dataset([{f!r}], {s}).repeat()"
                    f".map(decode_raw(tf.uint8))",
                    f"tf.data.FixedLengthRecordDataset([{f!r}], {s}).repeat()"
                    f".map(lambda r: tf.io.decode_raw(r, tf.uint8))"))
    out.append((f"range(N).batch({RANGE_BATCH})", f"range({RANGE_N}).batch({RANGE_BATCH})",
                f"tf.data.Dataset.range({RANGE_N}).batch({RANGE_BATCH})"))
    files = ", ".join(repr(f) for f in record_files)
    features_sluice = ("{'image': FixedLenFeature([], tf.string), "
                       "'label': FixedLenFeature([], tf.int64)}")
    features_tf = ("{'image': tf.io.FixedLenFeature([], tf.string), "
                   "'label': tf.io.FixedLenFeature([], tf.int64)}")
    out.append((f"TFRecord + parse_example + batch({RECORD_BATCH})",
                f"tf_record_dataset([{files}]).repeat().map(parse_example({features_sluice}))"
                f".batch({RECORD_BATCH})",
                f"tf.data.TFRecordDataset([{files}]).repeat()"
                f".map(lambda r: tf.io.parse_single_example(r, {features_tf}))"
                f".batch({RECORD_BATCH})"))
    return out


# ---- tf.data service processes (this script run with --tf_role) ----

def serve(role, dispatcher):
    """A tf.data service server in this process: prints its address, then lives until killed
    (or SERVER_LIFETIME_S)."""
    import tensorflow as tf
    service = tf.data.experimental.service
    if role == "dispatcher":
        server = service.DispatchServer(service.DispatcherConfig(port=0))
        print(server.target.split("://")[1], flush=True)
    else:
        server = service.WorkerServer(service.WorkerConfig(dispatcher_address=dispatcher, port=0))
        print("worker", flush=True)
    time.sleep(SERVER_LIFETIME_S)  # `server` stays referenced (alive) until the process ends
    os._exit(0 if server is not None else 1)


def step_bytes(tf, element):
    total = 0
    for t in tf.nest.flatten(element):
        a = t.numpy()
        total += sum(len(v) for v in a.reshape(-1)) if a.dtype == object else a.nbytes
    return total


def consume(builder, dispatcher, compression, seconds, warmup_steps, first_step_runs):
    """The consumer process: throughput of `builder` (when set) and/or time to first step over
    the service at `dispatcher`; prints one JSON line."""
    import tensorflow as tf
    target = f"grpc://{dispatcher}"
    out = {}

    def distributed(source):
        ds = eval(source, {"tf": tf})  # the source text is this script's own
        return ds.apply(tf.data.experimental.service.distribute(
            processing_mode="parallel_epochs", service=target, compression=compression,
            target_workers="ANY"))

    if first_step_runs > 0:
        next(iter(distributed(FIRST_STEP_PIPELINE[1])))  # warm: one job read before
        times = []
        for _ in range(first_step_runs):
            start = time.perf_counter()
            next(iter(distributed(FIRST_STEP_PIPELINE[1])))
            times.append(time.perf_counter() - start)
        out["first_step_seconds"] = statistics.median(times)
    if builder:
        it = iter(distributed(builder))
        size = step_bytes(tf, next(it))
        for _ in range(warmup_steps):
            next(it)
        steps = 0
        start = now = time.perf_counter()
        while now < start + seconds:
            next(it)
            steps += 1
            now = time.perf_counter()
        elapsed = now - start
        out.update(steps=steps, seconds=elapsed, steps_per_second=steps / elapsed,
                   bytes_per_second=steps * size / elapsed)
    print(json.dumps(out), flush=True)
    os._exit(0)  # TF's client threads have no clean stop; the process goes


class TfService:
    """A dispatcher process and a worker process, stopped (SIGKILL: they have no clean stop)
    on exit."""

    def __init__(self):
        self.procs = []
        self.dispatcher = None

    def _start(self, args):
        p = subprocess.Popen([sys.executable, os.path.abspath(__file__)] + args,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.procs.append(p)
        line = p.stdout.readline().strip()  # bounded: the process prints or dies
        if not line:
            raise RuntimeError(f"tf.data service {args} exited with {p.wait(timeout=60)}")
        return line

    def __enter__(self):
        self.dispatcher = self._start(["--tf_role=dispatcher"])
        self._start(["--tf_role=worker", f"--dispatcher={self.dispatcher}"])
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.send_signal(signal.SIGKILL)
            p.wait(timeout=60)

    def consume(self, builder, compression, seconds, warmup_steps, first_step_runs=0):
        args = [sys.executable, os.path.abspath(__file__), "--tf_role=consumer",
                f"--dispatcher={self.dispatcher}", f"--compression={compression}",
                f"--seconds={seconds}", f"--warmup_steps={warmup_steps}",
                f"--first_step_runs={first_step_runs}"]
        if builder:
            args.append(f"--builder={builder}")
        out = subprocess.run(args, capture_output=True, text=True, timeout=300 + 2 * seconds)
        if out.returncode != 0:
            raise RuntimeError(f"tf.data service consumer failed ({out.returncode}): "
                               f"{out.stderr.strip()[-2000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])


def human(b):
    for unit in ("B", "KB", "MB", "GB"):
        if b < 1000:
            return f"{b:.1f} {unit}"
        b /= 1000
    return f"{b:.1f} TB"


def load_average():
    a = os.getloadavg()
    return f"{a[0]:.2f} {a[1]:.2f} {a[2]:.2f}"


def alternate(rounds, sides):
    """Runs the measurements `sides` (name -> function returning its result) in turn, `rounds`
    times (A, B, C, A, B, C, ...), so that a change of the machine's load lands on every side;
    returns name -> the list of its results, in round order."""
    results = {name: [] for name in sides}
    for _ in range(rounds):
        for name, run in sides.items():
            results[name].append(run())
    return results


def tf_side(builder, compression, seconds, warmup_steps, first_step_runs=0):
    """A measurement of the tf.data service, on its own fresh dispatcher and worker."""
    def run():
        with TfService() as service:
            return service.consume(builder, compression, seconds, warmup_steps, first_step_runs)
    return run


def first_steps(args):
    """Median time to first step on a warm service, both sides alternating; prints a table."""
    def sluice():
        with SluiceCluster(args.build, num_workers=1) as cluster:
            cluster.bench(FIRST_STEP_PIPELINE[0], devices=args.devices, steps=1)  # warm
            return cluster.bench(FIRST_STEP_PIPELINE[0], devices=args.devices, steps=0,
                                 extra=[f"--first_step_runs={args.first_step_runs}"])
    r = alternate(args.rounds, {
        "None": tf_side(None, "None", 0, 0, args.first_step_runs),
        "AUTO": tf_side(None, "AUTO", 0, 0, args.first_step_runs),
        "sluice": sluice})

    def median(side, key):
        return statistics.median(x[key] for x in r[side])
    print(f"\nTime to first step, warm service, {FIRST_STEP_PIPELINE[0]}, median of "
          f"{args.first_step_runs} per round, median of {args.rounds} alternating rounds "
          f"(load average {load_average()}):\n")
    print("| tf.data (compression=None) | tf.data (AUTO) | Sluice first step | "
          "Sluice turnaround (create, 1 step, release) |")
    print("|---|---|---|---|")
    print(f"| {median('None', 'first_step_seconds') * 1e3:.1f} ms | "
          f"{median('AUTO', 'first_step_seconds') * 1e3:.1f} ms | "
          f"{median('sluice', 'first_step_seconds') * 1e3:.1f} ms | "
          f"{median('sluice', 'turnaround_seconds') * 1e3:.1f} ms |", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build", help="the CMake build folder")
    parser.add_argument("--seconds", type=float, default=3.0, help="measured time per side")
    parser.add_argument("--warmup_steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3,
                        help="alternating rounds per row (tf.data None, AUTO, Sluice, ...); "
                        "each side reports its best")
    parser.add_argument("--sizes", default="1024,65536,262144,1048576,4194304,16777216")
    parser.add_argument("--first_step_runs", type=int, default=10,
                        help="jobs timed to their first step (0: skip that table)")
    parser.add_argument("--devices", default="CPU:0",
                        help="sluicectl bench --devices (CPU:0: host tensors, as the tf.data "
                        "consumer gets them)")
    parser.add_argument("--tf_role", choices=["dispatcher", "worker", "consumer"],
                        help=argparse.SUPPRESS)
    parser.add_argument("--dispatcher", help=argparse.SUPPRESS)
    parser.add_argument("--compression", help=argparse.SUPPRESS)
    parser.add_argument("--builder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.tf_role in ("dispatcher", "worker"):
        serve(args.tf_role, args.dispatcher)
    if args.tf_role == "consumer":
        consume(args.builder, args.dispatcher,
                None if args.compression == "None" else args.compression,
                args.seconds, args.warmup_steps, args.first_step_runs)
    try:
        import tensorflow as tf
    except Exception as e:  # noqa: BLE001  (any import failure means: no peer to compare)
        print(f"SKIPPED: TensorFlow is not importable with {sys.executable} ({e!r}); run this "
              "script with a Python that has tensorflow (e.g. /tmp/tfvenv/bin/python)")
        return 0
    sizes = [int(s) for s in args.sizes.split(",") if s]
    with tempfile.TemporaryDirectory(prefix="sluice-peer-") as tmp:
        gen = subprocess.run([os.path.join(args.build, "bin", "sluicectl"), "gen",
                              "--format=tfrecord", f"--out={tmp}", "--num_files=4",
                              "--records_per_file=5000", f"--image_bytes={IMAGE_BYTES}"],
                             capture_output=True, text=True, timeout=300)
        if gen.returncode != 0:
            raise SystemExit(f"sluicectl gen failed: {gen.stderr}")
        files = sorted(os.path.join(tmp, f) for f in os.listdir(tmp) if f.endswith(".tfrecord"))
        print(f"tensorflow {tf.__version__}; load average {load_average()}; {args.seconds} s "
              f"per side, best of {args.rounds} alternating rounds; tf.data dispatcher, worker "
              f"and consumer in 3 processes; sluicectl bench --devices={args.devices}\n")
        print("| pipeline | tf.data None steps/s | tf.data AUTO steps/s | tf.data best bytes/s "
              "| sluice steps/s | sluice bytes/s | sluice p50 wait | sluice / best tf.data |")
        print("|---|---|---|---|---|---|---|---|")
        for name, expr, builder in pipelines(sizes, tmp, files):
            def sluice():
                # A fresh service per measurement: no earlier (endless) job is left on the
                # worker (the tf.data side's services are fresh too).
                with SluiceCluster(args.build, num_workers=1) as cluster:
                    return cluster.bench(expr, devices=args.devices, seconds=args.seconds,
                                         warmup_steps=args.warmup_steps)
            r = alternate(args.rounds, {
                "None": tf_side(builder, "None", args.seconds, args.warmup_steps),
                "AUTO": tf_side(builder, "AUTO", args.seconds, args.warmup_steps),
                "sluice": sluice})
            t = {c: max(r[c], key=lambda x: x["steps_per_second"]) for c in ("None", "AUTO")}
            s = max(r["sluice"], key=lambda x: x["steps_per_second"])
            best = max(t.values(), key=lambda x: x["steps_per_second"])
            ratio = s["steps_per_second"] / best["steps_per_second"]
            print(f"| {name} | {t['None']['steps_per_second']:.0f} | "
                  f"{t['AUTO']['steps_per_second']:.0f} | {human(best['bytes_per_second'])}/s | "
                  f"{s['steps_per_second']:.0f} | {human(s['bytes_per_second'])}/s | "
                  f"{s['wait_seconds']['p50'] * 1e6:.0f} us | {ratio:.2f}x |", flush=True)
        if args.first_step_runs > 0:
            first_steps(args)
        print(f"\nload average after: {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
