"""The opset-23 LLM operators at ONNX import: one-node RMSNormalization, RotaryEmbedding and Attention
(opsets 23, 24, 25) models compared with ``onnx.reference.ReferenceEvaluator`` on every device, and each
attribute, input or output PipeLink cannot honour refused at import with the node and the attribute named.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import pipelink as pl  # noqa: E402
from pipelink.errors import ErrorCode  # noqa: E402
from pipelink.onnx import import_model  # noqa: E402

from .ops_helpers import TOL  # noqa: E402

F, H = np.float32, np.float16


def _model(op, feeds, inits, attrs, opset, n_out=1, outputs=None):
    """A one-node model of ``op``: ``feeds`` typed graph inputs, ``inits`` initializers (their names in
    ``feeds`` then ``inits`` order, an empty name for an absent optional input)."""
    names = [n for n in [*feeds, *inits]]
    outputs = outputs or [f"y{k}" for k in range(n_out)]
    node = helper.make_node(op, names, outputs, name="the_node", **attrs)
    first = next(iter(feeds.values()))
    graph = helper.make_graph(
        [node],
        op,
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in feeds.items()
        ],
        [
            helper.make_tensor_value_info(o, helper.np_dtype_to_tensor_dtype(first.dtype), None)
            for o in outputs
            if o
        ],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in inits.items() if a is not None],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def _as32(arrays: dict) -> dict:
    return {n: a.astype(F) if a is not None and a.dtype == H else a for n, a in arrays.items()}


def _check(op, feeds, inits, attrs, opset, device):
    """The imported one-node model's Y is ONNX's reference's at the tolerance of the input dtype. For a
    float16 model the reference runs the same node in float32 (its own float16 rounding is not the
    truth PipeLink's float32 arithmetic is held to)."""
    model = _model(op, feeds, inits, attrs, opset)
    dtype = np.dtype(next(iter(feeds.values())).dtype).name
    truth = _model(op, _as32(feeds), _as32(inits), attrs, opset) if dtype == "float16" else model
    want = ReferenceEvaluator(truth).run(None, _as32(feeds))[0]
    pipe = pl.from_onnx(model, device=device)
    got = np.asarray(pipe.run(feeds)[pipe.outputs[0]].numpy())
    assert got.shape == want.shape and got.dtype == np.dtype(dtype), (got.shape, want.shape, got.dtype)
    assert not np.isnan(got).any(), "NaN in Y (a fully masked row is 0 in ONNX)"
    rtol, atol = TOL[dtype]
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol)


def _refused(model, *phrases):
    """Importing ``model`` fails naming the node and every phrase, with the invalid-argument code."""
    with pytest.raises(pl.PipeLinkError) as info:
        import_model(model)
    assert info.value.code == ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT
    (entry,) = info.value.context["unsupported"]
    assert entry["node"] == "the_node", entry
    for phrase in phrases:
        assert phrase in info.value.message, (phrase, info.value.message)


# -- RMSNormalization -------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [F, H])
@pytest.mark.parametrize(
    ("shape", "axis", "scale_shape", "scale_is_input"),
    [
        ((2, 3, 16), -1, (16,), False),
        ((2, 3, 4, 5), 2, (4, 5), True),  # a computed scale of the normalised shape
        ((2, 3, 4, 5), -2, (5,), False),  # a constant scale broadcast to [4, 5]
        ((2, 3, 4, 5), 1, (1, 1, 4, 1), False),  # leading 1s and a broadcast axis
    ],
)
def test_rms_normalization_matches_onnx(device, rng, dtype, shape, axis, scale_shape, scale_is_input):
    x = rng.standard_normal(shape).astype(dtype)
    scale = rng.uniform(0.5, 1.5, scale_shape).astype(dtype)
    feeds = {"x": x, "scale": scale} if scale_is_input else {"x": x}
    inits = {} if scale_is_input else {"scale": scale}
    _check("RMSNormalization", feeds, inits, {"axis": axis, "epsilon": 1e-3}, 23, device)


def test_rms_normalization_refuses_a_scale_of_another_dtype(rng):
    x = rng.standard_normal((2, 3, 8)).astype(H)
    model = _model("RMSNormalization", {"x": x}, {"scale": np.ones(8, F)}, {}, 23)
    _refused(model, "scale's dtype float32 differs from X's float16")


@pytest.mark.parametrize(
    ("scale_shape", "scale_is_input", "attrs", "phrases"),
    [
        ((4, 5), False, {"stash_type": 10}, ["stash_type=10", "only stash_type=1"]),
        ((4, 5), False, {"stash_type": 11}, ["stash_type=11", "float32 input"]),
        ((5,), True, {}, ["scale [5] is not the normalised shape", "[4, 5]"]),
        ((3, 1, 1), False, {}, ["does not broadcast to the normalised shape"]),
    ],
)
def test_rms_normalization_refusals(rng, scale_shape, scale_is_input, attrs, phrases):
    x = rng.standard_normal((2, 3, 4, 5)).astype(F)
    scale = np.ones(scale_shape, F)
    feeds = {"x": x, "scale": scale} if scale_is_input else {"x": x}
    inits = {} if scale_is_input else {"scale": scale}
    _refused(_model("RMSNormalization", feeds, inits, {"axis": 2, **attrs}, 23), "RMSNormalization", *phrases)


# -- RotaryEmbedding --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [F, H])
@pytest.mark.parametrize("layout", ["bsh", "bhsd"])
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("rotary", [0, 4])
@pytest.mark.parametrize("with_positions", [True, False])
def test_rotary_embedding_matches_onnx(device, rng, dtype, layout, interleaved, rotary, with_positions):
    b, s, h, d, max_pos = 2, 5, 3, 8, 9
    x = rng.standard_normal((b, h, s, d) if layout == "bhsd" else (b, s, h * d)).astype(dtype)
    half = (rotary or d) // 2
    angles = rng.uniform(-np.pi, np.pi, (max_pos, half) if with_positions else (b, s, half))
    feeds = {"x": x}
    inits = {"cos": np.cos(angles).astype(dtype), "sin": np.sin(angles).astype(dtype)}
    if with_positions:
        feeds = {"x": x, "cos": inits.pop("cos"), "sin": inits.pop("sin")}  # caches as graph inputs too
        inits["pos"] = rng.integers(0, max_pos, (b, s)).astype(np.int64)
    attrs = {"interleaved": interleaved, "rotary_embedding_dim": rotary}
    if layout == "bsh":
        attrs["num_heads"] = h
    _check("RotaryEmbedding", feeds, inits, attrs, 23, device)


def test_rotary_embedding_refusals_name_the_node():
    x = np.zeros((2, 5, 24), F)
    caches = {"cos": np.zeros((9, 4), F), "sin": np.zeros((9, 4), F), "pos": np.zeros((2, 5), np.int64)}
    _refused(_model("RotaryEmbedding", {"x": x}, caches, {}, 23), "RotaryEmbedding", "num_heads > 0")
    odd = _model("RotaryEmbedding", {"x": x}, caches, {"num_heads": 3, "rotary_embedding_dim": 5}, 23)
    _refused(odd, "must be even")


# -- Attention --------------------------------------------------------------------------------------------
def _qkv(rng, dtype, b, hq, hkv, s, t, d, dv, rank):
    def heads(n, seq, size):
        a = rng.standard_normal((b, n, seq, size)).astype(dtype)
        return a if rank == 4 else a.transpose(0, 2, 1, 3).reshape(b, seq, n * size)

    return heads(hq, s, d), heads(hkv, t, d), heads(hkv, t, dv)


ATTENTION_CASES = [
    # (hq, hkv, s, t, d, dv, rank, attrs, mask)
    (4, 4, 6, 6, 8, 8, 4, {}, None),
    (4, 2, 6, 6, 8, 8, 4, {"is_causal": 1}, None),  # grouped-query heads, causal
    (4, 1, 5, 7, 8, 6, 4, {"is_causal": 1, "scale": 0.3}, None),  # MQA, cross, Dv != D, S < T
    (4, 2, 7, 5, 8, 8, 4, {"is_causal": 1}, None),  # S > T: the causal frontier past the keys
    (4, 4, 6, 6, 8, 8, 4, {}, "additive"),
    (4, 2, 6, 6, 8, 8, 4, {"is_causal": 1}, "bool"),
    (4, 2, 6, 6, 8, 8, 3, {"q_num_heads": 4, "kv_num_heads": 2}, None),
    (6, 3, 5, 7, 4, 8, 3, {"q_num_heads": 6, "kv_num_heads": 3, "is_causal": 1}, "additive"),
    (4, 4, 6, 6, 8, 8, 4, {}, "rows hidden"),  # a bool mask hiding whole rows: ONNX's zeros
    (4, 4, 6, 6, 8, 8, 4, {"is_causal": 1}, "-inf rows"),  # an additive mask of -inf rows: zeros
]


def _mask(rng, kind, dtype, b, s, t):
    if kind == "additive":
        return rng.standard_normal((b, 1, s, t)).astype(dtype)
    allowed = rng.random((s, t)) < 0.7
    allowed[:, 0] = True  # every row sees key 0 (and, causal, itself)
    if kind == "bool":
        return allowed
    allowed[[1, 4]] = False  # whole rows hidden
    if kind == "rows hidden":
        return allowed
    return np.where(allowed, 0.0, -np.inf).astype(dtype)


@pytest.mark.parametrize("dtype", [F, H])
@pytest.mark.parametrize(("hq", "hkv", "s", "t", "d", "dv", "rank", "attrs", "mask"), ATTENTION_CASES)
def test_attention_matches_onnx(device, rng, dtype, hq, hkv, s, t, d, dv, rank, attrs, mask):
    b = 2
    q, k, v = _qkv(rng, dtype, b, hq, hkv, s, t, d, dv, rank)
    feeds = {"q": q, "k": k, "v": v}
    inits = {}
    if mask is not None:
        inits["mask"] = _mask(rng, mask, dtype, b, s, t)
    if rank == 3 and mask is None and not attrs.get("is_causal"):  # (inputs in order: q, k, then v)
        del feeds["v"]
        inits["v"] = v  # a constant V: the reshape and transpose of a weight
    _check("Attention", feeds, inits, attrs, 23, device)


@pytest.mark.parametrize("opset", [24, 25])
def test_attention_of_later_opsets_matches_onnx(device, rng, opset):
    q, k, v = _qkv(rng, F, 2, 4, 2, 6, 6, 8, 8, 4)
    feeds = {"q": q, "k": k, "v": v}
    attrs = {"is_causal": 1} if opset == 24 else {"is_causal": 1, "left_window_size": -1}
    _check("Attention", feeds, {}, attrs, opset, device)


_OPTIONAL = ("mask", "past_key", "past_value", "nonpad")  # Attention's inputs 3..6


def _attention_model(rng, attrs=None, extra_inputs=(), outputs=("y",), rank=4, mask_t=6, opset=23):
    """A one-node Attention of 4 query and 2 key/value heads: a [6, mask_t] mask unless mask_t is 0, the
    optional inputs ``extra_inputs`` as constants, ``outputs`` (empty names: absent)."""
    q, k, v = _qkv(rng, F, 2, 4, 2, 6, 6, 8, 8, rank)
    feeds = {"q": q, "k": k, "v": v}
    consts = {
        "mask": np.zeros((6, mask_t), F) if mask_t else None,
        "past_key": np.zeros((2, 2, 3, 8), F) if "past_key" in extra_inputs else None,
        "past_value": np.zeros((2, 2, 3, 8), F) if "past_value" in extra_inputs else None,
        "nonpad": np.full((2,), 6, np.int64) if "nonpad" in extra_inputs else None,
    }
    last = max([-1, *(i for i, n in enumerate(_OPTIONAL) if consts[n] is not None)])
    node_inputs = list(feeds) + [n if consts[n] is not None else "" for n in _OPTIONAL[: last + 1]]
    names = {n: a for n, a in consts.items() if a is not None}
    node = helper.make_node("Attention", node_inputs, list(outputs), name="the_node", **(attrs or {}))
    graph = helper.make_graph(
        [node],
        "attention",
        [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, a.shape) for n, a in feeds.items()],
        [helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, None) for o in outputs if o],
        [numpy_helper.from_array(a, n) for n, a in names.items() if a is not None],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


@pytest.mark.parametrize(
    ("kwargs", "phrases"),
    [
        ({"extra_inputs": ("past_key", "past_value"), "outputs": ("y", "pk", "pv")}, ["input 4 (past_key)"]),
        ({"outputs": ("y", "", "", "qk")}, ["output 3 (qk_matmul_output)"]),
        ({"outputs": ("y", "pk")}, ["output 1 (present_key)"]),
        ({"attrs": {"softcap": 30.0}}, ["softcap=30.0"]),
        ({"attrs": {"qk_matmul_output_mode": 1}}, ["qk_matmul_output_mode=1"]),
        ({"attrs": {"softmax_precision": 10}}, ["softmax_precision=10", "float32"]),
        ({"attrs": {"softmax_precision": 11}}, ["softmax_precision=11"]),
        ({"extra_inputs": ("nonpad",), "opset": 24}, ["input 6 (nonpad_kv_seqlen)"]),
        ({"attrs": {"left_window_size": 2}, "opset": 25}, ["left_window_size=2"]),
        ({"mask_t": 4}, ["attn_mask's last dim (4) must be the keys' 6", "pads a shorter mask"]),
        ({"mask_t": 1}, ["attn_mask's last dim (1)"]),
        ({"rank": 3, "mask_t": 0}, ["need q_num_heads and kv_num_heads"]),
        (
            {"attrs": {"q_num_heads": 8}, "mask_t": 0},
            ["q_num_heads=8 differs from the 4-d input's heads (4)"],
        ),
    ],
)
def test_attention_refusals_name_the_node_and_the_attribute(rng, kwargs, phrases):
    _refused(_attention_model(rng, **kwargs), "Attention node 'the_node'", *phrases)


def test_attention_3d_self_attention_of_one_tensor(device, rng):
    """One tensor as Q, K and V (3-d): each role gets its own head view (no clash of stage outputs)."""
    x = rng.standard_normal((2, 5, 32)).astype(F)
    node = helper.make_node(
        "Attention", ["x", "x", "x"], ["y"], name="the_node", q_num_heads=4, kv_num_heads=4, is_causal=1
    )
    graph = helper.make_graph(
        [node],
        "self_attention",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    model.ir_version = 10
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    got = np.asarray(pl.from_onnx(model, device=device).run({"x": x})["y"].numpy())
    np.testing.assert_allclose(got, want, rtol=TOL["float32"][0], atol=TOL["float32"][1])
