"""Sluice against the tf.data service on the same pipelines, side by side (issue 13, item 6).

    /work/tfvenv/bin/python bench/peer/peer_bench.py [--build=build] [--seconds=3]
        [--sizes=1024,16384,262144,1048576,4194304,16777216] [--devices=CPU:0]

Per pipeline, one after the other on the same machine:
  - tf.data service: an in-process DispatchServer and WorkerServer and one consumer iterating
    `dataset.apply(tf.data.experimental.service.distribute("parallel_epochs", ...))` in Python,
    in a child process of its own (so that TF's threads are gone before Sluice runs);
  - Sluice: a local sluice-coordinator and one sluice-worker process, and
    `sluicectl bench --coordinator=...` (DistributeDatasetFromService, the trainer's path).
Each side is warmed up (--warmup_steps), then measured for --seconds. Pipelines: fixed-size
uint8 tensors (`from_tensors(...).repeat()`, one per step) of each --sizes (above 1 MiB a 1 MiB
constant batched: the coordinator refuses graphs over 16 MiB), `range(N).batch(1024)`
and TFRecord + parse_example + batch(256) over files made by `sluicectl gen`. Prints a Markdown
table: steps/s and bytes/s of both and the Sluice / tf.data ratio.

TensorFlow is developer tooling only (never needed by the build or the tests): without it the
script says why and exits 0.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TF's start-up chatter off stdout/stderr
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from sluice_cluster import SluiceCluster, fixed_size_pipelines  # noqa: E402

RANGE_N = 1 << 40  # effectively endless at any rate measured here
RANGE_BATCH = 1024
RECORD_BATCH = 256
IMAGE_BYTES = 3072


def pipelines(sizes, record_files):
    """(name, sluice expression, TF builder source) for every pipeline compared."""
    out = []
    for s in sizes:
        out.append(fixed_size_pipelines(s))
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


def tf_side(builder, seconds, warmup_steps):
    """Runs in the child: one dispatcher + one worker in process, one consumer; prints JSON."""
    import tensorflow as tf
    dispatcher = tf.data.experimental.service.DispatchServer()
    address = dispatcher.target.split("://")[1]
    worker = tf.data.experimental.service.WorkerServer(  # noqa: F841  (kept alive)
        tf.data.experimental.service.WorkerConfig(dispatcher_address=address))
    ds = eval(builder, {"tf": tf})  # the source text is this script's own
    ds = ds.apply(tf.data.experimental.service.distribute(
        processing_mode="parallel_epochs", service=dispatcher.target))
    it = iter(ds)
    first = next(it)
    step_bytes = 0
    for t in tf.nest.flatten(first):
        a = t.numpy()
        if a.dtype == object:
            step_bytes += sum(len(v) for v in a.reshape(-1))
        else:
            step_bytes += a.nbytes
    for _ in range(warmup_steps):
        next(it)
    steps = 0
    start = time.perf_counter()
    deadline = start + seconds
    now = start
    while now < deadline:
        next(it)
        steps += 1
        now = time.perf_counter()
    elapsed = now - start
    print(json.dumps({"steps": steps, "seconds": elapsed, "steps_per_second": steps / elapsed,
                      "bytes_per_second": steps * step_bytes / elapsed}), flush=True)
    os._exit(0)  # TF's servers have no clean stop; the process goes


def run_tf(builder, seconds, warmup_steps):
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--tf_side", builder,
                          f"--seconds={seconds}", f"--warmup_steps={warmup_steps}"],
                         capture_output=True, text=True, timeout=300 + 2 * seconds)
    if out.returncode != 0:
        raise RuntimeError(f"tf.data service side failed ({out.returncode}): "
                           f"{out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def human(b):
    for unit in ("B", "KB", "MB", "GB"):
        if b < 1000:
            return f"{b:.1f} {unit}"
        b /= 1000
    return f"{b:.1f} TB"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build", help="the CMake build folder")
    parser.add_argument("--seconds", type=float, default=3.0, help="measured time per side")
    parser.add_argument("--warmup_steps", type=int, default=20)
    parser.add_argument("--sizes", default="1024,16384,262144,1048576,4194304,16777216")
    parser.add_argument("--devices", default="CPU:0",
                        help="sluicectl bench --devices (CPU:0: host tensors, as the tf.data "
                        "consumer gets them)")
    parser.add_argument("--tf_side", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.tf_side is not None:
        tf_side(args.tf_side, args.seconds, args.warmup_steps)
        return 0
    try:
        import tensorflow as tf
    except Exception as e:  # noqa: BLE001  (any import failure means: no peer to compare)
        print(f"SKIPPED: TensorFlow is not importable with {sys.executable} ({e!r}); run this "
              "script with a Python that has tensorflow (e.g. /work/tfvenv/bin/python)")
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
        load = os.getloadavg()
        print(f"tensorflow {tf.__version__}; load average {load[0]:.2f} {load[1]:.2f} "
              f"{load[2]:.2f}; {args.seconds} s per side; sluicectl bench --devices="
              f"{args.devices}\n")
        print("| pipeline | tf.data steps/s | tf.data bytes/s | sluice steps/s | sluice bytes/s "
              "| sluice p50 wait | sluice / tf.data |")
        print("|---|---|---|---|---|---|---|")
        for name, expr, builder in pipelines(sizes, files):
            t = run_tf(builder, args.seconds, args.warmup_steps)
            # A fresh service per pipeline: no earlier (endless) job is left on the worker.
            with SluiceCluster(args.build, num_workers=1) as cluster:
                s = cluster.bench(expr, devices=args.devices, seconds=args.seconds,
                                  warmup_steps=args.warmup_steps)
            ratio = s["steps_per_second"] / t["steps_per_second"]
            print(f"| {name} | {t['steps_per_second']:.0f} | {human(t['bytes_per_second'])}/s | "
                  f"{s['steps_per_second']:.0f} | {human(s['bytes_per_second'])}/s | "
                  f"{s['wait_seconds']['p50'] * 1e6:.0f} us | {ratio:.2f}x |", flush=True)
        load = os.getloadavg()
        print(f"\nload average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
