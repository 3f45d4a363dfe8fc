"""Writes tests/testdata/graph/spec_cardinality.txt from tensorflow-cpu (developer tool, never
run by tests).

Each line: `expression<TAB>element_spec repr<TAB>cardinality`, or
`expression<TAB>ERROR<TAB>TF's exception type` when TF refuses to build the pipeline. The
expressions are valid both in Python (evaluated here against tf.data) and for Sluice's parser.
`legacy_rebatch(N)` is Sluice's spelling of TF's internal _LegacyRebatchDataset(ds, N).

Usage: /tmp/tfvenv/bin/python tools/golden/gen_graph_golden.py
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf  # noqa: E402
from tensorflow.python.data.experimental.ops.distribute import _LegacyRebatchDataset  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "testdata", "graph")

tf.data.Dataset.legacy_rebatch = lambda self, n: _LegacyRebatchDataset(self, n)
NAMESPACE = {
    "tf": tf,
    "AUTOTUNE": tf.data.AUTOTUNE,
    "SHARD_HINT": tf.data.experimental.SHARD_HINT,
}

D = "tf.data.Dataset."
EXPRESSIONS = [
    # Sources.
    D + "range(10)",
    D + "range(2, 10, 3)",
    D + "range(10, 0, -3)",
    D + "range(5, 5)",
    D + "range(-4, 4, 2)",
    D + "from_tensors(1)",
    D + "from_tensors(1.)",
    D + "from_tensors(True)",
    D + "from_tensors('s')",
    D + "from_tensors(b'b')",
    D + "from_tensors(1099511627776)",
    D + "from_tensors([1, 1099511627776])",
    D + "from_tensors([1, 2.5])",
    D + "from_tensors([])",
    D + "from_tensors([[], []])",
    D + "from_tensors([(1, 2), (3, 4)])",
    D + "from_tensors(([1.], [1.]))",
    D + "from_tensors(([1.], [2]))",
    D + "from_tensors(([2.]))",
    D + "from_tensors((1,))",
    D + "from_tensors({'a': [1, 2], 'b': 3.})",
    D + "from_tensors({'b': 1, 'a': ((1,), 'x')})",
    D + "from_tensors(tf.constant([1, 2], dtype=tf.int64))",
    D + "from_tensors(tf.constant([], dtype=tf.int32, shape=(0, 3)))",
    D + "from_tensors(tf.constant(7, shape=(2, 2)))",
    D + "from_tensor_slices([1, 2, 3, 4])",
    D + "from_tensor_slices([[1, 2], [3, 4], [5, 6]])",
    D + "from_tensor_slices(([1, 2], ['x', 'y']))",
    D + "from_tensor_slices({'a': [[1.], [2.]], 'b': [True, False]})",
    D + "from_tensor_slices([])",
    D + "from_tensor_slices(1)",
    D + "from_tensor_slices(([1, 2], [1, 2, 3]))",
    "tf.data.TextLineDataset(['a.txt', 'b.txt'])",
    "tf.data.TextLineDataset('a.txt')",
    # Batching.
    D + "range(10).batch(4)",
    D + "range(10).batch(4, drop_remainder=True)",
    D + "range(8).batch(4, True)",
    D + "range(0).batch(4)",
    D + "range(3).batch(0)",
    D + "from_tensors(([1.], [1.])).repeat(4).batch(4)",
    D + "from_tensors(([1.], [2])).repeat(100).batch(16)",
    D + "from_tensors(([2.])).repeat(100).batch(4)",
    D + "from_tensor_slices([1, 2, 3, 4]).repeat().batch(4)",
    D + "range(10).batch(3).batch(2, drop_remainder=True)",
    # Repeat / take / skip.
    D + "range(10).repeat(3)",
    D + "range(10).repeat()",
    D + "range(10).repeat(None)",
    D + "range(10).repeat(0)",
    D + "range(0).repeat()",
    D + "range(10).repeat().take(3)",
    D + "range(10).repeat().skip(3)",
    D + "range(10).take(3)",
    D + "range(10).take(30)",
    D + "range(10).take(-1)",
    D + "range(10).skip(3)",
    D + "range(10).skip(30)",
    D + "range(10).skip(-1)",
    D + "range(0).repeat().take(3)",
    "tf.data.TextLineDataset(['a']).repeat()",
    "tf.data.TextLineDataset(['a']).repeat(0)",
    "tf.data.TextLineDataset(['a']).take(0)",
    "tf.data.TextLineDataset(['a']).repeat().take(5)",
    # Shard / shuffle / prefetch.
    D + "range(10).shard(3, 0)",
    D + "range(10).shard(3, 2)",
    D + "range(10).shard(num_shards=2, index=1)",
    D + "range(1).shard(4, 3)",
    D + "range(10).shard(0, 0)",
    D + "range(10).shard(2, 2)",
    D + "range(10).repeat().shard(2, 1)",
    D + "range(10).shuffle(10, seed=42)",
    D + "range(10).shuffle(buffer_size=8, seed=1, reshuffle_each_iteration=False)",
    D + "range(10).shuffle(0)",
    D + "range(10).prefetch(2)",
    D + "range(10).prefetch(AUTOTUNE)",
    D + "range(10).prefetch(tf.data.AUTOTUNE)",
    D + "range(10).prefetch(-2)",
    # Unbatch.
    D + "range(10).batch(4).unbatch()",
    D + "range(10).batch(4, drop_remainder=True).unbatch()",
    D + "range(10).unbatch()",
    D + "from_tensors([[1, 2], [3, 4]]).unbatch()",
    D + "from_tensors(([1, 2], [[1.], [2.]])).unbatch()",
    D + "from_tensors(([1, 2], 3)).unbatch()",
    # Rebatch.
    D + "range(8).batch(4).rebatch([2, 2])",
    D + "range(8).batch(4, drop_remainder=True).rebatch([2, 2])",
    D + "range(8).batch(4, drop_remainder=True).rebatch([3, 1])",
    D + "range(8).batch(4, drop_remainder=True).rebatch(2)",
    D + "range(8).batch(4, drop_remainder=True).rebatch([3])",
    D + "range(8).batch(4, drop_remainder=True).rebatch([3], drop_remainder=True)",
    D + "range(8).batch(4).rebatch(batch_size=[3, 1], drop_remainder=False)",
    D + "range(8).batch(4).rebatch([2], drop_remainder=True)",
    D + "from_tensors(([1, 2, 3, 4], [[1.], [2.], [3.], [4.]])).rebatch([2])",
    D + "from_tensors(([1, 2, 3, 4], [1., 2.])).rebatch([2])",
    D + "range(8).rebatch([2])",
    D + "range(8).batch(4, drop_remainder=True).legacy_rebatch(2)",
    D + "range(8).batch(4, drop_remainder=True).legacy_rebatch(3)",
    D + "range(8).batch(4).legacy_rebatch(3)",
    D + "from_tensors(([1, 2, 3, 4], [[1.], [2.], [3.], [4.]])).legacy_rebatch(2)",
    D + "range(8).legacy_rebatch(3)",
]


def main():
    os.makedirs(OUT, exist_ok=True)
    lines = [
        "# expression<TAB>element_spec<TAB>cardinality, or expression<TAB>ERROR<TAB>exception",
        "# generated by tools/golden/gen_graph_golden.py from tensorflow " + tf.__version__,
    ]
    for expr in EXPRESSIONS:
        try:
            ds = eval(expr, NAMESPACE)  # noqa: S307 (developer tool over a fixed list)
            spec = repr(ds.element_spec)
            card = int(ds.cardinality().numpy())
            lines.append(f"{expr}\t{spec}\t{card}")
        except Exception as e:  # noqa: BLE001
            lines.append(f"{expr}\tERROR\t{type(e).__name__}")
    with open(os.path.join(OUT, "spec_cardinality.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
