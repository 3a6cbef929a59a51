"""ONNX import fusions (``pipelink.onnx.fuse``): each pattern matched (one stage, the right operator and
attributes) and each near miss left alone (a wrong constant, an intermediate read twice or that is a graph
output, a computed bias, a shape that does not fit); fused and unfused models alike compared with
onnxruntime (CPU; ONNX's ReferenceEvaluator without it) on each device at float32 tolerance; the real
GPT-2 block export (where transformers is installed) before and after."""

from __future__ import annotations

import json
import math

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


# -- whole models -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["gpt2_block", "resnet18", "espcn"])
def test_model_zoo_twins_fused_and_unfused_match_onnxruntime(name, device):
    from benchmarks.model_zoo import tiny_model

    model, feeds = tiny_model(name, batch=3)
    assert len(_stages(model)) <= len(_stages(model, fuse=False)) == len(model.graph.node)
    _check(model, feeds, device)


def test_tiny_gpt2_twin_fuses_its_mlp(device):
    model, feeds = om.gpt2_block()
    fused, unfused = _stages(model), _stages(model, fuse=False)
    mlp = [s for s in fused if s["id"].startswith("mlp_c_")]
    assert [(s["name"], s.get("attrs")) for s in mlp] == [
        ("gemm", {"activation": "gelu_tanh"}),
        ("gemm", None),
    ]
    assert mlp[1]["inputs"][-1] == "res1", "the residual Add is the second gemm's residual"
    assert len(fused) == len(unfused) - 4
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
    assert len(unfused) == len([n for n in model.graph.node if n.op_type != "Constant"])
    # gelu_new's 8 nodes fold into c_fc's gemm; the 8 Reshapes around the 4 Gemms go; both residual Adds
    # join their gemm; the Identity copies of weights are the weights; the float32->float32 Cast is a view.
    assert sorted(set(unfused) - set(fused)) == ["cast", "pow", "tanh"]
    assert fused.count("gemm") == 4 and fused.count("reshape") == 4 and fused.count("add") == 1
    assert fused.count("mul") == 1 and len(fused) == len(unfused) - 22
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
