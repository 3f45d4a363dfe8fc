"""sluice.jax and sluice.tf: tested where JAX / TensorFlow are importable, skipped otherwise
(Debian 12 packages neither)."""

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
