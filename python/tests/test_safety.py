"""What keeps a trainer from silently going wrong: a shared job name whenever several processes
read one job, iterators used from two threads or after a fork, numpy 2's __array__ protocol,
TF's get_next() and device strings, pickling datasets, one version string, stubs that match
the module."""

import ast
import os
import pickle
import re
import signal
import threading
import time

import numpy as np
import pytest

import dependencies
import sluice
import sluice_cluster
from sluice import _sluice
from sluice.service import job_name_for, launcher_job_name

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.abspath(os.path.join(HERE, "..", ".."))
LAUNCHER_VARS = ("TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "SLURM_STEP_ID", "JAX_COORDINATOR_ADDRESS")


@pytest.fixture
def no_launcher(monkeypatch):
    for name in LAUNCHER_VARS:
        monkeypatch.delenv(name, raising=False)


# --- A job name whenever there is more than one consumer ---------------------------------------

def test_several_consumers_without_a_job_name_is_an_error(no_launcher):
    strategy = sluice.MirroredStrategy("CPU:0")
    ds = sluice.data.parse("range(8).batch(2)")
    with pytest.raises(sluice.errors.InvalidArgumentError) as e:
        # Raised before any connection: the address is never dialled.
        sluice.distribute_from_service(strategy, ds, coordinator="127.0.0.1:1",
                                       consumer_index=0, num_consumers=2)
    assert "job=" in e.value.message and "num_consumers=2" in e.value.message


def test_torch_dataset_of_a_world_without_a_job_name_is_an_error(no_launcher):
    dependencies.import_installable("torch", "python3-torch")
    import sluice.torch
    data = sluice.torch.IterableDataset(sluice.data.parse("range(8).batch(2)"),
                                        coordinator="127.0.0.1:1", rank=1, world_size=2)
    with pytest.raises(sluice.errors.InvalidArgumentError) as e:
        next(iter(data))
    assert "sluice.torch.IterableDataset" in e.value.message


def test_job_name_comes_from_the_launcher(no_launcher, monkeypatch):
    assert job_name_for("mine", 4) == "mine"
    assert job_name_for("", 1) == ""  # one consumer: a private job is what it wants
    assert launcher_job_name() is None
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")  # torchrun without rendezvous: no name
    assert launcher_job_name() is None
    monkeypatch.setenv("SLURM_JOB_ID", "812")
    monkeypatch.setenv("SLURM_STEP_ID", "3")
    assert job_name_for("", 8) == "slurm-812.3"
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "f00d")
    assert job_name_for("", 8) == "torchelastic-f00d"
    assert launcher_job_name({"JAX_COORDINATOR_ADDRESS": "10.0.0.1:1234"}) == \
        "jax-10.0.0.1:1234"


def test_two_processes_of_one_launch_share_a_derived_job(cluster, no_launcher, monkeypatch):
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "run-%d" % os.getpid())
    strategy = sluice.MirroredStrategy(["CPU:0"])
    ds = sluice.data.parse("range(24).batch(6)")
    dists = [sluice.distribute_from_service(strategy, ds, coordinator=cluster.coordinator,
                                            consumer_index=i, num_consumers=2,
                                            sharding_policy="ranges") for i in range(2)]
    its = [iter(d) for d in dists]
    seen = []
    for _ in range(4):  # bounded: 4 global batches
        for it in its:
            seen += np.asarray(next(it)).tolist()
    assert sorted(seen) == list(range(24))


# --- Iterators: threads, forks, get_next ------------------------------------------------------

def test_a_second_thread_in_next_gets_runtime_error_not_a_crash():
    dependencies.require_binaries()
    with sluice_cluster.Cluster(num_workers=1) as c:
        strategy = sluice.MirroredStrategy(["CPU:0"])
        dist = sluice.distribute_from_service(strategy, sluice.data.parse("range(8).batch(2)"),
                                              coordinator=c.coordinator, job="two-threads",
                                              sharding_policy="ranges", retry_deadline=300)
        c.pause_worker(0)  # the first next() waits inside C++
        it = iter(dist)
        got = []
        t = threading.Thread(target=lambda: got.append(next(it)))
        t.start()
        try:
            for _ in range(3000):  # until the thread waits (bounded: 30 s)
                if it._in_flight:
                    break
                time.sleep(0.01)
            assert it._in_flight
            with pytest.raises(RuntimeError, match="another thread"):
                next(it)
        finally:
            c.continue_worker(0)
            t.join(timeout=120)
        assert not t.is_alive()
        assert np.asarray(got[0]).tolist() == [0, 1]
        assert [np.asarray(x).tolist() for x in it] == [[2, 3], [4, 5], [6, 7]]


def test_get_next_raises_out_of_range_at_the_end():
    strategy = sluice.MirroredStrategy(["CPU:0"])
    it = iter(strategy.experimental_distribute_dataset(sluice.data.parse("range(2).batch(2)")))
    assert np.asarray(it.get_next()).tolist() == [0, 1]
    with pytest.raises(sluice.errors.OutOfRangeError):
        it.get_next()
    with pytest.raises(StopIteration):
        next(it)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_an_iterator_used_in_a_forked_child_raises_failed_precondition():
    strategy = sluice.MirroredStrategy(["CPU:0"])
    dist = strategy.experimental_distribute_dataset(sluice.data.parse("range(8).batch(2)"))
    it = iter(dist)
    next(it)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what next() and iter() did, then leave at once
        code = 0
        for call in (lambda: next(it), lambda: iter(dist)):
            try:
                call()
                code = code * 10 + 1
            except sluice.errors.FailedPreconditionError:
                code = code * 10 + 2
            except BaseException:
                code = code * 10 + 3
        os.write(w, str(code).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        report = f.read()
    os.waitpid(pid, 0)
    assert report == "22"  # both refused with FailedPreconditionError
    assert np.asarray(next(it)).tolist() == [2, 3]  # the parent's iterator goes on


def test_torch_dataloader_workers_get_a_clear_error():
    torch = dependencies.import_installable("torch", "python3-torch")
    import sluice.torch
    data = sluice.torch.IterableDataset(sluice.data.parse("range(8).batch(2)"))
    loader = torch.utils.data.DataLoader(data, batch_size=None, num_workers=1)
    with pytest.raises(Exception) as e:
        list(loader)
    assert "num_workers=0" in str(e.value)
    # The dataset pickles without its connection (spawned workers get a fresh one).
    clone = pickle.loads(pickle.dumps(data))
    assert [b.tolist() for b in clone] == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_datasets_pickle_through_their_expression():
    ds = sluice.data.Dataset.from_tensor_slices(
        {"x": np.arange(6, dtype=np.float32), "s": ["a", "b", "c", "d", "e", "f"]}
    ).shuffle(4, seed=1).batch(2).map("cast(tf.float64)", key="x")
    clone = pickle.loads(pickle.dumps(ds))
    assert clone.to_expression() == ds.to_expression()
    assert clone.fingerprint() == ds.fingerprint()


def test_ctrl_c_interrupts_iter_of_a_service_dataset_waiting_for_the_coordinator():
    dependencies.require_binaries()
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach the main thread only")
    with sluice_cluster.Cluster(num_workers=1) as c:
        strategy = sluice.MirroredStrategy(["CPU:0"])
        dist = sluice.distribute_from_service(strategy, sluice.data.parse("range(8).batch(2)"),
                                              coordinator=c.coordinator, job="iter-ctrl-c",
                                              sharding_policy="ranges", retry_deadline=300)
        before = _sluice._waiting_calls()
        c._coordinator.send_signal(signal.SIGSTOP)  # a hung coordinator: iter() waits

        def interrupt_once_waiting():
            for _ in range(3000):  # until iter() waits inside C++ (bounded: 30 s)
                if _sluice._waiting_calls() > before:
                    os.kill(os.getpid(), signal.SIGINT)
                    return
                time.sleep(0.01)

        t = threading.Thread(target=interrupt_once_waiting)
        t.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                iter(dist)
        finally:
            t.join()
            c._coordinator.send_signal(signal.SIGCONT)
        assert _sluice._waiting_calls() == before
        # The dataset still works: a new iter() reads every step.
        assert [np.asarray(x).tolist() for x in dist] == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_a_call_whose_thread_cannot_start_raises_resource_exhausted():
    """distribute_from_service waits for its call on a thread of its own (so that Ctrl-C
    interrupts the wait): when the system refuses that thread (RLIMIT_NPROC, memory), the call
    raises ResourceExhaustedError naming it, and the interpreter goes on."""
    strategy = sluice.MirroredStrategy(["CPU:0"])
    ds = sluice.data.parse("range(8).batch(2)")
    _sluice._test_fail_thread_starts(1, "an interruptible call")
    try:
        with pytest.raises(sluice.errors.ResourceExhaustedError,
                           match="cannot start a thread for an interruptible call"):
            sluice.distribute_from_service(strategy, ds, coordinator="127.0.0.1:1",
                                           retry_deadline=0.1)
    finally:
        _sluice._test_fail_thread_starts(0, "")


# --- Tensors, strategies, the package ---------------------------------------------------------

def test_array_protocol_of_numpy_2():
    t = sluice.constant(np.arange(4, dtype=np.float32))
    view = t.__array__()
    assert view.ctypes.data == t._data_ptr  # copy=None: a view
    assert t.__array__(copy=False).ctypes.data == t._data_ptr
    copied = t.__array__(copy=True)
    assert copied.ctypes.data != t._data_ptr and copied.tolist() == [0, 1, 2, 3]
    assert t.__array__(np.float64).dtype == np.float64
    assert t.__array__(dtype=np.float64, copy=None).tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError):
        t.__array__(np.float64, copy=False)
    s = sluice.constant(["a", "b"])
    assert s.__array__().tolist() == [b"a", b"b"]
    assert s.__array__(copy=True).tolist() == [b"a", b"b"]
    with pytest.raises(ValueError):
        s.__array__(copy=False)


def test_mirrored_strategy_takes_one_device_string():
    assert sluice.MirroredStrategy("GPU:0").devices == sluice.MirroredStrategy(["GPU:0"]).devices
    assert sluice.MirroredStrategy("CPU:0").num_local_replicas == 1


def test_version_is_the_projects():
    with open(os.path.join(SOURCE_DIR, "CMakeLists.txt")) as f:
        want = re.search(r"project\(sluice VERSION ([0-9.]+)", f.read()).group(1)
    assert sluice.__version__ == want == _sluice.__version__
    with open(os.path.join(SOURCE_DIR, "pyproject.toml")) as f:
        assert not re.search(r'^version\s*=', f.read(), re.M)  # not written a second time


def _stub_classes():
    with open(os.path.join(SOURCE_DIR, "python", "sluice", "_sluice.pyi")) as f:
        tree = ast.parse(f.read())
    classes, functions = {}, set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names = set()
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names.add(item.target.id)
            classes[node.name] = names
        elif isinstance(node, ast.FunctionDef):
            functions.add(node.name)
    return classes, functions


def _public(cls):
    names = set()
    for name, value in vars(cls).items():
        if name.startswith("_") and name not in (
                "__next__", "__array__", "__array_interface__", "__dlpack__",
                "__dlpack_device__", "__len__"):
            continue
        if name in ("name", "value") and hasattr(cls, "__members__"):
            continue  # pybind11's enum properties
        names.add(name)
    return names


def test_stubs_match_the_module():
    classes, functions = _stub_classes()
    module_classes = {n for n, v in vars(_sluice).items() if isinstance(v, type)}
    module_functions = {n for n, v in vars(_sluice).items()
                        if callable(v) and not isinstance(v, type)}
    assert set(classes) == module_classes
    assert functions == module_functions
    for name, stub in classes.items():
        cls = getattr(_sluice, name)
        missing = _public(cls) - stub
        assert not missing, "%s: in the module, not in the stub: %s" % (name, sorted(missing))
        extra = {n for n in stub if not hasattr(cls, n)}
        assert not extra, "%s: in the stub, not in the module: %s" % (name, sorted(extra))
