"""parse_example's composite outputs in Python (issue 31): a TFRecord file of tf.train.Example
records this test writes, parsed with ``VarLenFeature`` (a SparseTensor) and ``RaggedFeature``
(a RaggedTensor, ragged rank 1 and, with row lengths, 2; string values too) next to a
``FixedLenFeature``; the numpy views of their components
(indices/values/dense_shape, values + row_splits) with TF's dtypes, the element_spec TF 2.15
prints for the same pipeline, and sluice.torch's sparse COO, nested and padded forms; in this
process and through real sluice-coordinator and sluice-worker processes, for 1 and 2 replicas,
remote equal to local. The service runs them with sharding_policy="DATA": AUTO would shard the
one file by FILE, which two workers cannot."""

import struct

import pytest

import dependencies
import sluice

# (ids, w, label) of each record; None leaves the feature out of the Example.
RECORDS = [([1, 2, 3], [1.5, 2.5], 7), ([4], None, 8), (None, [3.5], 9),
           ([5, 6], [4.5, 5.5, 6.5], 10)]
FEATURES = ("{'ids': tf.io.VarLenFeature(tf.int64), "
            "'w': tf.io.RaggedFeature(tf.float32, row_splits_dtype=tf.int64), "
            "'label': tf.io.FixedLenFeature([], tf.int64)}")
# What TF 2.15 prints for tf.data.TFRecordDataset(path).batch(2).map(lambda x:
# tf.io.parse_example(x, FEATURES)).element_spec: sparse keys, then dense, then ragged.
SPEC = ("{'ids': SparseTensorSpec(TensorShape([None, None]), tf.int64), "
        "'label': TensorSpec(shape=(None,), dtype=tf.int64, name=None), "
        "'w': RaggedTensorSpec(TensorShape([None, None]), tf.float32, 1, tf.int64)}")


# tf.train.Example in the protobuf wire format (proto/example.proto), written by hand: the
# Python tests depend on neither TensorFlow nor the protobuf runtime.
def _varint(n):
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number, payload):  # a length-delimited field
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _int64s(values):  # Feature.int64_list, packed
    return _field(3, _field(1, b"".join(_varint(v) for v in values)))


def _example(ids, w, label, lens=None, tags=None):
    features = {"label": _int64s([label])}
    if ids is not None:
        features["ids"] = _int64s(ids)
    if w is not None:  # Feature.float_list, packed little-endian floats
        features["w"] = _field(2, _field(1, struct.pack("<%df" % len(w), *w)))
    if lens is not None:
        features["lens"] = _int64s(lens)
    if tags is not None:  # Feature.bytes_list
        features["tags"] = _field(1, b"".join(_field(1, t) for t in tags))
    entries = b"".join(_field(1, _field(1, k.encode()) + _field(2, v))
                       for k, v in sorted(features.items()))
    return _field(1, entries)  # Example.features = Features{map<string, Feature> feature = 1}


def _crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def _masked_crc(data):
    crc = _crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _write_tfrecord(path, records):
    with open(path, "wb") as f:
        for record in records:
            length = struct.pack("<Q", len(record))
            f.write(length + struct.pack("<I", _masked_crc(length)) + record +
                    struct.pack("<I", _masked_crc(record)))


@pytest.fixture
def pipeline(tmp_path):
    """The pipeline expression over a TFRecord file of RECORDS."""
    path = tmp_path / "composites.tfrecord"
    _write_tfrecord(path, [_example(*r) for r in RECORDS])
    assert "'" not in str(path)
    return "tf_record_dataset('%s').batch(2).map(parse_example(%s))" % (path, FEATURES)


def test_crc32c_is_the_castagnoli_checksum():
    assert _crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value


def _dataset(pipeline, how):
    """The same pipeline from an expression or the fluent builder (map takes the parse
    function's expression text: Python has no feature-spec builder)."""
    if how == "expression":
        return sluice.data.parse(pipeline)
    path = pipeline.split("'")[1]
    return (sluice.data.Dataset.tf_record_dataset([path]).batch(2)
            .map("parse_example(%s)" % FEATURES))


def _check_steps(steps):
    """The batches of 2 records, as TF's parse_example gives them."""
    assert len(steps) == 2
    for step in steps:
        assert list(step) == ["ids", "label", "w"]
        ids, label, w = step["ids"], step["label"], step["w"]
        assert isinstance(ids, sluice.SparseTensor)
        assert ids.indices.dtype.name == "int64" and ids.values.dtype.name == "int64"
        assert ids.dense_shape.dtype.name == "int64"
        assert isinstance(w, sluice.RaggedTensor)
        assert w.ragged_rank == 1
        assert w.values.dtype.name == "float32" and w.row_splits.dtype.name == "int64"
        assert label.numpy().dtype.name == "int64"
    first, second = steps
    ids = first["ids"]
    assert ids.indices.shape == (4, 2)
    assert ids.indices.tolist() == [[0, 0], [0, 1], [0, 2], [1, 0]]
    assert ids.values.tolist() == [1, 2, 3, 4]
    assert ids.dense_shape.tolist() == [2, 3]
    assert ids.to_dense().tolist() == [[1, 2, 3], [4, 0, 0]]
    assert first["w"].values.tolist() == [1.5, 2.5]
    assert first["w"].row_splits.tolist() == [0, 2, 2]
    assert first["w"].to_list() == [[1.5, 2.5], []]
    assert first["label"].numpy().tolist() == [7, 8]
    ids = second["ids"]  # record 2 has no ids: row 0 is empty
    assert ids.indices.tolist() == [[1, 0], [1, 1]]
    assert ids.values.tolist() == [5, 6]
    assert ids.dense_shape.tolist() == [2, 2]
    assert second["w"].values.tolist() == [3.5, 4.5, 5.5, 6.5]
    assert second["w"].row_splits.tolist() == [0, 1, 4]
    assert second["label"].numpy().tolist() == [9, 10]


@pytest.mark.parametrize("how", ["expression", "builder"])
def test_local_parse_gives_sparse_and_ragged_numpy_views(pipeline, how):
    dataset = _dataset(pipeline, how)
    assert repr(dataset.element_spec) == SPEC
    dist = sluice.MirroredStrategy(["CPU:0"]).experimental_distribute_dataset(dataset)
    assert repr(dist.element_spec) == SPEC
    _check_steps(list(dist))


def test_through_the_service_one_replica_equals_local(cluster, pipeline):
    strategy = sluice.MirroredStrategy(["CPU:0"])
    remote = sluice.distribute_from_service(strategy, sluice.data.parse(pipeline),
                                            coordinator=cluster.coordinator, job="parse-1",
                                            sharding_policy="DATA")
    assert repr(remote.element_spec) == SPEC
    steps = list(remote)
    _check_steps(steps)
    local = list(strategy.experimental_distribute_dataset(sluice.data.parse(pipeline)))
    assert [str(s) for s in steps] == [str(s) for s in local]


def _rows(step):
    """Each row of a dict step: (ids densified without trailing zeros, label, w)."""
    dense = step["ids"].to_dense().tolist()
    lengths = [0] * len(dense)
    for row, col in step["ids"].indices.tolist():
        lengths[row] = max(lengths[row], col + 1)
    return [(d[:n], l, w) for d, n, l, w in zip(dense, lengths, step["label"].numpy().tolist(),
                                                  step["w"].to_list())]


def test_two_replicas_through_the_service_get_the_rows_local_mode_gives(cluster, pipeline):
    strategy = sluice.MirroredStrategy(["CPU:0", "CPU:1"])
    local = strategy.experimental_distribute_dataset(sluice.data.parse(pipeline))
    remote = sluice.distribute_from_service(strategy, sluice.data.parse(pipeline),
                                            coordinator=cluster.coordinator, job="parse-2",
                                            sharding_policy="DATA")
    assert repr(remote.element_spec) == repr(local.element_spec)
    assert repr(remote.element_spec).startswith("{'ids': PerReplicaSpec(SparseTensorSpec(")
    local_steps, remote_steps = list(local), list(remote)
    assert [str(s) for s in remote_steps] == [str(s) for s in local_steps]
    # Each replica gets one record of each batch of 2, in record order.
    rows = []
    for step in remote_steps:
        for key in ("ids", "label", "w"):
            assert isinstance(step[key], sluice.PerReplica) and len(step[key].values) == 2
        for r in range(2):
            rows += _rows({k: v.values[r] for k, v in step.items()})
    assert rows == [(ids or [], label, w or []) for ids, w, label in RECORDS]


def test_torch_sparse_nested_and_padded_from_the_service(cluster, pipeline):
    torch = dependencies.import_installable("torch", "python3-torch")
    import sluice.torch as st
    strategy = sluice.MirroredStrategy(["CPU:0"])
    step = next(iter(sluice.distribute_from_service(strategy, sluice.data.parse(pipeline),
                                                    coordinator=cluster.coordinator,
                                                    job="parse-torch",
                                                    sharding_policy="DATA")))
    padded = st.to_torch(step, ragged="padded", padding_value=-1.0)
    assert padded["ids"].is_sparse
    assert padded["ids"].dtype == torch.int64
    assert padded["ids"].to_dense().tolist() == [[1, 2, 3], [4, 0, 0]]
    assert padded["w"].dtype == torch.float32
    assert padded["w"].tolist() == [[1.5, 2.5], [-1.0, -1.0]]
    assert padded["label"].tolist() == [7, 8]
    nested = st.to_torch(step, ragged="nested")
    assert nested["w"].is_nested
    assert [t.tolist() for t in nested["w"].unbind()] == [[1.5, 2.5], []]


NESTED = ("{'tags': tf.io.VarLenFeature(tf.string), "
          "'words': tf.io.RaggedFeature(tf.int64, value_key='ids', "
          "partitions=[tf.io.RaggedFeature.RowLengths('lens')], row_splits_dtype=tf.int64)}")
# TF 2.15's element_spec for the batch of 3 parsed with NESTED.
NESTED_SPEC = ("{'tags': SparseTensorSpec(TensorShape([None, None]), tf.string), "
               "'words': RaggedTensorSpec(TensorShape([None, None, None]), tf.int64, 2, "
               "tf.int64)}")


def _check_nested_step(step):
    words, tags = step["words"], step["tags"]
    assert words.ragged_rank == 2
    assert [s.tolist() for s in words.nested_row_splits] == [[0, 2, 4, 4], [0, 2, 3, 3, 4]]
    assert words.values.tolist() == [1, 2, 3, 4]
    assert words.to_list() == [[[1, 2], [3]], [[], [4]], []]
    assert tags.indices.tolist() == [[0, 0], [0, 1], [2, 0]]
    assert tags.values.tolist() == [b"a", b"bc", b"d"]
    assert tags.dense_shape.tolist() == [3, 2]


def test_ragged_rank_2_and_string_sparse_local_and_through_the_service(cluster, tmp_path):
    path = tmp_path / "nested.tfrecord"
    _write_tfrecord(path, [_example([1, 2, 3], None, 0, lens=[2, 1], tags=[b"a", b"bc"]),
                           _example([4], None, 1, lens=[0, 1], tags=[]),
                           _example(None, None, 2, tags=[b"d"])])
    pipeline = "tf_record_dataset('%s').batch(3).map(parse_example(%s))" % (path, NESTED)
    strategy = sluice.MirroredStrategy(["CPU:0"])
    local = strategy.experimental_distribute_dataset(sluice.data.parse(pipeline))
    remote = sluice.distribute_from_service(strategy, sluice.data.parse(pipeline),
                                            coordinator=cluster.coordinator, job="parse-nested",
                                            sharding_policy="DATA")
    for dist in (local, remote):
        assert repr(dist.element_spec) == NESTED_SPEC
        steps = list(dist)
        assert len(steps) == 1
        _check_nested_step(steps[0])
