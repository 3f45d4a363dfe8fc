"""``sluice.torch``: Sluice steps as ``torch.Tensor``s for PyTorch training loops and DDP.

::

    import torch.distributed as dist
    dist.init_process_group("nccl")                     # or "gloo"
    data = sluice.torch.IterableDataset(
        sluice.data.parse("tf_record_dataset(...).map(...).batch(256)"),
        coordinator="coord:5000", job="resnet-epoch-1")   # rank -> consumer_index
    for batch in torch.utils.data.DataLoader(data, batch_size=None, num_workers=0):
        loss = model(batch["image"]).sum() ...

Each trainer process is one consumer of the job (rank and world size from torch.distributed
when it is initialized, else from the cluster spec, sluice.resolve_cluster); every process
gets its piece of each global batch (global batch / world size, TF's rebatching rule), all see
the same number of steps, and every element is read exactly once per epoch. Without a
coordinator the pipeline runs in this process, sharded the same way across ranks.

Tensors are converted with DLPack: no copy (CPU or CUDA memory as the step arrived); string
tensors become lists of bytes. Each step's tensors are its own: in-place ops (``x.sub_(mean)``)
never change another step (a step that would share memory with another, such as a
``from_tensors`` constant or a ``cache``, arrives as a copy). CUDA tensors are taken on the
current stream and go back to Sluice's prefetch ring only after the work queued there before
they die has run. Use DataLoader(batch_size=None, num_workers=0): Sluice does the loading and
batching; in a worker process IterableDataset raises FailedPreconditionError.
"""

import torch as _torch
import torch.utils.data as _tud

from . import _sluice
from . import _values
from .distribute import MirroredStrategy
from . import errors
from .service import distribute_from_service, job_name_for


def ragged_to_torch(value, ragged="nested", padding_value=0):
    """A sluice RaggedTensor of ragged rank 1 as a torch.nested tensor of its rows
    (``ragged="nested"``) or as one dense tensor padded with ``padding_value`` to the longest
    row (``ragged="padded"``, rows first). Rows are copied (torch.nested copies its inputs)."""
    if value.ragged_rank != 1:
        raise ValueError("sluice.torch converts RaggedTensors of ragged rank 1, not %d"
                         % value.ragged_rank)
    rows = [_torch.from_numpy(row) for row in value.rows()]
    if ragged == "nested":
        return _torch.nested.nested_tensor(rows)
    if ragged == "padded":
        if not rows:
            return _torch.empty((0, 0) + tuple(value.values.shape[1:]),
                                dtype=_torch.from_numpy(value.values[:0]).dtype)
        return _torch.nn.utils.rnn.pad_sequence(rows, batch_first=True,
                                                padding_value=padding_value)
    raise ValueError("ragged must be 'nested' or 'padded', not %r" % (ragged,))


def to_torch(value, ragged="nested", padding_value=0):
    """A step (nest of sluice.Tensor) as the same nest of torch.Tensor, without a copy.
    SparseTensors become torch sparse COO tensors; RaggedTensors as ragged_to_torch gives them;
    a PerReplica (several local replicas) stays one, of its replicas' converted values."""
    if isinstance(value, _sluice.Tensor):
        if value.dtype == "string":
            return value.numpy().ravel().tolist()
        # The object, not a capsule: torch then passes its current stream to __dlpack__.
        return _torch.utils.dlpack.from_dlpack(value)
    if isinstance(value, _values.SparseTensor):
        return _torch.sparse_coo_tensor(_torch.from_numpy(value.indices.T.copy()),
                                        _torch.from_numpy(value.values), value.shape)
    if isinstance(value, _values.RaggedTensor):
        return ragged_to_torch(value, ragged, padding_value)
    if isinstance(value, _values.PerReplica):  # each replica's value converted
        return _values.PerReplica(to_torch(v, ragged, padding_value) for v in value.values)
    if isinstance(value, tuple):
        return tuple(to_torch(v, ragged, padding_value) for v in value)
    if isinstance(value, list):
        return [to_torch(v, ragged, padding_value) for v in value]
    if isinstance(value, dict):
        return {k: to_torch(v, ragged, padding_value) for k, v in value.items()}
    return value


def rank_and_world_size():
    """(rank, world_size) from torch.distributed when initialized, else None."""
    if _torch.distributed.is_available() and _torch.distributed.is_initialized():
        return _torch.distributed.get_rank(), _torch.distributed.get_world_size()
    return None


class IterableDataset(_tud.IterableDataset):
    """The steps of ``dataset`` for this process, as torch tensors (see the module comment).

    ``coordinator``/``job`` and the other keyword arguments go to sluice.distribute_from_service;
    without a coordinator (and none in the cluster spec) the pipeline runs in-process. With a
    world size above 1, ``job`` is required unless torchrun or Slurm names the run
    (sluice.service.job_name_for): InvalidArgumentError otherwise.
    ``device``: the Sluice device name of this process's replica ("CPU:0", "GPU:<local rank>").
    """

    def __init__(self, dataset, coordinator=None, job="", device="CPU:0", rank=None,
                 world_size=None, **service_kwargs):
        super().__init__()
        self._dataset = dataset
        self._coordinator = coordinator
        self._job = job
        self._device = device
        self._rank = rank
        self._world_size = world_size
        self._service_kwargs = service_kwargs
        self._dist = None

    def _layout(self):
        if self._rank is not None and self._world_size is not None:
            return self._rank, self._world_size
        from_torch = rank_and_world_size()
        if from_torch is not None:
            return from_torch
        from .service import resolve_cluster
        c = resolve_cluster(coordinator=self._coordinator)
        return c["consumer_index"], c["num_consumers"]

    def distributed_dataset(self):
        """The sluice.DistributedDataset this reads (made on first use)."""
        if self._dist is None:
            rank, world = self._layout()
            from .service import resolve_cluster
            coordinator = resolve_cluster(coordinator=self._coordinator)["coordinator"]
            if coordinator:
                job = job_name_for(self._job, world, "sluice.torch.IterableDataset")
                strategy = MirroredStrategy([self._device])
                self._dist = distribute_from_service(
                    strategy, self._dataset, coordinator=coordinator, job=job,
                    consumer_index=rank, num_consumers=world, **self._service_kwargs)
            else:
                strategy = MirroredStrategy([self._device], num_workers=world, worker_index=rank)
                self._dist = strategy.experimental_distribute_dataset(self._dataset)
        return self._dist

    def __iter__(self):
        if _tud.get_worker_info() is not None:
            # A DataLoader worker is a fork (or spawn) of the trainer: gRPC channels, threads
            # and CUDA state made before it do not work there, and each worker would be a
            # consumer of its own.
            raise errors.FailedPreconditionError(
                "sluice.torch.IterableDataset runs in a DataLoader worker process; use "
                "DataLoader(batch_size=None, num_workers=0) (or sluice.torch.loader): Sluice's "
                "input workers do the loading, in the trainer process", errors.FAILED_PRECONDITION)
        for step in self.distributed_dataset():
            yield to_torch(step)

    def __getstate__(self):
        # The connection to the service stays with the process that made it.
        state = self.__dict__.copy()
        state["_dist"] = None
        return state

    def __len__(self):
        return len(self.distributed_dataset())


def loader(dataset, **kwargs):
    """``DataLoader(IterableDataset(dataset, **kwargs), batch_size=None, num_workers=0)``."""
    return _tud.DataLoader(IterableDataset(dataset, **kwargs), batch_size=None, num_workers=0)
