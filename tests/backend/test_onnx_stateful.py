"""The stateful sequence ops of opset 27 lowered onto existing operators (``onnx/stateful.py``):
CausalConvWithState and LinearAttention, each against onnx's ReferenceEvaluator on random inputs over
their attribute and input combinations, on every device, and every refusal."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from pipelink.onnx.recurrent import MAX_STEPS  # noqa: E402
from tests.backend import onnx_models as om  # noqa: E402
from tests.conftest import assert_close  # noqa: E402

F = np.float32
helper = onnx.helper
OPSET = 27


def _model(op, node_inputs, declared, attrs, inits=None):
    """A one-node model of ``op`` (``om.one_node_model``) reading ``node_inputs`` ("" for an absent one);
    ``declared`` maps each graph input to an array or to (dtype, shape) with symbols; two untyped outputs."""
    return om.one_node_model(
        op, node_inputs, declared, inits or {}, attrs, ("y", "state"), opset=OPSET, name="stateful"
    )


def _check(model, feeds, device, dtype="float32"):
    """PipeLink's outputs have the reference's shapes and dtypes, and its values within the tolerance."""
    want = om.reference_evaluator(model, feeds)
    got = om.run_pipeline(model, feeds, device)
    for k, (out, ref) in enumerate(zip(got, want, strict=True)):
        assert out.shape == ref.shape and out.dtype == ref.dtype, (k, out.shape, ref.shape, out.dtype)
        assert not np.isnan(out).any(), k
        if ref.size:
            assert_close(out.astype(F), ref.astype(F), dtype, f"output {k}")


def _stages(model):
    return om.stage_names(model)


def _refused(model, why):
    assert om.refused(model, why)[0]["node"] == "the_node"


# -- CausalConvWithState ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("length", "k", "with_bias", "with_past", "activation"),
    [
        (8, 4, False, False, "none"),
        (8, 4, True, False, "silu"),
        (7, 3, False, True, "none"),
        (6, 4, True, True, "swish"),
        (1, 4, True, True, "none"),  # a decode step
        (2, 5, False, False, "silu"),  # shorter than the state: zeros lead present_state
        (5, 1, True, False, "none"),  # an empty state
        (5, 1, False, True, "silu"),
    ],
)
def test_causal_conv_with_state_matches_the_reference(
    rng, device, length, k, with_bias, with_past, activation
):
    batch, channels = 2, 3
    feeds = {
        "x": rng.standard_normal((batch, channels, length)).astype(F),
        "w": rng.standard_normal((channels, 1, k)).astype(F),
    }
    if with_bias:
        feeds["b"] = rng.standard_normal(channels).astype(F)
    if with_past:
        feeds["past"] = rng.standard_normal((batch, channels, k - 1)).astype(F)
    names = ["x", "w", "b" if with_bias else "", "past" if with_past else ""]
    while not names[-1]:
        names.pop()
    model = _model("CausalConvWithState", names, feeds, {"activation": activation})
    stages = _stages(model)
    assert "conv2d" in stages and ("silu" in stages) == (activation != "none"), stages
    _check(model, feeds, device)


def test_causal_conv_with_state_takes_a_constant_weight_fp16_and_an_unknown_batch(rng, device):
    """A weight initializer (reshaped at import, no stage), float16, and a batch known only at run time
    (the past_state path needs neither)."""
    x = rng.standard_normal((3, 4, 6)).astype(np.float16)
    w = rng.standard_normal((4, 1, 3)).astype(np.float16)
    past = rng.standard_normal((3, 4, 2)).astype(np.float16)
    declared = {"x": (np.float16, ["B", 4, "L"]), "past": (np.float16, ["B", 4, 2])}
    model = _model("CausalConvWithState", ["x", "w", "", "past"], declared, {"activation": "silu"}, {"w": w})
    assert _stages(model).count("unsqueeze") == 1  # the input's alone: the weight is reshaped at import
    _check(model, {"x": x, "past": past}, device, "float16")


def test_causal_conv_with_state_refusals():
    x = np.zeros((2, 3, 4), F)
    w = np.zeros((3, 1, 2), F)
    conv = "CausalConvWithState"
    _refused(_model(conv, ["x", "w"], {"x": x, "w": w}, {"activation": "relu"}), "activation 'relu'")
    _refused(
        _model(conv, ["x", "w"], {"x": x, "w": (F, [3, 1, "k"])}, {}), "weight's shape .* known at import"
    )
    _refused(
        _model(conv, ["x", "w"], {"x": x, "w": np.zeros((3, 2, 2), F)}, {}), r"must be \(channels, 1, k\)"
    )
    _refused(
        _model(conv, ["x", "w"], {"x": x, "w": np.zeros((4, 1, 2), F)}, {}), r"must be \(channels, 1, k\)"
    )
    _refused(
        _model(conv, ["x", "w", "", "p"], {"x": x, "w": w, "p": np.zeros((2, 3, 3), F)}, {}),
        r"past_state \[2, 3, 3\] must be \(batch_size, 3, 1\)",
    )
    _refused(_model(conv, ["x", "w"], {"x": (F, [2, 3, "L"]), "w": w}, {}), "input's length known at import")
    short = {"x": (F, ["B", 3, 1]), "w": np.zeros((3, 1, 4), F)}
    _refused(_model(conv, ["x", "w"], short, {}), "need the batch size known at import")
    huge = {"x": (F, [2**40, 3, 1]), "w": np.zeros((3, 1, 4), F)}
    _refused(_model(conv, ["x", "w"], huge, {}), "MAX_CONSTANT_BYTES")
    _refused(_model(conv, ["x", "w"], {"x": x.astype(np.int32), "w": w}, {}), "input .* is int32")


# -- LinearAttention -------------------------------------------------------------------------------------
def _attention_feeds(rng, rule, sizes, decay_width, beta_width, with_past, dtype=F):
    b, t, h_q, h_kv, d_k, d_v = sizes
    feeds = {
        "q": rng.standard_normal((b, t, h_q * d_k)).astype(dtype),
        "k": (rng.standard_normal((b, t, h_kv * d_k)) * 0.4).astype(dtype),
        "v": rng.standard_normal((b, t, h_kv * d_v)).astype(dtype),
    }
    names = ["q", "k", "v", "", "", ""]
    if with_past:
        feeds["past"] = (rng.standard_normal((b, h_kv, d_k, d_v)) * 0.3).astype(dtype)
        names[3] = "past"
    if rule in ("gated", "gated_delta"):
        feeds["decay"] = (-np.abs(rng.standard_normal((b, t, decay_width))) * 0.2).astype(dtype)
        names[4] = "decay"
    if rule in ("delta", "gated_delta"):
        feeds["beta"] = rng.random((b, t, beta_width)).astype(dtype)
        names[5] = "beta"
    while not names[-1]:
        names.pop()
    return feeds, names


@pytest.mark.parametrize(
    ("rule", "sizes", "per_key_decay", "beta_scalar", "with_past", "scale"),
    [
        ("linear", (2, 5, 2, 2, 4, 3), False, False, False, 0.0),
        ("linear", (1, 1, 4, 2, 3, 5), False, False, True, 0.5),
        ("gated", (2, 4, 2, 2, 4, 4), True, False, False, 0.0),
        ("gated", (2, 3, 6, 3, 2, 3), False, False, True, 0.0),
        ("delta", (2, 4, 2, 2, 4, 3), False, False, True, 0.0),
        ("delta", (1, 3, 2, 1, 3, 2), False, True, False, 0.25),
        ("gated_delta", (2, 6, 4, 2, 4, 3), True, False, True, 0.0),
        ("gated_delta", (2, 4, 4, 1, 2, 4), False, True, False, 0.0),  # multi-query
        ("gated_delta", (1, 1, 2, 2, 4, 4), True, True, True, 1.5),  # a decode step
    ],
)
def test_linear_attention_matches_the_reference(
    rng, device, rule, sizes, per_key_decay, beta_scalar, with_past, scale
):
    b, t, h_q, h_kv, d_k, d_v = sizes
    feeds, names = _attention_feeds(
        rng, rule, sizes, h_kv * d_k if per_key_decay else h_kv, 1 if beta_scalar else h_kv, with_past
    )
    attrs = {"update_rule": rule, "q_num_heads": h_q, "kv_num_heads": h_kv, "scale": scale}
    model = _model("LinearAttention", names, feeds, attrs)
    # one read a step, and a delta rule's retrieval from every state but the first zero one
    retrievals = (t if with_past else t - 1) if rule.endswith("delta") else 0
    assert _stages(model).count("matmul") == t + retrievals
    _check(model, feeds, device)


def test_linear_attention_casts_half_types_and_takes_an_unknown_batch(rng, device):
    """float16 is computed in float32 and cast back (as the reference does); the batch may be a symbol."""
    sizes = (2, 3, 4, 2, 4, 4)
    feeds, names = _attention_feeds(rng, "gated_delta", sizes, 2, 2, True, np.float16)
    declared = {n: (np.float16, ["B", *a.shape[1:]]) for n, a in feeds.items()}
    model = _model("LinearAttention", names, declared, {"q_num_heads": 4, "kv_num_heads": 2})
    _check(model, feeds, device, "float16")


def test_linear_attention_refusals():
    q = np.zeros((1, 3, 8), F)
    qkv = {"q": q, "k": q, "v": q}
    heads = {"q_num_heads": 2, "kv_num_heads": 2}
    la = "LinearAttention"
    linear = {**heads, "update_rule": "linear"}
    _refused(_model(la, ["q", "k", "v"], qkv, {**heads, "update_rule": "slow"}), "update_rule 'slow'")
    _refused(
        _model(la, ["q", "k", "v"], qkv, {"update_rule": "linear", "q_num_heads": 3, "kv_num_heads": 2}),
        "positive multiple",
    )
    _refused(_model(la, ["q", "k", "v"], qkv, {**heads, "update_rule": "gated"}), "needs its decay input")
    _refused(
        _model(la, ["q", "k", "v", "", "", "b"], {**qkv, "b": np.zeros((1, 3, 2), F)}, linear),
        "takes no beta",
    )
    unknown_t = {n: (F, [1, "T", 8]) for n in qkv}
    _refused(_model(la, ["q", "k", "v"], unknown_t, linear), "T and H\\*D known at import")
    too_long = {n: (F, [1, MAX_STEPS + 1, 8]) for n in qkv}
    _refused(_model(la, ["q", "k", "v"], too_long, linear), "MAX_STEPS")
    _refused(_model(la, ["q", "k", "v"], {**qkv, "k": np.zeros((1, 3, 6), F)}, linear), "do not fit")
    gated = {**heads, "update_rule": "gated"}
    _refused(
        _model(la, ["q", "k", "v", "", "d"], {**qkv, "d": np.zeros((1, 3, 3), F)}, gated),
        r"decay \[1, 3, 3\]",
    )
    _refused(_model(la, ["q", "k", "v", "p"], {**qkv, "p": np.zeros((1, 2, 4, 3), F)}, linear), "past_state")
    _refused(_model(la, ["q", "k", "v"], {**qkv, "v": q.astype(np.float16)}, linear), "value is float16")
