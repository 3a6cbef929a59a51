"""ONNX op types imported as compositions of existing operators (Compress, ReverseSequence, CenterCropPad,
GlobalLpPool, LpPool) or as constants evaluated at import (the windows, MelWeightMatrix, EyeLike, Size,
NonZero, Unique, NonMaxSuppression): each against onnx's ReferenceEvaluator (or NumPy where it has no
implementation or departs from the spec), the folds leaving no stage of their own, and every refusal."""

from __future__ import annotations

import time

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

import pipelink as pl  # noqa: E402
from pipelink.onnx import import_model  # noqa: E402
from pipelink.onnx.fold import fold_limit  # noqa: E402
from tests.backend import onnx_models as om  # noqa: E402
from tests.backend.onnx_models import run_pipeline as _run  # noqa: E402
from tests.conftest import assert_close  # noqa: E402

F = np.float32
helper = onnx.helper


def _model(nodes, feeds, inits, outputs, opset=21):
    """A model of ``nodes``: typed inputs from ``feeds`` (name -> array, or name -> (dtype, shape) for a
    declared one), initializers, and untyped outputs."""
    inputs = []
    for name, value in feeds.items():
        dtype, shape = value if isinstance(value, tuple) else (value.dtype, value.shape)
        inputs.append(
            helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), shape)
        )
    graph = helper.make_graph(
        nodes,
        "lowering",
        inputs,
        [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in outputs],
        [onnx.numpy_helper.from_array(np.asarray(a), n) for n, a in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def _check(got, want, what):
    for out, ref in zip(got, want, strict=True):
        assert out.shape == ref.shape and out.dtype == ref.dtype, (what, out.shape, ref.shape, out.dtype)
        if ref.dtype.kind == "f":
            assert_close(out, ref, "float32", what)
        else:
            np.testing.assert_array_equal(out, ref)


def _one(op, feeds, inits, attrs, opset=21, n_out=1):
    names = list(feeds) + list(inits)
    node = helper.make_node(op, names, [f"y{k}" for k in range(n_out)], name="the_node", **attrs)
    return _model([node], feeds, inits, [f"y{k}" for k in range(n_out)], opset)


def _refused(model, why):
    return om.refused(model, why)


# -- lowerings against onnx's reference ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("shape", "condition", "axis"),
    [
        ((3, 5, 2), [True, False, True, True, False], 1),
        ((3, 5, 2), [False, True], -1),
        ((3, 5, 2), [1, 0, 0, 1], 1),  # shorter than the axis: the rest is dropped
        ((3, 4), [False, True, True, False, False, True], None),  # flattened
    ],
)
def test_compress_is_a_gather_of_the_true_indices(rng, device, shape, condition, axis):
    x = rng.standard_normal(shape).astype(F)
    attrs = {} if axis is None else {"axis": axis}
    model = _one("Compress", {"x": x}, {"c": np.array(condition, bool)}, attrs)
    config, _ = import_model(model)
    assert [s["name"] for s in config["pipeline"]] == (["reshape"] if axis is None else []) + ["gather"]
    _check(_run(model, {"x": x}, device), om.run_reference(model, {"x": x}), "Compress")


@pytest.mark.parametrize("exponent_dtype", [np.int64, np.int32, np.float16])
def test_pow_of_a_computed_exponent_of_another_type_casts_it_to_the_base(rng, device, exponent_dtype):
    x = (np.abs(rng.standard_normal((3, 4))) + 0.5).astype(F)
    e = rng.integers(-3, 4, size=(4,)).astype(exponent_dtype)
    model = _one("Pow", {"x": x, "e": e}, {}, {})
    config, _ = import_model(model)
    assert [s["name"] for s in config["pipeline"]] == ["cast", "pow"]
    _check(_run(model, {"x": x, "e": e}, device), om.run_reference(model, {"x": x, "e": e}), "Pow")


# -- ConvTranspose: 1-d, output_shape and auto_pad as the pads they imply ------------------------------
def _conv_transpose(x, w, **attrs):
    return _one("ConvTranspose", {"x": x}, {"w": w}, attrs)


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "attrs"),
    [
        ((2, 3, 7), (3, 4, 3), {"strides": [2], "pads": [1, 2], "output_padding": [1]}),
        ((1, 4, 5), (4, 1, 2), {"group": 4, "dilations": [2]}),
        ((1, 2, 4, 5), (2, 3, 3, 3), {"strides": [2, 3], "auto_pad": "SAME_UPPER"}),
        ((1, 2, 4, 5), (2, 3, 3, 2), {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
        ((1, 2, 3, 3), (2, 1, 3, 3), {"strides": [3, 2], "output_shape": [10, 8]}),  # larger: output_padding
        ((1, 1, 3), (1, 2, 3), {"strides": [2], "auto_pad": "SAME_UPPER"}),
    ],
)
def test_conv_transpose_1d_and_implied_pads_match_onnx(rng, device, x_shape, w_shape, attrs):
    x = rng.standard_normal(x_shape).astype(F)
    w = rng.standard_normal(w_shape).astype(F)
    model = _conv_transpose(x, w, **attrs)
    _check(_run(model, {"x": x}, device), om.run_reference(model, {"x": x}), "ConvTranspose")


def test_conv_transpose_output_shape_smaller_than_the_full_output_splits_its_pads_as_the_spec(rng, device):
    """A total padding of 3 (full 9, output 6): the spec puts 2 at the start, 1 at the end (onnx's
    reference crops at the end instead; onnxruntime follows the spec): compared with the explicit pads."""
    x = rng.standard_normal((1, 1, 3, 3)).astype(F)
    w = rng.standard_normal((1, 2, 3, 3)).astype(F)
    model = _conv_transpose(x, w, strides=[3, 3], output_shape=[6, 6])
    explicit = _conv_transpose(x, w, strides=[3, 3], pads=[2, 2, 1, 1])
    got = _run(model, {"x": x}, device)
    assert got[0].shape == (1, 2, 6, 6)
    _check(got, om.run_reference(explicit, {"x": x}), "ConvTranspose output_shape")


def test_conv_transpose_refusals_name_their_cause(rng):
    w4 = rng.standard_normal((1, 1, 2, 2, 2, 2)).astype(F)
    _refused(_conv_transpose(np.zeros((1, 1, 3, 3, 3, 3), F), w4), "a 4-d transposed convolution")
    w = rng.standard_normal((1, 1, 3, 3)).astype(F)
    _refused(
        _conv_transpose(np.zeros((1, 1, 3, 3), F), w, output_shape=[12, 12]),
        "which would pad the start; PipeLink pads only the end",
    )
    symbolic = _model(
        [helper.make_node("ConvTranspose", ["x", "w"], ["y0"], name="the_node", auto_pad="SAME_UPPER")],
        {"x": (F, [1, 1, "H", 3])},
        {"w": w},
        ["y0"],
    )
    _refused(symbolic, "needs the input's spatial dims and the kernel known at import")


@pytest.mark.parametrize(
    ("base", "exponent", "stages"),
    [
        (np.int32, np.int32, ["pow"]),  # pow's integer power, wrapping
        (np.uint16, np.int64, ["cast", "pow"]),  # the exponent cast to the base's type
        (np.int64, np.float32, ["cast", "cast", "pow", "cast"]),  # in float64 and back, as the reference
        (np.int16, np.float64, ["cast", "cast", "pow", "cast"]),
    ],
)
def test_pow_of_an_integer_base_matches_the_reference(rng, device, base, exponent, stages):
    """An integer base: the reference's power(a, b).astype(a.dtype), with a float exponent computed in
    float64 (truncated back toward zero), with an integer one as an integer power."""
    signed = np.dtype(base).kind == "i"
    x = rng.integers(-9 if signed else 0, 10, size=(3, 4)).astype(base)
    e = (rng.integers(0, 5, size=(4,)) + (0.5 if np.dtype(exponent).kind == "f" else 0)).astype(exponent)
    model = _one("Pow", {"x": x, "e": e}, {}, {})
    config, _ = import_model(model)
    assert [s["name"] for s in config["pipeline"]] == stages
    (got,) = _run(model, {"x": x, "e": e}, device)
    (want,) = om.reference_evaluator(model, {"x": x, "e": e})  # onnx's own (onnxruntime lacks int16 Pow)
    assert got.dtype == want.dtype == np.dtype(base)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    ("shape", "batch_axis", "time_axis", "lens"),
    [
        ((4, 3, 2), 1, 0, [4, 0, 2]),
        ((3, 5), 0, 1, [1, 5, 3]),
        ((2, 4, 2, 3), 0, 1, [3, 4]),
        ((5, 2), 1, 0, [2, 5]),
    ],
)
def test_reverse_sequence_is_a_gather_of_rows(rng, device, shape, batch_axis, time_axis, lens):
    x = rng.standard_normal(shape).astype(F)
    attrs = {"batch_axis": batch_axis, "time_axis": time_axis}
    model = _one("ReverseSequence", {"x": x}, {"lens": np.array(lens, np.int64)}, attrs)
    config, _ = import_model(model)
    assert [s["name"] for s in config["pipeline"]] == ["reshape", "gather", "reshape"]
    _check(_run(model, {"x": x}, device), om.run_reference(model, {"x": x}), "ReverseSequence")


@pytest.mark.parametrize(
    ("shape", "target", "axes", "dtype"),
    [
        ((2, 5, 6), [2, 3, 9], None, F),  # crop one odd, pad one odd
        ((2, 5, 6), [4, 6], [-1, 1], F),  # axes with a negative, out of order: crop 2, pad 1
        ((3, 4, 5), [7, 2], [2, 0], np.int64),  # pad 2 (one each side), crop 1
        ((1, 3, 4, 4), [6, 6], [2, 3], F),  # an image padded centrally
    ],
)
def test_center_crop_pad_crops_and_pads_each_axis_about_its_centre(rng, device, shape, target, axes, dtype):
    x = (10 * rng.standard_normal(shape)).astype(dtype)
    attrs = {} if axes is None else {"axes": axes}
    model = _one("CenterCropPad", {"x": x}, {"shape": np.array(target, np.int64)}, attrs)
    _check(_run(model, {"x": x}, device), om.run_reference(model, {"x": x}), "CenterCropPad")


def _lp_sum(x, p, axes):
    return (np.abs(x.astype(np.float64)) ** p).sum(axis=axes, keepdims=True) ** (1.0 / p)


@pytest.mark.parametrize(
    ("p", "shape"), [(1, (2, 3, 4, 5)), (2, (2, 3, 4, 5)), (3, (1, 2, 7)), (2, (2, 2, 2, 3, 2))]
)
def test_global_lp_pool_is_the_norm_over_the_spatial_dims(rng, device, p, shape):
    # onnx's ReferenceEvaluator has no GlobalLpPool (1.23): the spec's formula in float64
    x = rng.standard_normal(shape).astype(F)
    model = _one("GlobalLpPool", {"x": x}, {}, {"p": p})
    (got,) = _run(model, {"x": x}, device)
    want = _lp_sum(x, p, tuple(range(2, len(shape)))).astype(F)
    _check([got], [want], "GlobalLpPool")


@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": [2, 3], "p": 2},
        {"kernel_shape": [3, 2], "strides": [2, 1], "p": 1},
        {"kernel_shape": [2, 2], "strides": [1, 2], "dilations": [2, 1], "p": 3},
        {"kernel_shape": [3], "strides": [2], "p": 2},  # 1-d, as the 2-d pool over a unit height
    ],
)
def test_lp_pool_without_pads_matches_the_reference(rng, device, attrs):
    x = rng.standard_normal((2, 3, 7, 8) if len(attrs["kernel_shape"]) == 2 else (2, 3, 9)).astype(F)
    model = _one("LpPool", {"x": x}, {}, attrs)
    _check(_run(model, {"x": x}, device), om.run_reference(model, {"x": x}), "LpPool")


def _lp_pool_numpy(x, kernel, strides, pads, p):
    """The spec's Lp pool: every window of the zero-padded input, its Lp norm (a pad adds 0)."""
    (kh, kw), (sh, sw) = kernel, strides
    padded = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])])
    h = (padded.shape[2] - kh) // sh + 1
    w = (padded.shape[3] - kw) // sw + 1
    out = np.empty(x.shape[:2] + (h, w))
    for i in range(h):
        for j in range(w):
            window = padded[:, :, i * sh : i * sh + kh, j * sw : j * sw + kw]
            out[:, :, i, j] = (np.abs(window) ** p).sum(axis=(2, 3)) ** (1.0 / p)
    return out


@pytest.mark.parametrize("p", [1, 2, 3])
def test_lp_pool_with_pads_sums_the_real_taps(rng, device, p):
    """With pads, onnx's reference (1.23) averages over the taps inside the input and multiplies by the
    window size, which is not the Lp norm the spec defines; the pads add 0 to the sum here."""
    x = rng.standard_normal((2, 2, 5, 6)).astype(F)
    attrs = {"kernel_shape": [3, 3], "strides": [2, 1], "pads": [1, 0, 1, 2], "p": p}
    model = _one("LpPool", {"x": x}, {}, attrs)
    (got,) = _run(model, {"x": x}, device)
    _check([got], [_lp_pool_numpy(x, (3, 3), (2, 1), [1, 0, 1, 2], p).astype(F)], "LpPool")


# -- folds: evaluated at import, no stage of their own --------------------------------------------------
def _fold_case(rng, op):
    """(nodes making "v" from constants, initializers): the node under test and its inputs."""
    i64 = lambda v: np.array(v, np.int64)  # noqa: E731
    cases = {
        "HannWindow": ({"periodic": 0}, {"n": i64(7)}),
        "HammingWindow": ({"output_datatype": onnx.TensorProto.DOUBLE}, {"n": i64(8)}),
        "BlackmanWindow": ({}, {"n": np.array(10, np.int32)}),
        "MelWeightMatrix": (
            {},
            {
                "bins": i64(8),
                "dft": i64(64),
                "rate": i64(16000),
                "lo": np.array(20.0, F),
                "hi": np.array(8000.0, F),
            },
        ),
        "EyeLike": ({"k": -1}, {"m": np.zeros((3, 5), F)}),
        "Size": ({}, {"m": np.zeros((3, 5, 2), F)}),
        "Shape": ({"start": 1}, {"m": np.zeros((3, 5, 2), F)}),
        "NonZero": ({}, {"m": (rng.standard_normal((3, 4)) > 0.3).astype(F)}),
        "NonMaxSuppression": (
            {"center_point_box": 0},
            {
                "boxes": np.array(
                    [[[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, -0.1, 1, 0.9], [0, 10, 1, 11], [0, 10.1, 1, 11.1]]],
                    F,
                ),
                "scores": np.array([[[0.9, 0.75, 0.6, 0.95, 0.5]]], F),
                "keep": i64([3]),
                "iou": np.array([0.5], F),
                "score": np.array([0.0], F),
            },
        ),
    }
    return cases[op]


@pytest.mark.parametrize(
    "op",
    [
        "HannWindow",
        "HammingWindow",
        "BlackmanWindow",
        "MelWeightMatrix",
        "EyeLike",
        "Size",
        "Shape",
        "NonZero",
        "NonMaxSuppression",
    ],
)
def test_constant_inputs_fold_to_a_constant_without_a_stage(rng, device, op):
    attrs, inits = _fold_case(rng, op)
    nodes = [
        helper.make_node(op, list(inits), ["v"], name="folded", **attrs),
        helper.make_node("Identity", ["v"], ["y"], name="read"),
    ]
    model = _model(nodes, {}, inits, ["y"])
    config, weights = import_model(model)
    # the Identity of the folded value is a constant graph output: one identity stage copies it out
    assert [(s["name"], s["outputs"]) for s in config["pipeline"]] == [("identity", ["y"])]
    assert not set(inits) & set(weights)  # only the folded value is bound
    (want,) = om.run_reference(model, {})
    _check(_run(model, {}, device), [want], op)


def test_unique_folds_every_output(device):
    x = np.array([[2.0, 1.0, 2.0], [3.0, 1.0, 0.5]], F)
    outs = ["u", "idx", "inv", "counts"]
    nodes = [helper.make_node("Unique", ["x"], outs, name="folded", sorted=1)]
    nodes += [helper.make_node("Identity", [o], [f"{o}_y"], name=f"read_{o}") for o in outs]
    model = _model(nodes, {}, {"x": x}, [f"{o}_y" for o in outs])
    config, _ = import_model(model)
    assert [s["name"] for s in config["pipeline"]] == ["identity"] * 4
    _check(_run(model, {}, device), om.run_reference(model, {}), "Unique")
    # with an axis, and only the first output named
    nodes = [
        helper.make_node("Unique", ["x"], ["u", "", "inv"], name="folded", axis=1),
        helper.make_node("Identity", ["inv"], ["y"], name="read"),
    ]
    model = _model(nodes, {}, {"x": x}, ["y"])
    _check(_run(model, {}, device), om.run_reference(model, {}), "Unique axis 1")


def test_size_of_a_known_shape_is_a_constant(rng, device):
    x = rng.standard_normal((2, 3, 4)).astype(F)
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Size", ["r"], ["n"], name="size"),
        helper.make_node("Cast", ["n"], ["nf"], name="cast", to=onnx.TensorProto.FLOAT),
        helper.make_node("Mul", ["r", "nf"], ["y"], name="mul"),
    ]
    model = _model(nodes, {"x": x}, {}, ["y"])
    config, weights = import_model(model)
    assert [s["name"] for s in config["pipeline"]] == ["relu", "mul"]
    assert [float(v) for v in weights.values()] == [24.0]
    _check(_run(model, {"x": x}, device), om.run_reference(model, {"x": x}), "Size")


# -- refusals -------------------------------------------------------------------------------------------
def _computed(op, inputs, feeds, inits, attrs=None, opset=21, n_out=1):
    node = helper.make_node(op, inputs, [f"y{k}" for k in range(n_out)], name="the_node", **(attrs or {}))
    return _model([node], feeds, inits, [f"y{k}" for k in range(n_out)], opset)


@pytest.mark.parametrize(
    ("model", "why"),
    [
        (
            _computed("Compress", ["x", "c"], {"x": (F, [3, 4]), "c": (bool, [4])}, {}, {"axis": 1}),
            "'c'. must be a constant at import, and it is a graph input",
        ),
        (
            _computed(
                "Compress",
                ["x", "c"],
                {"x": (F, [3, 4])},
                {"c": np.array([0, 0, 0, 0, 1], bool)},
                {"axis": 1},
            ),
            "condition is true at 4, past the 4 entries",
        ),
        (
            _computed("Compress", ["x", "c"], {"x": (F, [3, 4])}, {"c": np.zeros(2, bool)}, {"axis": 0}),
            "selects nothing",
        ),
        (
            _computed("Compress", ["x", "c"], {"x": (F, ["N", 4])}, {"c": np.ones(2, bool)}, {"axis": 0}),
            "Compress needs the size it selects from known at import",
        ),
        (
            _computed("ReverseSequence", ["x", "l"], {"x": (F, [4, 2, 3]), "l": (np.int64, [2])}, {}),
            "'l'. must be a constant at import, and it is a graph input",
        ),
        (
            _computed(
                "ReverseSequence", ["x", "l"], {"x": (F, [4, 2, 3])}, {"l": np.array([5, 1], np.int64)}
            ),
            r"sequence_lens \[5, 1\] must have 2 entries \(the batch\), each in \[0, 4\]",
        ),
        (
            _computed(
                "ReverseSequence", ["x", "l"], {"x": (F, [4, "B", 3])}, {"l": np.array([1, 1], np.int64)}
            ),
            "needs its input's rank .* and its batch and time sizes",
        ),
        (
            _computed("CenterCropPad", ["x", "s"], {"x": (F, [4, 4]), "s": (np.int64, [2])}, {}),
            "must be a constant",
        ),
        (
            _computed("CenterCropPad", ["x", "s"], {"x": (F, ["N", 4])}, {"s": np.array([2, 2], np.int64)}),
            r"CenterCropPad of axis 0 \(size N\) to 2",
        ),
        (
            _computed("CenterCropPad", ["x", "s"], {"x": (F, [4, 4])}, {"s": np.array([2], np.int64)}),
            r"CenterCropPad: shape \[2\] for axes \[0, 1\]",
        ),
        (
            _computed(
                "LpPool", ["x"], {"x": (F, [1, 1, 5, 5])}, {}, {"kernel_shape": [2, 2], "ceil_mode": 1}
            ),
            "LpPool with ceil_mode=1",
        ),
        (
            _computed("LpPool", ["x"], {"x": (F, [1, 1, 5, 5, 5, 5])}, {}, {"kernel_shape": [2, 2, 2, 2]}),
            "4-d window",
        ),
        (_computed("GlobalLpPool", ["x"], {"x": (F, [1, 2, 3])}, {}, {"p": 0}), "GlobalLpPool p=0"),
        (_computed("GlobalLpPool", ["x"], {"x": (F, None)}, {}), "GlobalLpPool needs its input's rank"),
    ],
)
def test_lowerings_refuse_what_they_cannot_express(model, why):
    unsupported = _refused(model, why)
    assert [(u["op_type"], u["node"]) for u in unsupported] == [(model.graph.node[0].op_type, "the_node")]


@pytest.mark.parametrize(
    ("op", "feeds", "inits", "attrs", "n_out"),
    [
        ("NonZero", {"x": (F, [3, 4])}, {}, {}, 1),
        ("Unique", {"x": (F, [6])}, {}, {}, 4),
        (
            "NonMaxSuppression",
            {"boxes": (F, [1, 5, 4]), "scores": (F, [1, 1, 5])},
            {"keep": np.array([3], np.int64)},
            {},
            1,
        ),
    ],
)
def test_data_dependent_sizes_of_computed_inputs_are_refused(op, feeds, inits, attrs, n_out):
    model = _computed(op, list(feeds) + list(inits), feeds, inits, attrs, n_out=n_out)
    _refused(model, f"{op}'s output size depends on the values of its input, which the graph computes")


def _hostile(op, inits, attrs=None):
    nodes = [
        helper.make_node(op, list(inits), ["v"], name="the_node", **(attrs or {})),
        helper.make_node("Identity", ["v"], ["y"], name="read"),
    ]
    return _model(nodes, {}, inits, ["y"])


@pytest.mark.parametrize(
    ("model", "why"),
    [
        (
            _hostile("HannWindow", {"n": np.array(2**40, np.int64)}),
            "HannWindow of constants would read or make 1099511627776 elements",
        ),
        (
            _hostile("BlackmanWindow", {"n": np.array(fold_limit("BlackmanWindow") + 1, np.int64)}),
            f"make {fold_limit('BlackmanWindow') + 1} elements",
        ),
        (
            _hostile(
                "MelWeightMatrix",
                {
                    "b": np.array(2**20, np.int64),
                    "d": np.array(2**30, np.int64),
                    "r": np.array(16000, np.int64),
                    "lo": np.array(0.0, F),
                    "hi": np.array(8000.0, F),
                },
            ),
            "MelWeightMatrix of constants would read or make",
        ),
        (
            _hostile(
                "NonMaxSuppression",
                {
                    "boxes": np.zeros((1, 2000, 4), F),
                    "scores": np.zeros((1, 2, 2000), F),
                    "keep": np.array([2**40], np.int64),
                },
            ),
            "NonMaxSuppression of constants would read or make",
        ),
        (
            _hostile("NonZero", {"x": np.ones((1025, 1024), F)}),  # a table of 2**20 + 1024 elements
            f"the import evaluates at most {fold_limit('NonZero')}",
        ),
        (
            _hostile("ConstantOfShape", {"s": np.array([2**20, 2**20], np.int64)}),
            "ConstantOfShape of constants would read or make 1099511627776 elements",
        ),
        (
            _hostile("Range", {"a": np.array(0.0, F), "b": np.array(np.inf, F), "d": np.array(1.0, F)}),
            f"Range of constants would read or make more than {fold_limit('Range')} elements",
        ),
    ],
)
def test_hostile_sizes_stay_nodes_and_are_refused_clearly(model, why):
    start = time.perf_counter()
    unsupported = _refused(model, why)
    assert time.perf_counter() - start < 10  # nothing of that size was made
    assert [u["node"] for u in unsupported] == ["the_node"]
    assert "give a larger table as an initializer" in unsupported[0]["why"]


def test_fold_only_refusals_name_their_cause():
    # a window whose size the graph computes
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("ReduceProd", ["s"], ["n"], name="n", keepdims=0),
        helper.make_node("HannWindow", ["n"], ["w"], name="the_node"),
        helper.make_node("Mul", ["x", "w"], ["y"], name="mul"),
    ]
    model = _model(nodes, {"x": (F, ["N"])}, {}, ["y"])
    unsupported = _refused(model, "HannWindow is evaluated at import only, of constant inputs")
    assert [u["node"] for u in unsupported if u["op_type"] == "HannWindow"] == ["the_node"]
    # Size of a tensor with a dim known only when the model runs
    nodes = [
        helper.make_node("Size", ["x"], ["n"], name="the_node"),
        helper.make_node("Identity", ["n"], ["y"]),
    ]
    _refused(_model(nodes, {"x": (F, ["N", 3])}, {}, ["y"]), "Size needs its input's shape, every dim known")
    # the reference cannot evaluate it (an upper edge far above the Nyquist frequency)
    mel = {
        "b": np.array(8, np.int64),
        "d": np.array(16, np.int64),
        "r": np.array(100, np.int64),
        "lo": np.array(0.0, F),
        "hi": np.array(8000.0, F),
    }
    _refused(_hostile("MelWeightMatrix", mel), "MelWeightMatrix of these constants cannot be evaluated")


# -- Cast into float8: ONNX saturates by default ---------------------------------------------------------
@pytest.mark.parametrize("op", ["Cast", "CastLike"])
@pytest.mark.parametrize("target", ["float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("saturate", [None, 1, 0])
@pytest.mark.parametrize("source", ["float32", "float16"])
def test_casts_into_float8_saturate_as_onnx_says(device, op, target, saturate, source):
    """Beyond float8's finite range (and at +-inf) a saturating cast (ONNX's default) gives the largest
    finite value; saturate=0 gives NaN (e4m3fn) or inf (e5m2). Wrong if the default cast overflowed to
    NaN/inf, as the plain cast does, or if saturate were accepted and ignored."""
    import ml_dtypes

    fp8 = np.dtype(getattr(ml_dtypes, target))
    x = np.array([0.0, -0.0, 1.3, -2.7, 300.0, 500.0, -1e4, 6e4, -6.5e4, np.inf, -np.inf, np.nan], source)
    attrs = {} if saturate is None else {"saturate": saturate}
    elem = helper.np_dtype_to_tensor_dtype(fp8)
    if op == "Cast":
        node = helper.make_node("Cast", ["x"], ["y"], to=elem, **attrs)
        inits = {}
    else:
        node = helper.make_node("CastLike", ["x", "like"], ["y"], **attrs)
        inits = {"like": np.zeros(1, fp8)}
    model = _model([node], {"x": x}, inits, ["y"])
    (got,) = _run(model, {"x": x}, device)
    from onnx.reference import ReferenceEvaluator

    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    assert got.dtype == fp8
    np.testing.assert_array_equal(got.astype(np.float32), np.asarray(want).astype(np.float32))


def test_a_saturating_cast_into_float8_from_float64_is_refused():
    x = np.ones(3, np.float64)
    model = _model(
        [helper.make_node("Cast", ["x"], ["y"], to=onnx.TensorProto.FLOAT8E4M3FN)], {"x": x}, {}, ["y"]
    )
    with pytest.raises(pl.PipeLinkError, match="saturating cast to float8_e4m3fn from float64") as info:
        import_model(model)
    assert info.value.code.name == "PIPELINK_ERR_INVALID_ARGUMENT"
