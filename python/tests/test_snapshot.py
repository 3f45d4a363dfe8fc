"""sluice.save and sluice.data.Dataset.load against a real sluice-coordinator and sluice-worker
processes on loopback: every element saved once and loaded back with the manifest's spec, the
pipeline syntax load('DIR'), a second save to one directory refused, an unfinished snapshot
refused by load(wait=False), and a save that failed reported by load(wait=True) at once."""

import os

import pytest

import sluice


def test_save_then_load_reads_every_element_once(cluster, tmp_path):
    path = tmp_path / "snap"
    ds = sluice.data.parse("range(500).map(cast(tf.float32))")
    result = sluice.save(ds, path, coordinator=cluster.coordinator, split_size=64)
    assert result == {"num_chunks": 8, "num_elements": 500}
    loaded = sluice.data.Dataset.load(path)
    assert loaded.element_spec == sluice.TensorSpec((), "float32")
    strategy = sluice.MirroredStrategy(["CPU:0"])
    steps = list(strategy.experimental_distribute_dataset(loaded.batch(1000)))
    assert len(steps) == 1
    assert sorted(steps[0].numpy().tolist()) == [float(i) for i in range(500)]
    # The same snapshot through the pipeline syntax.
    steps = list(strategy.experimental_distribute_dataset(
        sluice.data.parse("load('%s').batch(100)" % path)))
    assert sum(len(s.numpy()) for s in steps) == 500
    # Read ahead on the pool: the same elements in the same order as sequentially.
    ahead = sluice.data.Dataset.load(path, num_parallel_calls=sluice.data.AUTOTUNE)
    steps_ahead = list(strategy.experimental_distribute_dataset(ahead.batch(1000)))
    steps = list(strategy.experimental_distribute_dataset(loaded.batch(1000)))
    assert steps_ahead[0].numpy().tolist() == steps[0].numpy().tolist()
    assert not os.path.exists(path / "save.lock")


def test_second_save_and_unfinished_load_are_refused(cluster, tmp_path):
    path = tmp_path / "snap"
    ds = sluice.data.parse("range(10)")
    sluice.save(ds, path, coordinator=cluster.coordinator)
    with pytest.raises(sluice.errors.FailedPreconditionError, match="finished snapshot"):
        sluice.save(ds, path, coordinator=cluster.coordinator)
    other = tmp_path / "other"
    os.makedirs(other)
    open(other / "save.lock", "w").write("someone")
    with pytest.raises(sluice.errors.AlreadyExistsError, match="save.lock"):
        sluice.save(ds, other, coordinator=cluster.coordinator)
    with pytest.raises(sluice.errors.NotFoundError, match="manifest"):
        sluice.data.Dataset.load(other)


def test_load_wait_reports_a_failed_save_at_once(cluster, tmp_path):
    # A "TFRecord" file of garbage: the worker's split fails with DATA_LOSS, so the save fails
    # and records its error in the manifest.
    bad = tmp_path / "bad.tfrecord"
    bad.write_bytes(b"this is not a TFRecord file at all, not even its first header")
    path = tmp_path / "snap"
    ds = sluice.data.parse("tf_record_dataset('%s')" % bad)
    with pytest.raises(sluice.errors.OpError):
        sluice.save(ds, path, coordinator=cluster.coordinator)
    strategy = sluice.MirroredStrategy(["CPU:0"])
    # The default timeout is 10 minutes: only the recorded failure ends this load quickly.
    loaded = sluice.data.Dataset.load(path, wait=True)
    # wait=True lists no chunk files: no FILE auto-sharding of it.
    off = sluice.InputOptions(auto_shard_policy=sluice.data.AutoShardPolicy.OFF)
    with pytest.raises(sluice.errors.FailedPreconditionError, match="save failed"):
        list(strategy.experimental_distribute_dataset(loaded, options=off))
    with pytest.raises(sluice.errors.FailedPreconditionError, match="save failed"):
        sluice.data.Dataset.load(path)
