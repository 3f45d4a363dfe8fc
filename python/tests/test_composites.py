"""SparseTensor and RaggedTensor values in Python (issue 31): numpy views of their components
with TF's dtypes and shapes, from a local pipeline and through real sluice-coordinator and
sluice-worker processes (the same values and element_spec), and sluice.torch's nested, padded
and sparse COO forms; across several replicas, PerReplica values of composites whose rows are
the batch's rows, cut as TF cuts them, remote equal to local."""

import pytest

import dependencies
import sluice

RAGGED = ("from_tensor_slices(tf.ragged.constant([[1, 2], [3], [4, 5, 6], []])).repeat(2)"
          ".ragged_batch(4)")
SPARSE = ("from_tensors(tf.sparse.SparseTensor(indices=[[0, 1], [1, 2]], values=[1., 2.], "
          "dense_shape=[2, 3])).repeat(3).batch(2)")
ROWS = [[1, 2], [3], [4, 5, 6], []]


def _local(expr):
    strategy = sluice.MirroredStrategy(["CPU:0"])
    return strategy.experimental_distribute_dataset(sluice.data.parse(expr))


def _remote(cluster, expr, job):
    strategy = sluice.MirroredStrategy(["CPU:0"])
    return sluice.distribute_from_service(strategy, sluice.data.parse(expr),
                                          coordinator=cluster.coordinator, job=job)


def _check_ragged_steps(steps):
    assert len(steps) == 2
    for step in steps:
        assert isinstance(step, sluice.RaggedTensor)
        assert step.ragged_rank == 1
        assert step.values.dtype.name == "int32"
        assert step.values.tolist() == [1, 2, 3, 4, 5, 6]
        assert step.row_splits.dtype.name == "int64"
        assert step.row_splits.tolist() == [0, 2, 3, 6, 6]
        assert step.to_list() == ROWS
        assert [r.tolist() for r in step.rows()] == ROWS


def _check_sparse_steps(steps):
    assert len(steps) == 2  # 3 elements, batches of 2: the last is partial
    first, last = steps
    for step in steps:
        assert isinstance(step, sluice.SparseTensor)
        assert step.indices.dtype.name == "int64"
        assert step.values.dtype.name == "float32"
        assert step.dense_shape.dtype.name == "int64"
    assert first.indices.shape == (4, 3)
    assert first.indices.tolist() == [[0, 0, 1], [0, 1, 2], [1, 0, 1], [1, 1, 2]]
    assert first.values.tolist() == [1.0, 2.0, 1.0, 2.0]
    assert first.shape == (2, 2, 3)
    assert first.to_dense().tolist() == [[[0, 1, 0], [0, 0, 2]]] * 2
    assert last.shape == (1, 2, 3)
    assert last.indices.tolist() == [[0, 0, 1], [0, 1, 2]]


def test_local_ragged_and_sparse_values_are_numpy_views_with_tf_dtypes():
    ragged = _local(RAGGED)
    assert repr(ragged.element_spec) == \
        "RaggedTensorSpec(TensorShape([None, None]), tf.int32, 1, tf.int64)"
    _check_ragged_steps(list(ragged))
    sparse = _local(SPARSE)
    assert repr(sparse.element_spec) == "SparseTensorSpec(TensorShape([None, 2, 3]), tf.float32)"
    _check_sparse_steps(list(sparse))


def test_through_the_service_values_and_spec_equal_local(cluster):
    for i, (expr, check) in enumerate([(RAGGED, _check_ragged_steps),
                                       (SPARSE, _check_sparse_steps)]):
        remote = _remote(cluster, expr, "composite-%d" % i)
        assert remote.element_spec == _local(expr).element_spec
        check(list(remote))


def _rows(value):
    """A RaggedTensor's rows, or a SparseTensor's rows densified, as lists."""
    if isinstance(value, sluice.RaggedTensor):
        return value.to_list()
    return value.to_dense().tolist()


@pytest.mark.parametrize("replicas", [2, 3])
def test_several_replicas_get_per_replica_composites_cut_by_rows(cluster, replicas):
    devices = ["CPU:%d" % i for i in range(replicas)]
    for i, expr in enumerate([RAGGED, SPARSE]):
        strategy = sluice.MirroredStrategy(devices)
        local = strategy.experimental_distribute_dataset(sluice.data.parse(expr))
        remote = sluice.distribute_from_service(strategy, sluice.data.parse(expr),
                                                coordinator=cluster.coordinator,
                                                job="replicas-%d-%d" % (replicas, i))
        kind = "RaggedTensorSpec" if expr == RAGGED else "SparseTensorSpec"
        assert repr(remote.element_spec).startswith("PerReplicaSpec(" + kind)
        assert repr(remote.element_spec) == repr(local.element_spec)
        local_steps, remote_steps = list(local), list(remote)
        assert [str(s) for s in remote_steps] == [str(s) for s in local_steps]
        # The pieces of each step, joined in replica order, are the input's batches' rows.
        joined = []
        for step in remote_steps:
            assert isinstance(step, sluice.PerReplica)
            assert len(step.values) == replicas
            for piece in step.values:
                assert isinstance(piece, sluice.RaggedTensor if expr == RAGGED
                                  else sluice.SparseTensor)
                joined += _rows(piece)
        whole = [_rows(s) for s in _local(expr)]
        assert joined == [row for batch in whole for row in batch]


def test_torch_per_replica_composites(cluster):
    torch = dependencies.import_installable("torch", "python3-torch")
    import sluice.torch as st
    strategy = sluice.MirroredStrategy(["CPU:0", "CPU:1"])
    step = next(iter(sluice.distribute_from_service(strategy, sluice.data.parse(RAGGED),
                                                    coordinator=cluster.coordinator,
                                                    job="torch-replicas")))
    nested = st.to_torch(step, ragged="nested")
    assert isinstance(nested, sluice.PerReplica)
    assert [[t.tolist() for t in r.unbind()] for r in nested.values] == [ROWS[:2], ROWS[2:]]
    padded = st.to_torch(step, ragged="padded", padding_value=-1)
    assert padded.values[1].dtype == torch.int32
    assert padded.values[1].tolist() == [[4, 5, 6], [-1, -1, -1]]


def test_torch_nested_padded_and_sparse(cluster):
    torch = dependencies.import_installable("torch", "python3-torch")
    import sluice.torch as st
    step = next(iter(_remote(cluster, RAGGED, "torch-ragged")))
    padded = st.to_torch(step, ragged="padded", padding_value=-1)
    assert padded.dtype == torch.int32
    assert padded.tolist() == [[1, 2, -1], [3, -1, -1], [4, 5, 6], [-1, -1, -1]]
    nested = st.to_torch(step, ragged="nested")
    assert nested.is_nested
    assert [t.tolist() for t in nested.unbind()] == ROWS
    sparse = next(iter(_remote(cluster, SPARSE, "torch-sparse")))
    coo = st.to_torch((sparse,))[0]
    assert coo.is_sparse
    assert coo.to_dense().tolist() == sparse.to_dense().tolist()
