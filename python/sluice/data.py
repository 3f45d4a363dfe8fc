"""``sluice.data``: datasets in tf.data's vocabulary.

Build a dataset with the fluent builder or parse tf.data's own syntax::

    ds = sluice.data.Dataset.from_tensor_slices([1, 2, 3, 4]).repeat().batch(4)
    ds = sluice.data.parse("from_tensor_slices([1, 2, 3, 4]).repeat().batch(4)")

A Dataset is an immutable graph: every method returns a new one. It pickles as its pipeline
expression. It is run by a strategy
(``strategy.experimental_distribute_dataset``) in this process or by the Sluice service
(``sluice.distribute_from_service``). Errors in the graph (``batch(0)``, an unknown op) raise
``sluice.errors.InvalidArgumentError`` naming the op.
"""

from . import _sluice

AutoShardPolicy = _sluice.AutoShardPolicy
AUTOTUNE = -1
INFINITE_CARDINALITY = -1
UNKNOWN_CARDINALITY = -2


class experimental:  # noqa: N801 (tf.data.experimental's spelling)
    """``tf.data.experimental`` names: AutoShardPolicy, AUTOTUNE, SHARD_HINT."""

    AutoShardPolicy = _sluice.AutoShardPolicy
    AUTOTUNE = -1
    SHARD_HINT = -1
    INFINITE_CARDINALITY = -1
    UNKNOWN_CARDINALITY = -2


def _literal(value):
    """A Python value as pipeline-expression text (Python's own literal syntax)."""
    if isinstance(value, str) and value.startswith("$"):
        return value[1:]  # a name or a function spec, passed through verbatim
    return repr(value)


def _call(name, *args, **kwargs):
    parts = [_literal(a) for a in args]
    parts += ["%s=%s" % (k, _literal(v)) for k, v in kwargs.items() if v is not None]
    return "%s(%s)" % (name, ", ".join(parts))


def _dtype_name(dtype):
    """'int32' for 'int32', tf.int32, np.int32 or np.dtype('int32')."""
    if isinstance(dtype, str):
        return dtype
    name = getattr(dtype, "name", None)
    if isinstance(name, str):
        return name
    import numpy as np  # only for numpy scalar types such as np.int32

    return np.dtype(dtype).name


class Dataset:
    """``tf.data.Dataset``: a source and a chain of ops (an immutable graph)."""

    __slots__ = ("_ds",)

    def __init__(self, ds):
        if not isinstance(ds, _sluice._Dataset):
            raise TypeError("use Dataset.range / from_tensors / ... or sluice.data.parse")
        self._ds = ds

    # Sources.
    @staticmethod
    def range(*args):
        """``range(stop)``, ``range(start, stop)``, ``range(start, stop, step)``: int64."""
        if not 1 <= len(args) <= 3:
            raise TypeError("range() takes 1 to 3 arguments")
        start, stop, step = (0, args[0], 1) if len(args) == 1 else (tuple(args) + (1,))[:3]
        return Dataset(_sluice._Dataset.range(start, stop, step))

    @staticmethod
    def from_tensors(tensors):
        """One element: ``tensors`` (tuples and dicts are structure; lists, numpy arrays and
        scalars are tensors with TensorFlow's dtype rules)."""
        return Dataset(_sluice._Dataset.from_tensors(tensors))

    @staticmethod
    def from_tensor_slices(tensors):
        """The slices of every leaf of ``tensors`` along dimension 0."""
        return Dataset(_sluice._Dataset.from_tensor_slices(tensors))

    @staticmethod
    def text_line_dataset(filenames):
        """The lines of the files (``tf.data.TextLineDataset``), as string scalars."""
        if isinstance(filenames, str):
            filenames = [filenames]
        return Dataset(_sluice._Dataset.text_line(list(filenames)))

    @staticmethod
    def tf_record_dataset(filenames, compression_type="", buffer_size=0, num_parallel_reads=0):
        """The records of TFRecord files (``tf.data.TFRecordDataset``)."""
        if isinstance(filenames, str):
            filenames = [filenames]
        return Dataset(_sluice._Dataset.tf_record(list(filenames), compression_type or "",
                                                  buffer_size or 0, num_parallel_reads or 0))

    @staticmethod
    def fixed_length_record_dataset(filenames, record_bytes, header_bytes=0, footer_bytes=0,
                                    compression_type=""):
        """Fixed-size records of binary files (``tf.data.FixedLengthRecordDataset``)."""
        if isinstance(filenames, str):
            filenames = [filenames]
        return Dataset(_sluice._Dataset.fixed_length_record(
            list(filenames), record_bytes, header_bytes, footer_bytes, compression_type or ""))

    @staticmethod
    def jsonl_dataset(filenames, keys):
        """One dict per line of JSON Lines files (core/data/ops/jsonl_reader.h): ``keys`` is a
        list of names (string values) or a dict of name -> dtype (``'int32'``, ``tf.int32``,
        ``np.float32``) or ``[dtype]`` for a 1-D vector from a JSON array. Bad lines, missing
        keys and wrong types are element errors naming file and line (``ignore_errors()``
        skips them)."""
        if isinstance(filenames, str):
            filenames = [filenames]
        if isinstance(keys, dict):
            keys = {k: ([_dtype_name(v[0])] if isinstance(v, (list, tuple)) else _dtype_name(v))
                    for k, v in keys.items()}
        else:
            keys = list(keys)
        return Dataset(_sluice._Dataset.parse(_call("jsonl_dataset", list(filenames), keys=keys)))

    # Ops with a builder in C++.
    @staticmethod
    def load(path, wait=False, timeout=600, num_parallel_calls=None):
        """The elements of a distributed snapshot written by ``sluice.save`` (``tf.data.Dataset.load``
        of a ``distributed_save``); the element spec comes from its manifest. ``wait=False``
        needs a finished snapshot (FailedPreconditionError otherwise) and reads its chunks in
        name order; ``wait=True`` reads one still being written, as its chunks are committed,
        until its manifest says done. With ``wait=True``, iterating raises DeadlineExceededError
        (naming the directory and what is missing) once the snapshot has not grown for
        ``timeout`` seconds (None: wait as long as it takes), and FailedPreconditionError at once
        when its save failed. ``num_parallel_calls`` (wait=False; N or AUTOTUNE) verifies the
        records' checksums on the thread pool ahead of the consumer, in the same order: more CPU
        per element, less waiting where cores are idle; None reads sequentially."""
        return Dataset(_sluice._load_snapshot(
            str(path), bool(wait), 0.0 if timeout is None else float(timeout),
            1 if num_parallel_calls is None else int(num_parallel_calls)))

    def batch(self, batch_size, drop_remainder=False):
        return Dataset(self._ds.batch(batch_size, drop_remainder))

    def repeat(self, count=None):
        return Dataset(self._ds.repeat(-1 if count is None else count))

    def take(self, count):
        return Dataset(self._ds.take(count))

    def skip(self, count):
        return Dataset(self._ds.skip(count))

    def shard(self, num_shards, index):
        if num_shards == experimental.SHARD_HINT and index == experimental.SHARD_HINT:
            return Dataset(self._ds.shard_hint())
        return Dataset(self._ds.shard(num_shards, index))

    def shuffle(self, buffer_size, seed=None, reshuffle_each_iteration=None):
        return Dataset(self._ds.shuffle(buffer_size, seed,
                                        True if reshuffle_each_iteration is None
                                        else reshuffle_each_iteration))

    def prefetch(self, buffer_size):
        return Dataset(self._ds.prefetch(buffer_size))

    def unbatch(self):
        return Dataset(self._ds.unbatch())

    def rebatch(self, batch_size, drop_remainder=False):
        sizes = list(batch_size) if isinstance(batch_size, (list, tuple)) else [batch_size]
        return Dataset(self._ds.rebatch(sizes, drop_remainder))

    # Ops written as pipeline-expression text (docs/PIPELINES.md lists the functions).
    def _then(self, op_text):
        return Dataset(_sluice._Dataset.parse(self._ds.expression() + "." + op_text))

    def map(self, map_func, key=None, num_parallel_calls=None, deterministic=None):
        """``map(map_func)`` with one of Sluice's named functions, given as its expression text:
        ``ds.map("cast(tf.float32)", key="image")`` (docs/PIPELINES.md lists them). Python
        callables cannot run on the service's workers, so they are not accepted."""
        if callable(map_func):
            raise TypeError("map() takes a function spec such as 'cast(tf.float32)'; Python "
                            "callables cannot run on input workers")
        return self._then(_call("map", "$" + map_func, key=key,
                                num_parallel_calls=num_parallel_calls,
                                deterministic=deterministic))

    def filter(self, predicate, key=None):
        """``filter(predicate)`` with a named predicate such as ``'less(5)'``."""
        if callable(predicate):
            raise TypeError("filter() takes a predicate spec such as 'less(5)'")
        return self._then(_call("filter", "$" + predicate, key=key))

    def padded_batch(self, batch_size, padded_shapes=None, padding_values=None,
                     drop_remainder=False):
        return self._then(_call("padded_batch", batch_size, padded_shapes=padded_shapes,
                                padding_values=padding_values, drop_remainder=drop_remainder))

    def pack(self, sequence_length, keys=None, max_open_rows=None):
        """Packs dict elements' token vectors into rows of ``sequence_length`` with
        ``<key>_segment_ids`` and ``<key>_positions``, as seqio's trim_and_pack (greedy first fit
        over ``max_open_rows`` open rows, default 8; core/data/ops/pack_iterator.h)."""
        return self._then(_call("pack", sequence_length,
                                keys=list(keys) if keys is not None else None,
                                max_open_rows=max_open_rows))

    def bucket_by_sequence_length(self, element_length_func, bucket_boundaries,
                                  bucket_batch_sizes, padded_shapes=None, padding_values=None,
                                  pad_to_bucket_boundary=False, no_padding=False,
                                  drop_remainder=False):
        """``tf.data.Dataset.bucket_by_sequence_length``. ``element_length_func`` is the key
        (or tuple index) whose dimension 0 is the length, None for the element itself, or the
        expression text ``"length('ids')"``; Python callables cannot run on input workers."""
        if callable(element_length_func):
            raise TypeError("bucket_by_sequence_length() takes the key whose length counts, "
                            "such as 'ids' (Python callables cannot run on input workers)")
        if element_length_func is None:
            length = "$length()"
        elif isinstance(element_length_func, str) and element_length_func.startswith("length("):
            length = "$" + element_length_func
        else:
            length = "$length(%r)" % (element_length_func,)
        return self._then(_call("bucket_by_sequence_length", length, list(bucket_boundaries),
                                list(bucket_batch_sizes), padded_shapes=padded_shapes,
                                padding_values=padding_values,
                                pad_to_bucket_boundary=pad_to_bucket_boundary or None,
                                no_padding=no_padding or None,
                                drop_remainder=drop_remainder or None))

    def cache(self, filename=""):
        return self._then(_call("cache", filename))

    def ignore_errors(self):
        return self._then("ignore_errors()")

    # Inspection.
    @property
    def element_spec(self):
        """The element's structure with a ``sluice.TensorSpec`` at each leaf (static)."""
        return self._ds.element_spec()

    def cardinality(self):
        """Number of elements; ``INFINITE_CARDINALITY`` (-1) or ``UNKNOWN_CARDINALITY`` (-2)."""
        return self._ds.cardinality()

    def fingerprint(self):
        """A digest of the graph: equal graphs have equal fingerprints."""
        return self._ds.fingerprint()

    def to_expression(self):
        """The graph as a pipeline expression that ``parse`` reads back."""
        return self._ds.expression()

    def __repr__(self):
        return "<sluice.data.Dataset %s>" % self._ds.expression()

    def __reduce__(self):
        # Pickled as its pipeline expression (what the service ships too), so a Dataset goes to
        # spawned processes (DataLoader workers, multiprocessing) and comes back equal.
        return (parse, (self._ds.expression(),))


def set_data_roots(roots):
    """Limits what pipelines run in this process read, as a server's ``--data_root`` does.

    ``roots`` are folders and URL prefixes, e.g. ``["/data", "s3://bucket/datasets",
    "http://minio.internal:9000/"]``; an empty list lifts the limit on local files. Whatever the
    roots, remote reads reach only public addresses: a loopback, link-local (cloud metadata) or
    private-network endpoint (a local MinIO, a test server) is read only once a root names its
    scheme, host and port. Refused reads raise ``sluice.errors.PermissionDeniedError``; a root
    that does not exist or is malformed raises ``InvalidArgumentError``.
    """
    _sluice._set_data_roots([str(r) for r in roots])


def parse(expression):
    """A Dataset from a pipeline expression in tf.data's syntax, e.g.
    ``"from_tensor_slices([1, 2, 3, 4]).repeat().batch(4)"``."""
    return Dataset(_sluice._Dataset.parse(expression))
