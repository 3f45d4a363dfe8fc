"""sluice.distribute_from_service against a real sluice-coordinator and sluice-worker processes
on loopback: the steps, element_spec over RPC, len(), two consumers sharing a job, checkpoint()
and resume_from=, cluster-spec resolution, errors, and Ctrl-C during a wait for data."""

import gc
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import dependencies
import sluice
import sluice_cluster


def _values(x):
    return [v.numpy().tolist() for v in x.values]


def test_reads_every_step_with_the_spec_from_the_coordinator(cluster):
    strategy = sluice.MirroredStrategy(["CPU:0", "CPU:1"])
    ds = sluice.data.parse("range(40).batch(4)")
    dist = sluice.distribute_from_service(strategy, ds, coordinator=cluster.coordinator,
                                          job="read-all", sharding_policy="ranges")
    assert dist.element_spec == sluice.PerReplicaSpec(sluice.TensorSpec((None,), "int64"),
                                                      sluice.TensorSpec((None,), "int64"))
    steps = [_values(x) for x in dist]
    assert len(steps) == len(dist) == 10
    assert steps == [[[4 * s, 4 * s + 1], [4 * s + 2, 4 * s + 3]] for s in range(10)]


def test_two_consumers_split_each_global_batch(cluster):
    strategy = sluice.MirroredStrategy(["CPU:0"])
    ds = sluice.data.parse("range(24).batch(6)")
    dists = [sluice.distribute_from_service(strategy, ds, coordinator=cluster.coordinator,
                                            job="two", consumer_index=i, num_consumers=2,
                                            sharding_policy="ranges") for i in range(2)]
    its = [iter(d) for d in dists]
    seen = []
    for _ in range(4):  # coordinated reads: both consumers step together
        for it in its:
            seen += next(it).numpy().tolist()
    for it in its:
        with pytest.raises(StopIteration):
            next(it)
    assert sorted(seen) == list(range(24))


def test_checkpoint_and_resume(cluster):
    strategy = sluice.MirroredStrategy(["CPU:0", "CPU:1"])
    ds = sluice.data.parse("range(40).batch(4)")
    kwargs = dict(coordinator=cluster.coordinator, job="resume", sharding_policy="ranges")
    it = iter(sluice.distribute_from_service(strategy, ds, **kwargs))
    first = [_values(next(it)) for _ in range(3)]
    checkpoint = it.checkpoint()
    assert isinstance(checkpoint, bytes)
    assert sluice.parse_checkpoint(checkpoint)["step"] == 3
    rest = [_values(x) for x in it]
    resumed = sluice.distribute_from_service(strategy, ds, resume_from=checkpoint, **kwargs)
    assert [_values(x) for x in resumed] == rest
    assert len(first) + len(rest) == 10
    with pytest.raises(sluice.errors.InvalidArgumentError):
        sluice.distribute_from_service(strategy, sluice.data.parse("range(8).batch(4)"),
                                       resume_from=checkpoint, **kwargs)


def _job_ends(cluster):
    """{job id: (error, released)} from `sluicectl status --format=json` (bounded)."""
    out = subprocess.run([os.path.join(sluice_cluster.BUILD_DIR, "bin", "sluicectl"), "status",
                          "--coordinator=" + cluster.coordinator, "--format=json"],
                         capture_output=True, text=True, timeout=30, check=True)
    return {j["job_id"]: (j.get("error", ""), j["released"])
            for j in json.loads(out.stdout)["jobs"]}


def test_a_dataset_and_its_iterators_collected_release_their_job(cluster):
    # A consumer done with its job releases it (docs/SERVICE.md, "Consumers that release their
    # job"): not while the dataset can still make an iterator, at once when both are gone.
    strategy = sluice.MirroredStrategy(["CPU:0"])
    endless = sluice.data.parse("range(1000000000).batch(4)")
    dist = sluice.distribute_from_service(strategy, endless, coordinator=cluster.coordinator)
    it = iter(dist)
    next(it)
    del it
    gc.collect()
    (job, end), = _job_ends(cluster).items()
    assert end == ("", False)
    it = iter(dist)  # a second iterator of the same job reads on
    next(it)
    del it, dist
    gc.collect()
    error, released = _job_ends(cluster)[job]
    assert "was released by its consumers" in error
    assert released


def test_checkpoint_of_a_local_dataset_is_a_failed_precondition():
    strategy = sluice.MirroredStrategy(["CPU:0"])
    it = iter(strategy.experimental_distribute_dataset(sluice.data.parse("range(4).batch(2)")))
    next(it)
    with pytest.raises(sluice.errors.FailedPreconditionError):
        it.checkpoint()


def test_coordinator_from_the_cluster_spec(cluster, monkeypatch, tmp_path):
    spec = {"cluster": {"coordinator": [cluster.coordinator],
                        "trainer": ["a:1", "b:1"]},
            "task": {"type": "trainer", "index": 1}}
    monkeypatch.setenv("SLUICE_CLUSTER", json.dumps(spec))
    resolved = sluice.resolve_cluster()
    assert resolved["coordinator"] == cluster.coordinator
    assert (resolved["consumer_index"], resolved["num_consumers"]) == (1, 2)
    assert resolved["coordinator_source"] == "SLUICE_CLUSTER"
    # Arguments win over the environment.
    assert sluice.resolve_cluster(consumer_index=0)["consumer_index"] == 0
    strategy = sluice.MirroredStrategy(["CPU:0"])
    ds = sluice.data.parse("range(8).batch(2)")
    dists = [sluice.distribute_from_service(strategy, ds, job="spec", sharding_policy="ranges",
                                            consumer_index=i) for i in range(2)]
    its = [iter(d) for d in dists]
    got = []
    for _ in range(4):
        for it in its:
            got += next(it).numpy().tolist()
    assert sorted(got) == list(range(8))
    monkeypatch.setenv("SLUICE_CLUSTER", '{"cluster": {"coordinator": ["x:1", "y:1"]}}')
    with pytest.raises(sluice.errors.InvalidArgumentError) as e:
        sluice.resolve_cluster()
    assert "SLUICE_CLUSTER" in e.value.message


def test_bad_options_raise(cluster):
    strategy = sluice.MirroredStrategy(["CPU:0"])
    with pytest.raises(ValueError):
        sluice.distribute_from_service(strategy, sluice.data.parse("range(8).batch(2)"),
                                       coordinator=cluster.coordinator, sharding_policy="nope")
    with pytest.raises(sluice.errors.InvalidArgumentError):
        sluice.distribute_from_service(sluice.MirroredStrategy(["CPU:0", "CPU:1"]),
                                       sluice.data.parse("range(8)"),
                                       coordinator=cluster.coordinator, job="unbatched")


def test_unreachable_coordinator_is_unavailable():
    strategy = sluice.MirroredStrategy(["CPU:0"])
    with pytest.raises(sluice.errors.UnavailableError) as e:
        sluice.distribute_from_service(strategy, sluice.data.parse("range(8).batch(2)"),
                                       coordinator="127.0.0.1:1", retry_deadline=0.5,
                                       rpc_deadline=0.2)
    assert "127.0.0.1:1" in e.value.message


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                    reason="signals reach the main thread only")
def test_ctrl_c_interrupts_a_wait_for_data_and_loses_no_step():
    dependencies.require_binaries()
    with sluice_cluster.Cluster(num_workers=1) as c:
        strategy = sluice.MirroredStrategy(["CPU:0"])
        dist = sluice.distribute_from_service(strategy, sluice.data.parse("range(8).batch(2)"),
                                              coordinator=c.coordinator, job="ctrl-c",
                                              sharding_policy="ranges", retry_deadline=300)
        c.pause_worker(0)  # a hung worker: next() waits for data that does not come
        it = iter(dist)

        def interrupt_once_waiting():
            for _ in range(3000):  # until next() is waiting inside C++ (bounded: 30 s)
                if it._in_flight:
                    os.kill(os.getpid(), signal.SIGINT)
                    return
                time.sleep(0.01)

        t = threading.Thread(target=interrupt_once_waiting)
        t.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                next(it)
        finally:
            t.join()
        # The interrupted call still runs (its step will not be lost) ...
        assert it._in_flight
        with pytest.raises(sluice.errors.FailedPreconditionError):
            it.checkpoint()
        # ... and once the worker goes on, the next call returns it: the first step.
        c.continue_worker(0)
        assert next(it).numpy().tolist() == [0, 1]
        assert [x.numpy().tolist() for x in it] == [[2, 3], [4, 5], [6, 7]]


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                    reason="signals reach the main thread only")
def test_ctrl_c_interrupts_creating_a_job_that_waits_for_workers():
    dependencies.require_binaries()
    from sluice import _sluice
    with sluice_cluster.Cluster(num_workers=0) as c:  # no worker: the job cannot be made yet
        def interrupt_once_waiting():
            for _ in range(3000):  # until the main thread waits inside C++ (bounded: 30 s)
                if _sluice._waiting_calls() > 0:
                    os.kill(os.getpid(), signal.SIGINT)
                    return
                time.sleep(0.01)

        t = threading.Thread(target=interrupt_once_waiting)
        t.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                sluice.distribute_from_service(
                    sluice.MirroredStrategy(["CPU:0"]), sluice.data.parse("range(8).batch(2)"),
                    coordinator=c.coordinator, job="no-workers", sharding_policy="ranges",
                    retry_deadline=5)
        finally:
            t.join()
        assert _sluice._waiting_calls() == 0


def test_trainers_of_a_shared_job_read_one_production(cluster):
    # One task (num_tasks=1): one element sequence, which both trainers read whole (lossless,
    # both awaited), at their own pace; a third trainer is over the job's bound.
    strategy = sluice.MirroredStrategy(["CPU:0"])
    ds = sluice.data.parse("range(1000000000000).batch(4)")

    def trainer(trainer_id):
        cache = sluice.CrossTrainerCache(trainer_id, lossless=True, expected_trainers=2,
                                         max_trainers=2)
        return sluice.distribute_from_service(strategy, ds, coordinator=cluster.coordinator,
                                              job="sweep", sharding_policy="data", num_tasks=1,
                                              cross_trainer_cache=cache)

    its = {t: iter(trainer(t)) for t in ("a", "b")}
    seen = {t: [] for t in its}
    for step in range(60):
        seen["a"] += next(its["a"]).numpy().tolist()
        if step % 3 == 0:  # "b" reads at a third of the pace, then catches up
            seen["b"] += next(its["b"]).numpy().tolist()
    while len(seen["b"]) < len(seen["a"]):
        seen["b"] += next(its["b"]).numpy().tolist()
    assert seen["a"] == seen["b"] == list(range(240))
    with pytest.raises(sluice.errors.ResourceExhaustedError) as e:
        trainer("c")
    assert "'c'" in str(e.value)
    with pytest.raises(sluice.errors.InvalidArgumentError):
        sluice.CrossTrainerCache("")
