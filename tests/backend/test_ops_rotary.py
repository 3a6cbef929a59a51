"""rotary_embedding against ONNX's reference implementation (``onnx.reference.ops.op_rotary_embedding``,
in float64) on every device: both layouts, interleaved or not, whole and partial rotary dims, caches
indexed by position ids or per token; bit for bit against ONNX's float32 arithmetic on the CPU; position
ids out of range (gather's contract); and every refusal of a bad shape, attribute or dtype, with its code.
"""

from __future__ import annotations

import numpy as np
import pytest

from pipelink.descriptor import infer_outputs
from pipelink.errors import DTypeMismatchError, ErrorCode, InvalidArgumentError, ShapeMismatchError

from .ops_helpers import TOL, make_registry, rand, run_op

DTYPES = ("float32", "float16", "bfloat16")


@pytest.fixture(scope="module")
def reg():
    return make_registry()


def _onnx_rotary():
    onnx_ops = pytest.importorskip("onnx.reference.ops.op_rotary_embedding")
    return onnx_ops.rotary_embedding


def _inputs(rng, dtype, layout, b, s, h, d, rotary, with_positions, max_pos=11):
    shape = (b, h, s, d) if layout == "bhsd" else (b, s, h * d)
    x = rand(rng, shape, dtype)
    half = (rotary or d) // 2
    cache_shape = (max_pos, half) if with_positions else (b, s, half)
    angles = rng.uniform(-np.pi, np.pi, size=cache_shape)
    cos, sin = np.cos(angles).astype(x.dtype), np.sin(angles).astype(x.dtype)
    positions = rng.integers(0, max_pos, size=(b, s)).astype(np.int64) if with_positions else None
    return x, cos, sin, positions


def _attrs(layout, h, rotary, interleaved):
    attrs = {"interleaved": interleaved, "rotary_embedding_dim": rotary}
    if layout == "bsh":
        attrs["num_heads"] = h
    return attrs


def _want(x, cos, sin, positions, layout, h, rotary, interleaved):
    as64 = [
        None if a is None else (a if a.dtype.kind == "i" else a.astype(np.float64)) for a in (x, cos, sin)
    ]
    return _onnx_rotary()(
        as64[0],
        as64[1],
        as64[2],
        position_ids=positions,
        interleaved=int(interleaved),
        rotary_embedding_dim=rotary,
        num_heads=h if layout == "bsh" else 0,
    )


def _check(y, want, dtype, x):
    assert y.shape == x.shape and y.dtype == x.dtype
    got = y.astype(np.float64)
    assert not np.isnan(got).any(), f"{np.isnan(got).sum()} element(s) not written (still NaN)"
    rtol, atol = TOL[dtype]
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["bsh", "bhsd"])
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("rotary", [0, 6])  # 0: the whole head of 16; 6: the first 6 elements, 10 copied
@pytest.mark.parametrize("with_positions", [True, False])
def test_rotary_embedding_matches_onnx_reference(
    reg, device, rng, dtype, layout, interleaved, rotary, with_positions
):
    """Every element of y is ONNX's: a wrong pair (halves vs interleaved), a wrong cache row (position id
    or token), a head mixed with another or a copied tail left unwritten (NaN) fails here."""
    b, s, h, d = 2, 5, 3, 16
    x, cos, sin, positions = _inputs(rng, dtype, layout, b, s, h, d, rotary, with_positions)
    attrs = _attrs(layout, h, rotary, interleaved)
    (y,) = run_op(reg, "rotary_embedding", [x, cos, sin, positions], attrs, device=device)
    _check(y, _want(x, cos, sin, positions, layout, h, rotary, interleaved), dtype, x)


@pytest.mark.parametrize("layout", ["bsh", "bhsd"])
@pytest.mark.parametrize("interleaved", [False, True])
def test_rotary_embedding_cpu_is_onnx_float32_bit_for_bit(reg, rng, layout, interleaved):
    """The reference does ONNX's float32 arithmetic in ONNX's order: equal bits, not just close values."""
    x, cos, sin, positions = _inputs(rng, "float32", layout, 3, 4, 2, 8, 4, True)
    attrs = _attrs(layout, 2, 4, interleaved)
    (y,) = run_op(reg, "rotary_embedding", [x, cos, sin, positions], attrs)
    want = _onnx_rotary()(
        x, cos, sin, position_ids=positions, interleaved=int(interleaved), rotary_embedding_dim=4, num_heads=2
    )
    np.testing.assert_array_equal(y, want)


def test_rotary_embedding_int32_positions_negative_and_larger_shapes(reg, device, rng):
    """int32 position ids, negative ones counting from the cache's end (NumPy indexing, as ONNX's
    reference), and a shape with many heads and tokens (the kernel's grid-stride loop)."""
    b, s, h, d = 2, 300, 8, 64
    x, cos, sin, positions = _inputs(rng, "float16", "bsh", b, s, h, d, 32, True, max_pos=512)
    positions = rng.integers(-512, 512, size=(b, s)).astype(np.int32)
    attrs = _attrs("bsh", h, 32, False)
    (y,) = run_op(reg, "rotary_embedding", [x, cos, sin, positions], attrs, device=device)
    _check(y, _want(x, cos, sin, positions.astype(np.int64), "bsh", h, 32, False), "float16", x)


@pytest.mark.parametrize("bad", [11, -12])
def test_rotary_embedding_position_out_of_range(reg, device, rng, bad):
    """An id outside [-max_pos, max_pos) is an error on the CPU, and on CUDA with check_indices (gather's
    contract); on CUDA without it, that token's rotated elements are zeros and the rest is right."""
    x, cos, sin, positions = _inputs(rng, "float32", "bhsd", 2, 3, 2, 8, 4, True)
    positions[1, 2] = bad
    attrs = _attrs("bhsd", 2, 4, False)
    with pytest.raises(
        InvalidArgumentError, match=rf"position id \(cache\) index {bad} is out of range"
    ) as e:
        run_op(
            reg, "rotary_embedding", [x, cos, sin, positions], dict(attrs, check_indices=True), device=device
        )
    assert e.value.code == ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT
    if device == "cpu":
        with pytest.raises(InvalidArgumentError, match="valid: -11 .. 10"):
            run_op(reg, "rotary_embedding", [x, cos, sin, positions], attrs, device=device)
        return
    (y,) = run_op(reg, "rotary_embedding", [x, cos, sin, positions], attrs, device=device)
    np.testing.assert_array_equal(y[1, :, 2, :4], 0.0)
    np.testing.assert_array_equal(y[1, :, 2, 4:], x[1, :, 2, 4:])
    good = positions.copy()
    good[1, 2] = 0
    want = _want(x, cos, sin, good, "bhsd", 2, 4, False)
    want[1, :, 2, :4] = 0.0
    _check(y, want, "float32", x)


def _infer(reg, shapes, dtypes=None, **attrs):
    desc = reg.get("rotary_embedding")
    shapes = list(shapes) + [None] * (4 - len(shapes))
    dtypes = dtypes or ["float32", "float32", "float32", "int64"]
    dtypes = [None if s is None else t for s, t in zip(shapes, dtypes, strict=True)]
    resolved = desc.resolve_attrs(attrs, where="stage 'r'")
    return infer_outputs(desc, tuple(shapes), tuple(dtypes), resolved, stage="r")


def test_rotary_embedding_shape_rule_with_symbols(reg):
    """Symbolic batch and sequence dims pass through; the caches are checked against what is known."""
    shapes, dtypes = _infer(reg, [("B", "S", 64), (100, 8), (100, 8), ("B", "S")], num_heads=4)
    assert tuple(shapes[0]) == ("B", "S", 64) and dtypes[0] == "float32"
    shapes, _ = _infer(reg, [(2, 4, "S", 32), (2, "S", 16), (2, "S", 16)])
    assert tuple(shapes[0]) == (2, 4, "S", 32)


@pytest.mark.parametrize(
    ("shapes", "attrs", "error", "match"),
    [
        ([(2, 3), (4, 2), (4, 2), (2, 3)], {}, ShapeMismatchError, r"must be \[B, S, hidden\]"),
        ([(2, 3, 16), (4, 4), (4, 4), (2, 3)], {}, InvalidArgumentError, "needs num_heads > 0"),
        ([(2, 3, 18), (4, 4), (4, 4), (2, 3)], {"num_heads": 4}, ShapeMismatchError, "does not split"),
        (
            [(2, 2, 3, 8), (4, 4), (4, 4), (2, 3)],
            {"num_heads": 4},
            InvalidArgumentError,
            "differs from the 2",
        ),
        ([(2, 2, 3, 8), (4, 2), (4, 2), (2, 3)], {"rotary_embedding_dim": 5}, ShapeMismatchError, "even"),
        ([(2, 2, 3, 8), (4, 6), (4, 6), (2, 3)], {"rotary_embedding_dim": 12}, ShapeMismatchError, "at most"),
        ([(2, 2, 3, 8), (4, 4), (4, 4), (2, 3)], {"rotary_embedding_dim": -2}, InvalidArgumentError, ">= 0"),
        ([(2, 2, 3, 8), (4, 3), (4, 3), (2, 3)], {}, ShapeMismatchError, "'cos_cache'"),
        ([(2, 2, 3, 8), (4, 4), (4, 5), (2, 3)], {}, ShapeMismatchError, "'sin_cache'"),
        ([(2, 2, 3, 8), (4, 4), (4, 4), (3, 2)], {}, ShapeMismatchError, "'position_ids'"),
        ([(2, 2, 3, 8), (4, 4), (4, 4)], {}, ShapeMismatchError, r"\[B, S, rotary_dim/2\]"),
        ([(2, 2, 3, 8), (2, 3, 4, 1), (2, 3, 4, 1)], {}, ShapeMismatchError, "'cos_cache'"),
    ],
)
def test_rotary_embedding_refusals(reg, shapes, attrs, error, match):
    """Each shape or attribute the operator cannot honour is refused with the rule and the input."""
    with pytest.raises(error, match=match) as e:
        _infer(reg, shapes, **attrs)
    want = (
        ErrorCode.PIPELINK_ERR_SHAPE_MISMATCH
        if error is ShapeMismatchError
        else ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT
    )
    assert e.value.code == want


def test_rotary_embedding_refuses_dtypes(reg):
    """Caches of another dtype than x, float position ids and float64 (not an ONNX RotaryEmbedding type)."""
    shapes = [(2, 2, 3, 8), (4, 4), (4, 4), (2, 3)]
    for dtypes in (
        ["float32", "float16", "float16", "int64"],
        ["float32", "float32", "float32", "float32"],
        ["float64", "float64", "float64", "int64"],
    ):
        with pytest.raises(DTypeMismatchError) as e:
            _infer(reg, shapes, dtypes)
        assert e.value.code == ErrorCode.PIPELINK_ERR_DTYPE_MISMATCH


def _emulate_kernel(plan, x, cos, sin, positions):
    """``pl_rotary_embedding``'s walk in NumPy, from the plan's macros and scalars: each thread's slot, head,
    token and cache row, as rotary.cu computes them. Returns y and how often each element was written."""
    sc, mac = plan.scalars, plan.macros
    d, rd, seq, heads, n = sc["D"], sc["rotary_dim"], sc["S"], sc["H"], sc["n"]
    half, slots = rd // 2, sc["D"] - rd // 2
    xf, y, writes = (
        x.reshape(-1).astype(np.float32),
        np.full(x.size, np.nan, np.float32),
        np.zeros(x.size, int),
    )
    i = np.arange(n)
    slot, head = i % slots, i // slots
    base = head * d
    copy = slot >= half
    e = base[copy] + rd + slot[copy] - half
    y[e], writes[e] = xf[e], writes[e] + 1
    slot, head, base = slot[~copy], head[~copy], base[~copy]
    if mac["PL_HEADS_OUTER"] == "1":
        s, b = head % seq, head // seq // heads
    else:
        s, b = (head // heads) % seq, head // heads // seq
    row = b * seq + s
    if mac["PL_INTERLEAVED"] == "1":
        e1 = base + 2 * slot
        e2 = e1 + 1
    else:
        e1 = base + slot
        e2 = e1 + half
    if mac["PL_HAS_POSITIONS"] == "1":
        p = positions.reshape(-1)[row]
        row = np.where(p < 0, p + sc["max_pos"], p)
    c, sn = cos.reshape(-1)[row * half + slot], sin.reshape(-1)[row * half + slot]
    x1, x2 = xf[e1], xf[e2]
    y[e1], y[e2] = c * x1 - sn * x2, sn * x1 + c * x2
    np.add.at(writes, e1, 1)
    np.add.at(writes, e2, 1)
    return y.reshape(x.shape), writes


@pytest.mark.parametrize("layout", ["bsh", "bhsd"])
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize(("rotary", "with_positions"), [(0, True), (6, True), (6, False)])
def test_rotary_kernel_index_walk_matches_the_reference(
    reg, rng, layout, interleaved, rotary, with_positions
):
    """The CUDA plan's geometry and rotary.cu's index arithmetic, emulated on the CPU: every element is
    written exactly once (a thread owns its pair) and equals the reference's (no GPU needed)."""
    from pipelink.ops.rotary.cuda import plan_rotary_embedding

    b, s, h, d = 2, 5, 3, 16
    x, cos, sin, positions = _inputs(rng, "float32", layout, b, s, h, d, rotary, with_positions)
    if with_positions:
        positions[0, 1] = -3  # from the cache's end
    attrs = _attrs(layout, h, rotary, interleaved)
    plan = plan_rotary_embedding(
        "float32",
        x.shape,
        rotary_dim=rotary,
        num_heads=attrs.get("num_heads", 0),
        interleaved=interleaved,
        cache_shape=cos.shape,
        index_dtype="int64" if with_positions else None,
    )
    y, writes = _emulate_kernel(plan, x, cos, sin, positions)
    assert (writes == 1).all(), "an element written twice or never"
    (want,) = run_op(reg, "rotary_embedding", [x, cos, sin, positions], attrs)
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)
