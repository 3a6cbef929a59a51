"""ONNX import: models built with ``onnx.helper`` imported, run on each device and compared with
onnxruntime (CPU) when installed, else ONNX's ReferenceEvaluator; every mapped op type on its own; the
listing of unsupported nodes; the CLI round trip; swapping one node for a native module."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

import pipelink as pl  # noqa: E402
from pipelink.cli import main  # noqa: E402
from pipelink.onnx import CONVERTERS, import_model  # noqa: E402
from tests.backend import onnx_models as om  # noqa: E402
from tests.conftest import assert_close  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MODELS = {
    "mlp_block": om.mlp_block,
    "resnet_block": om.resnet_block,
    "espcn": om.espcn,
    "causal_attention_where": lambda **kw: om.causal_attention(masking="where", **kw),
    "causal_attention_add": lambda **kw: om.causal_attention(masking="add", **kw),
    "gpt2_block": om.gpt2_block,
}


def check_model(pipe, model, feeds) -> None:
    expected = om.run_reference(model, feeds)
    got = pipe.run(feeds)
    assert pipe.outputs == [o.name for o in model.graph.output]
    for name, ref in zip(pipe.outputs, expected, strict=True):
        out = np.asarray(got[name].numpy())
        assert out.shape == ref.shape, name
        assert_close(out, ref, "float32", name)


@pytest.mark.parametrize("name", list(MODELS))
def test_model_matches_the_onnx_reference(name, device):
    model, feeds = MODELS[name]()
    pipe = pl.from_onnx(model, device=device)
    assert pipe.inputs == list(feeds)
    assert set(pipe.weights) and not set(pipe.weights) & set(pipe.inputs)
    check_model(pipe, model, feeds)


@pytest.mark.parametrize(
    ("name", "batches"),
    [
        ("mlp_block", {"batch": (1, 7)}),
        ("resnet_block", {"batch": (1, 3)}),
        ("espcn", {"batch": (1, 2)}),
        ("causal_attention_where", {"batch": (1, 3)}),
        ("gpt2_block", {"batch": (1, 3)}),
    ],
)
def test_symbolic_dims_stay_symbolic(name, batches, device):
    model, _ = MODELS[name]()
    config, _ = import_model(model)
    symbols = [d for decl in config["inputs"].values() for d in decl["shape"] if isinstance(d, str)]
    assert symbols, "the model's dim_param names are kept as symbols"
    pipe = pl.load(config, device=device, weights=import_model(model)[1])
    for batch in batches["batch"]:
        check_model(pipe, model, MODELS[name](batch=batch)[1])


def test_imported_config_declares_inputs_outputs_and_reads_weights():
    model, _ = om.resnet_block()
    config, weights = import_model(model, fuse=False)  # one stage per node (the fused import: below)
    assert config["inputs"] == {"input": {"dtype": "float32", "shape": ["batch_size", 3, 16, 16]}}
    assert config["outputs"] == ["logits"]
    assert "weights" not in config  # the arrays are returned, not written
    initializers = {t.name for t in model.graph.initializer}
    assert set(weights) == initializers
    ops = [s["name"] for s in config["pipeline"]]
    assert ops.count("conv2d") == 3 and ops.count("batch_norm") == 3 and "gemm" in ops
    # ONNX names that are not PipeLink tensor names are made valid, and stay unique.
    tensors = [t for s in config["pipeline"] for t in s["inputs"] + s["outputs"]]
    assert "stem_Conv_output_0" in tensors and not any(t.startswith("/") for t in tensors)
    assert pl.validate(config, device="cpu") != []  # without the weights, the constants are unknown inputs
    # Fused, each BatchNormalization is folded into its Conv: new weights replace the conv's and BN's.
    config, weights = import_model(model)
    ops = [s["name"] for s in config["pipeline"]]
    assert ops.count("conv2d") == 3 and "batch_norm" not in ops
    assert sum(name.endswith("_bn_folded") for name in weights) == 6 and not any(".bn." in n for n in weights)


# -- one node per mapped op type ----------------------------------------------------------------------
F = np.float32


def _r(rng, *shape):
    return rng.standard_normal(shape).astype(F)


def _case(rng, op):
    """(inputs as name -> array, initializers, attrs, n_outputs, opset) for a one-node model of ``op``."""
    x = _r(rng, 2, 3, 4, 5)
    m = _r(rng, 3, 4)
    i64 = lambda *v: np.array(v, dtype=np.int64)  # noqa: E731
    i32 = lambda *v: np.array(v, dtype=np.int32)  # noqa: E731
    cases = {
        "Gemm": ({"a": m}, {"b": _r(rng, 5, 4), "c": _r(rng, 5)}, {"transB": 1, "alpha": 0.5, "beta": 2.0}),
        "MatMul": ({"a": x}, {"b": _r(rng, 5, 6)}, {}),
        "Einsum": ({"a": x}, {"b": _r(rng, 2, 3, 6, 5)}, {"equation": "bhqd,bhkd->bhqk"}),
        # The recurrent cells ([seq 3, batch 2, input 4], hidden 5): more in test_onnx_recurrent.py.
        "LSTM": (
            {"x": _r(rng, 3, 2, 4)},
            {"w": _r(rng, 2, 20, 4), "r": _r(rng, 2, 20, 5), "b": _r(rng, 2, 40)},
            {"hidden_size": 5, "direction": "bidirectional"},
        ),
        "GRU": (
            {"x": _r(rng, 3, 2, 4)},
            {"w": _r(rng, 1, 15, 4), "r": _r(rng, 1, 15, 5), "b": _r(rng, 1, 30)},
            {"hidden_size": 5, "direction": "reverse", "linear_before_reset": 1},
        ),
        "RNN": (
            {"x": _r(rng, 3, 2, 4)},
            {"w": _r(rng, 1, 5, 4), "r": _r(rng, 1, 5, 5), "b": _r(rng, 1, 10)},
            {"hidden_size": 5},
        ),
        "Add": ({"a": x}, {"b": _r(rng, 5)}, {}),
        "Sub": ({"a": x, "b": _r(rng, 4, 1)}, {}, {}),
        "Mul": ({"a": x}, {"b": _r(rng, 1, 3, 1, 1)}, {}),
        "Div": ({"a": x}, {"b": 1.5 + np.abs(_r(rng, 5))}, {}),
        "Pow": ({"a": np.abs(x) + 0.1}, {"b": np.array(3, dtype=np.int64)}, {}),
        "Relu": ({"x": x}, {}, {}),
        "Sigmoid": ({"x": x}, {}, {}),
        "Tanh": ({"x": x}, {}, {}),
        "Gelu": ({"x": x}, {}, {"approximate": "tanh"}),
        "Erf": ({"x": x}, {}, {}),
        "Exp": ({"x": x}, {}, {}),
        "Sqrt": ({"x": np.abs(x)}, {}, {}),
        "HardSwish": ({"x": 4 * x}, {}, {}),
        "Neg": ({"x": x}, {}, {}),
        "Abs": ({"x": x}, {}, {}),
        "Log": ({"x": np.abs(x) + 0.05}, {}, {}),
        "Reciprocal": ({"x": np.sign(x) * (np.abs(x) + 0.25)}, {}, {}),
        "LeakyRelu": ({"x": x}, {}, {"alpha": 0.3}),
        "Elu": ({"x": x}, {}, {"alpha": 0.7}),
        "Celu": ({"x": x}, {}, {"alpha": 1.5}),
        "Selu": ({"x": x}, {}, {}),  # the spec's default alpha and gamma
        "ThresholdedRelu": ({"x": x}, {}, {"alpha": 0.2}),
        "PRelu": ({"x": x}, {"slope": _r(rng, 3, 1, 1)}, {}),
        "Softplus": ({"x": 4 * x}, {}, {}),
        "Softsign": ({"x": x}, {}, {}),
        "Mish": ({"x": 3 * x}, {}, {}),
        "Sin": ({"x": 3 * x}, {}, {}),
        "Cos": ({"x": 3 * x}, {}, {}),
        "Floor": ({"x": 3 * x}, {}, {}),
        "Ceil": ({"x": 3 * x}, {}, {}),
        "Round": ({"x": np.concatenate([3 * x.reshape(-1), [0.5, 1.5, 2.5, -0.5, -2.5]]).astype(F)}, {}, {}),
        "Sign": ({"x": np.concatenate([x.reshape(-1), [0.0, -0.0]]).astype(F)}, {}, {}),
        "Sum": ({"a": x, "b": _r(rng, 5)}, {"c": _r(rng, 4, 1)}, {}),
        "Mean": ({"a": x}, {"b": _r(rng, 3, 1, 1)}, {}),
        "Dropout": ({"x": x}, {"ratio": np.array(0.3, F), "training": np.array(False)}, {}),  # and its mask
        "Tile": ({"x": _r(rng, 2, 3, 1)}, {"repeats": i64(1, 2, 4)}, {}),
        "SpaceToDepth": ({"x": _r(rng, 2, 3, 4, 6)}, {}, {"blocksize": 2}),
        "LogSoftmax": ({"x": 10 * x}, {}, {"axis": 1}),
        "NegativeLogLikelihoodLoss": ({"x": x, "t": rng.integers(0, 3, (2, 4, 5))}, {}, {"ignore_index": 1}),
        "SoftmaxCrossEntropyLoss": (
            {"x": x, "t": rng.integers(0, 3, (2, 4, 5))},
            {"w": _r(rng, 3)},
            {"reduction": "sum"},
        ),  # more in test_onnx_losses.py
        "ReduceLogSumExp": ({"x": 10 * x}, {"axes": i64(1, 3)}, {"keepdims": 0}),
        "ReduceLogSum": ({"x": np.abs(x) + 0.1}, {"axes": i64(2)}, {"keepdims": 1}),
        "Upsample": ({"x": x}, {"scales": np.array([1, 1, 2, 3], F)}, {"mode": "nearest"}),  # opset 9
        # N = C: onnx's reference (1.23) loops its channel window over the batch dim, right only then
        "LRN": ({"x": _r(rng, 3, 3, 4, 5)}, {}, {"size": 3, "alpha": 0.5, "beta": 0.75, "bias": 2.0}),
        "MeanVarianceNormalization": ({"x": x}, {}, {}),
        "LpNormalization": ({"x": x}, {}, {"axis": 1, "p": 2}),
        "ArgMax": ({"x": x}, {}, {"axis": -2, "keepdims": 0, "select_last_index": 1}),
        "ArgMin": ({"x": np.round(x)}, {}, {"axis": 1}),  # ties: the first index
        "Max": ({"a": x, "b": _r(rng, 5)}, {"c": _r(rng, 4, 1)}, {}),  # three inputs: a chain of two
        "Min": ({"a": x}, {"b": _r(rng, 3, 1, 1)}, {}),
        "Clip": ({"x": 3 * x}, {"lo": np.array(-1.0, F), "hi": np.array(2.5, F)}, {}),
        "HardSigmoid": ({"x": 4 * x}, {}, {"alpha": 0.25, "beta": 0.4}),
        "Pad": ({"x": x}, {"pads": i64(0, 1, 2, 0, 0, 2, 1, 3), "v": np.array(0.5, F)}, {"mode": "constant"}),
        "GlobalMaxPool": ({"x": x}, {}, {}),
        "GroupNormalization": (
            {"x": x},
            {"s": _r(rng, 3), "b": _r(rng, 3)},
            {"num_groups": 3, "epsilon": 1e-3},
        ),
        "InstanceNormalization": ({"x": x}, {"s": _r(rng, 3), "b": _r(rng, 3)}, {"epsilon": 1e-3}),
        "Softmax": ({"x": x}, {}, {"axis": 1}),
        "LayerNormalization": (
            {"x": x},
            {"g": _r(rng, 4, 5), "b": _r(rng, 4, 5)},
            {"axis": 2, "epsilon": 1e-3},
        ),
        "Transpose": ({"x": x}, {}, {"perm": [0, 3, 1, 2]}),
        "Reshape": ({"x": x}, {"shape": i64(0, -1, 5)}, {}),
        "Flatten": ({"x": x}, {}, {"axis": 2}),
        "Squeeze": ({"x": _r(rng, 2, 1, 4, 1)}, {"axes": i64(1, -1)}, {}),
        "Unsqueeze": ({"x": m}, {"axes": i64(0, 3)}, {}),
        "Concat": ({"a": x, "b": _r(rng, 2, 3, 1, 5)}, {"c": _r(rng, 2, 3, 2, 5)}, {"axis": 2}),
        "Split": ({"x": x}, {"split": i64(1, 3)}, {"axis": 2}),
        "Slice": (
            {"x": x},
            {"starts": i64(1, -4), "ends": i64(3, 100), "axes": i64(2, 3), "steps": i64(1, 2)},
            {},
        ),
        "Gather": ({"x": x}, {"idx": i64(2, 0, 2)}, {"axis": 1}),
        "GatherElements": ({"x": x}, {"idx": rng.integers(-4, 4, (2, 3, 6, 5))}, {"axis": -2}),
        "Equal": ({"a": np.round(x)}, {"b": np.round(_r(rng, 5))}, {}),
        "Less": ({"a": x, "b": _r(rng, 4, 1)}, {}, {}),
        "Greater": ({"a": x}, {"b": _r(rng, 5)}, {}),
        "LessOrEqual": ({"a": np.round(x)}, {"b": np.round(_r(rng, 1, 3, 1, 1))}, {}),
        "GreaterOrEqual": ({"a": np.round(x), "b": np.round(_r(rng, 5))}, {}, {}),
        "And": ({"a": x > 0}, {"b": _r(rng, 5) > 0}, {}),
        "Or": ({"a": x > 0, "b": _r(rng, 4, 1) < 0}, {}, {}),
        "Xor": ({"a": x > 0}, {"b": _r(rng, 5) > 0}, {}),
        "Not": ({"x": x > 0}, {}, {}),
        "Where": ({"c": x > 0, "a": x}, {"b": _r(rng, 5)}, {}),
        "Expand": ({"x": _r(rng, 3, 1)}, {"shape": i64(2, 3, 4)}, {}),
        # of constants it folds (a graph output copied out); of a run-time batch: test_onnx_fold.py
        "ConstantOfShape": (
            {},
            {"shape": i64(2, 3, 4)},
            {"value": onnx.numpy_helper.from_array(np.array([2.5], F))},
        ),
        # of constants it folds (a graph output copied out); to a run-time batch: test_onnx_fold.py
        "Range": ({}, {"start": np.array(1.5, F), "limit": np.array(7.0, F), "delta": np.array(2.0, F)}, {}),
        "ReduceMean": ({"x": x}, {"axes": i64(1, 3)}, {"keepdims": 1}),
        "ReduceSum": ({"x": x}, {"axes": i64(-1)}, {"keepdims": 0}),
        "ReduceMax": ({"x": x}, {"axes": i64(2)}, {"keepdims": 1}),
        "ReduceMin": ({"x": x}, {"axes": i64(1, 3)}, {"keepdims": 0}),
        "ReduceSumSquare": ({"x": x}, {"axes": i64(-1)}, {"keepdims": 1}),
        "ReduceL2": ({"x": x}, {"axes": i64(0, 2)}, {"keepdims": 0}),
        "ReduceL1": ({"x": x}, {}, {"keepdims": 1}),  # every axis
        "Conv": (
            {"x": _r(rng, 2, 4, 9, 8)},
            {"w": _r(rng, 6, 2, 3, 3), "b": _r(rng, 6)},
            {"group": 2, "strides": [2, 1], "pads": [1, 0, 1, 2], "dilations": [1, 2]},
        ),
        "ConvTranspose": (
            {"x": _r(rng, 1, 4, 5, 6)},
            {"w": _r(rng, 4, 3, 3, 3), "b": _r(rng, 3)},
            {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 0]},
        ),
        "MaxPool": ({"x": x}, {}, {"kernel_shape": [2, 3], "strides": [1, 2], "pads": [0, 1, 0, 1]}),
        "AveragePool": ({"x": x}, {}, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
        "GlobalAveragePool": ({"x": x}, {}, {}),
        "Resize": (
            {"x": x},
            {"roi": np.zeros(0, F), "scales": np.array([1, 1, 2, 1.5], F)},
            {"mode": "linear"},
        ),
        "DepthToSpace": ({"x": _r(rng, 1, 8, 2, 3)}, {}, {"blocksize": 2, "mode": "DCR"}),
        "GridSample": ({"x": x, "grid": _r(rng, 2, 3, 6, 2)}, {}, {"padding_mode": "border"}),
        "AffineGrid": ({"theta": _r(rng, 2, 2, 3)}, {"size": i64(2, 3, 4, 5)}, {"align_corners": 1}),
        "RoiAlign": (
            {
                "x": x,
                "rois": np.array([[0.5, 1, 6, 7], [-1, 0, 9, 5], [2, 2, 3, 3]], F),
                "batch": i64(0, 1, 1),
            },
            {},
            {"output_height": 2, "output_width": 3, "sampling_ratio": 2, "spatial_scale": 0.5},
        ),
        "Col2Im": ({"x": _r(rng, 1, 8, 6)}, {"image": i64(4, 5), "block": i64(2, 4)}, {}),
        "DeformConv": (  # w and b graph inputs: the inputs keep their order x, w, offset, b, mask
            {
                "x": x,
                "w": _r(rng, 4, 3, 2, 2),
                "offset": _r(rng, 2, 8, 4, 5),
                "b": _r(rng, 4),
                "m": _r(rng, 2, 4, 4, 5),
            },
            {},
            {"pads": [1, 0, 0, 1]},
        ),
        "BatchNormalization": (
            {"x": x},
            {"s": _r(rng, 3), "b": _r(rng, 3), "m": _r(rng, 3), "v": 1 + np.abs(_r(rng, 3))},
            {"epsilon": 1e-3},
        ),
        "Identity": ({"x": x}, {}, {}),
        "ScatterND": ({"data": x}, {"i": i64(1, 0, 0, 2).reshape(2, 1, 2), "u": _r(rng, 2, 1, 4, 5)}, {}),
        "GatherND": ({"data": x}, {"i": i64(2, -1, 0, 1, -3, 0).reshape(2, 3, 1)}, {"batch_dims": 1}),
        "ScatterElements": (
            {"data": x},
            {"i": rng.integers(-4, 4, (2, 3, 6, 5)), "u": _r(rng, 2, 3, 6, 5)},
            {"axis": 2, "reduction": "max"},
        ),
        "OneHot": (
            {"i": i64(0, 4, -1, 7, -5, 2)},
            {"depth": np.array(5, np.int64), "values": np.array([-1.0, 2.5], F)},
            {},
        ),
        "EyeLike": ({"x": m}, {}, {"k": 1, "dtype": onnx.TensorProto.INT32}),
        "OptionalGetElement": ({"x": x}, {}, {}),  # opset 18: of a tensor, that tensor
        "TfIdfVectorizer": (
            {"x": rng.integers(0, 6, (3, 8)).astype(np.int64)},
            {},
            {
                "mode": "TFIDF",
                "min_gram_length": 1,
                "max_gram_length": 2,
                "max_skip_count": 2,
                "ngram_counts": [0, 3],
                "ngram_indexes": [0, 1, 2, 3, 4],
                "pool_int64s": [1, 2, 3, 1, 2, 4, 5],
                "weights": [0.5, 1.5, 2.0, 1.0, 3.0],
            },
        ),
        "CastLike": ({"x": 10 * x}, {"like": np.array([7], np.int8)}, {}),
        "CumSum": ({"x": x}, {"axis": np.array(-2, np.int32)}, {"exclusive": 1, "reverse": 1}),
        "CumProd": ({"x": 0.5 * x}, {"axis": np.array(-1, np.int64)}, {"exclusive": 1}),  # opset 26
        "ReduceProd": ({"x": x}, {"axes": i64(1, -1)}, {"keepdims": 0}),
        "TopK": ({"x": np.round(x)}, {"k": i64(2)}, {"axis": 2, "largest": 0}),  # ties: the lower index
        "Hardmax": ({"x": np.round(x)}, {}, {"axis": 1}),
        "Trilu": ({"x": x}, {"k": np.array(-1, np.int64)}, {"upper": 0}),
        "RMSNormalization": ({"x": x}, {"scale": _r(rng, 4, 5)}, {"axis": 2, "epsilon": 1e-3}),  # opset 23
        "RotaryEmbedding": (
            {"x": _r(rng, 2, 3, 4, 8)},
            {"cos": np.cos(_r(rng, 6, 4)), "sin": np.sin(_r(rng, 6, 4)), "pos": rng.integers(0, 6, (2, 4))},
            {"interleaved": 1},
        ),
        "Attention": (  # opset 23: grouped-query heads, causal
            {"q": _r(rng, 2, 4, 5, 8)},
            {"k": _r(rng, 2, 2, 6, 8), "v": _r(rng, 2, 2, 6, 8)},
            {"is_causal": 1},
        ),
        "IsNaN": ({"x": np.where(x > 1, np.nan, x).astype(F)}, {}, {}),
        "IsInf": (
            {"x": np.where(x > 1, np.inf, np.where(x < -1, -np.inf, x)).astype(F)},
            {},
            {"detect_negative": 0},
        ),
        "Mod": ({"a": 7 * x}, {"b": np.array([1.5, -2.0, 3.0, -0.75, 2.5], F)}, {"fmod": 1}),
        "Tan": ({"x": x}, {}, {}),
        "Asin": ({"x": np.tanh(x)}, {}, {}),
        "Acos": ({"x": np.tanh(x)}, {}, {}),
        "Atan": ({"x": 5 * x}, {}, {}),
        "Sinh": ({"x": 2 * x}, {}, {}),
        "Cosh": ({"x": 2 * x}, {}, {}),
        "Asinh": ({"x": 5 * x}, {}, {}),
        "Acosh": ({"x": 1.05 + np.abs(5 * x)}, {}, {}),
        "Atanh": ({"x": 0.95 * np.tanh(x)}, {}, {}),
        "Shrink": ({"x": 3 * x}, {}, {"lambd": 1.0, "bias": 0.25}),
        "Swish": ({"x": 4 * x}, {}, {"alpha": 0.75}),  # opset 24
        "BitwiseAnd": (
            {"a": rng.integers(-(2**31), 2**31, (2, 3, 4, 5), dtype=np.int32)},
            {"b": i32(-6, 5, 255, 0, -1)},
            {},
        ),
        "BitwiseOr": (
            {
                "a": rng.integers(-128, 128, (3, 1), dtype=np.int8),
                "b": rng.integers(-128, 128, (4,), dtype=np.int8),
            },
            {},
            {},
        ),
        "BitwiseXor": (
            {"a": rng.integers(0, 256, (3, 4), dtype=np.uint8)},
            {"b": rng.integers(0, 256, (4,), dtype=np.uint8)},
            {},
        ),
        "BitwiseNot": ({"x": rng.integers(-(2**63), 2**63, (3, 4), dtype=np.int64)}, {}, {}),
        "BitShift": (
            {"a": rng.integers(0, 256, (3, 4), dtype=np.uint8)},
            {"b": np.array([0, 3, 7, 9], np.uint8)},
            {"direction": "LEFT"},
        ),
        "Cast": ({"x": 10 * x}, {}, {"to": onnx.TensorProto.INT32}),
        "BitCast": ({"x": x}, {}, {"to": onnx.TensorProto.INT32}),  # opset 26
        "Det": ({"x": np.eye(3, dtype=F) + 0.3 * _r(rng, 2, 3, 3)}, {}, {}),
        "QuantizeLinear": ({"x": 20 * x}, {"s": np.array(0.5, F), "z": np.array(3, np.int8)}, {}),
        "DequantizeLinear": (
            {"x": rng.integers(-100, 100, (3, 4)).astype(np.int8)},
            {"s": np.array([0.5, 0.25, 2.0], F), "z": np.array([1, -2, 0], np.int8)},
            {"axis": 0},
        ),
        "Compress": ({"x": x}, {"c": np.array([True, False, True, True], bool)}, {"axis": 2}),
        "ReverseSequence": ({"x": x}, {"lens": i64(3, 1)}, {"batch_axis": 0, "time_axis": 1}),
        "CenterCropPad": ({"x": x}, {"shape": i64(7, 2)}, {"axes": [-1, 1]}),
        "GlobalLpPool": ({"x": x}, {}, {"p": 3}),  # onnx's reference has none: NumPy's below
        "LpPool": ({"x": x}, {}, {"kernel_shape": [2, 3], "strides": [2, 1], "p": 2}),
        # onnx/lowerings.py (more in test_onnx_small_lowerings.py); Scatter: opset 10, its oracle below
        "Scatter": ({"data": m}, {"i": i64(0, 2, 1, 2, 1, 0, 2, 0).reshape(2, 4), "u": _r(rng, 2, 4)}, {}),
        "SwiGLU": ({"a": 4 * x, "b": _r(rng, 2, 3, 4, 5)}, {}, {"alpha": 1.702}),  # opset 28
        "DynamicQuantizeLinear": ({"x": 5 * x}, {}, {}),
        # onnx/convert_quantized.py (more in test_onnx_quantized.py)
        "MatMulInteger": (
            {"a": rng.integers(0, 256, (3, 4), dtype=np.uint8)},
            {"b": rng.integers(-128, 128, (4, 5), dtype=np.int8), "az": np.array(7, np.uint8)},
            {},
        ),
        "ConvInteger": (
            {"x": rng.integers(0, 256, (1, 2, 5, 5), dtype=np.uint8)},
            {"w": rng.integers(0, 256, (3, 2, 3, 3), dtype=np.uint8), "xz": np.array(9, np.uint8)},
            {"pads": [1, 1, 1, 1]},
        ),
        "QLinearMatMul": (
            {"a": rng.integers(0, 256, (3, 4), dtype=np.uint8)},
            {
                "as": np.array(0.05, F),
                "az": np.array(120, np.uint8),
                "b": rng.integers(0, 256, (4, 2), dtype=np.uint8),
                "bs": np.array(0.02, F),
                "bz": np.array(130, np.uint8),
                "ys": np.array(0.1, F),
                "yz": np.array(128, np.uint8),
            },
            {},
        ),
        "QLinearConv": (
            {"x": rng.integers(-128, 128, (1, 2, 4, 4), dtype=np.int8)},
            {
                "xs": np.array(0.05, F),
                "xz": np.array(3, np.int8),
                "w": rng.integers(-128, 128, (2, 2, 2, 2), dtype=np.int8),
                "ws": np.array(0.02, F),
                "wz": np.array(0, np.int8),
                "ys": np.array(0.2, F),
                "yz": np.array(-5, np.int8),
            },
            {},
        ),
        "TensorScatter": ({"past": x, "update": _r(rng, 2, 3, 2, 5)}, {"w": i64(3, 1)}, {"mode": "circular"}),
        "MaxUnpool": (
            {"x": _r(rng, 2, 3, 2, 2)},
            {"i": rng.permutation(96)[:24].reshape(2, 3, 2, 2)},
            {"kernel_shape": [2, 2], "strides": [2, 2]},
        ),
        # onnx/spectral.py (more in test_onnx_spectral.py): DFT-20 (axis an input), STFT-17
        "DFT": (
            {"x": _r(rng, 2, 6, 3, 2)},
            {"n": np.array(8, np.int64), "axis": np.array(1, np.int64)},
            {"inverse": 1},
        ),
        "STFT": ({"x": _r(rng, 2, 16, 1)}, {"step": np.array(3, np.int64), "w": _r(rng, 6)}, {}),
        # onnx/stateful.py (more in test_onnx_stateful.py): opset 27, every input given
        "LinearAttention": (
            {"q": _r(rng, 2, 3, 8), "k": 0.5 * _r(rng, 2, 3, 4), "v": _r(rng, 2, 3, 6)},
            {
                "p": 0.3 * _r(rng, 2, 2, 2, 3),
                "g": -0.2 * np.abs(_r(rng, 2, 3, 4)),
                "b": rng.random((2, 3, 2), F),
            },
            {"q_num_heads": 4, "kv_num_heads": 2},
        ),
        "CausalConvWithState": (
            {"x": _r(rng, 2, 3, 6)},
            {"w": _r(rng, 3, 1, 3), "b": _r(rng, 3), "p": _r(rng, 2, 3, 2)},
            {"activation": "silu"},
        ),
    }
    feeds, inits, attrs = cases[op]
    two = ("Split", "Dropout", "TopK", "LinearAttention", "CausalConvWithState")
    n_out = 2 if op in two else 3 if op == "DynamicQuantizeLinear" else 1
    return feeds, inits, attrs, n_out


@pytest.mark.parametrize("op", sorted(CONVERTERS))
def test_each_mapped_op_type_matches_onnx(op, device, rng):
    feeds, inits, attrs, n_out = _case(rng, op)
    names = list(feeds) + list(inits)
    if op == "Resize":
        names = ["x", "roi", "scales"]
    outs = [f"out{k}" for k in range(n_out)]
    node = onnx.helper.make_node(op, names, outs, name=f"the_{op.lower()}", **attrs)
    graph = onnx.helper.make_graph(
        [node],
        op,
        [
            onnx.helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in feeds.items()
        ],
        [onnx.helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in outs],
        [onnx.numpy_helper.from_array(np.asarray(a), n) for n, a in inits.items()],
    )
    opset = {
        "Upsample": 9,
        "Swish": 24,
        "CumProd": 26,
        "Scatter": 10,
        "SwiGLU": 28,
        "TensorScatter": 24,
        "LinearAttention": 27,
        "CausalConvWithState": 27,
        "BitCast": 26,
    }.get(
        op, 23 if op in ("RMSNormalization", "RotaryEmbedding", "Attention") else 21
    )  # Upsample left the standard at opset 10; Swish came at 24, CumProd at 26; the LLM ops at 23, the
    # stateful sequence ops (LinearAttention, CausalConvWithState) at 27
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
    model.ir_version = 10
    pipe = pl.from_onnx(model, device=device)
    if op == "GlobalLpPool":  # onnx's ReferenceEvaluator has no GlobalLpPool (1.23): the spec's formula
        power = np.abs(feeds["x"].astype(np.float64)) ** 3
        expected = [(power.sum(axis=(2, 3), keepdims=True) ** (1 / 3)).astype(F)]
    elif op == "Scatter":  # onnx's ReferenceEvaluator has no Scatter (1.23): its twin ScatterElements
        twin = onnx.ModelProto()
        twin.CopyFrom(model)
        twin.graph.node[0].op_type, twin.opset_import[0].version = "ScatterElements", 11
        expected = om.run_reference(twin, feeds)
    else:
        expected = om.run_reference(model, feeds)
    got = pipe.run(feeds)
    for name, ref in zip(outs, expected, strict=True):
        out = np.asarray(got[name].numpy())
        assert out.shape == ref.shape and out.dtype == ref.dtype, (name, out.shape, ref.shape)
        if ref.dtype.kind == "f":
            assert_close(out, ref, "float32", op)
        else:
            np.testing.assert_array_equal(out, ref)


def test_table_covers_the_brief():
    wanted = {
        "Gemm",
        "MatMul",
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Pow",
        "Relu",
        "Sigmoid",
        "Tanh",
        "Gelu",
        "Erf",
        "Exp",
        "Sqrt",
        "HardSwish",
        "Softmax",
        "LayerNormalization",
        "Transpose",
        "Reshape",
        "Flatten",
        "Squeeze",
        "Unsqueeze",
        "Concat",
        "Split",
        "Slice",
        "Gather",
        "Where",
        "Expand",
        "ReduceMean",
        "ReduceSum",
        "ReduceMax",
        "Conv",
        "ConvTranspose",
        "MaxPool",
        "AveragePool",
        "GlobalAveragePool",
        "Resize",
        "DepthToSpace",
        "BatchNormalization",
        "Identity",
        "Cast",
        "QuantizeLinear",
        "DequantizeLinear",
    }
    assert wanted <= set(CONVERTERS)


@pytest.mark.parametrize(
    ("inputs", "inits", "attrs", "opset", "want"),
    [
        (["x", "lo", "hi"], {"lo": -1.0, "hi": 2.0}, {}, 21, lambda x: np.clip(x, -1.0, 2.0)),
        (["x", "", "hi"], {"hi": 0.5}, {}, 21, lambda x: np.minimum(x, 0.5)),
        (["x", "lo"], {"lo": 0.0}, {}, 21, lambda x: np.maximum(x, 0.0)),
        (["x"], {}, {}, 21, lambda x: x),
        (["x", "lo", "hi"], {"lo": 2.0, "hi": -1.0}, {}, 21, lambda x: np.full_like(x, -1.0)),  # lo > hi
        (["x"], {}, {"min": 0.0, "max": 6.0}, 6, lambda x: np.clip(x, 0.0, 6.0)),  # ReLU6, before opset 11
        (["x"], {}, {"max": 1.0}, 6, lambda x: np.minimum(x, 1.0)),
    ],
)
def test_clip_is_max_then_min_of_its_bounds(rng, inputs, inits, attrs, opset, want):
    x = 4 * _r(rng, 3, 5)
    x[0, 0] = np.nan  # NaN stays NaN, as numpy.clip
    node = onnx.helper.make_node("Clip", inputs, ["y"], name="clip", **attrs)
    init = {k: np.array(v, F) for k, v in inits.items()}
    model = om.make_model([node], [("x", [3, 5])], [("y", [3, 5])], init, "clip", opset=opset)
    with pl.from_onnx(model, device="cpu") as pipe:
        got = pipe.run(x=x)["y"].numpy()
    expected = want(x)
    expected[0, 0] = np.nan
    np.testing.assert_array_equal(got, expected.astype(F))


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "wrap"])
@pytest.mark.parametrize(
    "pads",
    [
        [(1, 2), (0, 3)],
        [(0, 0), (2, 2)],
        [(-1, 1), (1, -2)],  # a negative pad crops, then the positive one pads what is left
        [(3, 0), (0, 0)],
    ],
)
def test_pad_matches_numpy_for_every_mode(rng, mode, pads):
    x = _r(rng, 4, 5)
    inits = {"pads": np.array([p[0] for p in pads] + [p[1] for p in pads], np.int64)}
    names = ["x", "pads"]
    if mode == "constant":
        inits["v"] = np.array(-2.5, F)
        names.append("v")
    node = onnx.helper.make_node("Pad", names, ["y"], name="pad", mode=mode)
    model = om.make_model([node], [("x", [4, 5])], [("y", None)], inits, "pad", opset=19)
    cropped = x[tuple(slice(max(-b, 0), d - max(-e, 0)) for (b, e), d in zip(pads, x.shape, strict=True))]
    widths = [(max(b, 0), max(e, 0)) for b, e in pads]
    extra = {"constant_values": -2.5} if mode == "constant" else {}
    with pl.from_onnx(model, device="cpu") as pipe:
        got = pipe.run(x=x)["y"].numpy()
    np.testing.assert_array_equal(got, np.pad(cropped, widths, mode=mode, **extra))


@pytest.mark.parametrize(
    ("mode", "pads", "why"),
    [
        ("reflect", [(4, 0), (0, 0)], "reflect by 4 on an axis of 4"),
        ("wrap", [(0, 0), (0, 6)], "wrap by 6 on an axis of 5"),
        ("antisymmetric", [(1, 1), (1, 1)], "mode 'antisymmetric'"),
        ("constant", [(-(2**40), 1), (0, 0)], "crops 1099511627776 of axis 0's 4"),  # a hostile file's pads
        ("edge", [(-2, -2), (0, 0)], "crops 4 of axis 0's 4 .pads -2, -2.: nothing would be left"),
    ],
)
def test_pad_refuses_what_it_cannot_build(mode, pads, why):
    inits = {"pads": np.array([p[0] for p in pads] + [p[1] for p in pads], np.int64)}
    node = onnx.helper.make_node("Pad", ["x", "pads"], ["y"], name="pad", mode=mode)
    model = om.make_model([node], [("x", [4, 5])], [("y", None)], inits, "pad", opset=19)
    with pytest.raises(pl.PipeLinkError, match=why):
        import_model(model)


def _group_norm_ref(x, groups, scale, bias, eps):
    n, c = x.shape[:2]
    rows = x.reshape(n, groups, -1).astype(np.float64)
    y = ((rows - rows.mean(-1, keepdims=True)) / np.sqrt(rows.var(-1, keepdims=True) + eps)).reshape(x.shape)
    at = (1, c) + (1,) * (x.ndim - 2)
    return y * scale.reshape(at) + bias.reshape(at)


@pytest.mark.parametrize(
    ("op", "groups", "opset", "params"),
    [
        ("GroupNormalization", 3, 18, 3),  # before opset 21: scale and bias per group
        ("GroupNormalization", 3, 21, 6),  # from opset 21: per channel
        ("GroupNormalization", 1, 21, 6),
        ("InstanceNormalization", None, 21, 6),
    ],
)
def test_group_and_instance_norm_are_layer_norms_of_the_groups(rng, op, groups, opset, params):
    x = _r(rng, 2, 6, 4, 5)
    scale, bias = _r(rng, params), _r(rng, params)
    attrs = {"epsilon": 1e-3} | ({"num_groups": groups} if groups else {})
    node = onnx.helper.make_node(op, ["x", "s", "b"], ["y"], name="norm", **attrs)
    model = om.make_model(
        [node], [("x", ["N", 6, 4, 5])], [("y", None)], {"s": scale, "b": bias}, op, opset=opset
    )
    with pl.from_onnx(model, device="cpu") as pipe:
        got = pipe.run(x=x)["y"].numpy()
    per_channel = (np.repeat(v, 6 // len(v)) for v in (scale, bias))
    want = _group_norm_ref(x, groups or 6, *per_channel, np.float32(1e-3))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [["N", 4, "H", "W"], ["N", "C", "H", 5]])
def test_group_norm_needs_its_channels_and_all_spatial_dims_but_one(shape):
    """One spatial dim known only at run time is the view back's -1 (test_onnx_fold.py); two, or unknown
    channels, are refused."""
    node = onnx.helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], name="norm", num_groups=2)
    init = {"s": np.ones(4, F), "b": np.zeros(4, F)}
    model = om.make_model([node], [("x", shape)], [("y", None)], init, "gn", opset=21)
    with pytest.raises(pl.PipeLinkError, match="its channels and every spatial dim but one"):
        import_model(model)


@pytest.mark.parametrize("op", ["Max", "Min"])
def test_max_and_min_of_one_input_are_a_copy(rng, op):
    x = _r(rng, 2, 3)
    model = om.make_model(
        [onnx.helper.make_node(op, ["x"], ["y"], name="m")], [("x", [2, 3])], [("y", [2, 3])], {}, op
    )
    assert [s["name"] for s in import_model(model)[0]["pipeline"]] == ["identity"]
    with pl.from_onnx(model, device="cpu") as pipe:
        np.testing.assert_array_equal(pipe.run(x=x)["y"].numpy(), x)


def _softmax_rows(x: np.ndarray, axis: int) -> np.ndarray:
    """Softmax before opset 13, as its spec defines it: x seen as [prod(dims before axis), prod(dims from
    axis)], each row normalised (not the reference evaluator's, which uses opset 13's one-axis rule)."""
    rows = x.reshape(int(np.prod(x.shape[:axis])), -1).astype(np.float64)
    e = np.exp(rows - rows.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).reshape(x.shape)


@pytest.mark.parametrize(("shape", "axis"), [((2, 5, 3), 0), ((2, 5, 3), 1), ((1, 4, 4, 4), -2), ((3, 4), 1)])
@pytest.mark.parametrize("dims", ["fixed", "symbolic batch"])
def test_softmax_before_opset_13_normalises_the_flattened_rows(rng, shape, axis, dims):
    x = _r(rng, *shape)
    node = onnx.helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=axis)
    declared = list(shape) if dims == "fixed" else ["N", *shape[1:]]
    model = om.make_model([node], [("x", declared)], [("y", declared)], {}, "softmax11", opset=11)
    with pl.from_onnx(model, device="cpu") as pipe:
        got = pipe.run(x=x)["y"].numpy()
    np.testing.assert_allclose(got, _softmax_rows(x, axis % len(shape)), rtol=1e-5, atol=1e-7)


def test_softmax_before_opset_13_without_the_inputs_rank_is_refused_clearly():
    node = onnx.helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=1)
    model = om.make_model([node], [("x", None)], [("y", None)], {}, "softmax11", opset=11)
    with pytest.raises(pl.PipeLinkError, match="Softmax before opset 13 with axis=1 .*rank"):
        import_model(model)


def test_constant_nodes_fold_into_weights(rng):
    x = _r(rng, 2, 6)
    nodes = [
        onnx.helper.make_node(
            "Constant",
            [],
            ["shape"],
            name="c_shape",
            value=onnx.numpy_helper.from_array(np.array([3, 4], np.int64)),
        ),
        onnx.helper.make_node("Constant", [], ["two"], name="c_two", value_float=2.0),
        onnx.helper.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
        onnx.helper.make_node("Mul", ["r", "two"], ["y"], name="mul"),
    ]
    model = om.make_model(nodes, [("x", [2, 6])], [("y", [3, 4])], {}, "constants")
    config, weights = import_model(model)
    assert list(weights) == ["two"]  # the shape became an attribute; the factor a bound constant
    assert config["pipeline"][0]["attrs"] == {"shape": [3, 4], "allowzero": False}
    pipe = pl.from_onnx(model, device="cpu")
    np.testing.assert_array_equal(pipe.run(x=x)["y"].numpy(), x.reshape(3, 4) * 2)


# -- what cannot be imported ----------------------------------------------------------------------------
def _unsupported_model():
    nodes = [
        onnx.helper.make_node("Relu", ["x"], ["a"], name="fine"),
        onnx.helper.make_node("NonZero", ["a"], ["nz"], name="nonzero"),
        onnx.helper.make_node("Shape", ["a"], ["shape"], name="shape_of_a"),
        onnx.helper.make_node("Reshape", ["a", "shape"], ["b"], name="reshape_computed"),
        onnx.helper.make_node(
            "Resize", ["b", "", "", "sizes"], ["c"], name="nearest_resize", mode="nearest", antialias=1
        ),
        onnx.helper.make_node("MaxPool", ["c"], ["d"], name="pool4d", kernel_shape=[2, 2, 2, 2]),
        onnx.helper.make_node("FusedMatMul", ["d", "d"], ["e"], name="ms_op", domain="com.microsoft"),
        onnx.helper.make_node("Conv", ["e", "w"], ["f"], name="conv"),
    ]
    init = {"sizes": np.array([1, 2, 4, 4, 4], np.int64), "w": np.ones((1, 1, 1, 1, 1, 1), np.float32)}
    return om.make_model(nodes, [("x", [1, 2, 2, 2, 2])], [("f", None)], init, "unsupported")


def test_every_unsupported_node_is_listed_at_once(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(pl.InvalidArgumentError) as info:
        import_model(_unsupported_model(), out_dir=out)
    err = info.value
    assert err.code == pl.ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT
    listed = {(u["op_type"], u["node"]): u["why"] for u in err.unsupported}
    assert set(listed) == {
        ("NonZero", "nonzero"),
        ("Shape", "shape_of_a"),
        ("Reshape", "reshape_computed"),
        ("Resize", "nearest_resize"),
        ("MaxPool", "pool4d"),
        ("FusedMatMul", "ms_op"),
        ("Conv", "conv"),
    }
    assert "no PipeLink operator" in listed[("NonZero", "nonzero")]
    assert "must be a constant" in listed[("Reshape", "reshape_computed")]
    assert "'shape'" in listed[("Reshape", "reshape_computed")]
    assert "antialias" in listed[("Resize", "nearest_resize")]
    assert "4-d window" in listed[("MaxPool", "pool4d")]
    assert "com.microsoft" in listed[("FusedMatMul", "ms_op")]
    assert "4-d convolution" in listed[("Conv", "conv")]
    assert "7 nodes" in err.message and "nothing was imported" in err.message
    assert not out.exists()  # nothing half-imported


def test_unsupported_attribute_value_is_named(rng):
    node = onnx.helper.make_node(
        "BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], name="bn_train", training_mode=2
    )
    init = {k: np.ones(3, np.float32) for k in "sbmv"}
    model = om.make_model([node], [("x", [1, 3, 2, 2])], [("y", None)], init, "train")
    match = r"BatchNormalization node 'bn_train': .*training_mode=2 must be 0 or 1"
    with pytest.raises(pl.InvalidArgumentError, match=match):
        import_model(model)


def test_model_that_is_not_onnx(tmp_path):
    (tmp_path / "m.onnx").write_bytes(b"\x00\xffnot a protobuf at all" * 10)
    with pytest.raises(pl.InvalidArgumentError, match="not a readable ONNX model"):
        import_model(tmp_path / "m.onnx")
    with pytest.raises(pl.InvalidArgumentError, match="not found"):
        import_model(tmp_path / "missing.onnx")
    with pytest.raises(pl.InvalidArgumentError, match="onnx.ModelProto or the path"):
        import_model(42)


def test_missing_onnx_package_says_which_extra(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_onnx(name, *args, **kwargs):
        if name == "onnx":
            raise ImportError("No module named 'onnx'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_onnx)
    with pytest.raises(pl.HardwareUnsupportedError, match=r"pip install 'pipelink\[onnx\]'"):
        import_model("model.onnx")


# -- the command line and editing the written config -----------------------------------------------------
def test_cli_import_round_trip(tmp_path, capsys, rng):
    model, feeds = om.resnet_block()
    onnx.save(model, tmp_path / "resnet.onnx")
    out = tmp_path / "imported"
    assert main(["import", str(tmp_path / "resnet.onnx"), "-o", str(out)]) == 0
    assert "stages" in capsys.readouterr().out
    written = json.loads((out / "pipeline.json").read_text())
    assert written["weights"] == "weights.npz"
    with np.load(out / "weights.npz", allow_pickle=False) as archive:
        assert set(archive.files) == set(import_model(model)[1])  # the weights the stages read
    # An ordinary config: moved elsewhere, it still finds its weights next to it.
    moved = tmp_path / "moved"
    shutil.copytree(out, moved)
    pipe = pl.load(moved / "pipeline.json", device="cpu")
    check_model(pipe, model, feeds)
    np.savez(tmp_path / "in.npz", **feeds)
    assert (
        main(
            [
                "run",
                str(moved / "pipeline.json"),
                "--inputs",
                str(tmp_path / "in.npz"),
                "--device",
                "cpu",
                "-o",
                str(tmp_path / "out.npz"),
            ]
        )
        == 0
    )
    with np.load(tmp_path / "out.npz") as result:
        assert_close(result["logits"], om.run_reference(model, feeds)[0], "float32")
    assert main(["validate", str(moved / "pipeline.json")]) == 0


def test_cli_import_usage_errors_exit_2_on_one_line(tmp_path, capsys):
    assert main(["import", str(tmp_path / "missing.onnx"), "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error[PIPELINK_ERR_INVALID_ARGUMENT]") and "not found" in err and "\n" not in err
    assert main(["import", str(tmp_path / "missing.onnx")]) == 2
    err = capsys.readouterr().err.strip()
    assert "--output" in err and "\n" not in err


def test_replace_one_node_with_a_native_module(tmp_path, rng):
    """docs/onnx-import.md, "Replacing a node with your own module": the exact edit, made and run."""
    from pipelink.modules.build import build_module

    model, feeds = om.mlp_block()
    onnx.save(model, tmp_path / "mlp.onnx")
    assert main(["import", str(tmp_path / "mlp.onnx"), "-o", str(tmp_path / "mlp")]) == 0
    src = ROOT / "examples" / "layernorm_module" / "src"
    build_module([src / "layernorm_cpu.c", src / "layernorm.desc.h"], tmp_path / "mlp/lib/liblayernorm.so")
    path = tmp_path / "mlp" / "pipeline.json"
    config = json.loads(path.read_text())
    stage = next(s for s in config["pipeline"] if s["id"] == "ln_LayerNormalization")
    assert stage == {
        "id": "ln_LayerNormalization",
        "name": "layer_norm",
        "inputs": ["res_Add_output_0", "ln.weight", "ln.bias"],
        "outputs": ["y"],
        "attrs": {"axis": -1, "eps": 1e-05},
    }
    stage.update(
        {
            "name": "layer_norm_v1",
            "library": "lib/liblayernorm.so",
            "inputs": ["res_Add_output_0", "ln.weight", "ln.bias", "ln_eps"],
            "outputs": ["y", "ln_mean", "ln_rstd"],
        }
    )
    del stage["attrs"]
    config["inputs"]["ln_eps"] = {"shape": [], "dtype": "float32"}
    path.write_text(json.dumps(config, indent=2))
    pipe = pl.load(path, device="cpu")
    assert pipe.load_report.versions["ln_LayerNormalization"].startswith("layer_norm_v1@1.0.0")
    got = pipe.run(x=feeds["x"], ln_eps=np.float32(1e-5))["y"].numpy()
    assert_close(np.asarray(got), om.run_reference(model, feeds)[0], "float32")


# -- the refusals of the composed converters ------------------------------------------------------------
def _refusal_model(node, x_decl, init, opset=21):
    return om.make_model([node], [("x", x_decl)], [("y", None)], init, "refused", opset=opset)


@pytest.mark.parametrize(
    ("node", "x_decl", "init", "opset", "why"),
    [
        (
            onnx.helper.make_node("ReduceL2", ["x"], ["y"], name="r", noop_with_empty_axes=1),
            [2, 3],
            {},
            21,
            "ReduceL2 with noop_with_empty_axes and no axes",
        ),
        (
            onnx.helper.make_node("GlobalMaxPool", ["x"], ["y"], name="r"),
            None,
            {},
            21,
            "GlobalMaxPool needs its input's rank",
        ),
        (
            onnx.helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], name="r", num_groups=4),
            [1, 6, 2, 2],
            {"s": np.ones(6, F), "b": np.zeros(6, F)},
            21,
            "6 channels do not split into 4 groups",
        ),
        (
            onnx.helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], name="r"),
            [1, 6, 2, 2],
            {"s": np.ones(5, F), "b": np.zeros(6, F)},
            21,
            "scale has 5 entries for 6 channels",
        ),
        (
            onnx.helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], name="r"),
            [1, 6, 2, 2],
            {"s": np.ones(6, F), "b": np.zeros(6, F)},
            21,
            "required attribute 'num_groups' is missing",  # check.py: its schema requires it
        ),
        (
            onnx.helper.make_node("Pad", ["x", "p"], ["y"], name="r", mode="edge"),
            ["N", 4],
            {"p": np.array([1, 0, 0, 0], np.int64)},
            19,
            "Pad of axis 0, whose size is known only when the model runs",
        ),
        (
            onnx.helper.make_node("Pad", ["x", "p"], ["y"], name="r"),
            [2, 4],
            {"p": np.array([1, 0, 0], np.int64)},
            19,
            "Pad needs 4 pads",
        ),
    ],
)
def test_composed_converters_refuse_what_they_cannot_build(node, x_decl, init, opset, why):
    with pytest.raises(pl.PipeLinkError, match=why) as info:
        import_model(_refusal_model(node, x_decl, init, opset))
    assert info.value.code.name == "PIPELINK_ERR_INVALID_ARGUMENT"
    assert [u["node"] for u in info.value.context["unsupported"]] == ["r"]


# -- the composed converters: semantics the one-node table above does not reach, and their refusals ----


def _one_node(op, inputs, shapes, attrs, inits=None, opset=21, n_out=1):
    node = onnx.helper.make_node(op, inputs, [f"y{k}" for k in range(n_out)], name="the_node", **attrs)
    outs = [(f"y{k}", None) for k in range(n_out)]
    return om.make_model([node], list(zip(inputs, shapes, strict=True)), outs, inits or {}, op, opset=opset)


@pytest.mark.parametrize(("size", "shape"), [(4, (1, 5, 3)), (1, (2, 3, 2, 2)), (5, (2, 6, 3, 4))])
def test_lrn_sums_squares_over_a_channel_window(rng, size, shape):
    x = _r(rng, *shape)
    model = _one_node(
        "LRN", ["x"], [["N", *shape[1:]]], {"size": size, "alpha": 0.3, "beta": 0.6, "bias": 1.5}
    )
    with pl.from_onnx(model, device="cpu") as pipe:
        got = pipe.run(x=x)["y0"].numpy()
    x64, c = x.astype(np.float64), shape[1]
    lo, hi = (size - 1) // 2, (size - 1) - (size - 1) // 2  # the spec's floor and ceil of (size-1)/2
    square_sum = np.stack(
        [(x64[:, max(0, k - lo) : min(c, k + hi + 1)] ** 2).sum(axis=1) for k in range(c)], axis=1
    )
    np.testing.assert_allclose(got, x64 / (1.5 + 0.3 / size * square_sum) ** 0.6, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("p", [1, 2])
def test_lp_normalization_divides_by_the_norm_along_the_axis(rng, p):
    x = _r(rng, 3, 4, 5)
    model = _one_node("LpNormalization", ["x"], [[3, 4, 5]], {"axis": -2, "p": p})
    with pl.from_onnx(model, device="cpu") as pipe:
        got = pipe.run(x=x)["y0"].numpy()
    norm = np.linalg.norm(x.astype(np.float64), ord=p, axis=-2, keepdims=True)
    np.testing.assert_allclose(got, x / norm, rtol=1e-5, atol=1e-6)


def test_log_softmax_before_opset_13_normalises_every_dim_from_the_axis(rng):
    x = 20 * _r(rng, 2, 3, 4)
    model = _one_node("LogSoftmax", ["x"], [[2, 3, 4]], {"axis": 1}, opset=11)
    with pl.from_onnx(model, device="cpu") as pipe:
        got = pipe.run(x=x)["y0"].numpy()
    flat = x.astype(np.float64).reshape(2, 12)
    want = flat - flat.max(axis=1, keepdims=True)
    want = want - np.log(np.exp(want).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(got, want.reshape(x.shape), rtol=1e-5, atol=1e-5)
    # far below the row's maximum, the log-probability stays finite (a log of softmax would be -inf)
    far = np.array([[0.0, -200.0, -1000.0]], F)
    model = _one_node("LogSoftmax", ["x"], [[1, 3]], {"axis": -1})
    with pl.from_onnx(model, device="cpu") as pipe:
        np.testing.assert_allclose(pipe.run(x=far)["y0"].numpy(), [[0.0, -200.0, -1000.0]], atol=1e-4)


@pytest.mark.parametrize(
    ("op", "inputs", "shapes", "attrs", "inits", "opset", "why"),
    [
        (
            "Dropout",
            ["x", "r", "t"],
            [[2, 3]],
            {},
            {"r": np.array(0.5, F), "t": np.array(True)},
            21,
            "training",
        ),
        ("Dropout", ["x"], [["N", 3]], {}, {}, 21, "mask output needs the input's shape"),
        ("Tile", ["x", "r"], [[2, 3], [2]], {}, {}, 21, "must be a constant"),
        ("Tile", ["x", "r"], [["N", 3]], {}, {"r": np.array([1, 65], np.int64)}, 21, "each from 1 to 64"),
        ("SpaceToDepth", ["x"], [[1, 2, 5, 4]], {"blocksize": 2}, {}, 21, "divide H=5"),
        ("SpaceToDepth", ["x"], [[1, 2, 4, 4]], {"blocksize": 2, "mode": "RCD"}, {}, 28, "mode 'RCD'"),
        ("LRN", ["x"], [["N", "C", 3, 3]], {"size": 3}, {}, 21, "every dim but N known"),
        ("LogSoftmax", ["x"], [None], {"axis": 1}, {}, 11, "needs the input's rank"),
        ("LpNormalization", ["x"], [[2, 3]], {"p": 3}, {}, 21, "p=3"),
        ("ReduceLogSumExp", ["x"], [[2, 3]], {"noop_with_empty_axes": 1}, {}, 21, "noop_with_empty_axes"),
        ("Upsample", ["x"], [[1, 1, 2, 2]], {"mode": "nearest"}, {}, 8, "required attribute 'scales'"),
    ],
)
def test_composed_converters_refuse_what_they_cannot_express(op, inputs, shapes, attrs, inits, opset, why):
    feeds = [n for n in inputs if n not in inits]
    n_out = 2 if op == "Dropout" else 1
    node = onnx.helper.make_node(op, inputs, [f"y{k}" for k in range(n_out)], name="the_node", **attrs)
    graph = onnx.helper.make_graph(
        [node],
        op,
        [
            onnx.helper.make_tensor_value_info(
                n, onnx.TensorProto.INT64 if n == "r" and op == "Tile" else onnx.TensorProto.FLOAT, s
            )
            for n, s in zip(feeds, shapes, strict=True)
        ],
        [onnx.helper.make_tensor_value_info(f"y{k}", onnx.TensorProto.UNDEFINED, None) for k in range(n_out)],
        [onnx.numpy_helper.from_array(np.asarray(a), n) for n, a in inits.items()],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
    model.ir_version = 8
    with pytest.raises(pl.PipeLinkError, match=why) as info:
        import_model(model)
    assert info.value.code.name == "PIPELINK_ERR_INVALID_ARGUMENT"
    assert info.value.unsupported[0]["op_type"] == op and info.value.unsupported[0]["node"] == "the_node"


@pytest.mark.parametrize(
    ("op", "attrs", "with_weight"),
    [
        ("Conv", {"group": 2, "strides": [2], "pads": [1, 2], "dilations": [2]}, True),
        ("Conv", {"auto_pad": "SAME_UPPER"}, True),
        ("MaxPool", {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}, False),
        ("AveragePool", {"kernel_shape": [2], "count_include_pad": 1, "pads": [0, 1]}, False),
    ],
)
def test_1d_windows_run_as_2d_ones_over_a_unit_height(rng, device, op, attrs, with_weight):
    """Conv1d (Whisper's and wav2vec's front ends) and 1-d pools: unsqueezed to [N, C, 1, L], the 2-d
    operator, squeezed back; the batch stays symbolic."""
    x = _r(rng, 2, 4, 11)
    inits = {"w": _r(rng, 6, 2, 3), "b": _r(rng, 6)} if with_weight else {}
    if with_weight and "group" not in attrs:
        inits["w"] = _r(rng, 6, 4, 3)
    node = onnx.helper.make_node(op, ["x", *inits], ["y"], name="window", **attrs)
    model = om.make_model([node], [("x", ["N", 4, 11])], [("y", None)], inits, op, opset=18)
    want = om.run_reference(model, {"x": x})[0]
    with pl.from_onnx(model, device=device) as pipe:
        got = pipe.run(x=x)["y"].numpy()
    assert got.shape == want.shape
    assert_close(got, want, "float32", op)


@pytest.mark.parametrize(("op", "opset"), [("Upsample", 7), ("Upsample", 9), ("Resize", 10)])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample_and_resize_10_map_pixels_asymmetrically(op, opset, mode):
    """The spec's Upsample examples: a pixel x maps to x / scale (nearest: its floor), clamped at the edge;
    Resize-10 runs the same way (it has no coordinate modes), as onnxruntime runs it."""
    x = np.array([[[[1, 2], [3, 4]]]], F)
    scales = [1.0, 1.0, 2.0, 2.0] if mode == "linear" else [1.0, 1.0, 2.0, 3.0]
    const = opset >= 9
    inputs = ["x", "scales"] if const else ["x"]
    attrs = {"mode": mode} | ({} if const else {"scales": scales})
    node = onnx.helper.make_node(op, inputs, ["y"], name="up", **attrs)
    inits = {"scales": np.array(scales, F)} if const else {}
    model = om.make_model([node], [("x", [1, 1, 2, 2])], [("y", None)], inits, op, opset=opset)
    model.ir_version = 8
    with pl.from_onnx(model, device="cpu") as pipe:
        got = pipe.run(x=x)["y"].numpy()[0, 0]
    if mode == "linear":
        want = [[1, 1.5, 2, 2], [2, 2.5, 3, 3], [3, 3.5, 4, 4], [3, 3.5, 4, 4]]
    else:
        want = [[1, 1, 1, 2, 2, 2], [1, 1, 1, 2, 2, 2], [3, 3, 3, 4, 4, 4], [3, 3, 3, 4, 4, 4]]
    np.testing.assert_array_equal(got, np.array(want, F))


@pytest.mark.parametrize("axes", [[2, 3], [3, 2], [-1, -2]])
@pytest.mark.parametrize("given", ["scales", "sizes"])
def test_resize_axes_spread_the_scales_or_sizes_over_every_axis(rng, device, axes, given):
    """Resize-18's ``axes``: the values given for those axes, in that order; the other axes keep their
    size (a symbolic batch too, with scales)."""
    x = _r(rng, 2, 3, 4, 5)
    values = {"scales": np.array([2.0, 0.5], F), "sizes": np.array([7, 3], np.int64)}[given]
    inputs = ["x", "", "scales"] if given == "scales" else ["x", "", "", "sizes"]
    node = onnx.helper.make_node("Resize", inputs, ["y"], name="resize", mode="linear", axes=axes)
    batch = "N" if given == "scales" else 2
    model = om.make_model([node], [("x", [batch, 3, 4, 5])], [("y", None)], {given: values}, "r", opset=19)
    # onnx's reference takes no negative axes (the spec does): its twin with them counted from the front
    twin = onnx.helper.make_node("Resize", inputs, ["y"], mode="linear", axes=[a % 4 for a in axes])
    twin = om.make_model([twin], [("x", [batch, 3, 4, 5])], [("y", None)], {given: values}, "r", opset=19)
    want = om.reference_evaluator(twin, {"x": x})[0]
    with pl.from_onnx(model, device=device) as pipe:
        got = pipe.run(x=x)["y"].numpy()
    assert got.shape == want.shape
    assert_close(got, want, "float32", "Resize axes")


def test_resize_axes_refusals():
    def refused(axes, x_shape, given="scales", values=(2.0, 2.0)):
        inputs = ["x", "", "scales"] if given == "scales" else ["x", "", "", "sizes"]
        dtype = F if given == "scales" else np.int64
        node = onnx.helper.make_node("Resize", inputs, ["y"], name="resize", axes=axes)
        model = om.make_model(
            [node], [("x", x_shape)], [("y", None)], {given: np.array(values, dtype)}, "r", 19
        )
        return om.refused(model, "Resize")[0]["why"]

    assert "must be distinct axes of x's rank 4" in refused([2, 2], [1, 1, 4, 4])
    assert "one scale or size per axis" in refused([2, 3], [1, 1, 4, 4], values=(2.0,))
    assert "need x's other dims known at import" in refused([2, 3], ["N", 1, 4, 4], "sizes", (8, 8))


@pytest.mark.parametrize(
    ("policy", "x_shape", "sizes", "axes"),
    [
        ("not_larger", [1, 1, 4, 4], [1, 1, 7, 8], None),  # one scale 7/4: [7, 7]
        ("not_smaller", [1, 1, 4, 4], [1, 1, 7, 8], None),  # 8/4: [8, 8]
        ("not_larger", [2, 3, 6, 4], [3, 8], [2, 3]),  # 3/6: [3, 2]
        ("not_smaller", [2, 3, 6, 4], [2, 12], [3, 2]),  # axes in another order: 2: [12, 8]
    ],
)
def test_resize_keeps_the_aspect_ratio_at_one_scale(rng, device, policy, x_shape, sizes, axes):
    x = _r(rng, *x_shape)
    attrs = {"mode": "nearest", "keep_aspect_ratio_policy": policy} | ({"axes": axes} if axes else {})
    node = onnx.helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], name="resize", **attrs)
    inits = {"sizes": np.array(sizes, np.int64)}
    model = om.make_model([node], [("x", x_shape)], [("y", None)], inits, "r", opset=19)
    want = om.reference_evaluator(model, {"x": x})[0]
    with pl.from_onnx(model, device=device) as pipe:
        got = pipe.run(x=x)["y"].numpy()
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize(
    ("policy", "x_shape", "sizes"),
    [
        ("not_smaller", [1, 1, 2, 4], [1, 3]),
        ("not_larger", [1, 2, 5, 3], [3, 4]),
        ("not_smaller", [1, 1, 3, 5], [4, 2]),
    ],
)
def test_resize_keeping_the_aspect_ratio_samples_at_the_one_scale(rng, device, mode, policy, x_shape, sizes):
    """not_smaller of [2, 4] to [1, 3]: the scale 0.75 gives sizes [2, 3] (rounded half up), and both axes
    are sampled at 0.75, though 2 / 2 is 1: resize takes the sizes and the scales both."""
    attrs = {"keep_aspect_ratio_policy": policy, "axes": [2, 3], "mode": mode}
    node = onnx.helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], name="resize", **attrs)
    inits = {"sizes": np.array(sizes, np.int64)}
    model = om.make_model([node], [("x", x_shape)], [("y", None)], inits, "r", opset=19)
    (stage,) = import_model(model)[0]["pipeline"]
    assert stage["attrs"]["scales"][:2] == [1.0, 1.0] and len(set(stage["attrs"]["scales"][2:])) == 1
    x = _r(rng, *x_shape)
    want = om.reference_evaluator(model, {"x": x})[0]
    with pl.from_onnx(model, device=device) as pipe:
        got = pipe.run(x=x)["y"].numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_resize_keep_aspect_ratio_policy_outside_the_spec_is_refused():
    attrs = {"keep_aspect_ratio_policy": "fill"}
    node = onnx.helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], name="resize", **attrs)
    inits = {"sizes": np.array([1, 1, 4, 4], np.int64)}
    model = om.make_model([node], [("x", [1, 1, 2, 2])], [("y", None)], inits, "r", opset=19)
    assert "the spec's are stretch, not_larger, not_smaller" in om.refused(model, "Resize")[0]["why"]
