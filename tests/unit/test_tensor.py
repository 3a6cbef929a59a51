"""pl.Tensor: NumPy in and out without copies, DLPack export/import for every dtype, strided views."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import pipelink as pl
from pipelink import dlpack
from pipelink.dtypes import DTYPES, SUB_BYTE_DTYPES, get_dtype
from pipelink.tensor import Tensor


def random_array(dtype: str, shape, rng):
    np_dtype = get_dtype(dtype).numpy
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if get_dtype(dtype).is_floating:
        return rng.standard_normal(shape).astype(np_dtype)
    return rng.integers(-100 if dtype.startswith("int") else 0, 100, size=shape).astype(np_dtype)


@pytest.mark.parametrize("dtype", sorted(set(DTYPES) - SUB_BYTE_DTYPES))
def test_dlpack_round_trip_every_dtype(dtype):
    rng = np.random.default_rng(1)
    a = random_array(dtype, (5, 7), rng)
    t = Tensor.from_numpy(a[:, 1::2])  # a strided view
    assert t.strides == (7, 2) and not t.is_contiguous
    back = Tensor.from_dlpack(_Producer(t))
    assert back.shape == (5, 3) and back.dtype.name == dtype and back.strides == (7, 2)
    np.testing.assert_array_equal(np.asarray(back), a[:, 1::2])
    assert back.ptr == t.ptr  # zero-copy


class _Producer:
    """A foreign DLPack producer (hides that it is a pl.Tensor so the capsule path is exercised)."""

    def __init__(self, t):
        self._t = t

    def __dlpack__(self, stream=None):
        return self._t.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self._t.__dlpack_device__()


def test_numpy_consumes_our_capsule_and_memory_is_released():
    x = np.random.default_rng(2).standard_normal(11).astype(np.float32)
    y = np.from_dlpack(pl.asarray(x))
    np.testing.assert_array_equal(x, y)
    assert len(dlpack._live) >= 1
    del y
    gc.collect()
    assert len(dlpack._live) == 0, "the deleter must run when the consumer drops the tensor"


def test_unconsumed_capsule_is_released():
    t = pl.asarray(np.ones(3, np.float32))
    capsule = t.__dlpack__()
    assert len(dlpack._live) >= 1
    del capsule
    gc.collect()
    assert len(dlpack._live) == 0


def test_scalars_and_device_errors():
    assert pl.asarray(2.5).shape == () and pl.asarray(2.5).dtype is pl.float32
    with pytest.raises(pl.InvalidArgumentError, match="device must be"):
        Tensor(0, (1,), "float32", device="tpu")
    with pytest.raises(pl.InvalidArgumentError, match="unsupported dtype"):
        get_dtype("complex64")


def test_cuda_tensor_refuses_implicit_host_access():
    t = Tensor(0x1000, (4,), "float32", device="cuda:0")
    with pytest.raises(pl.InvalidArgumentError, match="cuda:0"):
        np.asarray(t)
    assert t.__dlpack_device__() == (dlpack.DEVICE_CUDA, 0)
