"""``sluice.jax``: Sluice steps as ``jax.Array``s for this process's devices.

::

    it = sluice.jax.iterate(dataset, coordinator="coord:5000", job="train")
    for batch in it:      # global arrays, sharded over the mesh's batch axis
        state = train_step(state, batch)

Each process is one consumer (jax.process_index() of jax.process_count()), gets its piece of
every global batch, and the pieces are assembled into global arrays with
``jax.make_array_from_process_local_data(sharding, local_piece)`` (one process:
``jax.device_put(piece, sharding)``), so the arrays live on the mesh's devices. ``sharding``
defaults to the batch dimension split over all devices (replicated when the batch does not
divide among them, and for scalars). Host tensors go to JAX through DLPack (no copy on CPU)
first. With several processes ``job`` is required unless jax.distributed's coordinator (or
torchrun / Slurm) names the run.
"""

import jax as _jax
import numpy as _np

from . import _sluice
from .distribute import MirroredStrategy
from .service import distribute_from_service, job_name_for


def _coordinator_job_name():
    """A job name from jax.distributed's coordinator address, None when not initialized."""
    try:
        from jax._src import distributed as _distributed
        address = getattr(_distributed.global_state, "coordinator_address", None)
    except ImportError:
        address = None
    return "jax-" + address if address else None


def _default_sharding(global_shape):
    """The batch dimension over every device; replicated when it does not divide."""
    devices = _jax.devices()
    mesh = _jax.sharding.Mesh(_np.array(devices), ("batch",))
    split = len(global_shape) > 0 and global_shape[0] % len(devices) == 0
    spec = _jax.sharding.PartitionSpec("batch") if split else _jax.sharding.PartitionSpec()
    return _jax.sharding.NamedSharding(mesh, spec)


def to_jax(value, sharding=None):
    """A step (nest of sluice.Tensor) as the same nest of global jax.Arrays."""
    if isinstance(value, _sluice.Tensor):
        if value.dtype == "string":
            return value.numpy()
        try:
            local = _jax.dlpack.from_dlpack(value)  # the protocol object (current JAX)
        except TypeError:
            local = _jax.dlpack.from_dlpack(value.__dlpack__())  # a capsule (older JAX)
        processes = _jax.process_count()
        if processes == 1:
            return _jax.device_put(local, sharding or _default_sharding(local.shape))
        global_shape = ((local.shape[0] * processes,) + tuple(local.shape[1:])
                        if local.ndim else ())
        return _jax.make_array_from_process_local_data(
            sharding or _default_sharding(global_shape), _np.asarray(local))
    if isinstance(value, tuple):
        return tuple(to_jax(v, sharding) for v in value)
    if isinstance(value, list):
        return [to_jax(v, sharding) for v in value]
    if isinstance(value, dict):
        return {k: to_jax(v, sharding) for k, v in value.items()}
    return value


def iterate(dataset, coordinator=None, job="", sharding=None, **service_kwargs):
    """Yields every step of ``dataset`` for this process as jax.Arrays (see the module)."""
    rank, world = _jax.process_index(), _jax.process_count()
    from .service import resolve_cluster
    address = resolve_cluster(coordinator=coordinator)["coordinator"]
    strategy = MirroredStrategy(["CPU:0"], num_workers=1 if address else world,
                                worker_index=0 if address else rank)
    if address:
        job = job_name_for(job, world, "sluice.jax.iterate", derived=_coordinator_job_name())
        dist = distribute_from_service(strategy, dataset, coordinator=address, job=job,
                                       consumer_index=rank, num_consumers=world, **service_kwargs)
    else:
        dist = strategy.experimental_distribute_dataset(dataset)
    for step in dist:
        yield to_jax(step, sharding)
