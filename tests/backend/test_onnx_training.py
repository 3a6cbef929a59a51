"""ONNX's training-domain optimizers (``ai.onnx.preview.training``: Adagrad, Momentum, Adam; lowered by
``onnx/training.py``) against onnx's ReferenceEvaluator on random tensors, at the first update (T = 0)
and later ones, one pipeline for both (R and T are run inputs), one or two updated tensors, on every
device; and the refusals."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper  # noqa: E402

import pipelink as pl  # noqa: E402
from pipelink.onnx import import_model  # noqa: E402
from tests.backend import onnx_models as om  # noqa: E402
from tests.conftest import assert_close  # noqa: E402

DOMAIN = "ai.onnx.preview.training"
STATES = {"Adagrad": ("H",), "Momentum": ("V",), "Adam": ("V", "H")}


def _model(op, count, attrs, dtype=TensorProto.FLOAT, shape=(3, 4)):
    groups = ["X", "G", *STATES[op]]
    tensors = [f"{kind}{i}" for kind in groups for i in range(count)]
    outs = [f"{kind}{i}_new" for kind in ("X", *STATES[op]) for i in range(count)]
    node = helper.make_node(op, ["R", "T", *tensors], outs, name="the_node", domain=DOMAIN, **attrs)
    inputs = [
        helper.make_tensor_value_info("R", TensorProto.FLOAT, []),
        helper.make_tensor_value_info("T", TensorProto.INT64, []),
        *(helper.make_tensor_value_info(t, dtype, list(shape)) for t in tensors),
    ]
    graph = helper.make_graph(
        [node], op, inputs, [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs]
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid(DOMAIN, 1)]
    )
    model.ir_version = om.ORT_IR_VERSION
    return model


def _feeds(rng, model, t, dtype=np.float32):
    feeds = {"R": np.array(0.1, np.float32), "T": np.array(t, np.int64)}
    for info in model.graph.input[2:]:
        shape = [d.dim_value for d in info.type.tensor_type.shape.dim]
        value = rng.standard_normal(shape)
        feeds[info.name] = (np.abs(value) if info.name.startswith("H") else value).astype(dtype)
    return feeds


CASES = [
    ("Adagrad", {"decay_factor": 0.1, "epsilon": 1e-6, "norm_coefficient": 0.01}),
    ("Adagrad", {}),
    ("Momentum", {"alpha": 0.9, "beta": 0.5, "mode": "standard", "norm_coefficient": 0.001}),
    ("Momentum", {"alpha": 0.8, "beta": 0.3, "mode": "nesterov", "norm_coefficient": 0.0}),
    ("Adam", {"alpha": 0.85, "beta": 0.95, "epsilon": 1e-7, "norm_coefficient": 0.02}),
    ("Adam", {"norm_coefficient_post": 0.1}),
]


@pytest.mark.parametrize("count", [1, 2])
@pytest.mark.parametrize(("op", "attrs"), CASES)
def test_optimizers_match_the_reference_at_the_first_and_later_updates(rng, device, op, attrs, count):
    model = _model(op, count, attrs)
    with pl.from_onnx(model, device=device) as pipe:
        for t in (0, 1, 7):  # T = 0 drops the bias corrections and Momentum's beta: one pipeline for all
            feeds = _feeds(rng, model, t)
            got = pipe.run(feeds)
            want = om.reference_evaluator(model, feeds)
            for out, ref in zip(model.graph.output, want, strict=True):
                assert_close(
                    np.asarray(got[out.name].numpy()), ref.astype(np.float32), "float32", f"{op} {out.name}"
                )


def test_a_float64_update_runs_in_float64(rng):
    model = _model("Adam", 1, {"alpha": 0.9, "beta": 0.99}, dtype=TensorProto.DOUBLE)
    feeds = _feeds(rng, model, 3, np.float64)
    with pl.from_onnx(model, device="cpu") as pipe:
        got = pipe.run(feeds)
        for out, ref in zip(model.graph.output, om.reference_evaluator(model, feeds), strict=True):
            value = np.asarray(got[out.name].numpy())
            assert value.dtype == np.float64
            # onnx's reference mixes float32 scalars (R, the attributes) into its float64 terms
            np.testing.assert_allclose(value, ref, rtol=1e-5, atol=1e-8, err_msg=out.name)


@pytest.mark.parametrize(
    ("op", "attrs", "inputs", "dtype", "says"),
    [
        (
            "Momentum",
            {"alpha": 0.9, "beta": 0.5, "mode": "heavy", "norm_coefficient": 0.0},
            None,
            None,
            "mode='heavy'",
        ),
        (
            "Momentum",
            {"alpha": 0.9, "beta": 0.5, "mode": "standard"},
            None,
            None,
            "norm_coefficient is required",
        ),
        ("Adagrad", {}, ["R", "T", "X0", "G0"], None, "takes R, T and then 3 groups"),
        ("Adam", {}, None, TensorProto.INT32, "float tensors of one dtype"),
    ],
)
def test_refusals_name_their_cause(op, attrs, inputs, dtype, says):
    model = _model(op, 1, attrs, dtype=dtype or TensorProto.FLOAT)
    if inputs is not None:
        del model.graph.node[0].input[len(inputs) :]
    with pytest.raises(pl.PipeLinkError, match=says) as e:
        import_model(model)
    assert e.value.code.name == "PIPELINK_ERR_INVALID_ARGUMENT"
