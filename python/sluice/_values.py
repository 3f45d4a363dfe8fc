"""Distributed values and specs as ``tf.distribute`` has them.

``PerReplica`` holds one value per local replica and prints exactly as TensorFlow prints it.
``TensorSpec`` / ``PerReplicaSpec`` describe what an iterator yields (``element_spec``);
``pformat`` lays an ``element_spec`` out the way the seed shows it. ``Optional`` is what
``get_next_as_optional()`` returns. ``SparseTensor`` and ``RaggedTensor`` are the composite
components (include/sluice/composite_tensor.h) as numpy views, scipy-free; their specs print as
TensorFlow's ``SparseTensorSpec`` / ``RaggedTensorSpec``.
"""

from . import errors


class PerReplica:
    """One value per replica in sync (``tf.distribute``'s PerReplica).

    ``values`` is a tuple, replica order. ``str()`` and ``repr()`` are TensorFlow's::

        PerReplica:{
          0: tf.Tensor([1 2], shape=(2,), dtype=int32),
          1: tf.Tensor([3 4], shape=(2,), dtype=int32)
        }
    """

    __slots__ = ("_values",)

    def __init__(self, values):
        self._values = tuple(values)

    @property
    def values(self):
        """The per-replica values, a tuple in replica order."""
        return self._values

    def __str__(self):
        body = ",\n".join("  %d: %s" % (i, v) for i, v in enumerate(self._values))
        return "%s:{\n%s\n}" % (type(self).__name__, body)

    def __repr__(self):
        body = ",\n".join("  %d: %r" % (i, v) for i, v in enumerate(self._values))
        return "%s:{\n%s\n}" % (type(self).__name__, body)


class TensorSpec:
    """``tf.TensorSpec``: a dtype name and a shape whose unknown dimensions are ``None``."""

    __slots__ = ("shape", "dtype", "name")

    def __init__(self, shape, dtype, name=None):
        self.shape = tuple(shape)
        self.dtype = dtype
        self.name = name

    def __eq__(self, other):
        return (isinstance(other, TensorSpec) and self.shape == other.shape
                and self.dtype == other.dtype and self.name == other.name)

    def __hash__(self):
        return hash((self.shape, self.dtype, self.name))

    def is_compatible_with(self, tensor):
        """True if ``tensor`` (a Tensor, or anything with ``shape`` and ``dtype``) fits."""
        if getattr(tensor, "dtype", None) != self.dtype:
            return False
        shape = tuple(tensor.shape)
        return len(shape) == len(self.shape) and all(
            want is None or want == got for want, got in zip(self.shape, shape))

    def __repr__(self):
        if len(self.shape) == 1:
            dims = "(%s,)" % _dim(self.shape[0])
        else:
            dims = "(" + ", ".join(_dim(d) for d in self.shape) + ")"
        return "TensorSpec(shape=%s, dtype=tf.%s, name=%r)" % (dims, self.dtype, self.name)


def _dim(d):
    return "None" if d is None else str(d)


class PerReplicaSpec:
    """The spec of a PerReplica: one TensorSpec per local replica."""

    __slots__ = ("_specs",)

    def __init__(self, *specs):
        self._specs = tuple(specs)

    @property
    def specs(self):
        return self._specs

    def __eq__(self, other):
        return isinstance(other, PerReplicaSpec) and self._specs == other._specs

    def __hash__(self):
        return hash(self._specs)

    def __repr__(self):
        inner = ", ".join(repr(s) for s in self._specs)
        if len(self._specs) == 1:
            inner += ","
        return "PerReplicaSpec(%s)" % inner


def pformat(spec):
    """The seed's multi-line layout of an ``element_spec``::

        (PerReplicaSpec(TensorSpec(shape=(None, 1), dtype=tf.float32, name=None),
                        TensorSpec(shape=(None, 1), dtype=tf.float32, name=None)),
         PerReplicaSpec(TensorSpec(shape=(None, 1), dtype=tf.int32, name=None),
                        TensorSpec(shape=(None, 1), dtype=tf.int32, name=None)))

    Every container and every PerReplicaSpec puts its items one per line, each continuation
    line indented to the column just after its own opening bracket.
    """
    return _layout(spec, 0)


def _items(open_, close, parts, col, trailing_comma):
    sep = ",\n" + " " * (col + len(open_))
    text = open_ + sep.join(parts)
    if trailing_comma:
        text += ","
    return text + close


def _layout(value, col):
    if isinstance(value, PerReplicaSpec):
        inner = col + len("PerReplicaSpec(")
        parts = [_layout(s, inner) for s in value.specs]
        return _items("PerReplicaSpec(", ")", parts, col, len(parts) == 1)
    if isinstance(value, tuple):
        parts = [_layout(v, col + 1) for v in value]
        return _items("(", ")", parts, col, len(parts) == 1)
    if isinstance(value, list):
        return _items("[", "]", [_layout(v, col + 1) for v in value], col, False)
    if isinstance(value, dict):
        parts = []
        for k, v in value.items():
            key = repr(k) + ": "
            parts.append(key + _layout(v, col + 1 + len(key)))
        return _items("{", "}", parts, col, False)
    return repr(value)


class Optional:
    """``tf.experimental.Optional``: a step, or nothing at the end of data."""

    __slots__ = ("_value", "_has_value")

    def __init__(self, value=None, has_value=False):
        self._value = value
        self._has_value = bool(has_value)

    def has_value(self):
        """True when there is a value."""
        return self._has_value

    def get_value(self):
        """The value; InvalidArgumentError when there is none (as TF)."""
        if not self._has_value:
            raise errors.InvalidArgumentError(
                "get_value() on an empty Optional: the iterator is at the end of data",
                errors.INVALID_ARGUMENT)
        return self._value

    def __bool__(self):
        return self._has_value

    def __repr__(self):
        return "Optional(%r)" % (self._value,) if self._has_value else "Optional(None)"


class SparseTensor:
    """A ``tf.SparseTensor`` value: ``indices`` int64 [N, rank], ``values`` [N] and
    ``dense_shape`` int64 [rank], numpy arrays viewing the received buffers (no copy)."""

    __slots__ = ("indices", "values", "dense_shape")

    def __init__(self, indices, values, dense_shape):
        import numpy as np
        self.indices = np.asarray(indices)
        self.values = np.asarray(values)
        self.dense_shape = np.asarray(dense_shape)

    @property
    def shape(self):
        return tuple(int(d) for d in self.dense_shape)

    def to_dense(self, default_value=0):
        """A new dense numpy array of ``shape`` with ``values`` at ``indices``."""
        import numpy as np
        out = np.full(self.shape, default_value, dtype=self.values.dtype)
        if len(self.values):
            out[tuple(self.indices.T)] = self.values
        return out

    def __repr__(self):
        return "SparseTensor(indices=%r, values=%r, dense_shape=%r)" % (
            self.indices, self.values, self.dense_shape)


class RaggedTensor:
    """A ``tf.RaggedTensor`` value: ``values`` (its flat values) and ``nested_row_splits``
    (int64, outermost first), numpy arrays viewing the received buffers (no copy).
    ``row_splits`` is the outermost. Row ``i`` of the outermost dimension is
    ``values[row_splits[i]:row_splits[i + 1]]`` when the ragged rank is 1."""

    __slots__ = ("values", "nested_row_splits")

    def __init__(self, values, nested_row_splits):
        import numpy as np
        self.values = np.asarray(values)
        self.nested_row_splits = tuple(np.asarray(s) for s in nested_row_splits)

    @property
    def row_splits(self):
        return self.nested_row_splits[0] if self.nested_row_splits else None

    @property
    def ragged_rank(self):
        return len(self.nested_row_splits)

    def __len__(self):
        return len(self.row_splits) - 1 if self.nested_row_splits else len(self.values)

    def to_list(self):
        """Nested Python lists, as ``tf.RaggedTensor.to_list()``."""
        rows = self.values.tolist()
        for splits in reversed(self.nested_row_splits):
            rows = [rows[splits[i]:splits[i + 1]] for i in range(len(splits) - 1)]
        return rows

    def rows(self):
        """The outermost rows as numpy views (ragged rank 1) or RaggedTensors (deeper)."""
        s = self.row_splits
        if self.ragged_rank == 1:
            return [self.values[s[i]:s[i + 1]] for i in range(len(s) - 1)]
        inner = self.nested_row_splits[1:]
        out = []
        for i in range(len(s) - 1):
            begin, end = int(s[i]), int(s[i + 1])
            splits = []
            for level in inner:
                splits.append(level[begin:end + 1] - level[begin])
                begin, end = int(level[begin]), int(level[end])
            out.append(RaggedTensor(self.values[begin:end], splits))
        return out

    def __repr__(self):
        return "<sluice.RaggedTensor %r>" % (self.to_list(),)


def _tensor_shape(dims):
    return "TensorShape([%s])" % ", ".join("None" if d is None else str(d) for d in dims)


class SparseTensorSpec:
    """``tf.SparseTensorSpec``: the static dense shape and the values' dtype name."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype):
        self.shape = tuple(shape)
        self.dtype = dtype

    def __eq__(self, other):
        return (isinstance(other, SparseTensorSpec) and self.shape == other.shape
                and self.dtype == other.dtype)

    def __hash__(self):
        return hash(("sparse", self.shape, self.dtype))

    def __repr__(self):
        return "SparseTensorSpec(%s, tf.%s)" % (_tensor_shape(self.shape), self.dtype)


class RaggedTensorSpec:
    """``tf.RaggedTensorSpec``: shape, values' dtype name, ragged rank; row splits int64."""

    __slots__ = ("shape", "dtype", "ragged_rank", "row_splits_dtype")

    def __init__(self, shape, dtype, ragged_rank, row_splits_dtype="int64"):
        self.shape = tuple(shape)
        self.dtype = dtype
        self.ragged_rank = ragged_rank
        self.row_splits_dtype = row_splits_dtype

    def __eq__(self, other):
        return (isinstance(other, RaggedTensorSpec) and self.shape == other.shape
                and self.dtype == other.dtype and self.ragged_rank == other.ragged_rank)

    def __hash__(self):
        return hash(("ragged", self.shape, self.dtype, self.ragged_rank))

    def __repr__(self):
        return "RaggedTensorSpec(%s, tf.%s, %d, tf.%s)" % (
            _tensor_shape(self.shape), self.dtype, self.ragged_rank, self.row_splits_dtype)


def composite(kind, parts, dims):
    """Builds a composite from its components (what the C++ binding hands over): specs from
    TensorSpecs, values from tensors, a PerReplica of values from PerReplica components and a
    PerReplicaSpec of specs from PerReplicaSpec components (several replicas)."""
    if parts and isinstance(parts[0], PerReplicaSpec):
        per_replica = zip(*(p.specs for p in parts))
        return PerReplicaSpec(*(composite(kind, list(v), dims) for v in per_replica))
    if parts and isinstance(parts[0], TensorSpec):
        values = parts[1] if kind == "sparse" else parts[0]
        if kind == "sparse":
            return SparseTensorSpec(dims, values.dtype)
        return RaggedTensorSpec(dims, values.dtype, len(parts) - 1)
    if parts and isinstance(parts[0], PerReplica):
        per_replica = zip(*(p.values for p in parts))
        return PerReplica(composite(kind, list(v), dims) for v in per_replica)
    if kind == "sparse":
        return SparseTensor(parts[0], parts[1], parts[2])
    return RaggedTensor(parts[0], parts[1:])
