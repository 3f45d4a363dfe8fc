"""numpy-backed arithmetic for ``sluice.Tensor``, so that a train step written for tf.Tensors
(``labels - 0.3 * features``, ``x * x``) works and its result still prints as a tf.Tensor.

Each operation computes with numpy on the tensors' zero-copy views and wraps the result in a new
Tensor (a copy: tensors are immutable). Python scalars combine with numpy's rules, so a float32
tensor times 0.3 stays float32, as in TensorFlow.
"""

import operator

import numpy as np

from . import _sluice

Tensor = _sluice.Tensor


def _np(x):
    return x.numpy() if isinstance(x, Tensor) else x


def wrap(result):
    """numpy results become Tensors; anything else is returned as it is."""
    if isinstance(result, (np.ndarray, np.generic)):
        return _sluice.constant(np.asarray(result))
    return result


def _binary(op):
    def forward(a, b):
        return wrap(op(_np(a), _np(b)))

    def backward(a, b):
        return wrap(op(_np(b), _np(a)))

    return forward, backward


def _install():
    for name, op in [("add", operator.add), ("sub", operator.sub), ("mul", operator.mul),
                     ("truediv", operator.truediv), ("floordiv", operator.floordiv),
                     ("mod", operator.mod), ("pow", operator.pow),
                     ("matmul", operator.matmul)]:
        forward, backward = _binary(op)
        setattr(Tensor, "__%s__" % name, forward)
        setattr(Tensor, "__r%s__" % name, backward)
    for name, op in [("lt", operator.lt), ("le", operator.le), ("gt", operator.gt),
                     ("ge", operator.ge)]:
        setattr(Tensor, "__%s__" % name, _binary(op)[0])
    Tensor.__neg__ = lambda a: wrap(-a.numpy())
    Tensor.__abs__ = lambda a: wrap(abs(a.numpy()))
    Tensor.__float__ = lambda a: float(a.numpy())
    Tensor.__int__ = lambda a: int(a.numpy())
    Tensor.__bool__ = lambda a: bool(a.numpy())
    Tensor.__getitem__ = lambda a, index: wrap(a.numpy()[index])
    Tensor.__iter__ = lambda a: (wrap(row) for row in a.numpy())

    def __format__(a, spec):
        value = a.numpy()
        return format(value.item() if value.ndim == 0 else value, spec)

    Tensor.__format__ = __format__


_install()
