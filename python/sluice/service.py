"""Reading from the Sluice service (a coordinator and input workers) instead of running the
pipeline in the trainer: the tf.data service's ``distribute``, from Python.

::

    dist = sluice.distribute_from_service(
        strategy, dataset, coordinator="coord:5000", job="resnet-train",
        consumer_index=rank, num_consumers=world_size)
    for x in dist: ...

Where the coordinator is and which consumer this process is come from the arguments when given,
else from the cluster spec exactly as the C++ client resolves it (``sluice.resolve_cluster``:
``cluster_spec=`` file, SLUICE_CLUSTER or TF_CONFIG, SLUICE_COORDINATOR /
SLUICE_CONSUMER_INDEX / SLUICE_NUM_CONSUMERS, Slurm, Kubernetes). Waiting for data releases
the GIL and Ctrl-C interrupts it.
"""

import os

from . import _sluice
from . import errors
from .distribute import DistributedDataset

ReadMode = _sluice.ServiceReadMode
ShardingPolicy = _sluice.ServiceShardingPolicy
Shuffle = _sluice.ServiceShuffle
Compression = _sluice.ServiceCompression


def _enum(enum, value, what):
    if isinstance(value, enum):
        return value
    try:
        return enum.__members__[str(value).upper()]
    except KeyError:
        raise ValueError("%s must be one of %s, got %r" % (
            what, ", ".join(k.lower() for k in enum.__members__), value)) from None


def resolve_cluster(coordinator=None, consumer_index=None, num_consumers=None, cluster_spec=""):
    """Where the coordinator is and which trainer this process is (sluice/cluster_spec.h):
    a dict with ``coordinator``, ``consumer_index``, ``num_consumers``, ``role`` and where each
    came from (``*_source``, ``description``). Arguments given win over every other source.
    InvalidArgumentError naming the source and key for a bad spec."""
    return _sluice._resolve_cluster_config(coordinator, consumer_index, num_consumers,
                                           cluster_spec or "")


def launcher_job_name(environ=None):
    """A job name shared by every process of one launch, from the launcher's environment:
    torchrun's ``TORCHELASTIC_RUN_ID`` (its ``--rdzv-id``; ``"none"``, torchrun's default
    without rendezvous, does not count), Slurm's ``SLURM_JOB_ID`` (with ``SLURM_STEP_ID``), or
    JAX's coordinator address (``JAX_COORDINATOR_ADDRESS``). None when there is none."""
    env = os.environ if environ is None else environ
    run_id = env.get("TORCHELASTIC_RUN_ID", "")
    if run_id and run_id != "none":
        return "torchelastic-" + run_id
    if env.get("SLURM_JOB_ID"):
        step = env.get("SLURM_STEP_ID")
        return "slurm-" + env["SLURM_JOB_ID"] + ("." + step if step else "")
    if env.get("JAX_COORDINATOR_ADDRESS"):
        return "jax-" + env["JAX_COORDINATOR_ADDRESS"]
    return None


def job_name_for(job, num_consumers, where="distribute_from_service", derived=None):
    """The job name consumers share: ``job`` when given, else ``derived`` or the launcher's
    (launcher_job_name). With one consumer an empty name is fine (a job private to this
    process); with more, InvalidArgumentError: an empty name gives every process a job of its
    own, so each would wait for peers that never join or read only part of the data."""
    if job:
        return job
    derived = derived or launcher_job_name()
    if derived:
        return derived
    if num_consumers is not None and num_consumers > 1:
        raise errors.InvalidArgumentError(
            "%s: job= is required with num_consumers=%d: without a job name shared by every "
            "consumer, each process would get a job of its own and wait for peers that never "
            "join. Pass the same job='...' in every process, or launch with torchrun "
            "(TORCHELASTIC_RUN_ID), Slurm (SLURM_JOB_ID) or jax.distributed "
            "(JAX_COORDINATOR_ADDRESS), from which it is derived" % (where, num_consumers),
            errors.INVALID_ARGUMENT)
    return ""


def set_connection(o, retry_deadline, rpc_deadline, token, tls, tls_ca_file, tls_cert_file,
                   tls_key_file, tls_server_name):
    """Sets the deadlines (seconds) and security of the _ServiceOptions ``o``."""
    o.retry_deadline = retry_deadline
    o.rpc_deadline = rpc_deadline
    o.token = token
    o.tls = tls
    o.tls_ca_file = tls_ca_file
    o.tls_cert_file = tls_cert_file
    o.tls_key_file = tls_key_file
    o.tls_server_name = tls_server_name


class CrossTrainerCache:
    """Shares a job across trainers, as ``tf.data.experimental.service.CrossTrainerCache``.

    Trainers that pass the same ``job`` and a ``CrossTrainerCache`` with different
    ``trainer_id`` s read one production: the workers keep each task's steps in a window
    bounded in bytes (``sluice-worker --cross_trainer_window_bytes``) and every trainer reads
    it at its own pace. The same ``trainer_id`` in several processes makes them consumers of
    one trainer (they split its steps). ``lossless=False`` (TF's behaviour): a trainer that
    falls behind the window's start skips to it (the worker counts the skipped steps);
    ``lossless=True``: the slowest trainer holds the producer and every trainer reads every
    step from where it joined (``expected_trainers``: steps are kept until that many have
    joined). ``max_trainers``: distinct trainers the job admits (0: 16; at most 64).
    """

    def __init__(self, trainer_id, lossless=False, expected_trainers=0, max_trainers=0):
        if not isinstance(trainer_id, str) or not trainer_id:
            from .errors import InvalidArgumentError, INVALID_ARGUMENT
            raise InvalidArgumentError(
                "CrossTrainerCache: trainer_id must be a non-empty string, got %r" % (trainer_id,),
                INVALID_ARGUMENT)
        self.trainer_id = trainer_id
        self.lossless = bool(lossless)
        self.expected_trainers = int(expected_trainers)
        self.max_trainers = int(max_trainers)


def distribute_from_service(strategy, dataset, coordinator=None, job="", consumer_index=None,
                            num_consumers=None, sharding_policy="auto", read_mode="coordinated",
                            resume_from=None, cluster_spec="", num_tasks=0, seed=0,
                            shuffle="none", num_epochs=1, fetch_to_device=True,
                            per_replica_buffer_size=1, receive_budget_bytes=64 << 20,
                            retry_deadline=60.0,
                            rpc_deadline=10.0, token="", tls=False, tls_ca_file="",
                            tls_cert_file="", tls_key_file="", tls_server_name="",
                            compression="none", force_compression=False,
                            cross_trainer_cache=None):
    """A DistributedDataset whose iterators stream ``dataset``'s steps from the service.

    Consumers naming the same ``job`` share it (required with more than one consumer unless
    the launcher names the run, see ``job_name_for``): in coordinated reads (the default) every step is
    one global batch cut into num_consumers x local-replica pieces by TF's rule, and every
    consumer sees the same number of steps. ``sharding_policy``: auto, file, data, hint, off,
    dynamic or ranges (a deterministic global order that survives worker failures and can be
    resumed). ``resume_from``: bytes from an earlier iterator's ``checkpoint()``.
    ``compression``: the job's wire compression, none, lz4 or zstd (for network-bound
    clusters: workers on other hosts compress each frame that shrinks; ``force_compression``
    compresses on loopback too).
    ``cross_trainer_cache``: a ``CrossTrainerCache`` to share ``job`` across trainers (the job
    then reads independently: each step goes to one consumer of each trainer).
    Durations are in seconds. Raises InvalidArgumentError for bad options and the
    coordinator's validation errors, UnavailableError when the coordinator cannot be reached
    within ``retry_deadline``.
    """
    cluster = resolve_cluster(coordinator, consumer_index, num_consumers, cluster_spec)
    if not cluster["coordinator"]:
        from .errors import InvalidArgumentError, INVALID_ARGUMENT
        raise InvalidArgumentError(
            "distribute_from_service: no coordinator address (pass coordinator=, or set "
            "SLUICE_COORDINATOR, SLUICE_CLUSTER or TF_CONFIG)", INVALID_ARGUMENT)
    o = _sluice._ServiceOptions()
    o.coordinator_address = cluster["coordinator"]
    o.job_name = job_name_for(job, cluster["num_consumers"])
    o.consumer_index = cluster["consumer_index"]
    o.num_consumers = cluster["num_consumers"]
    o.sharding_policy = _enum(ShardingPolicy, sharding_policy, "sharding_policy")
    o.read_mode = _enum(ReadMode, read_mode, "read_mode")
    o.num_tasks = num_tasks
    o.seed = seed
    o.shuffle = _enum(Shuffle, shuffle, "shuffle")
    o.num_epochs = num_epochs
    o.fetch_to_device = fetch_to_device
    o.per_replica_buffer_size = per_replica_buffer_size
    o.receive_budget_bytes = receive_budget_bytes
    set_connection(o, retry_deadline, rpc_deadline, token, tls, tls_ca_file, tls_cert_file,
                   tls_key_file, tls_server_name)
    o.resume_from = resume_from
    o.compression = _enum(Compression, compression, "compression")
    o.force_compression = bool(force_compression)
    if cross_trainer_cache is not None:
        o.read_mode = ReadMode.INDEPENDENT
        o.cross_trainer = True
        o.trainer_id = cross_trainer_cache.trainer_id
        o.cross_trainer_lossless = cross_trainer_cache.lossless
        o.expected_trainers = cross_trainer_cache.expected_trainers
        o.max_trainers = cross_trainer_cache.max_trainers
    dd = _sluice._distribute_from_service(strategy._s, dataset._ds, o)
    length = None
    if o.read_mode == ReadMode.COORDINATED and resume_from is None:
        n = dataset.cardinality()
        if n >= 0:
            length = n * (num_epochs if o.sharding_policy == ShardingPolicy.RANGES else 1)
    return DistributedDataset(dd, length)


def parse_checkpoint(checkpoint):
    """The fields of an iterator checkpoint (bytes): job_key, step, epoch, step_in_epoch."""
    return _sluice._parse_checkpoint(checkpoint)
