"""The ONNX import of 3-d Conv and ConvTranspose (``conv3d``, ``conv_transpose3d``): one-node models of
random shapes imported, run on each device and compared with ONNX's ReferenceEvaluator (strides,
dilations, groups, asymmetric pads, auto_pad SAME_UPPER / SAME_LOWER / VALID, output_padding,
output_shape), a video block (Conv -> BatchNormalization -> Relu, a residual Add) and a symbolic batch,
and the refusals of what the import cannot express, each naming its cause.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from tests.backend import onnx_models as om  # noqa: E402
from tests.conftest import assert_close  # noqa: E402

from .ops_helpers import rand  # noqa: E402
from .test_ops_conv3d import conv_transpose_ref  # noqa: E402

F = np.float32
helper = onnx.helper


def _r(rng, *shape) -> np.ndarray:
    return rand(rng, shape, "float32", -1, 1)


def _one(op: str, x: np.ndarray, w: np.ndarray, b: np.ndarray | None, attrs: dict, *, batch=None):
    """A one-node model of ``op`` reading graph input x and constant w (and b); x's batch declared as
    ``batch`` when given (a symbol)."""
    inits = {"w": w} | ({} if b is None else {"b": b})
    shape = x.shape if batch is None else (batch, *x.shape[1:])
    feeds = {"x": (x.dtype, shape)}
    return om.one_node_model(op, ["x", *inits], feeds, inits, attrs, ["y"], opset=22)


CONV_CASES = [
    ((2, 3, 5, 6, 7), (4, 3, 3, 3, 3), {}),
    ((1, 4, 7, 6, 9), (6, 2, 3, 2, 3), {"strides": [2, 1, 3], "pads": [1, 0, 2, 0, 1, 1], "group": 2}),
    ((2, 3, 6, 8, 7), (5, 3, 2, 3, 3), {"dilations": [2, 1, 3], "pads": [0, 1, 3, 1, 1, 0]}),
    ((1, 6, 5, 8, 8), (6, 1, 3, 3, 3), {"group": 6, "strides": [1, 2, 2], "auto_pad": "SAME_UPPER"}),
    ((2, 3, 7, 8, 6), (4, 3, 3, 3, 2), {"auto_pad": "SAME_LOWER", "strides": [2, 3, 2]}),
    ((1, 2, 5, 6, 7), (3, 2, 3, 3, 3), {"auto_pad": "VALID", "strides": [1, 2, 3], "dilations": [1, 1, 2]}),
    ((2, 4, 4, 5, 6), (3, 4, 1, 1, 1), {"kernel_shape": [1, 1, 1]}),
]


@pytest.mark.parametrize(("xs", "ws", "attrs"), CONV_CASES)
@pytest.mark.parametrize("with_bias", [True, False])
def test_3d_conv_imports_as_conv3d_and_matches_onnx(device, rng, xs, ws, attrs, with_bias):
    x, w = _r(rng, *xs), _r(rng, *ws)
    model = _one("Conv", x, w, _r(rng, ws[0]) if with_bias else None, attrs)
    assert om.stage_names(model) == ["conv3d"]
    (got,) = om.run_pipeline(model, {"x": x}, device)
    (want,) = om.reference_evaluator(model, {"x": x})
    assert got.shape == want.shape
    assert_close(got, want, "float32", "Conv 3-d")


TRANSPOSE_CASES = [
    ((2, 3, 3, 4, 3), (3, 2, 3, 3, 3), {}),
    ((1, 4, 3, 3, 2), (4, 3, 3, 2, 3), {"strides": [2, 3, 2], "pads": [1, 0, 0, 0, 1, 1]}),
    ((1, 4, 3, 3, 2), (4, 3, 3, 2, 3), {"strides": [2, 3, 2], "output_padding": [1, 2, 1]}),
    ((2, 2, 3, 4, 3), (2, 3, 2, 3, 2), {"dilations": [2, 1, 3], "strides": [1, 2, 2]}),
    ((1, 3, 3, 4, 5), (3, 2, 3, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2, 3]}),
    ((1, 3, 3, 4, 5), (3, 2, 2, 3, 2), {"auto_pad": "SAME_LOWER", "strides": [2, 1, 3]}),
    ((1, 3, 3, 4, 5), (3, 2, 2, 3, 2), {"auto_pad": "VALID", "strides": [2, 1, 3]}),
    (
        (1, 3, 3, 4, 5),
        (3, 2, 3, 3, 3),
        {"output_shape": [8, 9, 11], "strides": [2, 2, 2]},
    ),  # + output_padding
]


@pytest.mark.parametrize(("xs", "ws", "attrs"), TRANSPOSE_CASES)
def test_3d_conv_transpose_imports_as_conv_transpose3d_and_matches_onnx(device, rng, xs, ws, attrs):
    x, w = _r(rng, *xs), _r(rng, *ws)
    model = _one("ConvTranspose", x, w, _r(rng, ws[1]), attrs)
    assert om.stage_names(model) == ["conv_transpose3d"]
    (got,) = om.run_pipeline(model, {"x": x}, device)
    (want,) = om.reference_evaluator(model, {"x": x})
    assert got.shape == want.shape
    assert_close(got, want, "float32", "ConvTranspose 3-d")


def test_an_output_shape_smaller_than_the_full_output_splits_its_pads_as_the_spec(device, rng):
    """Full output [7, 9, 11], output_shape [6, 9, 10]: totals 1, 0, 1, the larger half at the start (the
    spec, as onnxruntime; onnx's reference cannot run it): compared with the explicit pads."""
    x, w = _r(rng, 1, 3, 3, 4, 5), _r(rng, 3, 2, 3, 3, 3)
    model = _one("ConvTranspose", x, w, None, {"output_shape": [6, 9, 10], "strides": [2, 2, 2]})
    explicit = _one("ConvTranspose", x, w, None, {"pads": [1, 0, 1, 0, 0, 0], "strides": [2, 2, 2]})
    (got,) = om.run_pipeline(model, {"x": x}, device)
    assert got.shape == (1, 2, 6, 9, 10)
    assert_close(got, om.reference_evaluator(explicit, {"x": x})[0], "float32", "output_shape")


def test_grouped_3d_conv_transpose_matches_the_gather_sum(device, rng):
    # ONNX's reference ConvTranspose fails on group > 1 (onnx 1.23): the loop reference of
    # test_ops_conv3d stands in for it
    x, w, b = _r(rng, 1, 6, 3, 3, 4), _r(rng, 6, 2, 2, 3, 2), _r(rng, 6)
    attrs = {"group": 3, "strides": [2, 1, 2], "pads": [0, 1, 0, 1, 0, 1], "output_padding": [1, 0, 1]}
    (got,) = om.run_pipeline(_one("ConvTranspose", x, w, b, attrs), {"x": x}, device)
    assert_close(got, conv_transpose_ref(x, w, b, attrs).astype(F), "float32", "grouped ConvTranspose")


def test_a_symbolic_batch_stays_symbolic(device, rng):
    w, b = _r(rng, 4, 3, 3, 3, 3), _r(rng, 4)
    model = _one("Conv", _r(rng, 1, 3, 4, 6, 6), w, b, {"pads": [1] * 6, "strides": [1, 2, 2]}, batch="N")
    with pl_from(model, device) as pipe:
        for batch in (1, 3):
            x = _r(rng, batch, 3, 4, 6, 6)
            (want,) = om.reference_evaluator(model, {"x": x})
            assert_close(pipe.run(x=x)["y"].numpy(), want, "float32", f"batch {batch}")


def pl_from(model, device):
    import pipelink as pl

    return pl.from_onnx(model, device=device)


@pytest.mark.parametrize("fuse", [True, False])
def test_a_video_block_imports_and_matches_onnx(device, rng, fuse):
    import pipelink as pl
    from pipelink.onnx import import_model

    model, feeds = om.video_block(batch=2)
    x = feeds["x"]
    config, weights = import_model(model, fuse=fuse)
    names = [s["name"] for s in config["pipeline"]]
    assert names.count("conv3d") == 2 and "conv2d" not in names, names
    if fuse:  # each BatchNormalization folded, the Relus and the shortcut Add in the convs (fuse_gemm.py)
        assert names == ["conv3d", "conv3d"], names
        assert config["pipeline"][0]["attrs"]["activation"] == "relu"
    with pl.load(config, device=device, weights=weights) as pipe:
        got = pipe.run(x=x)["y"].numpy()
    (want,) = om.reference_evaluator(model, {"x": x})
    assert_close(got, want, "float32", "video block")


@pytest.mark.parametrize(
    ("op", "xs", "ws", "attrs", "why"),
    [
        (
            "Conv",
            (1, 1, 3, 3, 3, 3),
            (1, 1, 2, 2, 2, 2),
            {},
            "a 4-d convolution; PipeLink's are 1-d, 2-d and 3-d",
        ),
        (
            "ConvTranspose",
            (1, 1, 3, 3, 3, 3),
            (1, 1, 2, 2, 2, 2),
            {},
            "a 4-d transposed convolution; PipeLink's are 1-d, 2-d and 3-d",
        ),
        (
            "Conv",
            (1, 2, 4, 4, 4),
            (3, 2, 3, 3, 3),
            {"strides": [1, 1]},
            r"strides=\[1, 1\] must give the 3 spatial dims",
        ),
        (
            "Conv",
            (1, 2, 4, 4, 4),
            (3, 2, 3, 3, 3),
            {"pads": [1, 1, 1, 1]},
            "pads=.* must give a begin and an end for each of the 3 spatial dims",
        ),
        (
            "Conv",
            (1, 2, 4, 4, 4),
            (3, 2, 3, 3, 3),
            {"kernel_shape": [3, 3, 2]},
            "must be the weight's spatial",
        ),
        ("Conv", (1, 2, 4, 4), (3, 2, 3, 3, 3), {}, "disagree on the number of spatial axes"),
        (
            "ConvTranspose",
            (1, 2, 3, 3, 3),
            (2, 1, 2, 2, 2),
            {"output_padding": [1, 1]},
            r"output_padding=\[1, 1\] must give the 3 spatial dims",
        ),
        (
            "ConvTranspose",
            (1, 2, 3, 3, 3),
            (2, 1, 2, 2, 2),
            {"output_shape": [5, 5]},
            r"output_shape=\[5, 5\] must give the 3 spatial dims",
        ),
        (
            "ConvTranspose",
            (1, 2, 3, 3, 3),
            (2, 1, 3, 3, 3),
            {"output_shape": [12, 5, 5]},
            "which would pad the start",
        ),
    ],
)
def test_what_the_import_cannot_express_is_refused_with_its_cause(rng, op, xs, ws, attrs, why):
    model = _one(op, _r(rng, *xs), _r(rng, *ws), None, attrs)
    (entry,) = om.refused(model, why)
    assert entry["op_type"] == op and entry["node"] == "the_node"


def test_the_integer_form_stays_2d():
    """conv2d_stage (ConvInteger's window attributes) refuses a 3-d Conv; conv_stage (Conv's converter
    and the Conv + Relu / residual fusions) makes the conv3d stage."""
    from pipelink.onnx.convert_window import conv2d_stage, conv_stage
    from pipelink.onnx.graph import Node, Unsupported

    class G:
        constants = {"w": np.zeros((2, 1, 3, 3, 3), F)}
        shapes = {"x": (1, 1, 4, 4, 4)}

    node = Node("Conv", "c", "", ["x", "w"], ["y"], {"pads": [1] * 6})
    assert conv_stage(G, node) == ("conv3d", ["x", "w"], {"pads": [1] * 6})
    with pytest.raises(Unsupported, match="a 3-d convolution where a conv2d stage is needed"):
        conv2d_stage(G, node)
