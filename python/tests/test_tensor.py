"""Tensors cross into Python without a copy, and their memory lives as long as any view."""

import gc

import numpy as np
import pytest

import dependencies
import sluice


def _first_step(expression, devices=2):
    strategy = sluice.MirroredStrategy(["CPU:%d" % i for i in range(devices)])
    dist = strategy.experimental_distribute_dataset(sluice.data.parse(expression))
    it = iter(dist)
    return strategy, dist, it, next(it)


def test_numpy_views_the_tensor_bytes_without_a_copy():
    _, _, _, x = _first_step("range(8).batch(4)")
    t = x.values[0]
    a = np.asarray(t)
    assert a.ctypes.data == t._data_ptr  # the very bytes the iterator produced
    assert np.shares_memory(a, t.numpy())
    assert np.shares_memory(a, np.asarray(memoryview(t)))
    assert not a.flags.writeable  # tensors are immutable
    np.testing.assert_array_equal(a, [0, 1])
    assert a.dtype == np.int64
    # __array_interface__ points at the same bytes.
    assert t.__array_interface__["data"] == (t._data_ptr, True)
    assert t.__array_interface__["typestr"] == "<i8"


def test_replicas_of_a_step_are_views_of_one_received_batch():
    _, _, _, x = _first_step("range(8).batch(4)")
    a0, a1 = (np.asarray(v) for v in x.values)
    # Rebatching slices the input batch: replica 1's bytes follow replica 0's.
    assert a1.ctypes.data == a0.ctypes.data + a0.nbytes


def test_buffers_outlive_the_iterator_and_the_dataset():
    strategy, dist, it, x = _first_step("range(4).batch(2)")
    t = x.values[1]
    assert t._buffer_refs == 2  # the two replicas' slices of one batch, nothing else
    a = np.asarray(t)
    assert t._buffer_refs == 2  # a numpy view holds the Tensor, not another reference
    del strategy, dist, it, x
    gc.collect()
    assert t._buffer_refs == 1  # replica 0 and the iterator let go
    del t
    gc.collect()
    np.testing.assert_array_equal(a, [1])  # still valid: the array holds the buffer


def test_every_view_gives_its_reference_back():
    torch = dependencies.import_installable("torch", "python3-torch")
    t = sluice.constant(np.arange(6, dtype=np.float32))
    assert t._buffer_refs == 1
    views = [np.asarray(t), memoryview(t), np.from_dlpack(t), torch.from_dlpack(t)]
    assert t._buffer_refs == 3  # each DLPack consumer holds the buffer until it lets go
    del views
    gc.collect()
    assert t._buffer_refs == 1


NUMPY_DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
                np.uint64, np.float16, np.float32, np.float64]
SHAPES = [(), (0,), (3, 0), (2, 3)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=lambda d: np.dtype(d).name)
def test_every_dtype_and_shape_crosses_without_a_copy(dtype, shape):
    want = (np.arange(int(np.prod(shape))) % 7).reshape(shape).astype(dtype)
    t = sluice.constant(want)
    assert t.shape == shape and t.dtype == np.dtype(dtype).name.replace("bool", "bool")
    a = np.asarray(t)
    assert a.dtype == want.dtype and a.shape == shape
    np.testing.assert_array_equal(a, want)
    assert not a.flags.writeable
    m = memoryview(t)
    assert m.readonly and m.shape == shape and m.nbytes == want.nbytes
    if want.size:
        assert a.ctypes.data == t._data_ptr
    np.testing.assert_array_equal(t.numpy(), want)
    refs = t._buffer_refs
    capsule = t.__dlpack__()
    assert t._buffer_refs == refs + 1
    del capsule, a, m
    gc.collect()
    assert t._buffer_refs == refs


TORCH_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32",
                "float64"]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", TORCH_DTYPES)
def test_every_torch_dtype_and_shape_crosses_with_dlpack(dtype, shape):
    torch = dependencies.import_installable("torch", "python3-torch")
    if dtype == "bool" and int(torch.__version__.split(".")[0]) < 2:
        pytest.skip("torch %s's from_dlpack has no bool (DLPack code 6)" % torch.__version__)
    want = (np.arange(int(np.prod(shape))) % 7).reshape(shape).astype(dtype)
    t = sluice.constant(want)
    pt = torch.from_dlpack(t)
    assert pt.dtype == getattr(torch, dtype) and tuple(pt.shape) == shape
    np.testing.assert_array_equal(pt.numpy(), want)
    if want.size:
        assert pt.data_ptr() == t._data_ptr
    assert t._buffer_refs == 2
    del pt
    gc.collect()
    assert t._buffer_refs == 1


def test_bfloat16_crosses_to_torch_and_widens_for_numpy():
    torch = dependencies.import_installable("torch", "python3-torch")
    from sluice import _sluice
    t = _sluice._bfloat16_for_tests(sluice.constant([1.5, -2., 3.25, 0.]))
    assert t.dtype == "bfloat16" and t._buffer_refs == 1
    pt = torch.from_dlpack(t)
    assert pt.dtype == torch.bfloat16 and pt.tolist() == [1.5, -2., 3.25, 0.]
    assert pt.data_ptr() == t._data_ptr
    assert t.numpy().dtype == np.float32 and t.numpy().tolist() == [1.5, -2., 3.25, 0.]
    with pytest.raises(BufferError):
        memoryview(t)
    del pt
    gc.collect()
    assert t._buffer_refs == 1


def test_dlpack_to_numpy_without_a_copy():
    _, _, _, x = _first_step("from_tensor_slices([1., 2., 3., 4.]).batch(4)")
    t = x.values[0]
    assert t.__dlpack_device__() == (1, 0)  # kDLCPU
    a = np.from_dlpack(t)
    assert a.ctypes.data == t._data_ptr
    np.testing.assert_array_equal(a, np.array([1., 2.], dtype=np.float32))
    del t, x
    gc.collect()
    np.testing.assert_array_equal(a, np.array([1., 2.], dtype=np.float32))


def test_dlpack_capsule_not_consumed_is_freed():
    t = sluice.constant(np.arange(6, dtype=np.int32).reshape(2, 3))
    refs = t._buffer_refs
    capsule = t.__dlpack__()
    assert t._buffer_refs == refs + 1  # the capsule holds the buffer
    del capsule
    gc.collect()
    assert t._buffer_refs == refs


def test_dlpack_to_torch_without_a_copy():
    torch = dependencies.import_installable("torch", "python3-torch")
    _, _, _, x = _first_step("from_tensor_slices([1., 2., 3., 4.]).batch(4)")
    t = x.values[1]
    pt = torch.from_dlpack(t)
    assert pt.data_ptr() == t._data_ptr
    assert pt.dtype == torch.float32
    assert pt.tolist() == [3., 4.]
    del t, x
    gc.collect()
    assert pt.tolist() == [3., 4.]


def test_string_tensors_become_object_arrays_of_bytes():
    _, _, _, x = _first_step("from_tensor_slices(['a', 'bb', 'c', 'dd']).batch(4)")
    a = x.values[0].numpy()
    assert a.dtype == object
    assert a.tolist() == [b"a", b"bb"]
    assert np.asarray(x.values[1]).tolist() == [b"c", b"dd"]
    with pytest.raises(BufferError):
        memoryview(x.values[0])
    with pytest.raises(BufferError):
        x.values[0].__dlpack__()


def test_constant_follows_tensorflow_dtype_rules():
    assert sluice.constant(1).dtype == "int32"
    assert sluice.constant(1.5).dtype == "float32"
    assert sluice.constant([[1, 2], [3, 4]]).shape == (2, 2)
    assert sluice.constant([2**40]).dtype == "int64"
    assert sluice.constant("x").dtype == "string"
    assert sluice.constant(np.zeros((2, 3), np.float16)).dtype == "float16"
    assert sluice.constant(np.float64(2.0)).shape == ()
    assert str(sluice.constant([1, 2])) == "tf.Tensor([1 2], shape=(2,), dtype=int32)"
    with pytest.raises(sluice.errors.InvalidArgumentError):
        sluice.constant([[1, 2], [3]])
    with pytest.raises(sluice.errors.InvalidArgumentError):
        sluice.constant(object())


def test_arithmetic_keeps_float32_and_prints_as_tf():
    t = sluice.constant([1., 2.])
    r = 1 - 0.3 * t
    assert isinstance(r, sluice.Tensor) and r.dtype == "float32"
    assert "{:.2f}".format(sluice.constant(0.25)) == "0.25"
    assert len(t) == 2


def test_from_tensor_slices_of_numpy_structures():
    images = np.arange(24, dtype=np.uint8).reshape(6, 2, 2)
    labels = np.arange(6, dtype=np.int64)
    ds = sluice.data.Dataset.from_tensor_slices({"image": images, "label": labels}).batch(6)
    spec = ds.element_spec
    assert spec["image"] == sluice.TensorSpec((None, 2, 2), "uint8")
    strategy = sluice.MirroredStrategy(["CPU:0", "CPU:1"])
    x = next(iter(strategy.experimental_distribute_dataset(ds)))
    np.testing.assert_array_equal(np.asarray(x["image"].values[1]), images[3:])
    np.testing.assert_array_equal(np.asarray(x["label"].values[0]), labels[:3])
