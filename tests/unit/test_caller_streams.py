"""The caller's streams of the CUDA backend without a GPU (backends/cuda/streams.py): which objects are
streams, and CallerStreams driven by a fake driver (capture status, the implicit-capture refusal, the
relaxed capture mode restored even when the run fails)."""

from __future__ import annotations

import enum
import types

import pytest

import pipelink as pl
from pipelink.backends.cuda.streams import CallerStreams, stream_handle


class _Protocol:
    def __init__(self, version: int, handle: int):
        self.answer = (version, handle)

    def __cuda_stream__(self):
        return self.answer


class _TorchLike:
    cuda_stream = 0x5000


@pytest.mark.parametrize(
    ("stream", "handle"),
    [(_Protocol(0, 0x1234), 0x1234), (_TorchLike(), 0x5000), (0, 0), (0x7F00, 0x7F00)],
    ids=["protocol", "cuda_stream attribute", "legacy default", "raw handle"],
)
def test_every_kind_of_caller_stream_gives_its_handle(stream, handle):
    assert stream_handle(stream) == handle


@pytest.mark.parametrize("stream", [-1, True, 1.0, "0x10", None, object()])
def test_what_is_no_stream_is_refused_naming_its_type(stream):
    with pytest.raises(pl.InvalidArgumentError) as e:
        stream_handle(stream)
    assert "stream= must be a CUDA stream" in e.value.message and type(stream).__name__ in e.value.message


def test_a_protocol_version_other_than_0_is_refused():
    with pytest.raises(pl.InvalidArgumentError, match="version 2; PipeLink understands version 0"):
        stream_handle(_Protocol(2, 0x10))


class _Status(enum.IntEnum):
    CU_STREAM_CAPTURE_STATUS_NONE = 0
    CU_STREAM_CAPTURE_STATUS_ACTIVE = 1
    CU_STREAM_CAPTURE_STATUS_INVALIDATED = 2


class _Mode(enum.IntEnum):
    CU_STREAM_CAPTURE_MODE_GLOBAL = 0
    CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1
    CU_STREAM_CAPTURE_MODE_RELAXED = 2


class _FakeDriver:
    """What CallerStreams uses of cuda.bindings.driver: capture status per handle, the thread's mode."""

    CUstreamCaptureStatus = _Status
    CUstreamCaptureMode = _Mode
    CUresult = types.SimpleNamespace(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT=906)

    def __init__(self):
        self.capturing: dict[int, int] = {}
        self.mode = _Mode.CU_STREAM_CAPTURE_MODE_GLOBAL

    def cuStreamIsCapturing(self, handle):  # noqa: N802 - the driver's name
        if handle == 0 and any(self.capturing.values()):
            return (906, _Status.CU_STREAM_CAPTURE_STATUS_NONE)
        return (0, _Status(self.capturing.get(handle, 0)))

    def cuThreadExchangeStreamCaptureMode(self, mode):  # noqa: N802 - the driver's name
        previous, self.mode = self.mode, mode
        return (0, previous)


def _streams(driver):
    def wrap(obj):
        return types.SimpleNamespace(handle=obj.__cuda_stream__()[1])

    def error(code, what):
        return pl.CUDAError(f"{what} failed ({code})")

    return CallerStreams(driver, wrap, error)


def test_one_wrapper_per_handle():
    streams = _streams(_FakeDriver())
    assert streams.stream(0x10) is streams.stream(0x10)
    assert streams.stream(0x10) is not streams.stream(0x20)
    assert streams.stream(0x20).handle == 0x20


def test_capture_status_is_read_per_stream():
    driver = _FakeDriver()
    streams = _streams(driver)
    a, b = streams.stream(0x10), streams.stream(0x20)
    assert not streams.is_capturing(a)
    driver.capturing[0x10] = 1
    assert streams.is_capturing(a) and not streams.is_capturing(b)
    driver.capturing[0x10] = 2  # an invalidated capture is still a capture: nothing may be queued
    assert streams.is_capturing(a)


def test_the_legacy_stream_during_a_global_capture_is_refused():
    driver = _FakeDriver()
    streams = _streams(driver)
    driver.capturing[0x10] = 1
    with pytest.raises(pl.InvalidArgumentError, match="legacy default stream"):
        streams.is_capturing(streams.stream(0))


def test_relaxed_mode_is_restored_even_when_the_run_fails():
    driver = _FakeDriver()
    streams = _streams(driver)
    with pytest.raises(RuntimeError), streams.relaxed():
        assert driver.mode == _Mode.CU_STREAM_CAPTURE_MODE_RELAXED
        raise RuntimeError("a stage failed")
    assert driver.mode == _Mode.CU_STREAM_CAPTURE_MODE_GLOBAL
