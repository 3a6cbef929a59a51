"""The op types of ONNX's ai.onnx.ml domain PipeLink imports (``onnx/ml.py``: Binarizer and
ArrayFeatureExtractor) against onnx's ReferenceEvaluator on every device, and the refusals: of the
domain's other op types (named with what PipeLink takes from it) and of what the lowerings cannot express."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper  # noqa: E402

import pipelink as pl  # noqa: E402
from pipelink.onnx import import_model  # noqa: E402
from tests.backend import onnx_models as om  # noqa: E402

ML = "ai.onnx.ml"


def _model(op, inputs, attrs=None, outputs=("y",)):
    node = helper.make_node(
        op, [n for n, *_ in inputs], list(outputs), name="the_node", domain=ML, **(attrs or {})
    )
    graph = helper.make_graph(
        [node],
        op,
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid(ML, 3)])
    model.ir_version = om.ORT_IR_VERSION
    return model


@pytest.mark.parametrize(
    ("elem", "dtype", "threshold"),
    [
        (TensorProto.FLOAT, np.float32, 0.25),
        (TensorProto.DOUBLE, np.float64, -1.0),
        (TensorProto.INT64, np.int64, -1.5),  # an integer x: above -1.5 is above -2
        (TensorProto.INT32, np.int32, 2.0),
    ],
)
def test_binarizer_matches_the_reference(rng, device, elem, dtype, threshold):
    model = _model("Binarizer", [("x", elem, [3, 5])], {"threshold": threshold})
    x = (rng.standard_normal((3, 5)) * 3).astype(dtype)
    with pl.from_onnx(model, device=device) as pipe:
        got = np.asarray(pipe.run(x=x)["y"].numpy())
    (want,) = om.reference_evaluator(model, {"x": x})
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    ("x_shape", "indices"),
    [([3, 4], [2, 0, 2]), ([2, 3, 5], [[4, 1]]), ([6], [5, 0]), ([2, 4], [[1, 3], [0, 2]])],
)
def test_array_feature_extractor_matches_the_reference(rng, device, x_shape, indices):
    indices = np.array(indices, np.int64)
    model = _model(
        "ArrayFeatureExtractor",
        [("x", TensorProto.FLOAT, x_shape), ("i", TensorProto.INT64, list(indices.shape))],
    )
    x = rng.standard_normal(x_shape).astype(np.float32)
    with pl.from_onnx(model, device=device) as pipe:
        got = np.asarray(pipe.run(x=x, i=indices)["y"].numpy())
    (want,) = om.reference_evaluator(model, {"x": x, "i": indices})
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_refusals_name_their_cause():
    scaler = _model("Scaler", [("x", TensorProto.FLOAT, [2, 3])], {"scale": [2.0, 1.0, 1.0]})
    with pytest.raises(
        pl.PipeLinkError, match=r"domain 'ai.onnx.ml' \(PipeLink imports ArrayFeatureExtractor, Binarizer"
    ):
        import_model(scaler)
    infinite = _model("Binarizer", [("x", TensorProto.INT64, [2])], {"threshold": float("inf")})
    with pytest.raises(pl.PipeLinkError, match="threshold inf: give a finite one") as e:
        import_model(infinite)
    assert e.value.code.name == "PIPELINK_ERR_INVALID_ARGUMENT"
    boolean = _model("Binarizer", [("x", TensorProto.BOOL, [2])])
    with pytest.raises(pl.PipeLinkError, match="Binarizer of x bool: the spec's are floats, int32, int64"):
        import_model(boolean)
    unranked = _model(
        "ArrayFeatureExtractor", [("x", TensorProto.FLOAT, None), ("i", TensorProto.INT64, [1])]
    )
    with pytest.raises(pl.PipeLinkError, match="needs x's rank known"):
        import_model(unranked)
