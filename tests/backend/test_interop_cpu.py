"""run(stream=..., out=...) on the CPU (docs/interop.md): the CPU refuses a stream, and caller buffers are
written in place, checked (shape, dtype, device, layout, overlap) and never replaced by a fresh tensor."""

from __future__ import annotations

import numpy as np
import pytest

import pipelink as pl
from pipelink.backends import get_backend

rng = np.random.default_rng()

TWO_OUT = {
    "inputs": {"x": {"shape": ["N", 8], "dtype": "float32"}},
    "outputs": ["r", "g"],
    "pipeline": [
        {"name": "relu", "id": "a", "inputs": ["x"], "outputs": ["r"]},
        {"name": "gelu", "id": "b", "inputs": ["r"], "outputs": ["g"]},
    ],
}


def f32(*shape) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def poisoned(*shape) -> np.ndarray:
    return np.full(shape, np.nan, np.float32)


def reference(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    with pl.load(TWO_OUT, device="cpu") as pipe:
        outs = pipe.run(x=x)
        return np.asarray(outs["r"]).copy(), np.asarray(outs["g"]).copy()


@pytest.mark.parametrize("stream", [0, 7, object(), "cuda"])
def test_a_stream_on_the_cpu_is_refused_saying_the_cpu_has_none(stream):
    with pl.load(TWO_OUT, device="cpu") as pipe, pytest.raises(pl.InvalidArgumentError) as e:
        pipe.run(x=f32(2, 8), stream=stream)
    assert e.value.code == pl.ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT
    assert "runs synchronously on no stream: leave stream= out" in e.value.message


def test_stream_none_on_the_cpu_runs_as_without_it():
    x = f32(3, 8)
    with pl.load(TWO_OUT, device="cpu") as pipe:
        got = np.asarray(pipe.run(x=x, stream=None)["g"])
    np.testing.assert_array_equal(got, reference(x)[1])


def test_out_buffers_are_written_in_place_and_returned_as_views_of_them():
    x = f32(5, 8)
    r, g = poisoned(5, 8), poisoned(5, 8)
    with pl.load(TWO_OUT, device="cpu") as pipe:
        outs = pipe.run(x=x, out={"r": r, "g": g})
    want_r, want_g = reference(x)
    np.testing.assert_array_equal(r, want_r)
    np.testing.assert_array_equal(g, want_g)
    assert outs["r"].ptr == r.ctypes.data and outs["g"].ptr == g.ctypes.data


def test_nothing_is_allocated_for_the_outputs_given_in_out(monkeypatch):
    """The second run (the plan exists) must not ask the backend for any fresh tensor."""
    x = f32(4, 8)
    r, g = poisoned(4, 8), poisoned(4, 8)
    with pl.load(TWO_OUT, device="cpu") as pipe:
        pipe.run(x=x, out={"r": r, "g": g})
        backend = get_backend("cpu")

        def no_allocation(*args, **kwargs):
            raise AssertionError("run(out=...) allocated an output")

        monkeypatch.setattr(backend, "empty", no_allocation)
        x2 = f32(4, 8)
        r[:], g[:] = np.nan, np.nan
        pipe.run(x=x2, out={"r": r, "g": g})
        monkeypatch.undo()
    np.testing.assert_array_equal(g, reference(x2)[1])


def test_outputs_not_in_out_are_fresh_tensors():
    x = f32(2, 8)
    g = poisoned(2, 8)
    with pl.load(TWO_OUT, device="cpu") as pipe:
        outs = pipe.run(x=x, out={"g": g})
    want_r, want_g = reference(x)
    np.testing.assert_array_equal(g, want_g)
    np.testing.assert_array_equal(np.asarray(outs["r"]), want_r)
    assert not np.shares_memory(np.asarray(outs["r"]), g)


def test_out_accepts_pl_tensors_and_torch_cpu_tensors():
    torch = pytest.importorskip("torch")
    x = f32(3, 8)
    r = pl.asarray(poisoned(3, 8))
    g = torch.full((3, 8), float("nan"), dtype=torch.float32)
    with pl.load(TWO_OUT, device="cpu") as pipe:
        pipe.run(x=x, out={"r": r, "g": g})
    want_r, want_g = reference(x)
    np.testing.assert_array_equal(np.asarray(r), want_r)
    np.testing.assert_array_equal(g.numpy(), want_g)


def test_an_output_passed_through_from_an_input_is_copied_into_its_out_buffer():
    doc = {
        "inputs": {"x": {"shape": ["N"], "dtype": "float32"}},
        "outputs": ["x", "y"],
        "pipeline": [{"name": "relu", "inputs": ["x"], "outputs": ["y"]}],
    }
    x = f32(6)
    xo, yo = poisoned(6), poisoned(6)
    with pl.load(doc, device="cpu") as pipe:
        pipe.run(x=x, out={"x": xo, "y": yo})
    np.testing.assert_array_equal(xo, x)
    np.testing.assert_array_equal(yo, np.maximum(x, 0))


def test_out_works_in_checked_mode_without_guard_bytes_in_the_callers_memory():
    """Checked mode must not write its guard pattern past a caller's buffer: the neighbour stays intact."""
    x = f32(2, 8)
    block = np.full(2 * 8 + 16, 7.0, np.float32)
    g = block[: 2 * 8].reshape(2, 8)
    with pl.load(TWO_OUT, device="cpu", checked=True) as pipe:
        pipe.run(x=x, out={"g": g})
        pipe.run(x=x, out={"g": g})
    np.testing.assert_array_equal(g, reference(x)[1])
    np.testing.assert_array_equal(block[2 * 8 :], 7.0)


@pytest.mark.parametrize(
    ("out", "error", "text"),
    [
        (
            {"g": poisoned(3, 8)},
            pl.ShapeMismatchError,
            "out['g'] has shape [3, 8], but this run produces [2, 8]",
        ),
        (
            {"g": np.zeros((2, 8), np.float64)},
            pl.DTypeMismatchError,
            "has dtype float64, but this run produces",
        ),
        ({"gg": poisoned(2, 8)}, pl.InvalidArgumentError, "did you mean 'g'?"),
        ({"g": poisoned(8, 2).T}, pl.InvalidArgumentError, "out['g'] is not C-contiguous"),
        ({"g": "buffer"}, pl.InvalidArgumentError, "must be a NumPy array, a pl.Tensor or a DLPack tensor"),
        ([poisoned(2, 8)], pl.InvalidArgumentError, "out= must be a dict of output name -> buffer"),
    ],
)
def test_a_wrong_out_buffer_is_refused_before_anything_runs(out, error, text):
    x = f32(2, 8)
    with pl.load(TWO_OUT, device="cpu") as pipe, pytest.raises(error) as e:
        pipe.run(x=x, out=out)
    assert text in e.value.message


def test_a_read_only_out_buffer_is_refused():
    g = poisoned(2, 8)
    g.flags.writeable = False
    with pl.load(TWO_OUT, device="cpu") as pipe, pytest.raises(pl.InvalidArgumentError, match="read-only"):
        pipe.run(x=f32(2, 8), out={"g": g})


def test_a_device_out_buffer_on_a_cpu_pipeline_is_refused():
    fake = pl.Tensor(0x10000, (2, 8), "float32", device="cuda:0")
    with pl.load(TWO_OUT, device="cpu") as pipe, pytest.raises(pl.InvalidArgumentError) as e:
        pipe.run(x=f32(2, 8), out={"g": fake})
    assert "out['g'] lives on cuda:0, but the pipeline runs on the cpu" in e.value.message


def test_an_out_buffer_overlapping_an_input_is_refused_and_the_input_is_untouched():
    x = f32(2, 8)
    keep = x.copy()
    with pl.load(TWO_OUT, device="cpu") as pipe, pytest.raises(pl.InvalidArgumentError) as e:
        pipe.run(x=x, out={"g": x})
    assert "out['g'] overlaps input 'x'" in e.value.message
    np.testing.assert_array_equal(x, keep)


def test_two_out_buffers_sharing_memory_are_refused():
    block = poisoned(3, 8)
    with pl.load(TWO_OUT, device="cpu") as pipe, pytest.raises(pl.InvalidArgumentError) as e:
        pipe.run(x=f32(2, 8), out={"r": block[:2], "g": block[1:]})
    assert "out['r'] overlaps out['g']" in e.value.message


def test_disjoint_halves_of_one_block_are_accepted():
    block = poisoned(4, 8)
    x = f32(2, 8)
    with pl.load(TWO_OUT, device="cpu") as pipe:
        pipe.run(x=x, out={"r": block[:2], "g": block[2:]})
    want_r, want_g = reference(x)
    np.testing.assert_array_equal(block[:2], want_r)
    np.testing.assert_array_equal(block[2:], want_g)


def test_an_input_named_out_or_stream_still_runs_through_the_inputs_dict():
    doc = {"pipeline": [{"name": "add", "inputs": ["out", "stream"], "outputs": ["y"]}]}
    a, b = f32(4), f32(4)
    with pl.load(doc, device="cpu") as pipe:
        got = np.asarray(pipe.run({"out": a, "stream": b})["y"])
    np.testing.assert_allclose(got, a + b)


def test_host_mapped_memory_needs_a_cuda_device():
    with pytest.raises(pl.HardwareUnsupportedError, match="device='cuda_host' needs a CUDA device"):
        get_backend("cpu").empty_mapped((4,), pl.float32)
    with pytest.raises(pl.InvalidArgumentError, match="not host-mapped memory"):
        pl.empty((4,), device="cpu").host()
