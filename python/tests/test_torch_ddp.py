"""sluice.torch with PyTorch DDP (gloo, CPU): two trainer processes read one job per epoch from
a real coordinator and workers for 3 epochs, normalizing every batch in place. Every element is
read exactly once per epoch, every batch arrives with its rows' values, no batch changes after
its successor is fetched, both ranks take the same number of steps, and the model trains (the
loss decreases)."""

import json
import os
import socket
import subprocess
import sys

import pytest

import dependencies

torch = dependencies.import_installable("torch", "python3-torch")

HERE = os.path.dirname(os.path.abspath(__file__))


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_process_ddp_reads_every_element_once_and_trains(cluster):
    epochs = 3
    init = "tcp://127.0.0.1:%d" % _free_port()
    procs = [subprocess.Popen(
        [sys.executable, os.path.join(HERE, "ddp_trainer.py"), cluster.coordinator, init,
         str(rank), "2", str(epochs)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for rank in range(2)]
    results = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        assert p.returncode == 0, err.decode()[-3000:]
        results.append(json.loads(out.decode().strip().splitlines()[-1]))
    ids = sorted(results[0]["ids"] + results[1]["ids"])
    assert ids == sorted(list(range(64)) * epochs)  # exactly once per epoch
    assert results[0]["steps"] == results[1]["steps"] == 8 * epochs
    for r in results:
        assert r["bad_arrivals"] == 0 and r["changed_later"] == 0, r
        assert r["losses"][-1] < r["losses"][0] / 2, r["losses"]


def test_to_torch_is_zero_copy():
    import numpy as np
    import sluice
    import sluice.torch
    strategy = sluice.MirroredStrategy(["CPU:0"])
    ds = sluice.data.Dataset.from_tensor_slices(
        {"x": np.arange(8, dtype=np.float32), "s": np.array([b"a"] * 8, dtype=object)}).batch(4)
    step = next(iter(strategy.experimental_distribute_dataset(ds)))
    t = sluice.torch.to_torch(step)
    assert t["x"].data_ptr() == step["x"]._data_ptr
    assert t["s"] == [b"a"] * 4
    loader = sluice.torch.loader(ds)
    assert len(loader) == 2
    assert [b["x"].tolist() for b in loader] == [[0., 1., 2., 3.], [4., 5., 6., 7.]]
