"""gemm, matmul, det, layer_norm and rms_norm against ONNX's own reference implementation
(``onnx.reference.ReferenceEvaluator``) on one-node models, on every device: the ONNX operator's inputs
and attributes mapped to PipeLink's, the outputs (and their shapes) compared."""

from __future__ import annotations

import numpy as np
import pytest

import pipelink as pl
from pipelink.descriptor import infer_outputs

from .ops_helpers import check_close, make_registry, rand, run_op

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

_ELEM = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16, "float64": TensorProto.DOUBLE}
DTYPES = ("float32", "float16", "float64")  # the dtypes ONNX's reference evaluator computes in


@pytest.fixture(scope="module")
def reg():
    return make_registry()


def onnx_run(op_type: str, inputs: list, attrs: dict, n_outputs: int, opset: int) -> list[np.ndarray]:
    """Run one ONNX node on ``inputs`` (None: an omitted optional input) with ONNX's reference evaluator."""
    names = ["" if x is None else f"in{i}" for i, x in enumerate(inputs)]
    feeds = {name: x for name, x in zip(names, inputs, strict=True) if x is not None}
    value_infos = [
        helper.make_tensor_value_info(name, _ELEM[str(x.dtype)], x.shape) for name, x in feeds.items()
    ]
    outs = [f"out{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, names, outs, **attrs)
    graph = helper.make_graph(
        [node],
        "one_node",
        value_infos,
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model).run(None, feeds)


def _check(got: np.ndarray, want: np.ndarray, dtype: str) -> None:
    assert got.shape == want.shape, (got.shape, want.shape)
    check_close(got, np.asarray(want, dtype=np.float64), dtype)


GEMM = [  # A shape, B shape, C shape (None: omitted), ONNX attributes
    ((3, 7), (7, 5), None, {}),
    ((7, 3), (7, 5), (5,), {"transA": 1}),
    ((3, 7), (5, 7), (3, 1), {"transB": 1, "alpha": 0.5, "beta": 2.0}),
    ((7, 3), (5, 7), (), {"transA": 1, "transB": 1, "beta": -1.0}),
    ((3, 7), (7, 5), (3, 5), {"alpha": -0.25, "beta": 0.75}),
    ((3, 7), (7, 5), (1, 5), {}),
    ((1, 64), (64, 48), (48,), {"alpha": 2.0}),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("a_shape", "b_shape", "c_shape", "attrs"), GEMM)
def test_gemm_matches_onnx_gemm(reg, device, rng, dtype, a_shape, b_shape, c_shape, attrs):
    a, b = rand(rng, a_shape, dtype, -1.0, 1.0), rand(rng, b_shape, dtype, -1.0, 1.0)
    c = None if c_shape is None else rand(rng, c_shape, dtype)
    (want,) = onnx_run("Gemm", [a, b, c], attrs, 1, 13)
    ours = {
        "trans_a": bool(attrs.get("transA", 0)),
        "trans_b": bool(attrs.get("transB", 0)),
        "alpha": attrs.get("alpha", 1.0),
        "beta": attrs.get("beta", 1.0),
    }
    (got,) = run_op(reg, "gemm", [a, b, c], ours, device=device)
    _check(got, want, dtype)


MATMUL = [
    ((3, 7), (7, 5)),
    ((7,), (7, 5)),
    ((3, 7), (7,)),
    ((7,), (7,)),
    ((2, 3, 7), (7, 5)),
    ((2, 1, 3, 7), (4, 7, 5)),
    ((1, 4, 3, 7), (2, 1, 7, 5)),
    ((7,), (3, 2, 7, 4)),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("a_shape", "b_shape"), MATMUL)
def test_matmul_matches_onnx_matmul(reg, device, rng, dtype, a_shape, b_shape):
    a, b = rand(rng, a_shape, dtype, -1.0, 1.0), rand(rng, b_shape, dtype, -1.0, 1.0)
    (want,) = onnx_run("MatMul", [a, b], {}, 1, 13)
    (got,) = run_op(reg, "matmul", [a, b], device=device)
    _check(got, want, dtype)


NORMS = [((3, 7), -1), ((2, 5, 33), -1), ((2, 5, 33), -2), ((2, 5, 33), 0), ((3, 4, 5, 6), 1)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (4, 4), (3, 5, 5), (2, 3, 2, 2), (0, 3, 3), (2, 0, 0)])
def test_det_matches_onnx_det(reg, device, rng, dtype, shape):
    """Well-conditioned random matrices (the identity plus noise), an empty batch, 0 x 0 matrices (1)."""
    x = (np.eye(shape[-1]) + 0.3 * rng.standard_normal(shape)).astype(dtype)
    # onnx's reference (numpy.linalg.det) takes no float16: the float64 determinant is the oracle there
    want = np.linalg.det(x.astype(np.float64)) if dtype == "float16" else onnx_run("Det", [x], {}, 1, 22)[0]
    (got,) = run_op(reg, "det", [x], device=device, staged_ok=True)
    _check(got, want, dtype)


def test_det_of_a_singular_matrix_is_zero_and_of_a_non_square_one_refused(reg, device):
    x = np.array([[1.0, 2.0], [2.0, 4.0]], np.float32)
    (got,) = run_op(reg, "det", [x], device=device, staged_ok=True)
    assert got.shape == () and abs(float(got)) < 1e-6
    desc = reg.get("det")
    for bad in [(3,), (2, 3, 4)]:
        with pytest.raises(pl.ShapeMismatchError, match=r"det: x") as info:
            infer_outputs(desc, (bad,), ("float32",), desc.resolve_attrs({}, where="s"), stage="s")
        assert info.value.code == pl.ErrorCode.PIPELINK_ERR_SHAPE_MISMATCH


def test_onnx_det_of_integers_is_refused_naming_the_dtypes():
    from . import onnx_models as om

    model = om.one_node_model("Det", ["x"], {"x": np.ones((2, 2), np.int32)}, {}, {}, ["y"], opset=22)
    with pytest.raises(pl.PipeLinkError, match="dtype int32 is not supported") as info:
        pl.from_onnx(model)
    assert info.value.code == pl.ErrorCode.PIPELINK_ERR_DTYPE_MISMATCH


@pytest.mark.parametrize("dtype", ("float32", "float64"))
@pytest.mark.parametrize(("shape", "axis"), NORMS)
@pytest.mark.parametrize("with_beta", [True, False])
def test_layer_norm_matches_onnx_layer_normalization(reg, device, rng, dtype, shape, axis, with_beta):
    x = rand(rng, shape, dtype, -2.0, 4.0)
    gamma = rand(rng, shape[axis:], dtype)
    beta = rand(rng, shape[axis:], dtype) if with_beta else None
    want = onnx_run("LayerNormalization", [x, gamma, beta], {"axis": axis, "epsilon": 1e-3}, 3, 17)
    got = run_op(reg, "layer_norm", [x, gamma, beta], {"axis": axis, "eps": 1e-3}, device=device)
    for g, w in zip(got, want, strict=True):  # Y, Mean, InvStdDev: values and ONNX's shapes
        _check(g, w, dtype)


@pytest.mark.parametrize("dtype", ("float32", "float64"))
@pytest.mark.parametrize(("shape", "axis"), NORMS)
def test_rms_norm_matches_onnx_rms_normalization(reg, device, rng, dtype, shape, axis):
    x = rand(rng, shape, dtype)
    gamma = rand(rng, shape[axis:], dtype)
    (want,) = onnx_run("RMSNormalization", [x, gamma], {"axis": axis, "epsilon": 1e-2}, 1, 23)
    (got,) = run_op(reg, "rms_norm", [x, gamma], {"axis": axis, "eps": 1e-2}, device=device)
    _check(got, want, dtype)
