"""distribute_from_service(compression=...) against real sluice-coordinator and sluice-worker
processes on loopback (docs/SERVICE.md, "Wire compression"): a job forced to compress reads
the same steps as one without; bad values are errors naming the option."""

import pytest

import sluice


def _steps(dist):
    return [[v.numpy().tolist() for v in x.values] for x in dist]


def test_compressed_jobs_read_the_same_steps(cluster):
    strategy = sluice.MirroredStrategy(["CPU:0", "CPU:1"])
    ds = sluice.data.parse("range(4096).batch(512)")
    plain = _steps(sluice.distribute_from_service(
        strategy, ds, coordinator=cluster.coordinator, job="plain", sharding_policy="ranges"))
    assert len(plain) == 8
    for codec in ("lz4", "zstd"):
        got = _steps(sluice.distribute_from_service(
            strategy, ds, coordinator=cluster.coordinator, job="c-" + codec,
            sharding_policy="ranges", compression=codec, force_compression=True))
        assert got == plain, codec


def test_an_unknown_compression_is_refused(cluster):
    strategy = sluice.MirroredStrategy(["CPU:0"])
    ds = sluice.data.parse("range(8).batch(2)")
    with pytest.raises(ValueError, match="compression"):
        sluice.distribute_from_service(strategy, ds, coordinator=cluster.coordinator,
                                       compression="gzip")
