#!/usr/bin/env python3
"""Generates tests/testdata/format/composites.txt: SparseTensor and RaggedTensor literals as
pipeline expressions write them, with the element_spec and the printed value TensorFlow gives
(include/sluice/composite_tensor.h, core/format/tensor_format.h: FormatComposite); and
tests/testdata/format/parse_composites.txt: parse_example with VarLenFeature and RaggedFeature
on a TFRecord file of the Examples listed in it (tests/core/parse_example_composites_test.cc
writes that file with Sluice's writer and runs the pipelines).

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
parse_composites.txt starts with the records, one serialized tf.train.Example in hex a line:
  @record <hex>
then pipelines as above, reading '{records}' (the TFRecord file of those records), and cases
that fail: @error <a substring of TF's error message, or of Sluice's where TF's differs (said
next to the case below)> instead of the elements.
"""
import tempfile
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
    # Issue 31's table (docs/PIPELINES.md): ragged_batch of a SparseTensor batches it as batch();
    # bucket_by_sequence_length with no_padding batches composites, their length their rows.
    ("ragged_batch_sparse", "from_tensor_slices(%s).ragged_batch(3)" % SPARSE),
    ("bucket_ragged_no_padding",
     "from_tensor_slices(%s).bucket_by_sequence_length(length(), [2], [2, 3], no_padding=True)"
     % RAGGED2),
    ("bucket_sparse_no_padding",
     "from_tensors(%s).repeat(3).bucket_by_sequence_length(length(), [3, 5], [1, 2, 2], "
     "no_padding=True)" % SPARSE),
    ("bucket_dict_no_padding",
     "from_tensor_slices({'ids': %s, 'tokens': %s}).bucket_by_sequence_length("
     "length('tokens'), [2], [1, 2], no_padding=True, drop_remainder=True)"
     % (SPARSE, "tf.ragged.constant([[[1], [2, 3]], [[4]], [], [[5], [6]]])")),
]

# Sluice map() functions as TF spells them.
TF_SPELLING = {".map(decode_raw(tf.uint8))": ".map(lambda x: tf.io.decode_raw(x, tf.uint8))",
               "length()": "lambda e: tf.shape(e)[0]",
               "length('tokens')": "lambda e: tf.shape(e['tokens'])[0]"}


def pipeline_lines(name, expression, dataset):
    """A pipeline case: its expression, TF's element_spec and printed elements."""
    lines = ["@case " + name, "@pipeline " + expression, "@spec " + repr(dataset.element_spec)]
    for element in dataset:
        lines.append("@element")
        lines += str(element).split("\n")
    return lines + ["@end"]


def example(features):
    """A serialized tf.train.Example of {key: list of int | float | bytes}."""
    feature = {}
    for key, values in features.items():
        if values and isinstance(values[0], bytes):
            feature[key] = tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
        elif values and isinstance(values[0], float):
            feature[key] = tf.train.Feature(float_list=tf.train.FloatList(value=values))
        else:
            feature[key] = tf.train.Feature(int64_list=tf.train.Int64List(value=values))
    return tf.train.Example(
        features=tf.train.Features(feature=feature)).SerializeToString()


# Record 2 has no tags, no ids (and no rows), no w: missing features.
RECORDS = [
    example({"ids": [1, 2, 3], "lens": [2, 1], "spl": [0, 1, 3], "tags": [b"a", b"bc"],
             "w": [1.5, 2.5, 3.5, 4.5], "label": [7]}),
    example({"ids": [4], "lens": [1], "spl": [0, 1], "w": [5.0, 6.0], "label": [8],
             "tags": [b"d"]}),
    example({"lens": [], "spl": [0], "label": [9]}),
    example({"ids": [5, 6, 7, 8], "lens": [0, 4], "spl": [0, 2, 2, 4], "tags": [b"x"],
             "w": [7.0, 8.0], "label": [10]}),
    example({"ids": [9, 10], "lens": [2], "spl": [0, 2], "tags": [b"y", b"z", b""],
             "w": [9.0, 10.0, 11.0, 12.0], "label": [11]}),
]
# Broken records for the error cases (one file each).
BROKEN = {
    "lens_sum": [example({"ids": [1, 2, 3], "lens": [2, 2], "label": [0]})],
    "splits_decrease": [example({"ids": [1, 2, 3], "spl": [0, 2, 1, 3], "label": [0]})],
    "uniform": [example({"w": [1.0, 2.0, 3.0], "label": [0]})],
    "lens_dtype": [example({"ids": [1], "lens": [1.0], "label": [0]})],
}

VARLEN = ("{'tags': tf.io.VarLenFeature(tf.string), 'ids': tf.io.VarLenFeature(tf.int64), "
          "'label': tf.io.FixedLenFeature([], tf.int64), 'w': tf.io.VarLenFeature(tf.float32)}")
RAGGED_FEATURES = (
    "{'flat': tf.io.RaggedFeature(tf.int64, value_key='ids', row_splits_dtype=tf.int64), "
    "'by_lens': tf.io.RaggedFeature(tf.int64, value_key='ids', "
    "partitions=[tf.io.RaggedFeature.RowLengths('lens')], row_splits_dtype=tf.int64), "
    "'by_splits': tf.io.RaggedFeature(tf.int64, value_key='ids', "
    "partitions=(tf.io.RaggedFeature.RowSplits('spl'),), row_splits_dtype=tf.int64), "
    "'pairs': tf.io.RaggedFeature(tf.float32, value_key='w', "
    "partitions=[tf.io.RaggedFeature.UniformRowLength(2)], row_splits_dtype=tf.int64), "
    "'tags': tf.io.RaggedFeature(tf.string, row_splits_dtype=tf.int64, validate=True), "
    "'label': tf.io.FixedLenFeature([], tf.int64)}")
RAGGED_NESTED = (
    "{'nested': tf.io.RaggedFeature(tf.float32, value_key='w', partitions=["
    "tf.io.RaggedFeature.RowLengths('lens2'), tf.io.RaggedFeature.UniformRowLength(2)], "
    "row_splits_dtype=tf.int64), 'v': tf.io.VarLenFeature(tf.int64)}")
PARSE_PIPELINES = [
    ("varlen_single", "tf_record_dataset('{records}').map(parse_example(%s))" % VARLEN),
    ("varlen_batch", "tf_record_dataset('{records}').batch(2).map(parse_example(%s))" % VARLEN),
    ("varlen_batch_static",
     "tf_record_dataset('{records}').batch(2, drop_remainder=True).map(parse_example(%s))"
     % VARLEN),
    ("varlen_single_then_batch",
     "tf_record_dataset('{records}').map(parse_example(%s)).batch(3)" % VARLEN),
    ("varlen_batch_unbatch",
     "tf_record_dataset('{records}').batch(3).map(parse_example(%s)).unbatch()" % VARLEN),
    ("ragged_single", "tf_record_dataset('{records}').map(parse_example(%s))" % RAGGED_FEATURES),
    ("ragged_batch",
     "tf_record_dataset('{records}').batch(2).map(parse_example(%s))" % RAGGED_FEATURES),
    ("ragged_batch_static",
     "tf_record_dataset('{records}').batch(5, drop_remainder=True).map(parse_example(%s))"
     % RAGGED_FEATURES),
    ("ragged_single_then_batch",
     "tf_record_dataset('{records}').map(parse_example({'by_lens': tf.io.RaggedFeature("
     "tf.int64, value_key='ids', partitions=[tf.io.RaggedFeature.RowLengths('lens')], "
     "row_splits_dtype=tf.int64)})).batch(2)"),
    ("ragged_flat_ragged_batch",
     "tf_record_dataset('{records}').map(parse_example({'flat': tf.io.RaggedFeature("
     "tf.int64, value_key='ids', row_splits_dtype=tf.int64)})).ragged_batch(3)"),
    ("ragged_batch_unbatch",
     "tf_record_dataset('{records}').batch(3).map(parse_example(%s)).unbatch()"
     % RAGGED_FEATURES),
    ("ragged_take_skip_repeat",
     "tf_record_dataset('{records}').skip(1).take(3).repeat(2).batch(4)"
     ".map(parse_example(%s))" % RAGGED_FEATURES),
    ("ragged_nested_uniform",
     "tf_record_dataset('{nested}').batch(2).map(parse_example(%s))" % RAGGED_NESTED),
    ("ragged_nested_uniform_single",
     "tf_record_dataset('{nested}').map(parse_example(%s))" % RAGGED_NESTED),
    # Sluice's var_len_as_dense=True is TF's tf.sparse.to_dense of each VarLenFeature.
    ("varlen_as_dense",
     "tf_record_dataset('{records}').batch(2).map(parse_example(%s, var_len_as_dense=True))"
     % VARLEN),
    ("varlen_as_dense_single",
     "tf_record_dataset('{records}').map(parse_example(%s, var_len_as_dense=True))" % VARLEN),
]
NESTED_RECORDS = [
    example({"w": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], "lens2": [1, 2], "v": [1]}),
    example({"w": [7.0, 8.0], "lens2": [0, 1, 0], "v": [2, 3]}),
    example({"lens2": [], "v": []}),
]
# RaggedFeature's other row partitions (RowStarts, RowLimits, ValueRowIds): the same rows
# spelled three ways, empty rows and a record without values included; 'ri2' / 'st2' split
# the rows that 'ri' makes again (two ragged partitions, outermost first).
PARTITION_RECORDS = [
    example({"ids": [1, 2, 3], "st": [0, 2], "li": [2, 3], "ri": [0, 0, 1], "ri2": [0, 1],
             "st2": [0, 2]}),
    example({"ids": [4], "st": [0, 0, 1], "li": [0, 0, 1], "ri": [2], "ri2": [0, 1, 1],
             "st2": [0, 0, 3]}),
    example({"st": [], "li": [], "ri": [], "ri2": [], "st2": []}),
    example({"ids": [5, 6, 7, 8], "st": [0, 0], "li": [0, 4], "ri": [1, 1, 1, 1],
             "ri2": [0, 0], "st2": [0]}),
]
PARTITIONS = (
    "{'starts': tf.io.RaggedFeature(tf.int64, value_key='ids', partitions=["
    "tf.io.RaggedFeature.RowStarts('st')], row_splits_dtype=tf.int64), "
    "'limits': tf.io.RaggedFeature(tf.int64, value_key='ids', partitions=["
    "tf.io.RaggedFeature.RowLimits('li')], row_splits_dtype=tf.int64), "
    "'rowids': tf.io.RaggedFeature(tf.int64, value_key='ids', partitions=["
    "tf.io.RaggedFeature.ValueRowIds('ri')], row_splits_dtype=tf.int64), "
    "'two': tf.io.RaggedFeature(tf.int64, value_key='ids', partitions=["
    "tf.io.RaggedFeature.RowStarts('st2'), tf.io.RaggedFeature.ValueRowIds('ri')], "
    "row_splits_dtype=tf.int64)}")
PARTITION_PIPELINES = [
    ("ragged_partitions_single",
     "tf_record_dataset('{partitions}').map(parse_example(%s))" % PARTITIONS),
    ("ragged_partitions_batch",
     "tf_record_dataset('{partitions}').batch(3).map(parse_example(%s))" % PARTITIONS),
    ("ragged_rowids_nested_batch",
     "tf_record_dataset('{partitions}').batch(4).map(parse_example({'x': tf.io.RaggedFeature("
     "tf.int64, value_key='ids', partitions=[tf.io.RaggedFeature.ValueRowIds('ri2'), "
     "tf.io.RaggedFeature.RowLimits('li')], row_splits_dtype=tf.int64)}))"),
]
BROKEN.update({
    "starts_decrease": [example({"ids": [1, 2, 3], "st": [0, 2, 1]})],
    "starts_range": [example({"ids": [1, 2, 3], "st": [0, 4]})],
    "starts_first": [example({"ids": [1, 2, 3], "st": [1, 2]})],
    "limits_decrease": [example({"ids": [1, 2, 3], "li": [2, 1, 3]})],
    "limits_total": [example({"ids": [1, 2, 3], "li": [1, 2]})],
    "rowids_decrease": [example({"ids": [1, 2, 3], "ri": [0, 1, 0]})],
    "rowids_negative": [example({"ids": [1, 2, 3], "ri": [0, 0, -1]})],
    "rowids_count": [example({"ids": [1, 2, 3], "ri": [0, 0]})],
})


def partition_error(name, kind, key, sluice_error, tf_error, batched=False):
    return ("error_" + name, "tf_record_dataset('{%s}')%s.map(parse_example({'x': "
            "tf.io.RaggedFeature(tf.int64, value_key='ids', partitions=["
            "tf.io.RaggedFeature.%s('%s')], row_splits_dtype=tf.int64, validate=True)}))"
            % (name, ".batch(1)" if batched else "", kind, key), tf_error,
            "RaggedFeature 'x', record 0: " + sluice_error)


# TF 2.15 without validate=True gives undefined rows for inconsistent partitions; with it the
# error comes from the RaggedTensor constructors ("do not form a valid RaggedTensor"). Sluice
# always validates; its message names the feature, the record and the partition.
PARSE_ERRORS = [
    ("error_lens_sum", "tf_record_dataset('{lens_sum}').map(parse_example({'x': "
     "tf.io.RaggedFeature(tf.int64, value_key='ids', partitions=["
     "tf.io.RaggedFeature.RowLengths('lens')], row_splits_dtype=tf.int64, validate=True)}))",
     "do not form a valid RaggedTensor",
     "RaggedFeature 'x', record 0: the row lengths of 'lens' sum to more than the 3 rows of "
     "the level below (the values of 'ids')"),
    ("error_splits_decrease", "tf_record_dataset('{splits_decrease}').map(parse_example({'x': "
     "tf.io.RaggedFeature(tf.int64, value_key='ids', partitions=["
     "tf.io.RaggedFeature.RowSplits('spl')], row_splits_dtype=tf.int64, validate=True)}))",
     "do not form a valid RaggedTensor",
     "RaggedFeature 'x', record 0: the row splits of 'spl' decrease at position 2 (1 after 2)"),
    ("error_uniform", "tf_record_dataset('{uniform}').map(parse_example({'x': "
     "tf.io.RaggedFeature(tf.float32, value_key='w', partitions=["
     "tf.io.RaggedFeature.UniformRowLength(2)], row_splits_dtype=tf.int64)}))",
     "requested shape requires a multiple of 2",
     "RaggedFeature 'x', record 0: 3 values of 'w' are not a multiple of the uniform row "
     "length 2"),
    ("error_lens_dtype", "tf_record_dataset('{lens_dtype}').batch(1).map(parse_example({'x': "
     "tf.io.RaggedFeature(tf.int64, value_key='ids', partitions=["
     "tf.io.RaggedFeature.RowLengths('lens')], row_splits_dtype=tf.int64)}))",
     "Name: <unknown>, Key: lens, Index: 0.  Data types don't match. Expected type: int64, "
     "Actual type: float",
     "Name: <unknown>, Key: lens, Index: 0.  Data types don't match. Expected type: int64, "
     "Actual type: float"),
]
# RowStarts / RowLimits / ValueRowIds that do not fit: (record set, partition, key, batched,
# where TF's "Arguments to <it> do not form a valid ..." comes from, Sluice's error).
PARTITION_ERRORS = [
    ("starts_decrease", "RowStarts", "st", False, "from_row_starts",
     "the row starts of 'st' decrease at position 2 (1 after 2)"),
    ("starts_range", "RowStarts", "st", True, "from_row_starts",
     "row start 4 of 'st' at position 1 is past the 3 rows of the level below (the values of "
     "'ids')"),
    ("starts_first", "RowStarts", "st", False, "from_row_starts",
     "the row starts of 'st' start at 1, not 0"),
    ("limits_decrease", "RowLimits", "li", False, "from_row_limits",
     "the row limits of 'li' decrease at position 1 (1 after 2)"),
    ("limits_total", "RowLimits", "li", True, "_from_row_partition",
     "the row limits of 'li' end at 2 but the level below has 3 rows (the values of 'ids')"),
    ("rowids_decrease", "ValueRowIds", "ri", False, "from_value_rowids",
     "value row id 0 of 'ri' at position 2 is below the one before"),
    ("rowids_negative", "ValueRowIds", "ri", True, "from_value_rowids",
     "value row id -1 of 'ri' at position 2 is negative"),
]
PARSE_ERRORS += [partition_error(name, kind, key, sluice, "Arguments to %s do not form" % tf_from,
                                 batched)
                 for name, kind, key, batched, tf_from, sluice in PARTITION_ERRORS]
# TF refuses a ValueRowIds feature whose count differs from the values' while it builds the
# graph (a ValueError from the static shapes), not as an InvalidArgumentError, so this case is
# Sluice's alone: INVALID_ARGUMENT naming feature, record and partition.
SLUICE_ONLY_ERRORS = [
    partition_error("rowids_count", "ValueRowIds", "ri",
                    "'ri' has 2 value row ids but the level below has 3 rows (the values of "
                    "'ids')", None),
]


def to_dense_varlen(parsed):
    return {k: tf.sparse.to_dense(v) if isinstance(v, tf.SparseTensor) else v
            for k, v in parsed.items()}


def tf_parse(spec_text, dense):
    """TF's map function for Sluice's map(parse_example(spec_text[, var_len_as_dense]))."""
    spec = eval(spec_text, {"tf": tf})  # noqa: S307 (the specs above)

    def parse(x):
        parsed = (tf.io.parse_single_example(x, spec) if x.shape.rank == 0
                  else tf.io.parse_example(x, spec))
        return to_dense_varlen(parsed) if dense else parsed
    return parse


def tf_pipeline(expression, files):
    """The tf.data pipeline of a parse pipeline above."""
    for name, path in files.items():
        expression = expression.replace("'{%s}'" % name, "'%s'" % path)
    head, rest = expression.split(".map(parse_example(", 1)
    spec_text, tail = rest.split("))", 1)
    dense = spec_text.endswith(", var_len_as_dense=True")
    if dense:
        spec_text = spec_text[:-len(", var_len_as_dense=True")]
    dataset = eval(head.replace("tf_record_dataset", "tf.data.TFRecordDataset"),
                   {"tf": tf})  # noqa: S307
    dataset = dataset.map(tf_parse(spec_text, dense))
    if tail:
        dataset = eval("dataset" + tail, {"dataset": dataset})  # noqa: S307
    return dataset


def write_records(directory, name, records):
    path = os.path.join(directory, name + ".tfrecord")
    with tf.io.TFRecordWriter(path) as w:
        for r in records:
            w.write(r)
    return path


def parse_goldens(out_dir):
    lines = ["# Generated by tools/golden/gen_composite_goldens.py with TensorFlow %s, numpy %s."
             % (tf.__version__, np.__version__)]
    sets = {"records": RECORDS, "nested": NESTED_RECORDS, "partitions": PARTITION_RECORDS}
    sets.update(BROKEN)
    for name, records in sets.items():
        lines.append("@records " + name)
        lines += ["@record " + r.hex() for r in records]
    with tempfile.TemporaryDirectory() as tmp:
        files = {name: write_records(tmp, name, records) for name, records in sets.items()}
        for name, expression in PARSE_PIPELINES + PARTITION_PIPELINES:
            lines += pipeline_lines(name, expression, tf_pipeline(expression, files))
        for name, expression, tf_error, sluice_error in PARSE_ERRORS + SLUICE_ONLY_ERRORS:
            try:  # TF must fail too (SLUICE_ONLY_ERRORS: its message is not compared)
                for _ in tf_pipeline(expression, files):
                    pass
                raise AssertionError(name + ": TF did not fail")
            except (ValueError, tf.errors.InvalidArgumentError) as e:
                assert tf_error is None or tf_error in str(e), (name, str(e))
            lines += ["@case " + name, "@pipeline " + expression, "@error " + sluice_error,
                      "@end"]
    with open(os.path.join(out_dir, "parse_composites.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


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
        lines += pipeline_lines(name, expression, dataset)
    with open(os.path.join(out_dir, "composites.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    parse_goldens(out_dir)


if __name__ == "__main__":
    main(sys.argv[1])
