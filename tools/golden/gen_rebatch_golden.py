"""Writes tests/testdata/rebatch/*.txt from tensorflow-cpu (developer tool, never run by tests).

Usage: /tmp/tfvenv/bin/python tools/golden/gen_rebatch_golden.py
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf  # noqa: E402
from tensorflow.python.data.experimental.ops import distribute  # noqa: E402
from tensorflow.python.data.ops import rebatch_op  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "testdata", "rebatch")


def batch_sizes():
    lines = ["# global_batch_size num_workers replicas_per_worker worker_index: sizes",
             "# from tensorflow.python.data.experimental.ops.distribute.batch_sizes_for_worker"]
    for b in [0, 1, 3, 4, 7, 8, 10, 16, 17, 33]:
        for w in [1, 2, 3, 4]:
            for r in [1, 2, 3, 5]:
                for i in range(w):
                    sizes = distribute.batch_sizes_for_worker(b, w, r, i).numpy().tolist()
                    lines.append(f"{b} {w} {r} {i}: {' '.join(map(str, sizes))}")
    return lines


def show(ds):
    out = []
    for x in ds:
        out.append("[" + " ".join(str(v) for v in x.numpy().tolist()) + "]")
    return " ".join(out)


def rebatch():
    lines = ["# n input_batch drop_remainder | sizes : pieces of range(n).batch(input_batch)",
             "# rebatched by tensorflow.python.data.ops.rebatch_op._RebatchDataset"]
    cases = [(10, 4, [2, 2]), (10, 3, [2]), (4, 4, [1, 1, 1, 1, 0]), (2, 2, [2, 0]),
             (0, 2, [0, 2]), (9, 4, [3, 1, 0, 2]), (7, 7, [5]), (12, 5, [4, 0, 4]),
             (13, 3, [1, 2, 3, 4])]
    for n, b, sizes in cases:
        for drop in [False, True]:
            ds = rebatch_op._RebatchDataset(tf.data.Dataset.range(n).batch(b), sizes,
                                            drop_remainder=drop)
            lines.append(f"{n} {b} {int(drop)} | {' '.join(map(str, sizes))} : {show(ds)}")
    return lines


def legacy():
    lines = ["# n input_batch num_replicas : pieces of range(n).batch(input_batch)",
             "# rebatched by tensorflow.python.data.experimental.ops.distribute."
             "_LegacyRebatchDataset"]
    for n, b, r in [(8, 4, 3), (5, 5, 2), (10, 4, 2), (3, 3, 4), (9, 2, 1)]:
        ds = distribute._LegacyRebatchDataset(tf.data.Dataset.range(n).batch(b), r)
        lines.append(f"{n} {b} {r} : {show(ds)}")
    return lines


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, fn in [("batch_sizes_for_worker.txt", batch_sizes), ("rebatch.txt", rebatch),
                     ("legacy_rebatch.txt", legacy)]:
        with open(os.path.join(OUT, name), "w") as f:
            f.write("\n".join(fn()) + "\n")


if __name__ == "__main__":
    main()
