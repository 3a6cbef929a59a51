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


def _attention_model(
    rng, attrs=None, extra_inputs=(), outputs=("y",), rank=4, mask_t=6, opset=23, mask_dtype=F
):
    """A one-node Attention of 4 query and 2 key/value heads: a [6, mask_t] mask unless mask_t is 0, the
    optional inputs ``extra_inputs`` as constants (``past_key3``: a 3-d one, ``past_key_heads``: of 4
    heads, ``nonpad32``: int32), ``outputs`` (empty names: absent)."""
    q, k, v = _qkv(rng, F, 2, 4, 2, 6, 6, 8, 8, rank)
    feeds = {"q": q, "k": k, "v": v}

    def past(role):
        for suffix, shape in (("", (2, 2, 3, 8)), ("3", (2, 3, 8)), ("_heads", (2, 4, 3, 8))):
            if f"{role}{suffix}" in extra_inputs:
                return np.zeros(shape, F)
        return None

    nonpad = [np.dtype(t) for n, t in (("nonpad", np.int64), ("nonpad32", np.int32)) if n in extra_inputs]
    consts = {
        "mask": np.zeros((6, mask_t), mask_dtype) if mask_t else None,
        "past_key": past("past_key"),
        "past_value": past("past_value"),
        "nonpad": np.full((2,), 6, nonpad[0]) if nonpad else None,
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
        ({"extra_inputs": ("past_key",)}, ["past_key and past_value must be given together"]),
        ({"extra_inputs": ("past_value",)}, ["past_key and past_value must be given together"]),
        (
            {"extra_inputs": ("past_key", "past_value", "nonpad"), "opset": 24},
            ["nonpad_kv_seqlen) is for an external cache", "past_key"],
        ),
        (
            {"extra_inputs": ("nonpad",), "outputs": ("y", "pk"), "opset": 24},
            ["nonpad_kv_seqlen) is for an external cache", "present_key"],
        ),
        ({"extra_inputs": ("nonpad32",), "opset": 24}, ["nonpad_kv_seqlen) must be int64 (got int32)"]),
        ({"extra_inputs": ("past_key3", "past_value")}, ["past_key must be a 4-d", "rank 3"]),
        ({"extra_inputs": ("past_key", "past_value3")}, ["past_value must be a 4-d", "rank 3"]),
        ({"extra_inputs": ("past_key_heads", "past_value")}, ["past_key's heads is 4, but 2 in K and V"]),
        ({"attrs": {"softcap": -1.0}}, ["softcap=-1.0 must be >= 0"]),
        ({"attrs": {"qk_matmul_output_mode": 4}}, ["qk_matmul_output_mode=4 must be 0, 1, 2 or 3"]),
        (
            {"attrs": {"softcap": 30.0}, "outputs": ("y", "", "", "qk")},
            ["qk_matmul_output_mode=0 and a softcap", "reference evaluator the softcapped one"],
        ),
        ({"attrs": {"softmax_precision": 7}}, ["softmax_precision=7 is not one the spec allows"]),
        ({"attrs": {"left_window_size": -2}, "opset": 25}, ["left_window_size=-2 must be -1"]),
        ({"attrs": {"right_window_size": -5}, "opset": 25}, ["right_window_size=-5 must be -1"]),
        ({"mask_t": 9}, ["attn_mask's last dim (9) must be the keys' 6", "ONNX pads it"]),
        ({"mask_dtype": np.float16}, ["attn_mask is float16: it must be bool", "float32"]),
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


# -- Attention: key/value caches, nonpad_kv_seqlen, windows and the explicit lowering ---------------------
_ATTENTION_INPUTS = ("q", "k", "v", "mask", "past_key", "past_value", "nonpad")
_ONNX_TYPE = {np.dtype(t): helper.np_dtype_to_tensor_dtype(np.dtype(t)) for t in (F, H, np.float64)}


def _attention_inputs(
    rng, dtype=F, *, b=2, hq=4, hkv=2, s=4, kv=5, past=0, d=8, dv=8, rank=4, mask=None, mask_t=0, nonpad=None
):
    """Random Q, K, V (and past_key/past_value of ``past`` steps, a mask of ``mask``'s kind over
    ``mask_t`` keys or all of them, nonpad_kv_seqlen), by input name; None where absent."""
    q, k, v = _qkv(rng, dtype, b, hq, hkv, s, kv, d, dv, rank)
    t = mask_t or past + kv
    masks = {
        "bool": lambda: rng.random((s, t)) < 0.7,
        "additive": lambda: rng.standard_normal((b, 1, s, t)).astype(dtype),
        "heads": lambda: rng.standard_normal((hq, s, t)).astype(dtype),  # rank 3: [heads, S, T]
        "rows hidden": lambda: np.vstack([np.zeros((1, t), bool), rng.random((s - 1, t)) < 0.7]),
        "-inf rows": lambda: np.where(
            np.arange(s)[:, None] == 1, -np.inf, rng.standard_normal((s, t))
        ).astype(dtype),
    }
    return {
        "q": q,
        "k": k,
        "v": v,
        "mask": masks[mask]() if mask else None,
        "past_key": rng.standard_normal((b, hkv, past, d)).astype(dtype) if past else None,
        "past_value": rng.standard_normal((b, hkv, past, dv)).astype(dtype) if past else None,
        "nonpad": None if nonpad is None else np.asarray(nonpad, np.int64),
    }


def _attention_node(inputs, attrs, outputs, opset):
    """A one-node Attention model reading ``inputs`` (graph inputs; None: absent) and making ``outputs``
    (empty names: absent)."""
    given = [n for n in _ATTENTION_INPUTS if inputs[n] is not None]
    last = max(_ATTENTION_INPUTS.index(n) for n in given)
    names = [n if inputs[n] is not None else "" for n in _ATTENTION_INPUTS[: last + 1]]
    dtype = _ONNX_TYPE[inputs["q"].dtype]
    node = helper.make_node("Attention", names, list(outputs), name="the_node", **attrs)
    graph = helper.make_graph(
        [node],
        "attention",
        [
            helper.make_tensor_value_info(
                n, helper.np_dtype_to_tensor_dtype(inputs[n].dtype), inputs[n].shape
            )
            for n in given
        ],
        [helper.make_tensor_value_info(o, dtype, None) for o in outputs if o],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def _check_attention(device, inputs, attrs, outputs=("y",), opset=23, tol=None):
    """Every output of the imported node is ONNX's reference's at the tolerance of the input dtype (or
    ``tol``'s); a float16 node is held to the reference run in float32, as in ``_check``. Returns the
    operators of the imported stages."""
    model = _attention_node(inputs, attrs, outputs, opset)
    dtype = inputs["q"].dtype
    truth = _attention_node(_as32(inputs), attrs, outputs, opset) if dtype == H else model
    feeds = {n: a for n, a in inputs.items() if a is not None}
    want = ReferenceEvaluator(truth).run(None, _as32(feeds))
    pipe = pl.from_onnx(model, device=device)
    got = pipe.run(feeds)
    rtol, atol = TOL[tol or dtype.name]
    for name, expected in zip([o for o in outputs if o], want, strict=True):
        value = np.asarray(got[name].numpy())
        assert value.shape == expected.shape and value.dtype == dtype, (name, value.shape, expected.shape)
        assert not np.isnan(value).any(), f"NaN in {name} (a fully masked row is 0 in ONNX)"
        np.testing.assert_allclose(
            value.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=atol, err_msg=name
        )
    config, _ = import_model(model)
    return [stage["name"] for stage in config["pipeline"]]


GQA3 = {"q_num_heads": 4, "kv_num_heads": 2}
CACHE_CASES = [
    # (s, kv, past, rank, attrs, mask, outputs)
    (1, 1, 7, 4, {"is_causal": 1}, None, ("y", "pk", "pv")),  # a decoder step: q_len 1, past 7
    (1, 1, 7, 3, {"is_causal": 1, **GQA3}, "additive", ("y", "pk", "pv")),  # 3-d Q/K/V, 4-d caches
    (1, 1, 7, 4, {"is_causal": 1}, "bool", ("y", "pk", "pv")),
    (4, 4, 3, 4, {"is_causal": 1}, None, ("y", "pk", "pv")),  # a prefill with a cache: bottom-right
    (4, 4, 3, 4, {"is_causal": 1}, "additive", ("y", "pk", "pv")),
    (4, 4, 3, 3, {"is_causal": 1, **GQA3}, "rows hidden", ("y", "pk", "pv")),
    (4, 2, 5, 4, {}, "heads", ("y", "pk", "pv")),  # a cache without is_causal: the mask alone
    (4, 4, 3, 4, {"is_causal": 1}, None, ("y",)),  # the present tensors not asked for
    (4, 5, 0, 4, {"is_causal": 1}, None, ("y", "pk", "pv")),  # present without past: K and V
]


@pytest.mark.parametrize("dtype", [F, H])
@pytest.mark.parametrize(("s", "kv", "past", "rank", "attrs", "mask", "outputs"), CACHE_CASES)
def test_attention_with_a_cache_matches_onnx(device, rng, dtype, s, kv, past, rank, attrs, mask, outputs):
    inputs = _attention_inputs(rng, dtype, s=s, kv=kv, past=past, rank=rank, mask=mask)
    ops = _check_attention(device, inputs, attrs, outputs)
    assert ops.count("attention") == 1 and "softmax" not in ops, ops  # one attention stage still


NONPAD_CASES = [
    # (s, rank, attrs, mask, mask_t, nonpad)
    (1, 4, {"is_causal": 1}, None, 0, [8, 5, 2]),  # a decoder step over an external (static) cache
    (4, 4, {"is_causal": 1}, None, 0, [8, 5, 2]),  # batch 2's frontier is 2 - 4: its first rows see nothing
    (4, 4, {}, None, 0, [8, 5, 2]),  # the padding alone
    (4, 4, {"is_causal": 1}, "bool", 0, [8, 5, 2]),
    (4, 4, {"is_causal": 1}, "additive", 0, [7, 8, 4]),
    (4, 4, {"is_causal": 1}, "additive", 6, [6, 5, 2]),  # a mask shorter than K: padded with -inf
    (4, 3, {"is_causal": 1, **GQA3}, "bool", 6, [6, 5, 3]),  # ... with False
]


@pytest.mark.parametrize(("s", "rank", "attrs", "mask", "mask_t", "nonpad"), NONPAD_CASES)
def test_attention_with_nonpad_kv_seqlen_matches_onnx(device, rng, s, rank, attrs, mask, mask_t, nonpad):
    inputs = _attention_inputs(rng, b=3, s=s, kv=8, rank=rank, mask=mask, mask_t=mask_t, nonpad=nonpad)
    ops = _check_attention(device, inputs, attrs, opset=24)
    assert ops.count("attention") == 1 and "less_equal" in ops, ops


WINDOW_CASES = [
    # (attrs, past, nonpad, mask)
    ({"is_causal": 1, "left_window_size": 2}, 0, None, None),
    ({"left_window_size": 1, "right_window_size": 2}, 0, None, None),  # bidirectional
    ({"right_window_size": 0}, 0, None, "additive"),
    ({"is_causal": 1, "left_window_size": 0}, 0, None, "bool"),
    ({"is_causal": 1, "left_window_size": 2}, 5, None, None),  # at the cache's offset
    ({"is_causal": 1, "left_window_size": 2}, 0, [8, 5, 2], None),  # at nonpad's per-batch offset
    ({"left_window_size": 1, "right_window_size": 1}, 0, [8, 6, 3], "heads"),
]


@pytest.mark.parametrize(("attrs", "past", "nonpad", "mask"), WINDOW_CASES)
def test_attention_sliding_windows_match_onnx(device, rng, attrs, past, nonpad, mask):
    kv = 8 - past
    inputs = _attention_inputs(rng, b=3, s=4, kv=kv, past=past, mask=mask, nonpad=nonpad)
    outputs = ("y", "pk", "pv") if past else ("y",)
    ops = _check_attention(device, inputs, attrs, outputs, opset=25)
    assert ops.count("attention") == 1, ops


CAPPED_CAUSAL_MODE3 = {"is_causal": 1, "softcap": 2.0, "qk_matmul_output_mode": 3}
EXPLICIT_CASES = [
    # (dtype, rank, hq, past, attrs, mask, qk output, opset, tolerance)
    (F, 4, 4, 0, {"softcap": 2.0}, None, False, 23, None),
    (F, 4, 4, 0, {"softcap": 0.5, "is_causal": 1}, "-inf rows", False, 23, None),  # hidden rows: zeros
    (F, 3, 4, 0, {"softcap": 3.0, "is_causal": 1, **GQA3}, None, False, 23, None),
    (F, 4, 4, 0, {"qk_matmul_output_mode": 0}, "additive", True, 23, None),
    (F, 4, 2, 3, {"qk_matmul_output_mode": 1, "softcap": 2.0, "is_causal": 1}, None, True, 23, None),
    (F, 4, 4, 0, {"qk_matmul_output_mode": 1}, "bool", True, 23, None),  # no softcap: the scaled product
    (F, 4, 4, 3, {"qk_matmul_output_mode": 2, "is_causal": 1}, "bool", True, 23, None),
    (F, 4, 4, 0, {"qk_matmul_output_mode": 2}, None, True, 23, None),  # no bias: the scaled product
    (F, 4, 4, 0, {"qk_matmul_output_mode": 3}, "rows hidden", True, 23, None),
    (F, 3, 4, 3, {"qk_matmul_output_mode": 3, "softcap": 2.0, **GQA3}, "additive", True, 23, None),
    (F, 4, 2, 0, {"softmax_precision": 11, "is_causal": 1}, None, False, 23, None),
    (F, 4, 4, 0, {"softmax_precision": 10}, "additive", False, 23, "float16"),
    (F, 4, 4, 0, {"softmax_precision": 16}, None, False, 23, "bfloat16"),
    (H, 4, 2, 0, {"softmax_precision": 1, "qk_matmul_output_mode": 3}, "bool", True, 24, None),
    (H, 4, 4, 0, {"softcap": 2.0, "is_causal": 1}, "additive", False, 23, None),
    (np.float64, 4, 2, 0, {"is_causal": 1}, "additive", False, 23, None),  # attention takes no float64
    (F, 4, 2, 0, {"left_window_size": 1, **CAPPED_CAUSAL_MODE3}, "bool", True, 25, None),
]


@pytest.mark.parametrize(
    ("dtype", "rank", "hq", "past", "attrs", "mask", "qk", "opset", "tol"), EXPLICIT_CASES
)
def test_attention_explicit_lowering_matches_onnx(
    device, rng, dtype, rank, hq, past, attrs, mask, qk, opset, tol
):
    """softcap, qk_matmul_output, softmax_precision and float64 lowered stage by stage; the outputs
    (qk_matmul_output in the mode asked for) are the reference's."""
    attrs = {**attrs, **({"q_num_heads": hq} if rank == 3 else {})}
    inputs = _attention_inputs(rng, dtype, hq=hq, s=4, kv=5, past=past, rank=rank, mask=mask)
    outputs = ["y", "pk" if past else "", "pv" if past else "", "qk" if qk else ""]
    while not outputs[-1]:
        outputs.pop()
    ops = _check_attention(device, inputs, attrs, tuple(outputs), opset=opset, tol=tol)
    assert "attention" not in ops and "softmax" in ops, ops
    # a softmax_precision other than the input's compute dtype: cast there and back
    casts = 2 if dtype == F and attrs.get("softmax_precision") in (10, 11, 16) else 0
    assert ops.count("cast") == casts, ops


def test_attention_explicit_lowering_zeroes_the_rows_a_constant_bias_hides(device, rng):
    """S > T with a window of 0 keys back: queries 2 and 3 see no key (a constant bias of -inf rows),
    so their rows of Y and of the probabilities are 0, as ONNX's."""
    inputs = _attention_inputs(rng, s=4, kv=2)
    attrs = {"left_window_size": 0, **CAPPED_CAUSAL_MODE3}
    _check_attention(device, inputs, attrs, ("y", "", "", "qk"), opset=25)
    got = pl.from_onnx(_attention_node(inputs, attrs, ("y",), 25), device=device).run(
        {n: a for n, a in inputs.items() if a is not None}
    )
    assert not np.asarray(got["y"].numpy())[:, :, 2:].any()


@pytest.mark.parametrize("past", [0, 3])
@pytest.mark.parametrize("mask", ["additive", "bool"])
def test_attention_pads_a_short_mask_as_onnx(device, rng, past, mask):
    """A mask over fewer keys than K (and the cache) is padded with -inf (False): the keys past it are
    hidden, not broadcast to."""
    inputs = _attention_inputs(rng, s=4, kv=5, past=past, mask=mask, mask_t=3)
    ops = _check_attention(device, inputs, {}, ("y", "pk", "pv") if past else ("y",))
    assert "concat" in ops, ops


def test_attention_without_new_features_stays_one_stage(rng):
    """The fast path: no feature of the explicit lowering, one attention stage and nothing else."""
    inputs = _attention_inputs(rng, mask="additive")
    config, _ = import_model(_attention_node(inputs, {"is_causal": 1}, ("y",), 23))
    ((stage,),) = [config["pipeline"]]
    assert stage["name"] == "attention" and stage["attrs"]["is_causal"] is True, stage


def _symbolic_model(attrs, shapes, outputs=("y",), opset=23):
    """An Attention node over float32 graph inputs of ``shapes`` (names in input order, None: absent; a
    str dim is symbolic)."""
    names = [n if shapes.get(n) is not None else "" for n in _ATTENTION_INPUTS]
    while not names[-1]:
        names.pop()
    types = {"mask": onnx.TensorProto.FLOAT, "nonpad": onnx.TensorProto.INT64}
    node = helper.make_node("Attention", names, list(outputs), name="the_node", **attrs)
    graph = helper.make_graph(
        [node],
        "attention",
        [
            helper.make_tensor_value_info(n, types.get(n, onnx.TensorProto.FLOAT), shapes[n])
            for n in names
            if n
        ],
        [helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, None) for o in outputs if o],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


QKV = {"q": [2, 4, 4, 8], "k": [2, 2, 6, 8], "v": [2, 2, 6, 8]}


@pytest.mark.parametrize(
    ("attrs", "shapes", "opset", "phrases"),
    [
        (
            {"is_causal": 1},
            {**QKV, "past_key": [2, 2, "P", 8], "past_value": [2, 2, "P", 8]},
            23,
            ["is_causal with a key/value cache", "known at import", "T=None"],
        ),
        ({"left_window_size": 2}, {**QKV, "q": [2, 4, "S", 8]}, 25, ["sliding window", "S=S"]),
        (
            {"is_causal": 1},
            {**QKV, "k": [2, 2, "T", 8], "v": [2, 2, "T", 8], "nonpad": [2]},
            24,
            ["nonpad_kv_seqlen needs the query length", "T=T"],
        ),
        ({}, {**QKV, "mask": ["S", 4]}, 23, ["attn_mask's last dim (4) must be the keys' 6", "shape known"]),
        (
            {"softcap": 2.0},
            {**QKV, "k": [2, 2, "T", 8], "v": [2, 2, "T", 8]},
            23,
            ["grouped-query heads need H (4) a multiple of H_kv (2)", "T=T"],
        ),
    ],
)
def test_attention_refuses_what_needs_unknown_sizes(attrs, shapes, opset, phrases):
    _refused(_symbolic_model(attrs, shapes, opset=opset), "Attention node 'the_node'", *phrases)
