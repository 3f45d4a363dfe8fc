"""``sluice.function(input_signature=...)``: tf.function's input check without the tracing.

A function decorated with an input signature (typically ``[dist_dataset.element_spec]``)
rejects arguments that do not match it before running, as a tf.function with an
``input_signature`` does::

    @sluice.function(input_signature=[dist_dataset.element_spec])
    def train_step(per_replica_inputs): ...

A mismatch raises InvalidArgumentError naming the argument, the place in its structure and the
spec it does not match.
"""

import functools

from . import errors
from ._values import PerReplica, PerReplicaSpec, TensorSpec


def _mismatch(where, what):
    raise errors.InvalidArgumentError("%s: %s" % (where, what), errors.INVALID_ARGUMENT)


def _check(spec, value, where):
    if isinstance(spec, PerReplicaSpec):
        values = value.values if isinstance(value, PerReplica) else (value,)
        if len(values) != len(spec.specs):
            _mismatch(where, "expected %d replicas, got %d" % (len(spec.specs), len(values)))
        for r, (s, v) in enumerate(zip(spec.specs, values)):
            _check(s, v, "%s, replica %d" % (where, r))
    elif isinstance(spec, TensorSpec):
        if not spec.is_compatible_with(value):
            _mismatch(where, "%r does not match %r" % (
                (getattr(value, "shape", None), getattr(value, "dtype", None)), spec))
    elif isinstance(spec, (tuple, list)):
        if not isinstance(value, (tuple, list)) or len(value) != len(spec):
            _mismatch(where, "expected a sequence of %d, got %r" % (len(spec), type(value)))
        for i, (s, v) in enumerate(zip(spec, value)):
            _check(s, v, "%s[%d]" % (where, i))
    elif isinstance(spec, dict):
        if not isinstance(value, dict) or value.keys() != spec.keys():
            _mismatch(where, "expected a dict with keys %s" % sorted(spec))
        for k in spec:
            _check(spec[k], value[k], "%s[%r]" % (where, k))


def function(func=None, input_signature=None):
    """Decorator: checks positional arguments against ``input_signature`` (a list with one
    spec per argument) on every call; without a signature it returns ``func`` unchanged."""

    def decorate(f):
        if input_signature is None:
            return f

        @functools.wraps(f)
        def checked(*args, **kwargs):
            if len(args) != len(input_signature):
                _mismatch(f.__name__, "expected %d positional arguments, got %d" % (
                    len(input_signature), len(args)))
            for i, (spec, arg) in enumerate(zip(input_signature, args)):
                _check(spec, arg, "%s argument %d" % (f.__name__, i))
            return f(*args, **kwargs)

        return checked

    return decorate if func is None else decorate(func)
