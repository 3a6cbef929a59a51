"""ONNX NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss at import (``onnx/losses.py``: lowered onto
gather_elements, gather, where, neg, mul and the reductions): one-node models against onnx's
ReferenceEvaluator on random inputs on every device, the spec's semantics where the reference departs
from it, a target out of range at run time, and every refusal."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper, numpy_helper  # noqa: E402

import pipelink as pl  # noqa: E402
from pipelink.onnx import import_model  # noqa: E402
from tests.backend import onnx_models as om  # noqa: E402
from tests.backend.onnx_models import run_pipeline as _run  # noqa: E402
from tests.backend.onnx_oracle import run_onnx  # noqa: E402
from tests.conftest import assert_close  # noqa: E402

F, I64, I32 = np.float32, np.int64, np.int32
BF16 = np.dtype(ml_dtypes.bfloat16)
NLL, SCE = "NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"
OPSET = {NLL: 22, SCE: 13}


def _model(op, feeds, attrs, *, inits=None, n_out=1, opset=None, names=None):
    """A one-node model of ``op``: ``feeds`` typed graph inputs (name -> array, or (dtype, shape) for a
    declared one), then ``inits`` initializers; ``names`` overrides the node's inputs."""
    inits = inits or {}
    inputs = []
    for name, value in feeds.items():
        dtype, shape = value if isinstance(value, tuple) else (value.dtype, value.shape)
        inputs.append(
            helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), shape)
        )
    outputs = [f"y{k}" for k in range(n_out)]
    node = helper.make_node(op, names or [*feeds, *inits], outputs, name="the_node", **attrs)
    graph = helper.make_graph(
        [node],
        op,
        inputs,
        [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset or OPSET[op])])
    model.ir_version = 10
    return model


def _draw(rng, shape, dtype=F, target_dtype=I64, ignore=None, low=0):
    """Scores or log-probabilities [N, C, ...], targets in [low, C) (a third of them ``ignore`` when
    given, at least one kept), weights [C] in [0.5, 1.5)."""
    x = rng.standard_normal(shape).astype(dtype)
    classes = shape[1]
    target = rng.integers(low, classes, (shape[0], *shape[2:])).astype(target_dtype)
    if ignore is not None:
        hidden = rng.random(target.shape) < 1 / 3
        hidden.flat[0], hidden.flat[-1] = True, False
        target[hidden] = ignore
    weight = (0.5 + rng.random(classes)).astype(dtype)
    return x, target, weight


def _check(got, want, dtype, what):
    assert len(got) == len(want), what
    for out, ref in zip(got, want, strict=True):
        assert out.shape == ref.shape, (what, out.shape, ref.shape)
        assert np.isfinite(out.astype(np.float64)).all(), (what, out)
        assert_close(out, ref, dtype, what)


CASES = [  # (op, input shape, reduction, weighted, ignore_index, target dtype)
    (NLL, (4, 5), "none", False, None, I64),
    (NLL, (3, 5, 2), "mean", False, None, I64),
    (NLL, (3, 5, 2), "mean", True, None, I32),
    (NLL, (2, 4, 3, 2), "sum", True, 1, I64),
    (NLL, (2, 4, 3, 2), "mean", True, 1, I32),
    (NLL, (3, 6, 4), "mean", False, 2, I64),  # the count of the kept targets divides
    (NLL, (5, 3), "none", True, 7, I64),  # an ignore_index beyond the classes: replaced before the gather
    (NLL, (5, 3), "sum", True, -4, I32),
    (SCE, (4, 5), "none", False, None, I64),
    (SCE, (3, 5, 2), "mean", True, None, I64),
    (SCE, (2, 4, 3, 2), "mean", False, 0, I32),
    (SCE, (2, 4, 3, 2), "mean", True, 3, I64),
    (SCE, (6, 3), "sum", True, 10, I64),
    (SCE, (3, 4, 5), "none", True, -1, I32),
]


@pytest.mark.parametrize(("op", "shape", "reduction", "weighted", "ignore", "target_dtype"), CASES)
def test_losses_match_the_reference(rng, device, op, shape, reduction, weighted, ignore, target_dtype):
    x, target, weight = _draw(rng, shape, target_dtype=target_dtype, ignore=ignore)
    attrs = {"reduction": reduction} | ({} if ignore is None else {"ignore_index": ignore})
    feeds = {"x": x, "t": target} | ({"w": weight} if weighted else {})
    n_out = 2 if op == SCE else 1  # with log_prob
    model = _model(op, feeds, attrs, n_out=n_out)
    want = run_onnx(op, list(feeds.values()), attrs, n_outputs=n_out, opset=OPSET[op])
    _check(_run(model, feeds, device), want, "float32", f"{op} {shape} {reduction}")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
@pytest.mark.parametrize("op", [NLL, SCE])
def test_losses_of_every_float_dtype(rng, device, op, dtype):
    """The half types against the reference in float32 (its own float16 rounding is not the truth), at
    their tolerance; float64 against the reference in float64."""
    x, target, weight = _draw(
        rng, (3, 5, 4), dtype=np.dtype(BF16 if dtype == "bfloat16" else dtype), ignore=2
    )
    attrs = {"reduction": "mean", "ignore_index": 2}
    feeds = {"x": x, "t": target, "w": weight}
    n_out = 2 if op == SCE else 1
    wide = [a.astype(F) if a.dtype in (np.float16, BF16) else a for a in feeds.values()]
    want = run_onnx(op, wide, attrs, n_outputs=n_out, opset=OPSET[op])
    got = _run(_model(op, feeds, attrs, n_out=n_out), feeds, device)
    assert [g.dtype for g in got] == [x.dtype] * n_out
    _check(got, want, dtype, f"{op} {dtype}")


def test_softmax_cross_entropy_of_opset_12_and_its_loss_alone(rng, device):
    x, target, weight = _draw(rng, (4, 3, 5), ignore=1)
    attrs = {"reduction": "sum", "ignore_index": 1}
    feeds = {"x": x, "t": target}
    model = _model(SCE, feeds, attrs, inits={"w": weight}, opset=12)  # weights bound, log_prob not asked
    want = run_onnx(SCE, [x, target, weight], attrs, opset=12)
    _check(_run(model, feeds, device), want, "float32", "SoftmaxCrossEntropyLoss-12")


def test_the_lowering_is_gathers_and_elementwise_stages():
    x, target, weight = _draw(np.random.default_rng(0), (3, 5))
    plain = _model(NLL, {"x": x, "t": target}, {"reduction": "none"})
    config, _ = import_model(plain)
    assert [s["name"] for s in config["pipeline"]] == ["unsqueeze", "gather_elements", "squeeze", "neg"]
    full = _model(NLL, {"x": x, "t": target, "w": weight}, {"reduction": "mean", "ignore_index": 1})
    config, _ = import_model(full)
    assert [s["name"] for s in config["pipeline"]] == [
        "equal",
        "where",  # the ignored targets become class 0 before the gathers
        "unsqueeze",
        "gather_elements",
        "squeeze",
        "neg",
        "gather",
        "mul",
        "where",
        "where",
        "reduce_sum",
        "reduce_sum",
        "div",
    ]


def test_an_ignore_index_beyond_the_target_dtype_matches_nothing(rng, device):
    """ignore_index is an int64 attribute; with int32 targets a value past int32 equals no target (the
    reference compares it the same way), so the lowering has no mask."""
    x, target, weight = _draw(rng, (4, 5, 3), target_dtype=I32)
    attrs = {"reduction": "mean", "ignore_index": 2**40}
    feeds = {"x": x, "t": target, "w": weight}
    model = _model(NLL, feeds, attrs)
    config, _ = import_model(model)
    assert "equal" not in [s["name"] for s in config["pipeline"]]
    want = run_onnx(NLL, list(feeds.values()), attrs, opset=22)
    _check(_run(model, feeds, device), want, "float32", "ignore_index past int32")


def test_ignored_positions_are_zero_whatever_the_input_holds(device):
    """An ignored target reads class 0 of the input, which may be inf or NaN: the loss there is 0."""
    x = np.array([[np.inf, 1.0], [np.nan, 2.0], [-0.5, 3.0]], F)
    target = np.array([5, 5, 1], I64)  # 5: ignored, and out of range for the gather
    model = _model(NLL, {"x": x, "t": target}, {"reduction": "none", "ignore_index": 5})
    (got,) = _run(model, {"x": x, "t": target}, device)
    np.testing.assert_array_equal(got, np.array([0.0, 0.0, -3.0], F))
    mean = _model(NLL, {"x": x, "t": target}, {"reduction": "mean", "ignore_index": 5})
    (got,) = _run(mean, {"x": x, "t": target}, device)
    np.testing.assert_array_equal(got, np.array(-3.0, F))  # one kept target: the mean divides by 1


def test_an_unweighted_mean_with_ignore_index_minus_one_counts_the_kept_targets(rng, device):
    """onnx's reference (1.23) divides by every target when ignore_index is -1 and there are no weights
    (``elif ignore_index != -1``); the spec's function body divides by the kept ones, as for any other
    ignore_index. The oracle: the reference with weights of 1, which divides by the kept count."""
    x, target, _ = _draw(rng, (4, 5, 3), ignore=-1)
    kept = target != -1
    assert 0 < kept.sum() < kept.size  # some ignored: the two denominators differ
    attrs = {"reduction": "mean", "ignore_index": -1}
    (got,) = _run(_model(NLL, {"x": x, "t": target}, attrs), {"x": x, "t": target}, device)
    want = run_onnx(NLL, [x, target, np.ones(5, F)], attrs, opset=22)
    _check([got], want, "float32", "mean over the kept targets")
    picked = np.take_along_axis(x, np.where(kept, target, 0)[:, None], axis=1)[:, 0]
    _check([got], [np.array(-picked[kept].mean(), F)], "float32", "the spec's formula")


def test_negative_targets_count_from_the_end(rng, device):
    """A target in [-C, 0) that is not ignored picks class C + target, as the spec's function body
    (GatherElements, Gather) does, for the input and the weights alike; onnx's reference wraps the
    input's index but clips the weights' to 0, so it is the oracle only without weights."""
    x, target, weight = _draw(rng, (4, 5, 2), low=-5)
    assert (target < 0).any()
    attrs = {"reduction": "none"}
    (got,) = _run(_model(NLL, {"x": x, "t": target}, attrs), {"x": x, "t": target}, device)
    _check([got], run_onnx(NLL, [x, target], attrs, opset=22), "float32", "negative targets")
    feeds = {"x": x, "t": target, "w": weight}
    (got,) = _run(_model(NLL, feeds, attrs), feeds, device)
    picked = np.take_along_axis(x, (target % 5)[:, None], axis=1)[:, 0]
    _check([got], [-picked * weight[target % 5]], "float32", "negative targets, weighted")


def test_a_symbolic_batch_runs_at_every_size(rng, device):
    model = _model(SCE, {"x": (F, ["N", 4]), "t": (I64, ["N"])}, {"reduction": "mean", "ignore_index": 0})
    with pl.from_onnx(model, device=device) as pipe:
        for n in (2, 7):
            x, target, _ = _draw(rng, (n, 4), ignore=0)
            got = np.asarray(pipe.run({"x": x, "t": target})["y0"].numpy())
            want = run_onnx(SCE, [x, target], {"reduction": "mean", "ignore_index": 0}, opset=13)
            _check([got], want, "float32", f"batch {n}")


@pytest.mark.parametrize("bad", [5, -6])
def test_a_target_out_of_range_never_reads_out_of_bounds(device, bad):
    """onnx's reference raises on a class past C; PipeLink's CPU raises an error naming the stage, and
    CUDA's gathers give 0 there (never a read out of bounds): a loss of 0 and a weight of 0."""
    x = np.arange(10, dtype=F).reshape(2, 5)
    target = np.array([1, bad], I64)
    feeds = {"x": x, "t": target, "w": np.ones(5, F)}
    model = _model(NLL, feeds, {"reduction": "none"})
    if device == "cpu":
        with pytest.raises(
            pl.PipeLinkError, match=rf"stage 'the_node_\d+': gather_elements index {bad} "
        ) as info:
            _run(model, feeds, device)
        assert info.value.code.name == "PIPELINK_ERR_INVALID_ARGUMENT"
    else:
        np.testing.assert_array_equal(_run(model, feeds, device)[0], np.array([-1.0, 0.0], F))


def _refused(model, why):
    return om.refused(model, why)


def _producer_of_unknown_type():
    """x made by a node of a domain PipeLink lacks (its dtype and shape unknown), then the loss."""
    make = helper.make_node("Mystery", ["a"], ["x"], domain="example.custom", name="mystery")
    loss = helper.make_node(NLL, ["x", "t"], ["y0"], name="the_node")
    graph = helper.make_graph(
        [make, loss],
        "g",
        [
            helper.make_tensor_value_info("a", onnx.TensorProto.FLOAT, [3, 5]),
            helper.make_tensor_value_info("t", onnx.TensorProto.INT64, [3]),
        ],
        [helper.make_tensor_value_info("y0", onnx.TensorProto.UNDEFINED, None)],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 22), helper.make_opsetid("example.custom", 1)]
    )
    model.ir_version = 10
    return model


def _refusals() -> dict:
    """Test id -> (model, the reason's pattern)."""
    xf, t3 = (F, [3, 5]), (I64, [3])
    return {
        "reduction": (_model(NLL, {"x": xf, "t": t3}, {"reduction": "max"}), "attribute reduction='max'"),
        "integer input": (
            _model(SCE, {"x": (I32, [3, 5]), "t": t3}, {}),
            "input 'x' has dtype int32; it must be one of",
        ),
        "unknown input dtype": (_producer_of_unknown_type(), "input 'x' has dtype unknown"),
        "float target": (
            _model(NLL, {"x": xf, "t": (F, [3])}, {}),
            "target 't' has dtype float32; it must be",
        ),
        "weight dtype": (
            _model(NLL, {"x": xf, "t": t3, "w": (np.float64, [5])}, {}),
            "weight 'w' is float64 but the input is float32",
        ),
        "unknown rank": (
            _model(SCE, {"x": (F, None), "t": t3}, {}),
            "needs the rank of its input 'x', at least 2",
        ),
        "rank 1": (_model(NLL, {"x": (F, [5]), "t": (I64, [])}, {}), r"at least 2 .*got \[5\]"),
        "smaller target": (
            _model(NLL, {"x": (F, [3, 5, 2]), "t": (I64, [3, 1])}, {}),
            r"target 't' must have the input's shape without its class dim, \[3, 2\], .*\(got \[3, 1\]\)",
        ),
        "other symbol": (
            _model(SCE, {"x": (F, ["N", 5]), "t": (I64, ["M"])}, {}),
            r"without its class dim, \[N\], every dim known equal at import \(got \[M\]\)",
        ),
        "unknown target shape": (_model(NLL, {"x": xf, "t": (I64, None)}, {}), r"\(got unknown\)"),
        "weight shape": (
            _model(SCE, {"x": xf, "t": t3, "w": (F, [4])}, {}),
            r"weight 'w' must be \[C\] = \[5\], known at import \(got \[4\]\)",
        ),
        "no target": (_model(NLL, {"x": xf}, {}), r"takes 2 to 3 inputs \(got 1\)"),
    }


REFUSALS = _refusals()


@pytest.mark.parametrize("case", list(REFUSALS))
def test_losses_refuse_what_they_cannot_compute(case):
    model, why = REFUSALS[case]
    unsupported = _refused(model, why)
    assert (model.graph.node[-1].op_type, "the_node") in [(u["op_type"], u["node"]) for u in unsupported]
