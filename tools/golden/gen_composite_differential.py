#!/usr/bin/env python3
"""The random differential test of SparseTensor / RaggedTensor pipelines against TensorFlow:
draws seeded random pipelines (sparse and ragged sources, parse_example with VarLenFeature and
RaggedFeature on a TFRecord file, batch, unbatch, ragged_batch, take, skip, repeat, shuffle),
runs each in TensorFlow and writes what it gives to tests/testdata/conformance/composites_vs_tf.txt,
which tests/conformance/composite_vs_tf_test.cc replays through Sluice.

Developer tooling only: the build and the tests never run TensorFlow. Run it with the TF venv:

  /tmp/tfvenv/bin/python tools/golden/gen_composite_differential.py [FIRST_SEED [COUNT]]

Seeds FIRST_SEED .. FIRST_SEED + COUNT - 1 (default 1 .. 280); each case names its seed, and
the same seed draws the same pipeline (random.Random(seed), nothing else). Seeds 1..120 draw
the first op set above (kept as it was, so their pipelines and known differences stay put);
seeds from 121 also draw rebatch, padded_batch and bucket_by_sequence_length (with and without
no_padding) over whatever the pipeline holds: where TF 2.15 refuses one (padded_batch of a
composite, a length of a scalar), the case records TF's error and Sluice must refuse it too.

Format (line oriented), after the records of the file '{records}' (@records / @record <hex>):
  @case <seed>
  @pipeline <Sluice's pipeline expression>
  @order sequence | multiset   (multiset: a final shuffle, whose random stream is not TF's:
                                the elements are compared sorted by their printed form)
  @spec <element_spec>
  @element                     followed by the lines of str(element), once per element
  @error <TF's error, first line>  (TF failed after the elements listed; Sluice must fail too)
  @error_kind <TF's exception class> (Sluice's status must be of that kind: INVALID_ARGUMENT for
                               TypeError, ValueError and InvalidArgumentError)
  @end
"""
import os
import random
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_composite_goldens import RECORDS, tf_parse, write_records  # noqa: E402

# parse_example features the generator draws from: (key, Sluice/TF spec text, keys it reads).
# As in TF, a RaggedFeature may not read a VarLen or FixedLen feature's key.
FEATURES = [
    ("tags", "tf.io.VarLenFeature(tf.string)", {"tags"}),
    ("w", "tf.io.VarLenFeature(tf.float32)", {"w"}),
    ("label", "tf.io.FixedLenFeature([], tf.int64)", {"label"}),
    ("flat", "tf.io.RaggedFeature(tf.int64, value_key='ids', row_splits_dtype=tf.int64)",
     {"ids"}),
    ("by_lens", "tf.io.RaggedFeature(tf.int64, value_key='ids', partitions=["
     "tf.io.RaggedFeature.RowLengths('lens')], row_splits_dtype=tf.int64)", {"ids", "lens"}),
    ("by_splits", "tf.io.RaggedFeature(tf.int64, value_key='ids', partitions=["
     "tf.io.RaggedFeature.RowSplits('spl')], row_splits_dtype=tf.int64)", {"ids", "spl"}),
    ("pairs", "tf.io.RaggedFeature(tf.float32, value_key='w', partitions=["
     "tf.io.RaggedFeature.UniformRowLength(2)], row_splits_dtype=tf.int64)", {"w"}),
]


def ragged_literal(rng, rows, rank2=False):
    def row():
        if rank2:
            return [[rng.randrange(100) for _ in range(rng.randrange(3))]
                    for _ in range(rng.randrange(3))]
        return [rng.randrange(100) for _ in range(rng.randrange(5))]
    values = [row() for _ in range(rows)]
    values[rng.randrange(rows)] = [[7]] if rank2 else [7]  # never all empty (TF: float32)
    return "tf.ragged.constant(%r)" % values


def sparse_literal(rng, rows):
    cols = rng.randint(1, 4)
    cells = sorted(rng.sample([(r, c) for r in range(rows) for c in range(cols)],
                              rng.randint(1, min(6, rows * cols))))
    as_float = rng.random() < 0.5
    values = [rng.randrange(20) * 0.5 if as_float else rng.randrange(20) for _ in cells]
    return "tf.sparse.SparseTensor(indices=%r, values=%r, dense_shape=[%d, %d])" % (
        [list(c) for c in cells], values, rows, cols)


def feature_spec(rng):
    """The spec text and the keys of its dict, in the order written."""
    chosen = []
    for key, text, reads in rng.sample(FEATURES, rng.randint(1, 4)):
        dense_keys = {k for k, t, _ in chosen if "RaggedFeature" not in t}
        ragged_reads = set().union(*[r for _, t, r in chosen if "RaggedFeature" in t]) \
            if chosen else set()
        if "RaggedFeature" in text and reads & dense_keys:
            continue
        if "RaggedFeature" not in text and key in ragged_reads:
            continue
        chosen.append((key, text, reads))
    return ("{%s}" % ", ".join("'%s': %s" % (k, t) for k, t, _ in chosen),
            [k for k, _, _ in chosen])


SINGLE = ("length()", "lambda e: tf.shape(e)[0]")


class Case:
    def __init__(self, seed):
        self.seed = seed
        self.rng = random.Random(seed)
        self.sluice = ""       # Sluice's expression
        self.tf_ops = []       # TF's: a source expression, then method-call suffixes
        self.parsers = []      # TF map functions the TF expression names as P[i]
        self.batched = 0       # batch levels applied (unbatch needs one)
        self.var_rows = False  # dense rows of different lengths: only ragged_batch batches them
        self.multiset = False
        self.extended = seed > 120  # draws rebatch, padded_batch, bucket_by_sequence_length
        self.length_of = None  # bucket's element_length_func: (Sluice's, TF's) for the element

    def op(self, sluice, tf_text=None):
        self.sluice += sluice
        self.tf_ops.append(tf_text if tf_text is not None else sluice)

    def parse(self, spec_and_keys):
        spec, keys = spec_and_keys
        key = self.rng.choice(keys) if self.extended else keys[0]
        self.length_of = ("length('%s')" % key, "lambda e: tf.shape(e['%s'])[0]" % key)
        self.parsers.append(tf_parse(spec, dense=False))
        self.op(".map(parse_example(%s))" % spec, ".map(P[%d])" % (len(self.parsers) - 1))

    def source(self):
        rng = self.rng
        kind = rng.randrange(7)
        rows = rng.randint(2, 7)
        if kind == 0:
            self.op("from_tensor_slices(%s)" % ragged_literal(rng, rows))
            self.var_rows = True
            self.length_of = SINGLE  # rows of a ragged_rank-1 value are dense [None] tensors
        elif kind == 1:
            self.op("from_tensor_slices(%s)" % ragged_literal(rng, rows, rank2=True))
            self.length_of = SINGLE
        elif kind == 2:
            self.op("from_tensor_slices(%s)" % sparse_literal(rng, rows))
            self.length_of = SINGLE
        elif kind == 3:
            self.op("from_tensor_slices({'r': %s, 'x': %r})" % (
                ragged_literal(rng, rows, rank2=True), list(range(rows))))
            self.length_of = ("length('r')", "lambda e: tf.shape(e['r'])[0]")
        elif kind == 4:
            self.op("from_tensor_slices((%s, %r))" % (
                sparse_literal(rng, rows), [i * 1.5 for i in range(rows)]))
            self.length_of = ("length(0)", "lambda s, x: tf.shape(s)[0]")
        elif kind == 5:
            words = [bytes(rng.choice(b"abcdef") for _ in range(rng.randrange(5)))
                     for _ in range(rows)]
            self.op("from_tensor_slices(%r).map(decode_raw(tf.uint8))" % words,
                    "from_tensor_slices(%r).map(lambda x: tf.io.decode_raw(x, tf.uint8))"
                    % words)
            self.var_rows = True
            self.length_of = SINGLE
        else:
            self.records()

    def records(self):
        rng = self.rng
        self.op("tf_record_dataset('{records}')", "TFRECORDS")
        for _ in range(rng.randrange(2)):
            self.element_op(allow_batch=False)
        if rng.random() < 0.5:
            self.batch(rng.randint(1, 4))
        self.parse(feature_spec(rng))

    def batch(self, size):
        drop = self.rng.random() < 0.25
        self.op(".batch(%d%s)" % (size, ", drop_remainder=True" if drop else ""))
        self.batched += 1

    def element_op(self, allow_batch=True):
        rng = self.rng
        choice = rng.randrange((10 if self.extended else 7) if allow_batch else 3)
        if choice >= 7:
            return self.extended_op(choice)
        if choice == 0:
            self.op(".take(%d)" % rng.randint(0, 6))
        elif choice == 1:
            self.op(".skip(%d)" % rng.randint(0, 3))
        elif choice == 2:
            self.op(".repeat(%d)" % rng.randint(1, 3))
        elif choice in (3, 4):
            if self.var_rows:
                self.ragged_batch()
            else:
                self.batch(rng.randint(1, 4))
        elif choice == 5:
            self.ragged_batch()
        elif self.batched > 0:
            self.op(".unbatch()")
            self.batched -= 1
        else:
            self.op(".take(%d)" % rng.randint(1, 6))

    def extended_op(self, choice):
        """rebatch (of a batch), padded_batch, bucket_by_sequence_length."""
        rng = self.rng
        drop = rng.random() < 0.25
        if choice == 7 and self.batched > 0:
            self.op(".rebatch(%d%s)" % (rng.randint(1, 4), ", drop_remainder=True" if drop else ""))
            return
        if choice == 7 or self.length_of is None:
            self.op(".padded_batch(%d%s)" % (rng.randint(1, 3),
                                               ", drop_remainder=True" if drop else ""))
        else:
            sizes = [rng.randint(1, 3), rng.randint(1, 3)]
            no_padding = rng.random() < 0.6
            tail = "%s%s)" % (", no_padding=True" if no_padding else "",
                              ", drop_remainder=True" if drop else "")
            boundary = rng.randint(1, 4)
            self.op(".bucket_by_sequence_length(%s, [%d], %r%s" % (
                        self.length_of[0], boundary, sizes, tail),
                    ".bucket_by_sequence_length(%s, [%d], %r%s" % (
                        self.length_of[1], boundary, sizes, tail))
        self.batched += 1
        self.var_rows = False
        self.length_of = None  # the batch's length would be its batch size: not drawn again

    def ragged_batch(self):
        size = self.rng.randint(1, 4)
        drop = self.rng.random() < 0.25
        self.op(".ragged_batch(%d%s)" % (size, ", drop_remainder=True" if drop else ""))
        self.batched += 1
        self.var_rows = False

    def draw(self):
        self.source()
        for _ in range(self.rng.randrange(5)):
            self.element_op()
        if self.rng.random() < 0.2:
            self.op(".shuffle(%d, seed=%d)" % (self.rng.randint(2, 8), self.rng.randrange(100)))
            self.multiset = True
        return self

    def tf_dataset(self, records_path):
        namespace = {"tf": tf, "P": self.parsers}
        head = self.tf_ops[0]
        if head == "TFRECORDS":
            dataset = tf.data.TFRecordDataset(records_path)
        else:
            dataset = eval("tf.data.Dataset." + head, namespace)  # noqa: S307 (drawn above)
        namespace["d"] = dataset
        return eval("d" + "".join(self.tf_ops[1:]), namespace)  # noqa: S307


def main():
    first = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 280
    lines = ["# Generated by tools/golden/gen_composite_differential.py with TensorFlow %s, "
             "numpy %s: seeds %d..%d." % (tf.__version__, np.__version__, first,
                                          first + count - 1),
             "@records records"]
    lines += ["@record " + r.hex() for r in RECORDS]
    with tempfile.TemporaryDirectory() as tmp:
        path = write_records(tmp, "records", RECORDS)
        for seed in range(first, first + count):
            case = Case(seed).draw()
            lines += ["@case %d" % seed, "@pipeline " + case.sluice,
                      "@order " + ("multiset" if case.multiset else "sequence")]
            try:
                dataset = case.tf_dataset(path)
            except (ValueError, TypeError, AttributeError, tf.errors.OpError) as e:
                lines += ["@error " + str(e).strip().split("\n")[0],
                          "@error_kind " + type(e).__name__, "@end"]
                continue
            lines.append("@spec " + repr(dataset.element_spec))
            elements = []
            error = None
            try:
                for element in dataset:
                    elements.append(str(element))
            except tf.errors.OpError as e:
                error = str(e).strip().split("\n")[0]
                error_kind = type(e).__name__
            if case.multiset:
                elements.sort()
            for e in elements:
                lines.append("@element")
                lines += e.split("\n")
            if error is not None:
                lines += ["@error " + error, "@error_kind " + error_kind]
            lines.append("@end")
    out = "tests/testdata/conformance/composites_vs_tf.txt"
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
