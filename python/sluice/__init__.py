"""Sluice: a multi-node input-pipeline service for distributed training, with tf.distribute's
input API.

::

    import sluice
    strategy = sluice.MirroredStrategy(["GPU:0", "GPU:1"])
    dataset = sluice.data.Dataset.from_tensor_slices([1, 2, 3, 4]).repeat().batch(4)
    dist = strategy.experimental_distribute_dataset(dataset)
    print(next(iter(dist)))
    # PerReplica:{
    #   0: tf.Tensor([1 2], shape=(2,), dtype=int32),
    #   1: tf.Tensor([3 4], shape=(2,), dtype=int32)
    # }

``sluice.distribute_from_service`` reads the same from a coordinator and input workers.
Framework adaptors: ``sluice.torch``, ``sluice.jax``, ``sluice.tf`` (imported on demand).
"""

from . import errors
from . import _sluice
from . import _tensor_ops  # noqa: F401 (gives Tensor its arithmetic)
from . import data
from ._values import (Optional, PerReplica, PerReplicaSpec, RaggedTensor, RaggedTensorSpec,
                      SparseTensor, SparseTensorSpec, TensorSpec, pformat)
from .distribute import (DistributedDataset, DistributedIterator, InputContext, InputOptions,
                         InputReplicationMode, MirroredStrategy, ReduceOp)
from .function import function
from .service import CrossTrainerCache, distribute_from_service, parse_checkpoint, resolve_cluster
from .snapshot import save

__version__ = _sluice.__version__  # the project's version, from CMakeLists.txt's project()

Tensor = _sluice.Tensor
constant = _sluice.constant

__all__ = [
    "__version__", "CrossTrainerCache",
    "DistributedDataset", "DistributedIterator", "InputContext", "InputOptions",
    "InputReplicationMode", "MirroredStrategy", "Optional", "PerReplica", "PerReplicaSpec",
    "RaggedTensor", "RaggedTensorSpec", "ReduceOp", "SparseTensor", "SparseTensorSpec",
    "Tensor", "TensorSpec", "constant", "data", "distribute_from_service", "errors", "function",
    "parse_checkpoint", "pformat", "resolve_cluster", "save",
]
