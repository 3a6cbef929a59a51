"""ONNX DFT (opsets 17 and 20) and STFT (opset 17) lowered onto matmul with constant cosine/sine matrices
(``onnx/spectral.py``): each against onnx's ReferenceEvaluator on random inputs over the attribute
combinations (real and complex, forward and inverse, onesided, dft_length padding and cropping, every
axis form; STFT's frame steps and lengths, with no window, a constant one and a computed one), in
float32, float64, float16 and bfloat16 (DFT), on every device, and every refusal."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

import pipelink as pl  # noqa: E402
from pipelink.dtypes import get_dtype  # noqa: E402
from pipelink.onnx import import_model  # noqa: E402
from tests.backend import onnx_models as om  # noqa: E402
from tests.conftest import assert_close  # noqa: E402

helper = onnx.helper
I64 = np.int64
BF16 = get_dtype("bfloat16").numpy


def _model(op, feeds, inits, attrs, *, opset, inputs):
    """A one-node model (``om.one_node_model``): the node reading ``inputs`` ("" for an absent one), one
    untyped output ``y``."""
    return om.one_node_model(op, inputs, feeds, inits, attrs, ("y",), opset=opset, name="spectral")


def _dft_model(x, *, opset, axis=None, dft_length=None, **attrs):
    """DFT of a graph input x (an array, or (dtype, shape)); axis the attribute before opset 20, a
    constant input from it; dft_length a constant input (None: absent)."""
    feeds = {"x": x}
    inits, inputs = {}, ["x", ""]
    if dft_length is not None:
        inits["n"], inputs[1] = np.array(dft_length, I64), "n"
    if axis is not None and opset >= 20:
        inits["axis"] = np.array(axis, I64)
        inputs.append("axis")
    elif axis is not None:
        attrs["axis"] = axis
    while inputs[-1] == "":
        inputs.pop()
    return _model("DFT", feeds, inits, attrs, opset=opset, inputs=inputs)


def _stages(model):
    config, weights = import_model(model)
    return [s["name"] for s in config["pipeline"]], weights


def _check(model, feeds, device, dtype):
    """PipeLink's output has the reference's shape and dtype, every element written, within the dtype's
    tolerance."""
    want = om.reference_evaluator(model, feeds)[0]
    got = om.run_pipeline(model, feeds, device)[0]
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape, got.dtype)
    assert np.isfinite(got).all()
    assert_close(got, want, np.dtype(dtype).name, "spectral")


def _refused(model, why, graph_input=""):
    with pytest.raises(pl.PipeLinkError, match=why) as info:
        import_model(model)
    assert info.value.code.name == "PIPELINK_ERR_INVALID_ARGUMENT"
    entry = info.value.unsupported[0]
    assert entry["node"] == "the_node"
    assert entry.get("graph_input", "") == graph_input


# -- DFT --------------------------------------------------------------------------------------------
# (shape, axis, dft_length, inverse, onesided): real and complex, forward and inverse, RFFT and IRFFT,
# dft_length absent, padding (odd and even) and cropping, the axis last-signal and not, negative
DFT_CASES = [
    ((2, 8, 1), 1, None, 0, 0),
    ((2, 8, 2), -2, None, 0, 0),
    ((2, 7, 3, 2), 1, 10, 0, 0),
    ((3, 4, 9, 1), 2, 6, 0, 0),
    ((2, 5, 4, 2), -3, None, 1, 0),
    ((2, 6, 1), 1, 4, 1, 0),
    ((2, 9, 3, 1), 1, None, 0, 1),
    ((2, 3, 8, 1), -2, 11, 0, 1),
    ((2, 6, 2), 1, None, 1, 1),
    ((2, 3, 5, 2), 1, 7, 1, 1),
    ((2, 4, 6, 2), 2, 14, 1, 1),
    ((8, 2), 0, 5, 0, 0),
]


@pytest.mark.parametrize("opset", [17, 20])
@pytest.mark.parametrize(("shape", "axis", "dft_length", "inverse", "onesided"), DFT_CASES)
def test_dft_matches_onnx(rng, device, opset, shape, axis, dft_length, inverse, onesided):
    x = rng.standard_normal(shape).astype(np.float32)
    model = _dft_model(x, opset=opset, axis=axis, dft_length=dft_length, inverse=inverse, onesided=onesided)
    names, _ = _stages(model)
    # the last signal axis needs no transpose; another one is moved there and back
    moved = axis % len(shape) != len(shape) - 2
    assert names == (["transpose"] if moved else []) + ["reshape", "matmul", "reshape"] + (
        ["transpose"] if moved else []
    )
    _check(model, {"x": x}, device, np.float32)


@pytest.mark.parametrize("dtype", [np.float64, np.float16, BF16])
@pytest.mark.parametrize(("inverse", "onesided", "channels"), [(0, 0, 2), (0, 1, 1), (1, 0, 2), (1, 1, 2)])
def test_dft_computes_in_the_input_dtype(rng, device, dtype, inverse, onesided, channels):
    x = rng.standard_normal((3, 12, channels)).astype(dtype)
    model = _dft_model(x, opset=20, inverse=inverse, onesided=onesided)
    _, weights = _stages(model)
    (matrix,) = [w for n, w in weights.items() if "dft_matrix" in n]
    assert matrix.dtype == dtype
    _check(model, {"x": x}, device, dtype)


def test_dft_default_axis_and_a_batch_known_only_at_run_time(rng, device):
    """DFT-17's axis defaults to 1, DFT-20's to -2; the leading dims may be symbolic (the reshapes copy
    them)."""
    for opset, shape in ((17, ("batch", 6, 4, 2)), (20, ("batch", 4, 6, 2))):
        model = _dft_model((np.float32, shape), opset=opset)
        for batch in (1, 3):
            x = rng.standard_normal((batch, *shape[1:])).astype(np.float32)
            _check(model, {"x": x}, device, np.float32)


# -- STFT -------------------------------------------------------------------------------------------
# (length, channels, frame_step, frame_length, window, onesided); window: absent, constant or input
STFT_CASES = [
    (32, 1, 8, 16, "", 1),
    (20, 1, 3, None, "const", 1),
    (21, 1, 4, 7, "input", 1),
    (18, 2, 5, 6, "", 0),
    (19, 2, 2, None, "input", 0),
    (16, 1, 3, 5, "const", 0),
    (12, 1, 1, None, "", 1),
]


def _stft_model(x, step, frame_length, window, onesided, rng, dtype=np.float32):
    feeds = {"x": x}
    inits = {"step": np.array(step, I64)}
    inputs = ["x", "step", "", ""]
    size = frame_length or 5
    w = (0.5 + 0.5 * rng.random(size)).astype(dtype)
    if window == "const":
        inits["w"], inputs[2] = w, "w"
    elif window == "input":
        feeds["w"], inputs[2] = w, "w"
    if frame_length is not None:
        inits["len"], inputs[3] = np.array(frame_length, I64), "len"
    while inputs[-1] == "":
        inputs.pop()
    model = _model("STFT", feeds, inits, {"onesided": onesided}, opset=17, inputs=inputs)
    return model, {n: v for n, v in feeds.items() if isinstance(v, np.ndarray)}


@pytest.mark.parametrize(("length", "channels", "step", "frame_length", "window", "onesided"), STFT_CASES)
def test_stft_matches_onnx(rng, device, length, channels, step, frame_length, window, onesided):
    x = rng.standard_normal((2, length, channels)).astype(np.float32)
    model, feeds = _stft_model(x, step, frame_length, window, onesided, rng)
    names, _ = _stages(model)
    # a constant window is folded into the matrix; a computed one is multiplied in
    computed = ["unsqueeze", "mul"] if window == "input" else []
    assert names == ["gather", *computed, "reshape", "matmul", "reshape"]
    _check(model, feeds, device, np.float32)


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_stft_in_the_input_dtype(rng, device, dtype):
    for window in ("const", "input"):
        x = rng.standard_normal((2, 24, 1)).astype(dtype)
        model, feeds = _stft_model(x, 4, 8, window, 1, rng, dtype)
        _check(model, feeds, device, dtype)


# -- refusals ---------------------------------------------------------------------------------------
def test_a_dft_over_a_run_time_length_names_the_dims_to_fix():
    """FNet at a dynamic sequence: the refusal carries run_time_dims and says how to fix it."""
    with pytest.raises(pl.PipeLinkError) as info:
        import_model(_dft_model((np.float32, (2, "n", 2)), opset=20))
    assert info.value.run_time_dims == ["x"] and "--shape x=2x<n>x2" in info.value.message


def test_dft_refuses_what_it_cannot_build_or_the_spec_forbids():
    x = np.zeros((2, 6, 2), np.float32)
    real = np.zeros((2, 6, 1), np.float32)
    _refused(_dft_model(x, opset=20, axis=2), r"axis 2 of a rank-3 input.*\[-3, -2\] and \[0, 1\]")
    _refused(_dft_model(x, opset=17, axis=-1), "axis -1 of a rank-3 input")
    _refused(_dft_model(x, opset=20, onesided=1), "RFFT .* takes a real input only")
    _refused(_dft_model(real, opset=20, onesided=1, inverse=1), "IRFFT .* takes a complex input only")
    _refused(_dft_model(x, opset=20, dft_length=0), "DFT of length 0")
    _refused(_dft_model(np.zeros((2, 1, 2), np.float32), opset=20, onesided=1, inverse=1), "DFT of length 0")
    _refused(_dft_model(x, opset=20, inverse=2), "attribute inverse=2; the spec allows 0 and 1")
    _refused(_dft_model(np.zeros((2, 6, 3), np.float32), opset=20), r"last dim must be known, 1 \(real\)")
    _refused(_dft_model(np.zeros((2, 6, 2), np.int32), opset=20), "DFT input of dtype int32")
    _refused(_dft_model((np.float32, (2, "n", 2)), opset=20), "length along axis 1 known at import")
    _refused(_dft_model((np.float32, None), opset=20), "needs the input's rank")
    _refused(_dft_model(np.zeros((6, 2), np.float32), opset=17), r"axis 1 of a rank-2 input")
    _refused(
        _dft_model((np.float32, (1, 2**31, 2)), opset=20),
        "DFT's transform matrix is built at import as a constant table of",
    )


def test_dft_refuses_a_computed_dft_length_or_axis():
    x = np.zeros((2, 6, 2), np.float32)
    n = {"n": np.array(4, I64)}
    given = _model("DFT", {"x": x, **n}, {}, {}, opset=20, inputs=["x", "n"])
    _refused(given, r"input 1 \(dft_length, 'n'\) must be a constant at import.*graph input", "n")
    axis = _model("DFT", {"x": x, "a": np.array(1, I64)}, {}, {}, opset=20, inputs=["x", "", "a"])
    _refused(axis, r"input 2 \(axis, 'a'\) must be a constant at import", "a")
    computed = _model("DFT", {"x": x, "m": np.array(2, I64)}, {}, {}, opset=20, inputs=["x", "n"])
    computed.graph.node.insert(0, helper.make_node("Add", ["m", "m"], ["n"], name="twice"))
    _refused(computed, r"input 1 \(dft_length, 'n'\) must be a constant .* but the graph computes it")
    floats = _model("DFT", {"x": x}, {"n": np.array(4.0, np.float32)}, {}, opset=20, inputs=["x", "n"])
    _refused(floats, r"must be one integer, a scalar \(got float32")


def test_stft_refuses_what_it_cannot_build_or_the_spec_forbids(rng):
    x = np.zeros((2, 16, 1), np.float32)

    def stft(signal, inits, feeds=None, inputs=("x", "step"), **attrs):
        return _model("STFT", {"x": signal, **(feeds or {})}, inits, attrs, opset=17, inputs=list(inputs))

    step = {"step": np.array(4, I64)}
    _refused(stft(x, {"step": np.array(0, I64)}), "frame_step 0: it must be given, >= 1")
    _refused(
        stft(x, {}, {"step": np.array(4, I64)}), r"input 1 \(frame_step, 'step'\) must be a constant", "step"
    )
    _refused(
        stft(x, {**step, "len": np.array(20, I64)}, inputs=("x", "step", "", "len")),
        "frame_length 20 for a signal of length 16",
    )
    _refused(
        stft(
            x,
            {**step, "w": np.ones(6, np.float32), "len": np.array(5, I64)},
            inputs=("x", "step", "w", "len"),
        ),
        "window of length 6 and frame_length 5",
    )
    _refused(
        stft(x, step, {"w": (np.float32, ["k"])}, inputs=("x", "step", "w")), "window 1-d, its length known"
    )
    _refused(stft(x, {**step, "w": np.ones(6, np.float64)}, inputs=("x", "step", "w")), "window of float64")
    _refused(stft(np.zeros((2, 16, 2), np.float32), step), "one-sided output needs a real one")
    _refused(stft(np.zeros((16, 1), np.float32), step), r"signal's shape \[batch, length, 1 or 2\]")
    _refused(stft((np.float32, (2, "L", 1)), step), "the length known")
    _refused(stft(x, step, onesided=3), "attribute onesided=3")
    _refused(
        stft(
            (np.float32, (1, 2**31, 1)),
            {"step": np.array(1, I64), "len": np.array(2**30, I64)},
            inputs=("x", "step", "", "len"),
        ),
        "STFT's frame indices is built at import as a constant table",
    )
