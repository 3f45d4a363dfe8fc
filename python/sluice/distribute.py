"""``tf.distribute``'s input API: MirroredStrategy, DistributedDataset, DistributedIterator.

::

    strategy = sluice.MirroredStrategy(["GPU:0", "GPU:1"])
    dataset = sluice.data.Dataset.from_tensor_slices([1, 2, 3, 4]).repeat().batch(4)
    dist = strategy.experimental_distribute_dataset(dataset)
    for x in dist:                      # x: PerReplica values, as TF gives them
        loss = strategy.run(train_step, args=(x,))

Without a GPU (or with a build without CUDA) "GPU:i" devices use host memory (a one-time
warning on stderr says so). Tensors cross into Python without a copy (sluice.Tensor).
"""

import numpy as np

from . import _sluice
from . import _tensor_ops
from ._values import PerReplica

InputOptions = _sluice.InputOptions
InputContext = _sluice.InputContext
InputReplicationMode = _sluice.InputReplicationMode
DistributedIterator = _sluice._DistributedIterator


class ReduceOp:
    """``tf.distribute.ReduceOp``."""

    SUM = "SUM"
    MEAN = "MEAN"


class DistributedDataset:
    """``tf.distribute.DistributedDataset``: iterate it, or read its ``element_spec``.

    ``iter()`` starts a new pass. ``len()`` is the number of steps when it is known (a finite
    dataset of known cardinality read by one worker), so ``tqdm(dist)`` shows a real bar;
    otherwise ``len()`` raises TypeError, as for any iterable without a length.
    """

    __slots__ = ("_dd", "_len")

    def __init__(self, dd, length=None):
        self._dd = dd
        self._len = length

    def __iter__(self):
        return self._dd.make_iterator()

    def __len__(self):
        if self._len is None:
            raise TypeError("the number of steps of this distributed dataset is not known")
        return self._len

    @property
    def element_spec(self):
        """The element's structure with a ``PerReplicaSpec`` (one ``TensorSpec`` per local
        replica) at each leaf; with one device on one worker the dataset's own ``TensorSpec``,
        as TF gives it (a multi-worker strategy wraps even one replica per worker).
        ``sluice.pformat`` prints it in the seed's layout."""
        return self._dd.element_spec

    def __repr__(self):
        return "<sluice.DistributedDataset element_spec=%r>" % (self.element_spec,)


def _steps(dataset, strategy):
    """Steps of experimental_distribute_dataset: one per input batch, on one worker."""
    if strategy.num_workers != 1:
        return None
    n = dataset.cardinality()
    return n if n >= 0 else None


def _select(value, replica):
    """``value`` with every PerReplica replaced by its value for ``replica``."""
    if isinstance(value, PerReplica):
        return value.values[replica]
    if isinstance(value, tuple):
        return tuple(_select(v, replica) for v in value)
    if isinstance(value, list):
        return [_select(v, replica) for v in value]
    if isinstance(value, dict):
        return {k: _select(v, replica) for k, v in value.items()}
    return value


def _regroup(results):
    """Per-replica results of one structure -> that structure with PerReplica leaves."""
    first = results[0]
    if isinstance(first, tuple) and all(
            isinstance(r, tuple) and len(r) == len(first) for r in results):
        return tuple(_regroup([r[i] for r in results]) for i in range(len(first)))
    if isinstance(first, list) and all(
            isinstance(r, list) and len(r) == len(first) for r in results):
        return [_regroup([r[i] for r in results]) for i in range(len(first))]
    if isinstance(first, dict) and all(
            isinstance(r, dict) and r.keys() == first.keys() for r in results):
        return {k: _regroup([r[k] for r in results]) for k in first}
    if all(r is None for r in results):
        return None
    return PerReplica(_tensor_ops.wrap(r) for r in results)


def _local_results(value, n):
    if isinstance(value, PerReplica):
        return value.values
    if isinstance(value, (tuple, list, dict)) and _contains_per_replica(value):
        return tuple(_select(value, r) for r in range(n))
    return (value,)


def _contains_per_replica(value):
    if isinstance(value, PerReplica):
        return True
    if isinstance(value, (tuple, list)):
        return any(_contains_per_replica(v) for v in value)
    if isinstance(value, dict):
        return any(_contains_per_replica(v) for v in value.values())
    return False


class MirroredStrategy:
    """``tf.distribute.MirroredStrategy``: synchronous data parallelism over this process's
    devices ("GPU:0", "/gpu:1", "CPU:0", ...). ``num_workers`` / ``worker_index`` make this
    process one input worker of several (MultiWorkerMirroredStrategy's per-worker view).
    ``devices`` is a list of names or one name (``MirroredStrategy("GPU:0")``).
    InvalidArgumentError for an empty, malformed or duplicate device list."""

    def __init__(self, devices=None, cross_device_ops=None, *, num_workers=1, worker_index=0):
        del cross_device_ops  # no collectives over Python values here
        if isinstance(devices, (str, bytes)):
            devices = [devices.decode() if isinstance(devices, bytes) else devices]
        self._s = _sluice._MirroredStrategy(list(devices or ["CPU:0"]), num_workers, worker_index)

    @property
    def num_replicas_in_sync(self):
        """Replicas over all workers (num_workers x local replicas)."""
        return self._s.num_replicas_in_sync

    @property
    def num_local_replicas(self):
        return self._s.num_local_replicas

    @property
    def num_workers(self):
        return self._s.num_workers

    @property
    def worker_index(self):
        return self._s.worker_index

    @property
    def devices(self):
        """Canonical names of the local devices, replica order."""
        return tuple(self._s.devices)

    def experimental_distribute_dataset(self, dataset, options=None):
        """Rebatches the (batched) dataset into per-replica batches by TF's rule and auto-shards
        it by ``options.auto_shard_policy``. InvalidArgumentError if the dataset is not batched
        ("Call the `batch` method on the input Dataset") or cannot be sharded."""
        dd = self._s.experimental_distribute_dataset(dataset._ds, options or InputOptions())
        return DistributedDataset(dd, _steps(dataset, self))

    def distribute_datasets_from_function(self, dataset_fn, options=None):
        """Calls ``dataset_fn(input_context)`` once per input pipeline (here, now); it returns
        the pipeline's Dataset, already sharded and batched per replica. Its exceptions are
        raised unchanged."""
        return DistributedDataset(
            self._s.distribute_datasets_from_function(dataset_fn, options or InputOptions()))

    def run(self, fn, args=(), kwargs=None):
        """``fn`` once per local replica on that replica's values; results regrouped into
        PerReplica values (numpy results become Tensors). With one replica, fn's result."""
        kwargs = kwargs or {}
        n = self.num_local_replicas
        results = [fn(*_select(tuple(args), r), **_select(kwargs, r)) for r in range(n)]
        if n == 1:
            first = results[0]
            return _tensor_ops.wrap(first)
        return _regroup(results)

    def reduce(self, reduce_op, value, axis=None):
        """Sums (``ReduceOp.SUM``) or averages (``ReduceOp.MEAN``) ``value`` over the local
        replicas, and along ``axis`` too when it is given, as TF does. Returns a Tensor."""
        op = reduce_op.upper() if isinstance(reduce_op, str) else str(reduce_op)
        if op not in (ReduceOp.SUM, ReduceOp.MEAN):
            raise ValueError("reduce_op must be ReduceOp.SUM or ReduceOp.MEAN, got %r" % reduce_op)
        parts = [np.asarray(v.numpy() if hasattr(v, "numpy") else v)
                 for v in _local_results(value, self.num_local_replicas)]
        if axis is None:
            stacked = np.stack(parts)
            out = stacked.sum(axis=0) if op == ReduceOp.SUM else stacked.mean(axis=0)
        else:
            joined = np.concatenate(parts, axis=axis)
            out = joined.sum(axis=axis) if op == ReduceOp.SUM else joined.mean(axis=axis)
        return _tensor_ops.wrap(np.asarray(out, dtype=parts[0].dtype))

    def experimental_local_results(self, value):
        """The per-replica values of ``value`` as a tuple, replica order (``(value,)`` for a
        value that is not distributed)."""
        return tuple(_local_results(value, self.num_local_replicas))
