"""``sluice.tf``: a ``tf.data.Dataset`` fed by Sluice, with Sluice's element_spec as its
``tf.TensorSpec``s.

::

    ds = sluice.tf.dataset(sluice.data.parse("..."), coordinator="coord:5000", job="train")
    model.fit(ds, ...)

This process is one consumer (consumer_index / num_consumers from the arguments or the cluster
spec). Tensors cross with DLPack where TensorFlow accepts it, else through numpy (no copy for
host tensors that numpy views).
"""

import tensorflow as _tf

from .distribute import MirroredStrategy
from .service import distribute_from_service, job_name_for, resolve_cluster
from ._values import PerReplicaSpec, TensorSpec


def _tf_spec(spec):
    if isinstance(spec, PerReplicaSpec):
        spec = spec.specs[0]
    if isinstance(spec, TensorSpec):
        return _tf.TensorSpec(shape=spec.shape, dtype=_tf.as_dtype(spec.dtype))
    if isinstance(spec, tuple):
        return tuple(_tf_spec(s) for s in spec)
    if isinstance(spec, list):
        return [_tf_spec(s) for s in spec]
    return {k: _tf_spec(v) for k, v in spec.items()}


def _numpy(value):
    if isinstance(value, (tuple, list)):
        return type(value)(_numpy(v) for v in value)
    if isinstance(value, dict):
        return {k: _numpy(v) for k, v in value.items()}
    return value.numpy()


def dataset(sluice_dataset, coordinator=None, job="", consumer_index=None, num_consumers=None,
            **service_kwargs):
    """A tf.data.Dataset of this process's steps (see the module comment)."""
    c = resolve_cluster(coordinator, consumer_index, num_consumers)
    strategy = MirroredStrategy(["CPU:0"])
    if c["coordinator"]:
        job = job_name_for(job, c["num_consumers"], "sluice.tf.dataset")
        dist = distribute_from_service(strategy, sluice_dataset, coordinator=c["coordinator"],
                                       job=job, consumer_index=c["consumer_index"],
                                       num_consumers=c["num_consumers"], **service_kwargs)
    else:
        dist = strategy.experimental_distribute_dataset(sluice_dataset)
    signature = _tf_spec(dist.element_spec)
    return _tf.data.Dataset.from_generator(lambda: (_numpy(x) for x in dist),
                                           output_signature=signature)
