#!/usr/bin/env python3
"""TensorFlow's own tf.data, in-process, on executor_bench's pipelines (bench/executor_bench.sh).

    python3 bench/tf_executor_reference.py [--range_elements=33554432]
        [--batch_sizes=2048,131072,524288] [--records=DIR] [--parallel=2] [--reps=3]

Prints the same Markdown rows as executor_bench: elements/s, batches/s, and the process's CPU time
(user + system, all threads) per element and over wall time, best of --reps runs.
Developer tooling only: needs tensorflow (the /work/tfvenv venv), never the build or the tests.
"""
import argparse
import glob
import os
import resource
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402


def cpu_seconds():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def drain(ds):
    start = time.perf_counter()
    cpu = cpu_seconds()
    elements = batches = 0
    for b in ds:
        first = tf.nest.flatten(b)[0]
        elements += int(first.shape[0]) if first.shape.rank else 1
        batches += 1
    return elements, batches, time.perf_counter() - start, cpu_seconds() - cpu


def best(make, reps):
    runs = [drain(make()) for _ in range(reps)]
    return min(runs, key=lambda r: r[2])


def row(name, r):
    elements, batches, seconds, cpu = r
    print("| %-58s | %12.0f | %10.1f | %8.3f | %5.2f |" % (
        name, elements / seconds, batches / seconds, 1e6 * cpu / elements, cpu / seconds),
        flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--range_elements", type=int, default=1 << 25)
    p.add_argument("--batch_sizes", default="2048,131072,524288")
    p.add_argument("--records", default="")
    p.add_argument("--parallel", type=int, default=2)
    p.add_argument("--reps", type=int, default=3)
    a = p.parse_args()
    print("| %-58s | %12s | %10s | %8s | %5s |" % ("tf.data pipeline (TF %s)" % tf.__version__,
                                                  "elements/s", "batches/s", "CPU µs/elem",
                                                  "cores"))
    print("|---|---|---|---|---|")
    for b in filter(None, a.batch_sizes.split(",")):
        b = int(b)
        n = max(a.range_elements // b, 8) * b
        row("range(%d).batch(%d)" % (n, b),
            best(lambda: tf.data.Dataset.range(n).batch(b), a.reps))
    if not a.records:
        return
    files = sorted(glob.glob(os.path.join(a.records, "*")))
    spec = {"image": tf.io.FixedLenFeature([], tf.string),
            "label": tf.io.FixedLenFeature([], tf.int64, default_value=0)}

    def parse(x):
        return tf.io.parse_single_example(x, spec)

    def parse_batch(x):
        return tf.io.parse_example(x, spec)

    for name, calls in (("sequential", None), ("num_parallel_calls=%d" % a.parallel, a.parallel),
                        ("AUTOTUNE", tf.data.AUTOTUNE)):
        row("tfrecord .map(parse_example, %s).batch(256)" % name,
            best(lambda: tf.data.TFRecordDataset(files).map(parse, num_parallel_calls=calls)
                 .batch(256), a.reps))
    row("tfrecord .batch(256).map(parse_example) (TF's best form)",
        best(lambda: tf.data.TFRecordDataset(files).batch(256).map(parse_batch), a.reps))
    row("tfrecord .batch(256).map(parse_example, AUTOTUNE)",
        best(lambda: tf.data.TFRecordDataset(files).batch(256)
             .map(parse_batch, num_parallel_calls=tf.data.AUTOTUNE), a.reps))


if __name__ == "__main__":
    main()
