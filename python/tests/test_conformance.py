"""Every case of the conformance goldens (tests/testdata/distribute/index.json, written by
TensorFlow 2.15) through the Python API: element_spec, every step's per-replica values, and
the end of data, as tests/client/golden_test.cc checks them through C++. Also: len() equals the
number of steps wherever it is defined, and sluice.pformat lays every spec out exactly as the
C++ formatter does."""

import json
import os

import numpy as np
import pytest

import sluice
from conftest import SOURCE_DIR

GOLDEN_DIR = os.path.join(SOURCE_DIR, "tests", "testdata", "distribute")


def _cases():
    with open(os.path.join(GOLDEN_DIR, "index.json")) as f:
        return json.load(f)["cases"]


def _build(case):
    strategy = sluice.MirroredStrategy(["CPU:%d" % i for i in range(case["devices"])],
                                       num_workers=case.get("num_workers", 1),
                                       worker_index=case.get("worker_index", 0))
    ds = sluice.data.parse(case["expression"])
    options = sluice.InputOptions(
        auto_shard_policy=getattr(sluice.data.AutoShardPolicy, case.get("policy", "AUTO")))
    if case.get("replication_mode") == "PER_REPLICA":
        options.experimental_replication_mode = sluice.InputReplicationMode.PER_REPLICA
    if case["api"] == "from_function":
        contexts = []

        def dataset_fn(ctx):
            contexts.append(ctx)
            return ds

        dist = strategy.distribute_datasets_from_function(dataset_fn, options)
        assert contexts, "dataset_fn was not called"
        return strategy, dist
    return strategy, strategy.experimental_distribute_dataset(ds, options)


def _spec_json(spec):
    """element_spec in the goldens' form, as it is: a TensorSpec leaf stays one (TF's spec for
    one device on one worker), a PerReplicaSpec becomes {"per_replica": [...]}."""
    if isinstance(spec, sluice.TensorSpec):
        return {"dtype": spec.dtype, "shape": list(spec.shape)}
    if isinstance(spec, sluice.PerReplicaSpec):
        return {"per_replica": [{"dtype": s.dtype, "shape": list(s.shape)} for s in spec.specs]}
    if isinstance(spec, (tuple, list)):
        return [_spec_json(s) for s in spec]
    return {k: _spec_json(v) for k, v in spec.items()}


def _has_per_replica(value):
    if isinstance(value, sluice.PerReplica):
        return True
    if isinstance(value, (tuple, list)):
        return any(_has_per_replica(v) for v in value)
    if isinstance(value, dict):
        return any(_has_per_replica(v) for v in value.values())
    return False


def _assert_value(got, want, where):
    if isinstance(got, sluice.Tensor):
        assert got.dtype == want["dtype"], where
        assert list(got.shape) == want["shape"], where
        a = got.numpy()
        if got.dtype == "string":
            want_strings = list(np.array(want["values"], dtype=object).ravel())
            assert [b.decode("utf-8") for b in a.ravel()] == want_strings, where
        else:
            expect = np.array(want["values"], dtype=a.dtype).reshape(a.shape)
            np.testing.assert_array_equal(a, expect, err_msg=where)
        return
    if isinstance(got, (tuple, list)):
        assert isinstance(want, list) and len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want)):
            _assert_value(g, w, "%s[%d]" % (where, i))
        return
    assert isinstance(got, dict) and list(got) == list(want), where
    for k in got:
        _assert_value(got[k], want[k], "%s[%r]" % (where, k))


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c["name"])
def test_case_matches_tensorflow(case, monkeypatch):
    monkeypatch.chdir(SOURCE_DIR)  # the goldens name files relative to the source tree
    if "error_contains" in case:
        with pytest.raises(sluice.errors.OpError) as e:
            strategy, dist = _build(case)
            next(iter(dist))  # TF fails at the first step; Sluice may fail earlier
        assert case["error_contains"] in e.value.message
        return
    strategy, dist = _build(case)
    with open(os.path.join(GOLDEN_DIR, case["name"] + ".spec.json")) as f:
        assert _spec_json(dist.element_spec) == json.load(f)
    if strategy.num_local_replicas > 1:  # the seed's layout is of PerReplicaSpecs
        assert sluice.pformat(dist.element_spec) == dist._dd.format_element_spec()

    with open(os.path.join(GOLDEN_DIR, case["name"] + ".jsonl")) as f:
        steps = [json.loads(line) for line in f if line.strip()]
    it = iter(dist)
    for s, want in enumerate(steps):
        x = next(it)
        if "value" in want:  # TF gives the plain element (one device, one worker)
            assert not _has_per_replica(x), "step %d: TF does not wrap this in PerReplica" % s
            _assert_value(x, want["value"], "step %d" % s)
            continue
        assert _has_per_replica(x), "step %d: TF gives PerReplica values here" % s
        replicas = strategy.experimental_local_results(x)
        assert len(replicas) == len(want["per_replica"]), "step %d" % s
        for r, (got, w) in enumerate(zip(replicas, want["per_replica"])):
            _assert_value(got, w, "step %d replica %d" % (s, r))
    if len(steps) < case["max_steps"]:
        with pytest.raises(StopIteration):
            next(it)
        try:
            n = len(dist)
        except TypeError:
            n = None  # length not known for this kind of dataset
        if n is not None:
            assert n == len(steps)
    else:
        try:
            n = len(dist)
        except TypeError:
            n = None
        assert n is None or n >= len(steps)


def test_len_is_known_for_finite_single_worker_cases(monkeypatch):
    # len() is defined (and test_case_matches_tensorflow checks it is right) for the finite
    # goldens read by one worker through experimental_distribute_dataset.
    monkeypatch.chdir(SOURCE_DIR)
    known = []
    for case in _cases():
        if ("error_contains" in case or case["api"] != "distribute_dataset"
                or case.get("num_workers", 1) != 1):
            continue
        with open(os.path.join(GOLDEN_DIR, case["name"] + ".jsonl")) as f:
            steps = sum(1 for line in f if line.strip())
        if steps < case["max_steps"]:
            _, dist = _build(case)
            try:
                n = len(dist)
            except TypeError:
                continue  # cardinality unknown (files, filters)
            assert n == steps, case["name"]
            known.append(case["name"])
    assert len(known) >= 10, known
