"""Distributed snapshots: the service's workers write a pipeline's elements to a directory once,
and later jobs read them with ``sluice.data.Dataset.load(path)`` (or ``load('path')`` in a
pipeline expression) instead of recomputing them. ``tf.data.experimental.distributed_save``.

::

    sluice.save(dataset, "/data/snap", coordinator="coord:5000")
    ds = sluice.data.Dataset.load("/data/snap").batch(32)

Format, order and guarantees: docs/SNAPSHOTS.md.
"""

from . import _sluice
from . import errors
from .service import resolve_cluster, set_connection


def save(dataset, path, coordinator=None, compression="", resume=False, split_size=0,
         cluster_spec="", retry_deadline=60.0, rpc_deadline=10.0, token="", tls=False,
         tls_ca_file="", tls_cert_file="", tls_key_file="", tls_server_name=""):
    """Writes ``dataset``'s elements to ``path`` through the service and returns
    ``{"num_chunks": C, "num_elements": N}`` once the snapshot's manifest says done.

    The workers write one chunk per split (``split_size`` source elements for a source of
    elements, 0: 4096; one file for a source of files), each committed once, so a worker or
    coordinator restart neither loses nor repeats an element. ``compression``: "", "GZIP" or
    "ZLIB". ``resume=True`` continues an interrupted save of the same pipeline. Raises
    AlreadyExistsError when another save holds ``path``, FailedPreconditionError when ``path``
    holds a finished snapshot or one of another pipeline, UnimplementedError for an http(s)
    path (s3:// and gs:// are written: docs/SNAPSHOTS.md), and the job's errors. Waiting releases the GIL and Ctrl-C interrupts it."""
    cluster = resolve_cluster(coordinator, None, None, cluster_spec)
    if not cluster["coordinator"]:
        raise errors.InvalidArgumentError(
            "save: no coordinator address (pass coordinator=, or set SLUICE_COORDINATOR, "
            "SLUICE_CLUSTER or TF_CONFIG)", errors.INVALID_ARGUMENT)
    o = _sluice._ServiceOptions()
    o.coordinator_address = cluster["coordinator"]
    set_connection(o, retry_deadline, rpc_deadline, token, tls, tls_ca_file, tls_cert_file,
                   tls_key_file, tls_server_name)
    return _sluice._save_snapshot(dataset._ds, str(path), o, compression or "", bool(resume),
                                  int(split_size))
