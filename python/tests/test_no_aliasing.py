"""No step aliases another's writable memory: a trainer that changes a step in place through
DLPack (torch's ``x.mul_(100)``, ``x.sub_(mean)``) changes that step only. Every source or op
whose steps could share memory (from_tensors, from_tensor_slices, cache, repeat, the replica
slices of one batch), read locally and from the service, with each in-place op: every step
arrives with the values a reader that changes nothing sees, and no step changes after its
successor is fetched."""

import numpy as np
import pytest

import dependencies
import sluice
from sluice import _sluice

torch = dependencies.import_installable("torch", "python3-torch")

PIPELINES = [
    # (expression, local replicas)
    ("from_tensors([1., 2., 3., 4.]).repeat(3)", 1),
    ("from_tensors([[1., 2.], [3., 4.]]).repeat(3)", 2),          # replica slices of a constant
    ("from_tensor_slices([[1., 2.], [3., 4.]]).repeat(3)", 1),    # rows of a constant
    ("from_tensor_slices([1., 2., 3., 4., 5., 6.]).batch(2).cache().repeat(3)", 1),
    ("from_tensor_slices([1., 2., 3., 4., 5., 6., 7., 8.]).batch(4).cache().repeat(2)", 2),
    ("range(6).batch(2).cache().repeat(2)", 1),                  # int64
    ("from_tensors({'x': [1., 2.], 'y': [[3, 4]]}).repeat(3)", 1),
]

OPS = {
    "mul_": lambda t: t.mul_(100),
    "sub_": lambda t: t.sub_(7),
}


def _leaves(value):
    if isinstance(value, sluice.PerReplica):
        return [leaf for v in value.values for leaf in _leaves(v)]
    if isinstance(value, (tuple, list)):
        return [leaf for v in value for leaf in _leaves(v)]
    if isinstance(value, dict):
        return [leaf for k in sorted(value) for leaf in _leaves(value[k])]
    return [value]


def _local(expression, replicas):
    strategy = sluice.MirroredStrategy(["CPU:%d" % i for i in range(replicas)])
    return strategy.experimental_distribute_dataset(sluice.data.parse(expression))


def _reference(make_dist):
    """Every step's leaves as numpy copies, read without changing anything."""
    return [[np.array(t, copy=True) for t in _leaves(step)] for step in make_dist()]


def _check_in_place(make_dist, op):
    want = _reference(make_dist)
    assert len(want) > 1
    previous = None  # (torch tensors of the previous step, their values after the op)
    got = 0
    for i, step in enumerate(make_dist()):
        assert i < len(want), "more steps than the reference"
        tensors = [torch.from_dlpack(t) for t in _leaves(step)]
        arrived = [x.clone() for x in tensors]
        for a, w in zip(arrived, want[i]):
            np.testing.assert_array_equal(a.numpy(), w, err_msg="step %d arrived changed" % i)
        if previous is not None:
            for x, after in zip(*previous):
                assert torch.equal(x, after), "step %d changed when step %d came" % (i - 1, i)
        for x in tensors:
            op(x)
        previous = (tensors, [x.clone() for x in tensors])
        got += 1
    assert got == len(want)


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("expression,replicas", PIPELINES)
def test_in_place_ops_change_only_their_own_step_locally(expression, replicas, op):
    _check_in_place(lambda: _local(expression, replicas), OPS[op])


@pytest.mark.parametrize("op", sorted(OPS))
def test_in_place_ops_on_numpy_views_of_dlpack_change_only_their_own_step(op):
    del op
    # numpy's from_dlpack views are writable in numpy 1.x: the same copies protect them.
    steps = []
    for step in _local("from_tensors([1., 2., 3.]).repeat(3)", 1):
        a = np.from_dlpack(step)
        if a.flags.writeable:
            a *= 100
        steps.append(np.array(step, copy=True))
    assert [s.tolist() for s in steps] == [[1., 2., 3.]] * 3


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("expression", [
    "from_tensors([[1., 2.], [3., 4.]]).repeat(4)",
    "from_tensor_slices([1., 2., 3., 4., 5., 6., 7., 8.]).batch(4).cache().repeat(2)",
])
def test_in_place_ops_change_only_their_own_step_from_the_service(cluster, expression, op):
    counter = [0]

    def make_dist():
        counter[0] += 1
        strategy = sluice.MirroredStrategy(["CPU:0", "CPU:1"])
        return sluice.distribute_from_service(
            strategy, sluice.data.parse(expression), coordinator=cluster.coordinator,
            job="alias-%s-%d-%d" % (op, hash(expression) & 0xffff, counter[0]),
            sharding_policy="ranges")
    _check_in_place(make_dist, OPS[op])


def test_steps_that_share_nothing_are_not_copied():
    # A fresh batch is the step's own: handed out as it is (zero-copy), its replicas still
    # views of one batch.
    strategy = sluice.MirroredStrategy(["CPU:0", "CPU:1"])
    before = _sluice._handout_copies()
    step = next(iter(strategy.experimental_distribute_dataset(sluice.data.parse(
        "range(8).batch(4)"))))
    assert _sluice._handout_copies() == before
    a0, a1 = (np.asarray(v) for v in step.values)
    assert a1.ctypes.data == a0.ctypes.data + a0.nbytes
    assert step.values[0]._buffer_refs == 2  # the two replicas, nothing else


@pytest.mark.parametrize("batch,steps", [(8, 500), (1024, 64)])
def test_service_steps_are_never_copied(cluster, batch, steps):
    # Small steps arrive several to a frame (views of one receive buffer at disjoint offsets);
    # 8 KiB steps mostly as views of gRPC's received 64 KiB slices, several steps to a slice
    # (core/rpc/step_frame.h). None of them is copied, and changing one in place changes no
    # other, nor any later one.
    strategy = sluice.MirroredStrategy(["CPU:0"])
    dist = sluice.distribute_from_service(
        strategy, sluice.data.parse("range(%d).batch(%d)" % (batch * steps, batch)),
        coordinator=cluster.coordinator, job="never-copied-%d" % batch,
        sharding_policy="ranges")
    before = _sluice._handout_copies()
    got = []
    for step in dist:
        torch.from_dlpack(step).mul_(-1)
        got.append(step)
    assert _sluice._handout_copies() == before
    assert len(got) == steps
    for i, step in enumerate(got):
        assert np.asarray(step).tolist() == [-v for v in range(batch * i, batch * i + batch)]


def test_a_step_from_a_constant_does_not_hold_the_constant():
    strategy = sluice.MirroredStrategy(["CPU:0"])
    it = iter(strategy.experimental_distribute_dataset(sluice.data.parse(
        "from_tensors([1., 2.]).repeat(2)")))
    first, second = next(it), next(it)
    assert first._data_ptr != second._data_ptr
    assert first._buffer_refs == 1 and second._buffer_refs == 1
