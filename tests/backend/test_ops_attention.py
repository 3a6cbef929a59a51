"""attention against a query-by-query float64 reference (each row's scores, exponentials and weighted sum
written out) and ONNX's reference Attention (opset 23): causal masks with S != T, bool and additive
masks that broadcast, explicit scales, 16-bit types, fully masked rows, errors at load. The numeric cases
run on every device: on CUDA, float16/bfloat16 must run cuDNN's SDPA where it serves the stage (head sizes
multiple of 8, a mask of q's dtype covering [S, T]); the rest runs the staged reference, as the runtime
runs it.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import pipelink as pl
from pipelink.descriptor import KernelContext, VariantDeclined
from pipelink.errors import DTypeMismatchError, ShapeMismatchError
from pipelink.ops.attention.cuda import bias_shape, bind_attention

from .ops_helpers import check_close, make_registry, rand, run_op

TYPES = ("float32", "float16", "bfloat16")
HALF = ("float16", "bfloat16")


@pytest.fixture(scope="module")
def reg():
    return make_registry()


def _ref(q, k, v, *, causal=False, scale=None, mask=None):
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    b, h, s, d = q.shape
    t = k.shape[2]
    group = h // k.shape[1]  # grouped-query attention: query head hi reads key/value head hi // group
    scale = 1 / math.sqrt(d) if scale is None else scale
    full = None if mask is None else np.broadcast_to(mask, (b, h, s, t))
    y = np.empty((b, h, s, v.shape[3]))
    for bi, hi, i in itertools.product(range(b), range(h), range(s)):
        logits = []
        for j in range(t):
            visible = not (causal and j > i)
            if full is not None and full.dtype == np.bool_:
                visible = visible and bool(full[bi, hi, i, j])
            bias = 0.0 if full is None or full.dtype == np.bool_ else float(full[bi, hi, i, j])
            logits.append(scale * float(q[bi, hi, i] @ k[bi, hi // group, j]) + bias if visible else None)
        top = max(x for x in logits if x is not None)
        weights = [0.0 if x is None else math.exp(x - top) for x in logits]
        total = math.fsum(weights)
        y[bi, hi, i] = sum(w / total * v[bi, hi // group, j] for j, w in enumerate(weights))
    return y


@pytest.mark.parametrize("dtype", TYPES)
@pytest.mark.parametrize(
    ("b", "h", "s", "t", "d", "dv"),
    [(2, 3, 5, 5, 8, 8), (1, 2, 3, 7, 4, 6), (1, 1, 6, 2, 16, 3), (2, 1, 1, 9, 8, 8)],
)
@pytest.mark.parametrize("causal", [False, True])
def test_attention_against_rows(reg, dtype, b, h, s, t, d, dv, causal):
    rng = np.random.default_rng(61)
    q, k, v = (
        rand(rng, (b, h, s, d), dtype, -1, 1),
        rand(rng, (b, h, t, d), dtype, -1, 1),
        rand(rng, (b, h, t, dv), dtype, -1, 1),
    )
    (y,) = run_op(reg, "attention", [q, k, v], {"is_causal": causal})
    assert y.shape == (b, h, s, dv) and y.dtype == q.dtype
    check_close(y, _ref(q, k, v, causal=causal), dtype)


@pytest.mark.parametrize("dtype", TYPES)
def test_masks_and_scale(reg, device, dtype):
    # On CUDA both masks run staged (cuDNN has no bool mask, nor a bias broadcast over the queries).
    rng = np.random.default_rng(62)
    q, k, v = (rand(rng, (2, 2, 4, 8), dtype, -1, 1) for _ in range(3))
    keep = rng.random((2, 1, 4, 4)) > 0.3
    keep[..., 0] = True  # no row fully masked
    (y,) = run_op(reg, "attention", [q, k, v, keep], {"scale": 0.7}, device=device, staged_ok=True)
    check_close(y, _ref(q, k, v, scale=0.7, mask=keep), dtype)
    bias = rand(rng, (4,), dtype, -2, 2)  # an additive mask broadcast over batch, head and query
    (y,) = run_op(reg, "attention", [q, k, v, bias], {"is_causal": True}, device=device, staged_ok=True)
    check_close(y, _ref(q, k, v, causal=True, mask=bias), dtype)


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize(
    ("b", "h", "hk", "s", "t", "d", "dv", "strict"),
    [
        (1, 2, 2, 64, 64, 64, 64, True),
        (1, 2, 2, 37, 80, 64, 64, True),  # S != T: the causal mask is upper-left aligned
        (2, 4, 2, 17, 17, 128, 128, True),  # grouped-query heads
        (3, 4, 1, 1, 9, 64, 64, True),  # multi-query, one query (decoding)
        (2, 3, 3, 5, 5, 8, 8, False),  # small heads and Dv != D: cuDNN may decline them
        (1, 8, 1, 33, 40, 32, 16, False),
    ],
)
@pytest.mark.parametrize("causal", [False, True])
def test_attention_fused_on_every_device(reg, device, rng, dtype, b, h, hk, s, t, d, dv, strict, causal):
    # On CUDA the strict cases are cuDNN's SDPA (run_op fails if it declines): wrong if its scale, head
    # grouping or causal alignment differed from the reference's.
    q, k, v = (
        rand(rng, (b, h, s, d), dtype, -1, 1),
        rand(rng, (b, hk, t, d), dtype, -1, 1),
        rand(rng, (b, hk, t, dv), dtype, -1, 1),
    )
    attrs = {"is_causal": causal, **({"scale": 0.3} if causal else {})}  # else the default 1/sqrt(D)
    (y,) = run_op(reg, "attention", [q, k, v], attrs, device=device, staged_ok=not strict)
    check_close(y, _ref(q, k, v, causal=causal, scale=attrs.get("scale")), dtype)


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("mask_shape", [(2, 1, 6, 24), (6, 24), (2, 4, 6, 24)])
def test_additive_mask_as_cudnn_bias(reg, device, rng, dtype, mask_shape):
    q = rand(rng, (2, 4, 6, 64), dtype, -1, 1)
    k, v = rand(rng, (2, 4, 24, 64), dtype, -1, 1), rand(rng, (2, 4, 24, 64), dtype, -1, 1)
    mask = rand(rng, mask_shape, dtype, -2, 2)
    (y,) = run_op(reg, "attention", [q, k, v, mask], {"is_causal": True}, device=device)
    check_close(y, _ref(q, k, v, causal=True, mask=mask), dtype)


def test_declined_stages_say_why():
    # Wrong if cuDNN were handed a bool mask as bias bytes, a bias it cannot broadcast, or no keys.
    assert bias_shape((6, 24), (2, 4, 6, 24)) == (1, 1, 6, 24)
    assert bias_shape((2, 1, 1, 24), (2, 4, 6, 24)) is None

    def ctx(mask_shape, mask_dtype, t=24):
        return KernelContext(
            stage="a",
            attrs={"is_causal": False, "scale": None},
            in_shapes=((1, 2, 6, 8), (1, 2, t, 8), (1, 2, t, 8), mask_shape),
            in_dtypes=("float16", "float16", "float16", mask_dtype),
            out_shapes=((1, 2, 6, 8),),
            out_dtypes=("float16",),
            backend=None,
        )

    for args, why in [
        (((6, 24), "bool"), "a bool mask"),
        (((1, 1, 1, 24), "float16"), "broadcasts along the query or key axis"),
        ((None, None, 0), "no keys"),
    ]:
        with pytest.raises(VariantDeclined, match=why):
            bind_attention(ctx(*args))


@pytest.mark.parametrize("dtype", TYPES)
@pytest.mark.parametrize(("h", "hk"), [(4, 2), (6, 1), (8, 4)])
def test_grouped_query_attention(reg, dtype, h, hk):
    rng = np.random.default_rng(67)
    q = rand(rng, (2, h, 5, 8), dtype, -1, 1)
    k, v = rand(rng, (2, hk, 7, 8), dtype, -1, 1), rand(rng, (2, hk, 7, 4), dtype, -1, 1)
    keep = rng.random((2, h, 5, 7)) > 0.2
    keep[..., 0] = True
    (y,) = run_op(reg, "attention", [q, k, v, keep], {"is_causal": True})
    check_close(y, _ref(q, k, v, causal=True, mask=keep), dtype)


def test_fully_masked_row_is_nan_and_the_others_are_not(reg):
    rng = np.random.default_rng(63)
    q, k, v = (rand(rng, (1, 1, 3, 4), "float32") for _ in range(3))
    keep = np.ones((3, 3), bool)
    keep[1] = False
    (y,) = run_op(reg, "attention", [q, k, v, keep])
    assert np.isnan(y[0, 0, 1]).all() and not np.isnan(y[0, 0, [0, 2]]).any()


@pytest.mark.parametrize(
    ("shapes", "dtypes", "error", "match"),
    [
        ([(1, 2, 3, 4), (1, 2, 5, 8), (1, 2, 5, 4)], ["float32"] * 3, ShapeMismatchError, "dimension D"),
        ([(1, 2, 3, 4), (1, 3, 5, 4), (1, 3, 5, 4)], ["float32"] * 3, ShapeMismatchError, "not a multiple"),
        ([(1, 4, 3, 4), (1, 2, 5, 4), (1, 1, 5, 4)], ["float32"] * 3, ShapeMismatchError, "dimension Hkv"),
        ([(1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 6, 4)], ["float32"] * 3, ShapeMismatchError, "dimension T"),
        (
            [(1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 4), (3, 4)],
            ["float32"] * 4,
            ShapeMismatchError,
            "does not broadcast",
        ),
        (
            [(1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 4), (3, 5)],
            ["float32"] * 3 + ["int8"],
            DTypeMismatchError,
            "bool",
        ),
        ([(1, 2, 3, 4)] * 3, ["float64"] * 3, DTypeMismatchError, "not supported"),
    ],
)
def test_attention_errors(reg, shapes, dtypes, error, match):
    inputs = [np.zeros(s, dtype=t) for s, t in zip(shapes, dtypes, strict=True)]
    with pytest.raises(error, match=match):
        run_op(reg, "attention", inputs)


@pytest.mark.parametrize("causal", [0, 1])
@pytest.mark.parametrize(("s", "t"), [(4, 4), (3, 6)])
@pytest.mark.parametrize("hk", [2, 1])
def test_attention_matches_onnx(reg, causal, s, t, hk):
    pytest.importorskip("onnx")
    from .onnx_oracle import run_onnx

    rng = np.random.default_rng(64)
    q, k, v = (
        rand(rng, (2, 2, s, 8), "float32"),
        rand(rng, (2, hk, t, 8), "float32"),
        rand(rng, (2, hk, t, 5), "float32"),
    )
    (y,) = run_op(reg, "attention", [q, k, v], {"is_causal": bool(causal), "scale": 0.3})
    ref = run_onnx("Attention", [q, k, v], {"is_causal": causal, "scale": 0.3}, opset=23)[0]
    check_close(y, ref.astype(np.float64))


def test_pipeline_attention_block_plans_and_runs():
    # Symbolic batch: shapes are checked at load (reshape's -1 cancels B) and planned at the first run.
    config = {
        "inputs": {n: {"shape": ["B", 4, 16, 32], "dtype": "bfloat16"} for n in ("q", "k", "v")},
        "pipeline": [
            {
                "name": "attention",
                "id": "sdpa",
                "inputs": ["q", "k", "v"],
                "outputs": ["heads"],
                "attrs": {"is_causal": True},
            },
            {"name": "transpose", "inputs": ["heads"], "outputs": ["t"], "attrs": {"perm": [0, 2, 1, 3]}},
            {
                "name": "reshape",
                "id": "merge",
                "inputs": ["t"],
                "outputs": ["y"],
                "attrs": {"shape": [0, 0, -1]},
            },
        ],
    }
    rng = np.random.default_rng(65)
    q, k, v = (rand(rng, (2, 4, 16, 32), "bfloat16", -1, 1) for _ in range(3))
    with pl.load(config, device="cpu") as pipe:
        y = np.asarray(pipe.run(q=q, k=k, v=v)["y"])
        assert 0 < pipe.memory_plan.peak_bytes <= pipe.memory_plan.naive_bytes
    assert y.shape == (2, 16, 128)
    ref = _ref(q, k, v, causal=True).transpose(0, 2, 1, 3).reshape(2, 16, 128)
    check_close(y, ref, "bfloat16")


def test_pipeline_with_a_bool_mask_selects_the_cpu_variant():
    config = {
        "inputs": {
            "q": {"shape": [1, 2, 4, 8], "dtype": "float16"},
            "k": {"shape": [1, 2, 6, 8], "dtype": "float16"},
            "v": {"shape": [1, 2, 6, 8], "dtype": "float16"},
            "keep": {"shape": [1, 1, 1, 6], "dtype": "bool"},
        },
        "pipeline": [{"name": "attention", "inputs": ["q", "k", "v", "keep"], "outputs": ["y"]}],
    }
    rng = np.random.default_rng(66)
    q = rand(rng, (1, 2, 4, 8), "float16")
    k, v = rand(rng, (1, 2, 6, 8), "float16"), rand(rng, (1, 2, 6, 8), "float16")
    keep = np.array([[[[True, False, True, True, False, True]]]])
    with pl.load(config, device="cpu") as pipe:
        y = np.asarray(pipe.run(q=q, k=k, v=v, keep=keep)["y"])
    check_close(y, _ref(q, k, v, mask=keep), "float16")


def test_empty_queries_and_empty_keys(reg):
    (y,) = run_op(
        reg,
        "attention",
        [
            np.zeros((1, 2, 0, 4), np.float16),
            np.ones((1, 2, 3, 4), np.float16),
            np.ones((1, 2, 3, 5), np.float16),
        ],
    )
    assert y.shape == (1, 2, 0, 5)
    (y,) = run_op(
        reg,
        "attention",
        [
            np.ones((1, 2, 3, 4), np.float32),
            np.ones((1, 1, 0, 4), np.float32),
            np.ones((1, 1, 0, 5), np.float32),
        ],
    )
    assert y.shape == (1, 2, 3, 5) and np.isnan(y).all(), "no keys: every row is fully masked"
