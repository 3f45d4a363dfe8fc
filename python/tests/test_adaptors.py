"""sluice.jax and sluice.tf: tested where JAX / TensorFlow are importable, skipped otherwise
(Debian 12 packages neither)."""

import os
import subprocess
import sys

import numpy as np
import pytest

import sluice


def test_jax_adaptor_yields_jax_arrays():
    jax = pytest.importorskip("jax", reason="jax is not installed (not packaged in Debian 12)")
    import sluice.jax
    ds = sluice.data.Dataset.from_tensor_slices(np.arange(8, dtype=np.float32)).batch(4)
    steps = list(sluice.jax.iterate(ds))
    assert all(isinstance(s, jax.Array) for s in steps)
    assert [np.asarray(s).tolist() for s in steps] == [[0., 1., 2., 3.], [4., 5., 6., 7.]]


def test_jax_arrays_are_placed_on_the_mesh_devices():
    pytest.importorskip("jax", reason="jax is not installed (not packaged in Debian 12)")
    # Eight host devices need XLA_FLAGS before jax is imported: a process of its own.
    code = """
import numpy as np, jax, sluice, sluice.jax
assert len(jax.devices()) == 8, jax.devices()
ds = sluice.data.Dataset.from_tensor_slices(np.arange(36, dtype=np.float32)).batch(16)
steps = list(sluice.jax.iterate(ds))
full, last = steps[0], steps[-1]
assert full.sharding.device_set == set(jax.devices()), full.sharding
assert len({s.device for s in full.addressable_shards}) == 8
assert [s.data.shape for s in full.addressable_shards] == [(2,)] * 8
assert last.shape == (4,) and last.sharding.device_set == set(jax.devices())  # replicated
assert [np.asarray(s).tolist() for s in steps] == [list(range(0, 16)), list(range(16, 32)),
                                                   [32., 33., 34., 35.]]
print("ok")
"""
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8",
               JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]


def test_tf_adaptor_is_a_tf_data_dataset_with_the_sluice_spec():
    tf = pytest.importorskip("tensorflow",
                             reason="tensorflow is not installed (not packaged in Debian 12)")
    import sluice.tf
    ds = sluice.data.Dataset.from_tensor_slices(
        (np.arange(8, dtype=np.float32), np.arange(8, dtype=np.int64))).batch(4)
    tfds = sluice.tf.dataset(ds)
    assert isinstance(tfds, tf.data.Dataset)
    assert tfds.element_spec[0] == tf.TensorSpec((None,), tf.float32)
    assert [x.numpy().tolist() for x, _ in tfds] == [[0., 1., 2., 3.], [4., 5., 6., 7.]]
