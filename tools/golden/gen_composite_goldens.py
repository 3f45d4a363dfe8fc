#!/usr/bin/env python3
"""Generates tests/testdata/format/composites.txt: SparseTensor and RaggedTensor literals as
pipeline expressions write them, with the element_spec and the printed value TensorFlow gives
(include/sluice/composite_tensor.h, core/format/tensor_format.h: FormatComposite).

Developer tooling only: the build and the tests never run TensorFlow. Run it with the TF venv:

  /tmp/tfvenv/bin/python tools/golden/gen_composite_goldens.py tests/testdata/format

Format (line oriented):
  @case <name>
  @literal <the literal, one line: what from_tensors(...) takes in a pipeline expression>
  @spec <tf.data.Dataset.from_tensors(value).element_spec, one line>
  @str                  followed by the lines of str(value)
  @end
Pipelines (ops on sparse and ragged inputs):
  @pipeline <a pipeline expression; TF evaluates it as tf.data.Dataset.<expression>>
  @spec <its element_spec>
  @element              followed by the lines of str(element), once per element
  @end
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

CASES = [
    ("ragged_int", "tf.ragged.constant([[1, 2], [3]])"),
    ("ragged_empty_row", "tf.ragged.constant([[1, 2], [], [3]])"),
    ("ragged_float", "tf.ragged.constant([[1.5, 2.0], [3.25]])"),
    ("ragged_int64", "tf.ragged.constant([[1, 2], [3]], dtype=tf.int64)"),
    ("ragged_strings", "tf.ragged.constant([[b'a', b'b'], []])"),
    ("ragged_rank2", "tf.ragged.constant([[[1, 2], [3]], [[4]]])"),
    ("ragged_uniform_inner", "tf.ragged.constant([[[1.5], [2.0]], [[3.0]]], ragged_rank=1)"),
    ("ragged_uniform_inner2", "tf.ragged.constant([[[1, 2], [3, 4]], [[5, 6]]], ragged_rank=1)"),
    ("ragged_from_row_splits",
     "tf.RaggedTensor.from_row_splits(values=[1, 2, 3, 4], row_splits=[0, 3, 3, 4])"),
    ("ragged_from_nested",
     "tf.RaggedTensor.from_nested_row_splits(flat_values=[1., 2., 3.], "
     "nested_row_splits=([0, 1, 2], [0, 2, 3]))"),
    ("ragged_bool", "tf.ragged.constant([[True], [False, True]])"),
    ("sparse_int", "tf.sparse.SparseTensor(indices=[[0, 0], [1, 2]], values=[1, 2], "
                   "dense_shape=[3, 4])"),
    ("sparse_float_1d", "tf.sparse.SparseTensor(indices=[[1], [3]], values=[0.5, 2.0], "
                        "dense_shape=[5])"),
    ("sparse_strings", "tf.sparse.SparseTensor(indices=[[0, 1]], values=[b'x'], "
                       "dense_shape=[1, 2])"),
    ("sparse_int64_3d", "tf.sparse.SparseTensor(indices=[[0, 0, 1]], "
                        "values=tf.constant([7], dtype=tf.int64), dense_shape=[1, 1, 2])"),
]


RAGGED = "tf.ragged.constant([[1, 2], [3], [4, 5, 6], [], [7]])"
RAGGED2 = "tf.ragged.constant([[[1, 2], [3]], [[4]], [[5], [], [6, 7]]])"
SPARSE = ("tf.sparse.SparseTensor(indices=[[0, 1], [0, 3], [2, 0], [3, 2]], values=[1., 2., 3., 4.], "
          "dense_shape=[4, 5])")
PIPELINES = [
    ("slices_ragged", "from_tensor_slices(%s)" % RAGGED),
    ("slices_sparse", "from_tensor_slices(%s)" % SPARSE),
    ("batch_ragged", "from_tensor_slices(%s).batch(2)" % RAGGED),
    ("batch_ragged_drop", "from_tensor_slices(%s).batch(2, drop_remainder=True)" % RAGGED),
    ("batch_ragged2", "from_tensor_slices(%s).batch(2)" % RAGGED2),
    ("batch_sparse", "from_tensor_slices(%s).batch(3)" % SPARSE),
    ("batch_batch_sparse", "from_tensor_slices(%s).batch(2).batch(2)" % SPARSE),
    ("unbatch_ragged", "from_tensors(%s).unbatch()" % RAGGED2),
    ("rebatch_ragged", "from_tensor_slices(%s).batch(3).unbatch().batch(2)" % RAGGED),
    ("unbatch_sparse", "from_tensors(%s).unbatch()" % SPARSE),
    ("tuple_mixed", "from_tensor_slices((%s, [10, 20, 30, 40, 50])).batch(2)" % RAGGED),
    ("dict_mixed", "from_tensor_slices({'ids': %s, 'label': [1, 0, 1, 1]}).batch(3)" % SPARSE),
    ("repeat_take_ragged", "from_tensors(%s).repeat(3).take(2)" % RAGGED),
    # rebatch(): rows of composites cut and joined across input batches, size-0 pieces.
    ("rebatch_ragged_sizes", "from_tensor_slices(%s).batch(2).rebatch([3, 0, 1])" % RAGGED),
    ("rebatch_ragged2_drop", "from_tensor_slices(%s).batch(2).rebatch(3, drop_remainder=True)"
     % RAGGED2),
    ("rebatch_sparse_sizes", "from_tensor_slices(%s).batch(3).rebatch([1, 2, 1])" % SPARSE),
    ("rebatch_mixed", "from_tensor_slices((%s, [10, 20, 30, 40, 50])).batch(2).rebatch(4)"
     % RAGGED),
    ("ragged_batch_of_ragged", "from_tensor_slices(%s).ragged_batch(2)" % RAGGED),
    ("ragged_batch_dense_fixed", "from_tensor_slices([[1, 2], [3, 4], [5, 6]]).ragged_batch(2)"),
    # Sluice's map(decode_raw(...)) is TF's map(lambda x: tf.io.decode_raw(x, ...)).
    ("ragged_batch_dense_varlen",
     "from_tensor_slices([b'ab', b'cde', b'', b'f', b'ghij']).map(decode_raw(tf.uint8))"
     ".ragged_batch(2)"),
    ("ragged_batch_drop_unbatch",
     "from_tensor_slices([b'ab', b'cde', b'', b'f', b'ghij']).map(decode_raw(tf.uint8))"
     ".ragged_batch(2, drop_remainder=True).unbatch()"),
]

# Sluice map() functions as TF spells them.
TF_SPELLING = {".map(decode_raw(tf.uint8))": ".map(lambda x: tf.io.decode_raw(x, tf.uint8))"}


def main(out_dir):
    lines = ["# Generated by tools/golden/gen_composite_goldens.py with TensorFlow %s, numpy %s."
             % (tf.__version__, np.__version__)]
    for name, literal in CASES:
        value = eval(literal, {"tf": tf})  # noqa: S307 (the literals above, nothing else)
        spec = tf.data.Dataset.from_tensors(value).element_spec
        lines += ["@case " + name, "@literal " + literal, "@spec " + repr(spec), "@str"]
        lines += str(value).split("\n")
        lines.append("@end")
    for name, expression in PIPELINES:
        tf_expression = expression
        for sluice, spelled in TF_SPELLING.items():
            tf_expression = tf_expression.replace(sluice, spelled)
        dataset = eval("tf.data.Dataset." + tf_expression, {"tf": tf})  # noqa: S307
        lines += ["@case " + name, "@pipeline " + expression,
                  "@spec " + repr(dataset.element_spec)]
        for element in dataset:
            lines.append("@element")
            lines += str(element).split("\n")
        lines.append("@end")
    with open(os.path.join(out_dir, "composites.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
