"""The native core on a GPU host: pipeLinkValidateHardware reads the device through the CUDA driver, which
the core opens at run time (dlopen). CUDA plans run in tests/native_core/test_cuda_gpu.py."""

from __future__ import annotations

import ctypes

import pytest

from tests.native_core.conftest import _library

pytestmark = pytest.mark.gpu

HARDWARE_UNSUPPORTED = 8


@pytest.fixture
def core():
    lib = ctypes.CDLL(str(_library()))  # built here when the checkout has no build of it yet
    lib.pipeLinkValidateHardware.argtypes = [ctypes.c_char_p]
    lib.pipeLinkGetLastErrorMessage.restype = ctypes.c_char_p
    assert lib.pipeLinkInitialize() == 0
    yield lib
    assert lib.pipeLinkFinalize() == 0


def test_compute_capability_is_read_from_the_driver(core):
    # The H200 is compute capability 9.0: the driver (dlopen'ed libcuda.so.1) must say so.
    assert core.pipeLinkValidateHardware(b"compute_capability>=8.0") == 0, core.pipeLinkGetLastErrorMessage()
    assert core.pipeLinkValidateHardware(b"device=cuda, compute_capability==9.0") == 0
    assert core.pipeLinkValidateHardware(b"compute_capability>=99.0") == HARDWARE_UNSUPPORTED
    assert b"compute capability 9.0" in core.pipeLinkGetLastErrorMessage()
