"""ONNX import fusions (``pipelink.onnx.fuse``): each pattern matched (one stage, the right operator and
attributes) and each near miss left alone (a wrong constant, an intermediate read twice or that is a graph
output, a computed bias, a shape that does not fit); fused and unfused models alike compared with
onnxruntime (CPU; ONNX's ReferenceEvaluator without it) on each device at float32 tolerance; the real
GPT-2 block export (where transformers is installed) before and after."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import pipelink as pl  # noqa: E402
from pipelink.onnx import import_model  # noqa: E402
from pipelink.onnx.fuse import CONST_RTOL  # noqa: E402
from tests.backend import onnx_models as om  # noqa: E402
from tests.conftest import assert_close  # noqa: E402

F = np.float32
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _node(op, inputs, outputs, name=None, **attrs):
    return helper.make_node(op, inputs, outputs, name=name or f"/{op}_{outputs[0]}", **attrs)


def _model(nodes, inputs, outputs, init):
    """A float32 model; ``inputs``/``outputs`` are (name, shape) pairs."""
    return om.make_model(nodes, inputs, outputs, init, "fusion_case")


def _c(value, dtype=F):
    return np.array(value, dtype=dtype)


def _stages(model, fuse=True) -> list[dict]:
    return import_model(model, fuse=fuse)[0]["pipeline"]


def _ops(model, fuse=True) -> list[str]:
    return [s["name"] for s in _stages(model, fuse)]


def _check(model, feeds, device) -> None:
    """The fused and the unfused import both match the reference on ``device``."""
    expected = om.run_reference(model, feeds)
    for fuse in (True, False):
        with pl.from_onnx(model, device=device, fuse=fuse) as pipe:
            got = pipe.run(feeds)
            for name, ref in zip(pipe.outputs, expected, strict=True):
                out = np.asarray(got[name].numpy())
                assert out.shape == ref.shape, name
                assert_close(out, ref, "float32", f"{name} (fuse={fuse}) on {device}")


# -- GELU chains --------------------------------------------------------------------------------------
def _gelu_new(c=None, cube="pow", outer="half_first", extra_outputs=()):
    """transformers' gelu_new as PyTorch exports it, with knobs for the near misses: ``c`` overrides
    constants, ``cube`` is "pow" or "mul" (x * (x * x)), ``outer`` the grouping of x * 0.5 * s."""
    c = {"half": 0.5, "k": 0.044715, "beta": SQRT_2_OVER_PI, "one": 1.0, "three": 3.0, **(c or {})}
    init = {k: _c(v) for k, v in c.items()}
    if cube == "pow":
        nodes = [_node("Pow", ["x", "three"], ["cube"])]
    else:
        nodes = [_node("Mul", ["x", "x"], ["sq"]), _node("Mul", ["x", "sq"], ["cube"])]
    nodes += [
        _node("Mul", ["k", "cube"], ["kc"]),
        _node("Add", ["x", "kc"], ["inner"]),
        _node("Mul", ["inner", "beta"], ["arg"]),
        _node("Tanh", ["arg"], ["t"]),
        _node("Add", ["one", "t"], ["s"]),
    ]
    nodes += _outer(outer)
    outputs = [("y", [2, 3, 8])] + [(o, [2, 3, 8]) for o in extra_outputs]
    return _model(nodes, [("x", [2, 3, 8])], outputs, init)


def _outer(outer: str) -> list:
    if outer == "half_first":  # (x * 0.5) * s: gelu_new
        return [_node("Mul", ["x", "half"], ["h"]), _node("Mul", ["h", "s"], ["y"])]
    if outer == "x_first":  # (x * s) * 0.5: nn.GELU's export
        return [_node("Mul", ["x", "s"], ["xs"]), _node("Mul", ["half", "xs"], ["y"])]
    return [_node("Mul", ["s", "half"], ["sh"]), _node("Mul", ["sh", "x"], ["y"])]  # (s * 0.5) * x


def _gelu_erf(c=None, form="div", outer="x_first"):
    c = {"half": 0.5, "one": 1.0, "sqrt2": math.sqrt(2.0), "rsqrt2": 1 / math.sqrt(2.0), **(c or {})}
    init = {k: _c(v) for k, v in c.items()}
    arg = _node("Div", ["x", "sqrt2"], ["arg"]) if form == "div" else _node("Mul", ["rsqrt2", "x"], ["arg"])
    nodes = [arg, _node("Erf", ["arg"], ["t"]), _node("Add", ["t", "one"], ["s"]), *_outer(outer)]
    return _model(nodes, [("x", [2, 3, 8])], [("y", [2, 3, 8])], init)


def _x(rng):
    return {"x": (rng.standard_normal((2, 3, 8)) * 2).astype(F)}


@pytest.mark.parametrize(
    ("build", "approximate"),
    [
        (lambda: _gelu_new(), "tanh"),
        (lambda: _gelu_new(cube="mul", outer="x_first"), "tanh"),
        (lambda: _gelu_new(outer="s_first"), "tanh"),
        (lambda: _gelu_new(c={"beta": 0.7978846, "k": 0.0447149985}), "tanh"),  # float32-rounded
        (lambda: _gelu_erf(), "none"),
        (lambda: _gelu_erf(form="mul", outer="half_first"), "none"),
    ],
    ids=["gelu_new", "nn_gelu_tanh", "s_first", "rounded_constants", "erf_div", "erf_mul"],
)
def test_gelu_chain_becomes_one_gelu_stage(build, approximate, device, rng):
    model = build()
    stages = _stages(model)
    assert [s["name"] for s in stages] == ["gelu"], stages
    assert stages[0]["attrs"] == {"approximate": approximate}
    assert stages[0]["inputs"] == ["x"] and stages[0]["outputs"] == ["y"]
    _check(model, _x(rng), device)


@pytest.mark.parametrize(
    "build",
    [
        lambda: _gelu_new(c={"half": 0.6}),
        lambda: _gelu_new(c={"k": 0.05}),
        lambda: _gelu_new(c={"beta": SQRT_2_OVER_PI * (1 + 100 * CONST_RTOL)}),
        lambda: _gelu_new(c={"three": 2.0}),
        lambda: _gelu_new(c={"one": 2.0}),
        lambda: _gelu_erf(c={"sqrt2": 1.5}),
    ],
    ids=["half", "cubic", "sqrt_2_over_pi", "exponent", "one", "erf_sqrt2"],
)
def test_gelu_chain_with_a_wrong_constant_is_left_alone(build, device, rng):
    model = build()
    assert "gelu" not in _ops(model), "a chain that is not GELU was fused"
    assert len(_stages(model)) == len(model.graph.node)
    _check(model, _x(rng), device)


def test_gelu_chain_with_an_intermediate_graph_output_is_left_alone(device, rng):
    model = _gelu_new(extra_outputs=("t",))
    assert "gelu" not in _ops(model), "the tanh output is a graph output: it must survive"
    _check(model, _x(rng), device)


def test_gelu_chain_with_an_intermediate_read_twice_is_left_alone(device, rng):
    model = _gelu_new()
    model.graph.node.append(_node("Mul", ["inner", "inner"], ["other"]))
    model.graph.output.append(helper.make_tensor_value_info("other", TensorProto.FLOAT, [2, 3, 8]))
    assert "gelu" not in _ops(model), "'inner' is read outside the chain"
    _check(model, _x(rng), device)


def test_gelu_chain_on_two_different_tensors_is_left_alone():
    model = _gelu_new()
    for node in model.graph.node:
        if node.op_type == "Pow":
            node.input[0] = "x2"  # x**3 of another tensor: not GELU of x
    model.graph.input.append(helper.make_tensor_value_info("x2", TensorProto.FLOAT, [2, 3, 8]))
    assert "gelu" not in _ops(model)


def test_gelu_scalar_that_would_broadcast_the_input_is_left_alone():
    model = _gelu_new(c={})
    for t in model.graph.initializer:
        if t.name == "half":  # [1, 1, 1, 1] makes y 4-d: not an elementwise gelu of a 3-d x
            t.CopyFrom(numpy_helper.from_array(np.full((1, 1, 1, 1), 0.5, F), "half"))
    model.graph.output[0].type.tensor_type.shape.Clear()
    assert "gelu" not in _ops(model)


# -- LayerNorm written out ---------------------------------------------------------------------------
C = 8


def _layer_norm(
    rng, *, opset=13, square="pow", axes=(-1,), affine=("gamma", "beta"), eps=1e-5, param_shape=(C,), extra=()
):
    """nn.LayerNorm as PyTorch exports it before opset 17 (axes an attribute before 18, an input from 18)."""
    init = {"two": _c(2.0), "eps": _c(eps)}
    init.update({p: rng.standard_normal(param_shape).astype(F) for p in affine})

    def mean(src, dst):
        if opset >= 18:
            init[f"axes_{dst}"] = np.array(axes, np.int64)
            return _node("ReduceMean", [src, f"axes_{dst}"], [dst])
        return _node("ReduceMean", [src], [dst], axes=list(axes))

    nodes = [mean("x", "mu"), _node("Sub", ["x", "mu"], ["d"])]
    nodes.append(_node("Pow", ["d", "two"], ["d2"]) if square == "pow" else _node("Mul", ["d", "d"], ["d2"]))
    nodes += [
        mean("d2", "var"),
        _node("Add", ["var", "eps"], ["ve"]),
        _node("Sqrt", ["ve"], ["std"]),
        _node("Div", ["d", "std"], ["n"]),
    ]
    last = "n"
    for op, p in zip(("Mul", "Add"), affine, strict=False):
        nodes.append(_node(op, [last, p], [f"{last}_{p}"]))
        last = f"{last}_{p}"
    nodes.append(_node("Identity", [last], ["y"]))
    outputs = [("y", [2, 3, C])] + [(o, None) for o in extra]
    return om.make_model(nodes, [("x", [2, 3, C])], outputs, init, "layer_norm_case", opset=opset)


@pytest.mark.parametrize(
    ("kw", "n_inputs", "rest"),
    [
        ({}, 3, []),
        ({"opset": 18}, 3, []),
        ({"square": "mul", "axes": (2,)}, 3, []),
        ({"affine": ("gamma",)}, 2, []),
        ({"affine": ()}, 1, []),
        ({"param_shape": (3, C)}, 1, ["mul", "add"]),  # a per-row gamma is not layer_norm's: kept
    ],
    ids=["opset13", "opset18", "mul_square_positive_axis", "gamma_only", "no_affine", "row_gamma"],
)
def test_written_out_layer_norm_becomes_one_stage(kw, n_inputs, rest, device, rng):
    model = _layer_norm(rng, **kw)
    stages = _stages(model)
    assert [s["name"] for s in stages] == ["layer_norm", *rest, "identity"], stages
    assert len(stages[0]["inputs"]) == n_inputs and stages[0]["inputs"][0] == "x"
    assert stages[0]["attrs"] == {"axis": -1, "eps": 1e-05}
    _check(model, _x(rng), device)


@pytest.mark.parametrize(
    "kw",
    [{"axes": (1,)}, {"axes": (-2, -1)}, {"extra": ("d",)}, {"extra": ("std",)}],
    ids=["other_axis", "two_axes", "centred_is_an_output", "std_is_an_output"],
)
def test_written_out_layer_norm_near_misses_are_left_alone(kw, device, rng):
    model = _layer_norm(rng, **kw)
    assert "layer_norm" not in _ops(model)
    _check(model, _x(rng), device)


def test_written_out_layer_norm_of_another_mean_is_left_alone(rng):
    model = _layer_norm(rng)
    model.graph.node[1].input[0] = "x2"  # (x2 - mean(x)): not centred on its own mean
    model.graph.input.append(helper.make_tensor_value_info("x2", TensorProto.FLOAT, [2, 3, C]))
    assert "layer_norm" not in _ops(model)


# -- MatMul + bias, gemm epilogues --------------------------------------------------------------------
K, N = 8, 6


def _linear(rng, *, bias_shape=(N,), bias_input=False, extra=(), act=None, residual=False):
    init = {"w": rng.standard_normal((K, N)).astype(F) * 0.3}
    inputs = [("x", [2, 3, K])]
    if bias_input:
        inputs.append(("b", list(bias_shape)))
    else:
        init["b"] = rng.standard_normal(bias_shape).astype(F)
    nodes = [_node("MatMul", ["x", "w"], ["mm"], name="/fc/MatMul"), _node("Add", ["mm", "b"], ["z"])]
    last = "z"
    if act is not None:
        nodes.append(_node(act[0], [last], ["a"], **act[1]))
        last = "a"
    if residual:
        inputs.append(("r", [2, 3, N]))
        nodes.append(_node("Add", ["r", last], ["res"]))
        last = "res"
    nodes.append(_node("Identity", [last], ["y"]))
    outputs = [("y", [2, 3, N])] + [(o, None) for o in extra]
    return _model(nodes, inputs, outputs, init)


def _feeds(model, rng):
    return {
        i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(F)
        for i in model.graph.input
    }


def test_matmul_and_bias_become_one_gemm(device, rng):
    model = _linear(rng)
    stages = _stages(model)
    assert [s["name"] for s in stages] == ["gemm", "identity"]
    assert stages[0]["id"] == "fc_MatMul" and stages[0]["inputs"] == ["x", "w", "b"]
    _check(model, _feeds(model, rng), device)


@pytest.mark.parametrize(
    "kw",
    [{"bias_input": True}, {"bias_shape": (3, N)}, {"bias_shape": (1, N)}, {"extra": ("mm",)}],
    ids=["computed_bias", "bias_not_a_vector", "bias_2d", "product_is_an_output"],
)
def test_matmul_and_add_that_are_not_a_bias_are_left_alone(kw, device, rng):
    model = _linear(rng, **kw)
    assert _ops(model)[:2] == ["matmul", "add"]
    _check(model, _feeds(model, rng), device)


def test_matmul_of_a_computed_weight_is_left_alone(rng):
    model = _linear(rng)
    model.graph.initializer.remove(next(t for t in model.graph.initializer if t.name == "w"))
    model.graph.input.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [K, N]))
    assert _ops(model)[:2] == ["matmul", "add"]


@pytest.mark.parametrize(
    ("act", "activation"),
    [
        (("Relu", {}), "relu"),
        (("Gelu", {}), "gelu"),
        (("Gelu", {"approximate": "tanh"}), "gelu_tanh"),
    ],
)
def test_gemm_takes_the_activation_after_it(act, activation, device, rng):
    model = _linear(rng, act=act)
    stages = _stages(model)
    assert [s["name"] for s in stages] == ["gemm", "identity"]
    assert stages[0]["attrs"] == {"activation": activation} and stages[0]["outputs"] == ["a"]
    _check(model, _feeds(model, rng), device)


def test_gemm_keeps_its_output_when_it_is_read_besides_the_activation(device, rng):
    model = _linear(rng, act=("Relu", {}), extra=("z",))
    assert [s["name"] for s in _stages(model)] == ["gemm", "relu", "identity"]
    _check(model, _feeds(model, rng), device)


def test_gemm_takes_the_residual_after_bias_and_activation(device, rng):
    model = _linear(rng, act=("Gelu", {"approximate": "tanh"}), residual=True)
    stages = _stages(model)
    assert [s["name"] for s in stages] == ["gemm", "identity"]
    assert stages[0]["inputs"] == ["x", "w", "b", "r"] and stages[0]["attrs"] == {"activation": "gelu_tanh"}
    _check(model, _feeds(model, rng), device)


def test_residual_that_broadcasts_is_left_alone(device, rng):
    model = _linear(rng)
    model.graph.node.insert(2, _node("Add", ["z", "r"], ["zr"]))
    model.graph.node[3].input[0] = "zr"
    model.graph.input.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, [N]))
    assert [s["name"] for s in _stages(model)] == ["gemm", "add", "identity"]
    _check(model, _feeds(model, rng), device)


# -- ONNX Gemm between reshapes (PyTorch's Linear / GPT-2 Conv1D on a 3-d input) ----------------------
def _reshaped_gemm(
    rng, *, flat=(-1, K), back=(2, 3, N), bias_shape=(N,), trans_a=0, beta=1.0, residual=False, extra=()
):
    init = {
        "w": rng.standard_normal((K, N)).astype(F) * 0.3,
        "flat": np.array(flat, np.int64),
        "back": np.array(back, np.int64),
    }
    if bias_shape is not None:
        init["b"] = rng.standard_normal(bias_shape).astype(F)
    nodes = [_node("Reshape", ["x", "flat"], ["x2"])]
    gemm_in = ["x2", "w"] + (["b"] if bias_shape is not None else [])
    nodes += [
        _node("Gemm", gemm_in, ["g"], name="/proj/Gemm", transA=trans_a, beta=beta),
        _node("Reshape", ["g", "back"], ["h"]),
    ]
    inputs = [("x", [2, 3, K])]
    out = "h"
    if residual:
        inputs.append(("r", list(back)))
        nodes.append(_node("Add", ["h", "r"], ["y"]))
        out = "y"
    return _model(nodes, inputs, [(out, list(back))] + [(o, None) for o in extra], init)


def test_gemm_between_reshapes_reads_the_3d_input(device, rng):
    model = _reshaped_gemm(rng)
    stages = _stages(model)
    assert [s["name"] for s in stages] == ["gemm"] and stages[0]["inputs"] == ["x", "w", "b"]
    assert stages[0]["id"] == "proj_Gemm"
    _check(model, _feeds(model, rng), device)


def test_gemm_between_reshapes_then_residual_is_one_stage(device, rng):
    model = _reshaped_gemm(rng, residual=True, beta=0.5)
    stages = _stages(model)
    assert [s["name"] for s in stages] == ["gemm"]
    assert stages[0]["inputs"] == ["x", "w", "b", "r"] and stages[0]["attrs"] == {"beta": 0.5}
    _check(model, _feeds(model, rng), device)


def test_gemm_without_bias_takes_the_residual_as_its_bias(device, rng):
    model = _reshaped_gemm(rng, bias_shape=None, residual=True, beta=3.0)  # beta scales no C here
    stages = _stages(model)
    assert [s["name"] for s in stages] == ["gemm"]
    assert stages[0]["inputs"] == ["x", "w", "r"] and "beta" not in stages[0].get("attrs", {})
    _check(model, _feeds(model, rng), device)


@pytest.mark.parametrize(
    "kw",
    [
        {"back": (3, 2, N)},  # rows regrouped another way: not x's leading dims
        {"bias_shape": (6, N)},  # a per-row bias does not broadcast along x's leading dims
        {"trans_a": 1, "flat": (K, -1)},  # a transposed a: [K, M]
        {"extra": ("g",)},  # the 2-d product is a graph output
    ],
    ids=["other_shape", "row_bias", "trans_a", "product_is_an_output"],
)
def test_gemm_between_reshapes_that_do_not_undo_each_other_is_left_alone(kw, device, rng):
    model = _reshaped_gemm(rng, **kw)
    assert _ops(model).count("reshape") == 2
    _check(model, _feeds(model, rng), device)


# -- no-ops -------------------------------------------------------------------------------------------
def test_cast_to_the_same_dtype_is_an_identity_and_others_stay_casts(device, rng):
    nodes = [
        _node("Relu", ["x"], ["r"]),
        _node("Cast", ["r"], ["same"], to=TensorProto.FLOAT),
        _node("Cast", ["same"], ["half"], to=TensorProto.FLOAT16),
        _node("Cast", ["half"], ["y"], to=TensorProto.FLOAT),
    ]
    model = _model(nodes, [("x", [2, 3, 8])], [("y", [2, 3, 8])], {})
    assert _ops(model) == ["relu", "identity", "cast", "cast"]
    assert _ops(model, fuse=False) == ["relu", "cast", "cast", "cast"]
    _check(model, _x(rng), device)


def test_identity_of_a_constant_is_the_constant_unless_it_is_an_output():
    init = {"w": np.ones((8,), F)}
    nodes = [
        _node("Identity", ["w"], ["w2"]),
        _node("Identity", ["w"], ["w_out"]),
        _node("Add", ["x", "w2"], ["y"]),
    ]
    model = _model(nodes, [("x", [2, 8])], [("y", [2, 8]), ("w_out", [8])], init)
    config, weights = import_model(model)
    assert [s["name"] for s in config["pipeline"]] == ["identity", "add"]
    assert config["pipeline"][1]["inputs"] == ["x", "w"] and list(weights) == ["w"], "one array, one name"


def test_fuse_false_imports_one_stage_per_node(rng):
    model = _reshaped_gemm(rng, residual=True)
    assert len(_stages(model, fuse=False)) == len(model.graph.node)
    assert len(_stages(model)) == 1


# -- attention: the scaled, masked softmax ------------------------------------------------------------
S = (2, 3, 8, 8)  # scores [B, H, T, T]


def _masked_softmax(
    *,
    scale="mul",
    mask="const",
    order="scores_first",
    c=0.125,
    mask_shape=(1, 1, 8, 8),
    axis=-1,
    fill=-np.inf,
):
    """Softmax(Add(Mul(s, c), mask)) on scores s (a graph input), with knobs: ``scale`` "mul", "mul_c_first",
    "div" or None; ``mask`` "const" (causal, ``fill`` above the diagonal), "input" (a computed tensor) or
    None; the Add's operand ``order``."""
    init: dict = {}
    nodes, inputs, last = [], [("s", list(S))], "s"
    if scale is not None:
        init["c"] = _c(c) if np.ndim(c) == 0 else np.asarray(c, F)
        ins = ["c", last] if scale == "mul_c_first" else [last, "c"]
        nodes.append(_node("Div" if scale == "div" else "Mul", ins, ["scaled"], name="/attn/Scale"))
        last = "scaled"
    if mask is not None:
        causal = np.tril(np.ones((8, 8), bool))
        value = np.broadcast_to(np.where(causal, 0.0, fill), mask_shape).astype(F)
        if mask == "const":
            init["mask"] = np.ascontiguousarray(value)
        else:
            inputs.append(("mask", list(mask_shape)))
        ins = [last, "mask"] if order == "scores_first" else ["mask", last]
        nodes.append(_node("Add", ins, ["masked"], name="/attn/Add_mask"))
        last = "masked"
    nodes.append(_node("Softmax", [last], ["y"], name="/attn/Softmax", axis=axis))
    return _model(nodes, inputs, [("y", list(S))], init)


def _mask_feeds(model, rng):
    feeds = {"s": (rng.standard_normal(S) * 4).astype(F)}
    if any(i.name == "mask" for i in model.graph.input):
        shape = [
            d.dim_value
            for d in next(i for i in model.graph.input if i.name == "mask").type.tensor_type.shape.dim
        ]
        causal = np.tril(np.ones((8, 8), bool))
        feeds["mask"] = np.ascontiguousarray(np.broadcast_to(np.where(causal, 0.0, -np.inf), shape)).astype(F)
    return feeds


@pytest.mark.parametrize(
    ("kw", "inputs", "attrs"),
    [
        ({}, ["s", "mask"], {"axis": -1, "scale": 0.125}),
        ({"scale": "mul_c_first", "order": "mask_first"}, ["s", "mask"], {"axis": -1, "scale": 0.125}),
        ({"scale": "div", "c": 8.0}, ["s", "mask"], {"axis": -1, "scale": 0.125}),  # / 8 -> * 1/8
        ({"scale": "div", "c": 3.0}, ["s", "mask"], {"axis": -1, "scale": 0.33333334}),
        ({"scale": None}, ["s", "mask"], {"axis": -1}),
        ({"mask": None, "c": 0.5}, ["s"], {"axis": -1, "scale": 0.5}),
        ({"mask": "input"}, ["s", "mask"], {"axis": -1, "scale": 0.125}),  # a computed mask
        ({"mask_shape": (8, 8), "axis": 2}, ["s", "mask"], {"axis": 2, "scale": 0.125}),
        ({"mask_shape": S}, ["s", "mask"], {"axis": -1, "scale": 0.125}),
    ],
    ids=[
        "mul_add",
        "c_first_mask_first",
        "div_exact",
        "div_rounded",
        "add_only",
        "mul_only",
        "mask_input",
        "mask_2d_axis2",
        "mask_full",
    ],
)
def test_scaled_masked_softmax_becomes_one_softmax_stage(kw, inputs, attrs, device, rng):
    model = _masked_softmax(**kw)
    stages = _stages(model)
    assert [s["name"] for s in stages] == ["softmax"], stages
    assert stages[0]["inputs"] == inputs and stages[0]["attrs"] == attrs
    assert stages[0]["id"] == "attn_Softmax" and stages[0]["outputs"] == ["y"]
    _check(model, _mask_feeds(model, rng), device)


def test_scaled_masked_softmax_near_misses_are_left_alone(device, rng):
    # a per-column scale is not a scalar: the Mul stays, the mask still joins the softmax
    model = _masked_softmax(c=np.linspace(0.1, 0.8, 8))
    assert [(s["name"], s.get("attrs")) for s in _stages(model)] == [("mul", None), ("softmax", {"axis": -1})]
    _check(model, _mask_feeds(model, rng), device)
    # dividing by zero, or a constant by the scores, is no scale (the mask still joins the softmax)
    assert _ops(_masked_softmax(scale="div", c=0.0)) == ["div", "softmax"]
    model = _masked_softmax(scale="div")
    model.graph.node[0].input[:] = ["c", "s"]  # c / s
    assert _ops(model) == ["div", "softmax"]
    _check(model, _mask_feeds(model, rng), device)
    # a scale of another dtype than the scores (a double constant; ONNX would refuse the model) is no scale
    model = _masked_softmax()
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.array(0.125, np.float64), "c"))
    assert _ops(model) == ["mul", "softmax"]


@pytest.mark.parametrize("intermediate", ["scaled", "masked"])
def test_scaled_masked_softmax_keeps_an_intermediate_read_elsewhere(intermediate, device, rng):
    """An intermediate that is also a graph output (or read by another node) must survive: the nodes that
    make it stay, and only what follows it joins the softmax."""
    model = _masked_softmax(fill=-1e4)  # a finite mask: the masked scores are compared too
    model.graph.output.append(helper.make_tensor_value_info(intermediate, TensorProto.FLOAT, list(S)))
    expected = {"scaled": ["mul", "softmax"], "masked": ["mul", "add", "softmax"]}[intermediate]
    assert _ops(model) == expected
    _check(model, _mask_feeds(model, rng), device)
    model = _masked_softmax()
    model.graph.node.append(_node("Relu", [intermediate], ["other"]))
    model.graph.output.append(helper.make_tensor_value_info("other", TensorProto.FLOAT, list(S)))
    assert _ops(model) == expected + ["relu"]


def test_a_bias_that_would_broadcast_the_scores_up_is_left_alone(device, rng):
    nodes = [_node("Add", ["a", "b"], ["t"]), _node("Softmax", ["t"], ["y"], axis=-1)]
    model = _model(nodes, [("a", [8, 1]), ("b", [1, 8])], [("y", [8, 8])], {})
    assert _ops(model) == ["add", "softmax"], "neither operand has the sum's shape: no bias of either"
    _check(
        model,
        {"a": rng.standard_normal((8, 1)).astype(F), "b": rng.standard_normal((1, 8)).astype(F)},
        device,
    )


# -- attention: heads out of a split, as strided views ---------------------------------------------------
def _heads_views(stages) -> dict[str, dict]:
    return {s["id"]: s["attrs"] for s in stages if s["name"] == "as_strided"}


def test_split_reshape_transpose_become_three_strided_views(device):
    model, feeds = om.causal_attention(batch=3, masking="add", qkv="split", symbolic_batch=False)
    stages = _stages(model)
    ops = [s["name"] for s in stages]
    assert ops.count("as_strided") == 3 and "split" not in ops and ops.count("transpose") == 1  # the merge
    views = _heads_views(stages)
    t, d = 8, 16
    assert views == {
        "attn_Transpose_q": {"shape": [3, 2, t, 8], "strides": [t * 3 * d, 8, 3 * d, 1], "offset": 0},
        "attn_Transpose_k": {"shape": [3, 2, 8, t], "strides": [t * 3 * d, 8, 1, 3 * d], "offset": d},
        "attn_Transpose_v": {"shape": [3, 2, t, 8], "strides": [t * 3 * d, 8, 3 * d, 1], "offset": 2 * d},
    }
    assert all(s["inputs"] == ["qkv"] for s in stages if s["name"] == "as_strided")
    _check(model, feeds, device)


def test_split_views_need_the_input_shape_known():
    model, _ = om.causal_attention(masking="add", qkv="split")  # a symbolic batch: no element strides
    ops = _ops(model)
    assert "as_strided" not in ops and ops.count("split") == 1 and ops.count("transpose") == 4


def _split_parts(*, tail=("heads", "transpose"), axis=-1, extra_reader=None, opset=21, sizes=(16, 16, 16)):
    """x [2, 8, 48] split along ``axis`` into 3 parts, each through ``tail``: "heads" (Reshape [0, 0, 2, 8]),
    "rows" (Reshape [-1, 16]), "flat" (Reshape [2, -1]), "transpose" (the last two dims of a 2-d or 3-d
    tensor, or [0, 2, 1, 3] of a 4-d one)."""
    init = {
        "heads": np.array([0, 0, 2, 8], np.int64),
        "rows": np.array([-1, 16], np.int64),
        "flat": np.array([2, -1], np.int64),
    }
    split_in, attrs = ["x"], {"axis": axis}
    if sizes is None:
        attrs["num_outputs"] = 3
    else:
        init["sizes"] = np.array(sizes, np.int64)
        split_in.append("sizes")
    parts = ["p0", "p1", "p2"]
    nodes = [_node("Split", split_in, parts, name="/attn/Split", **attrs)]
    outs = []
    for p in parts:
        last, rank = p, 3
        for step in tail:
            out = f"{p}_{step}"
            if step == "transpose":
                perm = {2: [1, 0], 3: [0, 2, 1], 4: [0, 2, 1, 3]}[rank]
                nodes.append(_node("Transpose", [last], [out], name=f"/{out}", perm=perm))
            else:
                nodes.append(_node("Reshape", [last, step], [out], name=f"/{out}"))
                rank = len(init[step])
            last = out
        outs.append((last, None))
    if extra_reader is not None:
        nodes.append(_node("Relu", [extra_reader], ["extra"]))
        outs.append(("extra", None))
    return om.make_model(nodes, [("x", [2, 8, 48])], outs, init, "split_case", opset=opset)


def test_a_split_part_read_elsewhere_is_copied_out_as_it_is(device, rng):
    model = _split_parts(extra_reader="p1")
    stages = _stages(model)
    assert [s["name"] for s in stages] == [
        "as_strided",
        "as_strided",
        "as_strided",
        "reshape",
        "transpose",
        "relu",
    ]
    views = _heads_views(stages)
    assert views["attn_Split_part1"] == {"shape": [2, 8, 16], "strides": [384, 48, 1], "offset": 16}
    assert stages[3]["inputs"] == ["p1"] and stages[5]["inputs"] == ["p1"]
    _check(model, {"x": rng.standard_normal((2, 8, 48)).astype(F)}, device)


def test_a_reshape_that_needs_a_copy_stays_after_the_view(device, rng):
    """[2, 8, 16] parts transposed to [2, 16, 8], then flattened: merging a transposed pair of dims is no
    view, so the reshape stays a stage (its input the view's copy)."""
    model = _split_parts(tail=("transpose", "flat"))
    stages = _stages(model)
    assert [s["name"] for s in stages] == ["as_strided"] * 3 + ["reshape"] * 3
    assert _heads_views(stages)["p0_transpose"] == {"shape": [2, 16, 8], "strides": [384, 1, 48], "offset": 0}
    _check(model, {"x": rng.standard_normal((2, 8, 48)).astype(F)}, device)


def test_reshapes_that_are_views_compose(device, rng):
    """A part's [2, 8] rows merged into 16 rows of 16 (their strides chain: 384 = 8 * 48), transposed,
    then split into heads: each step is a view, so the whole chain is one copy."""
    model = _split_parts(tail=("rows", "transpose"))
    stages = _stages(model)
    assert [s["name"] for s in stages] == ["as_strided"] * 3
    assert _heads_views(stages)["p2_transpose"] == {"shape": [16, 16], "strides": [1, 48], "offset": 32}
    _check(model, {"x": rng.standard_normal((2, 8, 48)).astype(F)}, device)


@pytest.mark.parametrize(
    ("kw", "views"),
    [
        ({"axis": 1, "sizes": (2, 2, 4), "tail": ("transpose",)}, [[2, 48, 2], [2, 48, 2], [2, 48, 4]]),
        ({"opset": 18, "sizes": None, "axis": 2, "tail": ("transpose",)}, [[2, 16, 8]] * 3),
    ],
    ids=["middle_axis", "num_outputs"],
)
def test_split_views_of_other_axes_and_even_splits(kw, views, device, rng):
    model = _split_parts(**kw)
    stages = _stages(model)
    assert [s["attrs"]["shape"] for s in stages if s["name"] == "as_strided"] == views
    _check(model, {"x": rng.standard_normal((2, 8, 48)).astype(F)}, device)


def test_a_split_with_nothing_to_take_is_left_alone(device, rng):
    model = _split_parts(tail=())
    assert _ops(model) == ["split"]
    _check(model, {"x": rng.standard_normal((2, 8, 48)).astype(F)}, device)


# -- Conv -> Relu ---------------------------------------------------------------------------------------
def _conv_weights(rng, bias: bool) -> tuple[dict, list[str]]:
    """A Conv's initializers (w [6, 3, 3, 3], and b [6] with ``bias``) and its input names."""
    init = {"w": rng.standard_normal((6, 3, 3, 3)).astype(F) * 0.3}
    if bias:
        init["b"] = rng.standard_normal(6).astype(F)
    return init, ["x", "w", "b"] if bias else ["x", "w"]


def _conv_relu(extra_reader: bool = False, bias: bool = True):
    rng = np.random.default_rng(7)
    init, inputs = _conv_weights(rng, bias)
    nodes = [
        helper.make_node("Conv", inputs, ["c"], name="/conv/Conv", pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c"], ["y"], name="/relu/Relu"),
    ]
    outputs = [("y", [2, 6, 4, 4])]
    if extra_reader:  # the conv's own output is read too: nothing to fuse
        nodes.append(helper.make_node("Sigmoid", ["c"], ["z"], name="/sigmoid"))
        outputs.append(("z", [2, 6, 4, 4]))
    model = om.make_model(nodes, [("x", [2, 3, 8, 8])], outputs, init, "conv_relu")
    return model, {"x": rng.standard_normal((2, 3, 8, 8)).astype(F)}


@pytest.mark.parametrize("bias", [True, False])
def test_conv_then_relu_is_one_conv2d_with_its_activation(bias, device):
    model, feeds = _conv_relu(bias=bias)
    (stage,) = _stages(model)
    assert stage["name"] == "conv2d" and stage["attrs"]["activation"] == "relu"
    assert stage["attrs"]["pads"] == [1, 1, 1, 1] and stage["attrs"]["strides"] == [2, 2]
    assert stage["outputs"] == ["y"] and len(stage["inputs"]) == (3 if bias else 2)
    _check(model, feeds, device)


def test_a_conv_read_elsewhere_keeps_its_relu():
    model, _ = _conv_relu(extra_reader=True)
    assert _ops(model)[:2] == ["conv2d", "relu"]


# -- Conv -> Add (-> Relu): the residual --------------------------------------------------------------
def _conv_add(*, relu: bool = True, bias: bool = True, r_shape=(2, 6, 4, 4), conv_read_elsewhere=False):
    rng = np.random.default_rng(11)
    init, inputs = _conv_weights(rng, bias)
    nodes = [
        helper.make_node("Conv", inputs, ["c"], name="/conv/Conv", pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Add", ["r", "c"], ["s"], name="/add/Add"),  # the shortcut first: either slot
    ]
    outputs = [("y" if relu else "s", [2, 6, 4, 4])]
    if relu:
        nodes.append(helper.make_node("Relu", ["s"], ["y"], name="/relu/Relu"))
    if conv_read_elsewhere:
        nodes.append(helper.make_node("Sigmoid", ["c"], ["z"], name="/sigmoid"))
        outputs.append(("z", [2, 6, 4, 4]))
    model = om.make_model(nodes, [("x", [2, 3, 8, 8]), ("r", list(r_shape))], outputs, init, "conv_add")
    feeds = {
        "x": rng.standard_normal((2, 3, 8, 8)).astype(F),
        "r": rng.standard_normal(r_shape).astype(F),
    }
    return model, feeds


@pytest.mark.parametrize("relu", [True, False])
def test_conv_add_relu_is_one_conv2d_with_a_residual(relu, device):
    model, feeds = _conv_add(relu=relu)
    (stage,) = _stages(model)
    assert stage["name"] == "conv2d" and stage["inputs"][3:] == ["r"]
    assert stage.get("attrs", {}).get("activation", "none") == ("relu" if relu else "none")
    assert stage["outputs"] == ["y" if relu else "s"]
    _check(model, feeds, device)


@pytest.mark.parametrize(
    "why",
    [
        {"bias": False},  # conv2d's ports are positional: the residual follows the bias
        {"r_shape": (1, 6, 1, 1)},  # a broadcast add is not a residual
        {"conv_read_elsewhere": True},  # the conv's own output is read too
    ],
)
def test_a_conv_add_that_is_no_residual_is_left_to_the_other_patterns(why):
    model, feeds = _conv_add(**why)
    ops = _ops(model)
    assert "add" in ops and all(len(s["inputs"]) <= 3 for s in _stages(model) if s["name"] == "conv2d")
    _check(model, feeds, "cpu")


# -- Conv -> BatchNormalization: folded into the conv's weights ---------------------------------------
def _conv_bn(*, bias=True, after="Relu", bn_mean_computed=False, training=False, conv_read_elsewhere=False):
    rng = np.random.default_rng(13)
    init, inputs = _conv_weights(rng, bias)
    init["scale"] = rng.uniform(0.5, 1.5, 6).astype(F)
    init["shift"] = rng.standard_normal(6).astype(F)
    init["var"] = rng.uniform(0.2, 2.0, 6).astype(F)
    graph_inputs = [("x", [2, 3, 8, 8])]
    if bn_mean_computed:  # the mean is a graph input: nothing to fold
        graph_inputs.append(("mean", [6]))
    else:
        init["mean"] = rng.standard_normal(6).astype(F)
    bn_attrs = {"epsilon": 1e-3}
    if training:
        bn_attrs["training_mode"] = 1
    nodes = [
        helper.make_node("Conv", inputs, ["c"], name="/conv/Conv", pads=[1, 1, 1, 1]),
        helper.make_node(
            "BatchNormalization", ["c", "scale", "shift", "mean", "var"], ["n"], name="/bn", **bn_attrs
        ),
    ]
    feeds = {"x": rng.standard_normal((2, 3, 8, 8)).astype(F)}
    graph_outputs = [("y", [2, 6, 8, 8])]
    if after == "Relu":
        nodes.append(helper.make_node("Relu", ["n"], ["y"], name="/relu"))
    elif after == "Add":
        graph_inputs.append(("r", [2, 6, 8, 8]))
        feeds["r"] = rng.standard_normal((2, 6, 8, 8)).astype(F)
        nodes += [
            helper.make_node("Add", ["n", "r"], ["s"], name="/add"),
            helper.make_node("Relu", ["s"], ["y"], name="/relu"),
        ]
    else:
        graph_outputs = [("n", [2, 6, 8, 8])]
    if conv_read_elsewhere:
        nodes.append(helper.make_node("Sigmoid", ["c"], ["z"], name="/sigmoid"))
        graph_outputs.append(("z", [2, 6, 8, 8]))
    if bn_mean_computed:
        feeds["mean"] = rng.standard_normal(6).astype(F)
    model = om.make_model(nodes, graph_inputs, graph_outputs, init, "conv_bn")
    return model, feeds


@pytest.mark.parametrize(
    ("bias", "after", "want"),
    [
        (True, "Relu", {"activation": "relu", "inputs": 3}),
        (False, "Relu", {"activation": "relu", "inputs": 3}),  # the fold gives the conv a bias
        (True, "Add", {"activation": "relu", "inputs": 4}),  # ResNet's block end, exported unfolded
        (True, None, {"activation": "none", "inputs": 3}),
    ],
)
def test_a_batch_norm_after_a_conv_is_folded_into_its_weights(bias, after, want, device):
    model, feeds = _conv_bn(bias=bias, after=after)
    (stage,) = _stages(model)
    assert stage["name"] == "conv2d" and len(stage["inputs"]) == want["inputs"]
    assert stage.get("attrs", {}).get("activation", "none") == want["activation"]
    config, weights = import_model(model)
    w = weights[config["pipeline"][0]["inputs"][1]]
    s = _conv_bn_scale(model)
    init = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    np.testing.assert_allclose(w, init["w"] * s[:, None, None, None], rtol=1e-6)
    _check(model, feeds, device)


def _conv_bn_scale(model):
    init = {i.name: numpy_helper.to_array(i).astype(np.float64) for i in model.graph.initializer}
    return init["scale"] / np.sqrt(init["var"] + np.float64(np.float32(1e-3)))


@pytest.mark.parametrize(
    "why",
    [
        {"bn_mean_computed": True},  # a parameter the graph computes
        {"conv_read_elsewhere": True},  # the conv's own output is read too
    ],
)
def test_a_batch_norm_that_cannot_be_folded_stays_a_stage(why):
    model, feeds = _conv_bn(**why)
    assert "batch_norm" in _ops(model)
    _check(model, feeds, "cpu")


@pytest.mark.parametrize("bad", ["negative variance", "overflow"])
def test_a_batch_norm_whose_fold_would_change_the_result_stays_a_stage(bad):
    model, _ = _conv_bn()
    init = {i.name: i for i in model.graph.initializer}
    if bad == "negative variance":  # var + eps < 0: the BN computes NaN; the fold would warn and differ
        init["var"].CopyFrom(numpy_helper.from_array(np.full(6, -2.0, F), "var"))
    else:  # scale / sqrt(var + eps) times weights of ~0.3 overflows float32 in the fold only
        init["scale"].CopyFrom(numpy_helper.from_array(np.full(6, 3e38, F), "scale"))
        init["var"].CopyFrom(numpy_helper.from_array(np.full(6, 1e-30, F), "var"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing printed on the way
        assert "batch_norm" in _ops(model)


def test_a_training_batch_norm_is_not_folded(device):
    """training_mode=1 normalises by the batch's statistics, not the constants a fold would use: the
    conv stays, the batch's mean and variance are reduced after it."""
    model, feeds = _conv_bn(training=True)
    ops = _ops(model)
    assert "batch_norm" in ops and ops.count("reduce_mean") == 2
    with pl.from_onnx(model, device=device) as pipe:
        got = np.asarray(pipe.run(feeds)["y"].numpy())
    (want,) = om.reference_evaluator(model, feeds)  # onnxruntime's inference build has no training mode
    assert_close(got, want, "float32", "training batch norm after a conv")


def test_the_helper_built_resnet_folds_its_batch_norms():
    from benchmarks.model_zoo import tiny_model

    model, feeds = tiny_model("resnet18", 1)
    ops = _ops(model)
    assert "batch_norm" not in ops and ops.count("conv2d") == sum(
        n.op_type == "Conv" for n in model.graph.node
    )
    _check(model, feeds, "cpu")


# -- whole models -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["gpt2_block", "resnet18", "espcn"])
def test_model_zoo_twins_fused_and_unfused_match_onnxruntime(name, device):
    from benchmarks.model_zoo import tiny_model

    model, feeds = tiny_model(name, batch=3)
    assert len(_stages(model)) <= len(_stages(model, fuse=False)) == len(model.graph.node)
    _check(model, feeds, device)


def test_tiny_gpt2_twin_fuses_its_mlp_and_attention(device):
    model, feeds = om.gpt2_block()
    fused, unfused = _stages(model), _stages(model, fuse=False)
    mlp = [s for s in fused if s["id"].startswith("mlp_c_")]
    assert [(s["name"], s.get("attrs")) for s in mlp] == [
        ("gemm", {"activation": "gelu_tanh"}),
        ("gemm", None),
    ]
    assert mlp[1]["inputs"][-1] == "res1", "the residual Add is the second gemm's residual"
    (softmax,) = [s for s in fused if s["name"] == "softmax"]
    assert softmax["inputs"] == ["scores_raw", "mask"] and softmax["attrs"] == {
        "axis": -1,
        "scale": 0.35355338,
    }
    # a symbolic batch: the split and the heads' reshapes and transposes stay (their strides need it)
    ops = [s["name"] for s in fused]
    assert "mul" not in ops and "add" not in ops and ops.count("split") == 1
    assert len(unfused) == 28 and len(fused) == 19
    _check(model, feeds, device)


def test_tiny_gpt2_twin_of_a_fixed_batch_takes_its_heads_as_views(device):
    model, feeds = om.gpt2_block(batch=3, symbolic_batch=False)
    fused = _ops(model)
    assert fused.count("as_strided") == 3 and "split" not in fused
    assert fused.count("transpose") == 1 and fused.count("reshape") == 1  # the heads merged back
    assert len(fused) == 15
    _check(model, feeds, device)


def test_real_gpt2_block_export_fuses_and_matches_onnxruntime(device):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from benchmarks.model_zoo import MODELS, export_onnx

    torch.manual_seed(0)
    spec = MODELS["gpt2_block"]
    x = torch.randn(spec.input_shape(2))
    model = onnx.load_from_string(export_onnx(spec.build(torch).eval(), x))
    fused, unfused = _ops(model), _ops(model, fuse=False)
    # the Identity copies of weights are the weights before any fusion (fold.py)
    weights = {t.name for t in model.graph.initializer}
    copies = [n for n in model.graph.node if n.op_type == "Identity" and n.input[0] in weights]
    assert copies and len(unfused) == len([n for n in model.graph.node if n.op_type != "Constant"]) - len(
        copies
    )
    # gelu_new's 8 nodes fold into c_fc's gemm; the 8 Reshapes around the 4 Gemms go; both residual Adds
    # join their gemm; the float32->float32 Cast is a view.
    # The attention: the scaling Mul and the mask Add join the softmax (scale and bias); the Split, the
    # heads' 3 Reshapes and 3 Transposes are 3 as_strided copies out of c_attn's output.
    assert sorted(set(unfused) - set(fused)) == ["add", "cast", "mul", "pow", "split", "tanh"]
    assert fused.count("gemm") == 4 and fused.count("reshape") == 1 and fused.count("transpose") == 1
    assert fused.count("as_strided") == 3 and fused.count("softmax") == 1
    assert len(fused) == len(unfused) - 28 + len(copies)
    _check(model, {"x": x.numpy()}, device)


def test_cli_import_fuses_unless_told_not_to(tmp_path, capsys):
    from pipelink.cli import main

    model, _ = om.mlp_block()
    onnx.save(model, tmp_path / "mlp.onnx")
    counts = {}
    for flag in ("--fuse", "--no-fuse"):
        out = tmp_path / flag
        assert main(["import", str(tmp_path / "mlp.onnx"), "-o", str(out), flag]) == 0
        counts[flag] = len(json.loads((out / "pipeline.json").read_text())["pipeline"])
    assert counts == {"--fuse": 3, "--no-fuse": len(model.graph.node)}, counts
