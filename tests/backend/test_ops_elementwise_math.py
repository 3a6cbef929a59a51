"""The elementwise family's tan, inverse and hyperbolic functions, shrink, silu's alpha (ONNX Swish), the
bitwise ops and bit_shift: on every device, against references written here (float64 NumPy, or exact
Python integers), their IEEE and integer edges, their refusals, and their one-node ONNX models at opsets
the table of test_onnx_import.py does not use (Swish of opset 24, BitShift of signed integers at 28).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import pipelink as pl
from pipelink.descriptor import infer_outputs
from pipelink.dtypes import get_dtype
from pipelink.errors import DTypeMismatchError, ErrorCode, InvalidArgumentError
from pipelink.onnx import import_model

from .ops_helpers import FLOAT_NAMES, INT_NAMES, TOL, as64, check_close, make_registry, rand, run_op

SHAPES = [(3, 7), (2, 4099)]  # 4099: vector tails and more than one block
BINARY_SHAPES = [((3, 7), (3, 7)), ((2, 5, 33), (33,)), ((4, 1, 3), (5, 3)), ((1, 7), (3, 1))]


@pytest.fixture(scope="module")
def reg():
    return make_registry()


def _wrap(values, dtype: str) -> np.ndarray:
    """Python ints reduced modulo 2**bits into the range of an integer dtype."""
    bits = np.dtype(dtype).itemsize * 8
    signed = np.issubdtype(np.dtype(dtype), np.signedinteger)

    def one(v: int) -> int:
        v %= 1 << bits
        return v - (1 << bits) if signed and v >= 1 << (bits - 1) else v

    return np.vectorize(one, otypes=[object])(values)


def _full_range(rng, shape, dtype: str) -> np.ndarray:
    """Random integers over the whole range of the dtype (every bit pattern, signs included)."""
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)


# -------------------------------------------------------------------------- tan, inverse, hyperbolic

# (operator, float64 reference, the interval of well-conditioned random inputs)
MATH = [
    ("tan", np.tan, (-1.4, 1.4)),
    ("asin", np.arcsin, (-0.95, 0.95)),
    ("acos", np.arccos, (-0.95, 0.95)),
    ("atan", np.arctan, (-10.0, 10.0)),
    ("sinh", np.sinh, (-5.0, 5.0)),
    ("cosh", np.cosh, (-5.0, 5.0)),
    ("asinh", np.arcsinh, (-10.0, 10.0)),
    ("acosh", np.arccosh, (1.05, 10.0)),
    ("atanh", np.arctanh, (-0.95, 0.95)),
]
MATH_NAMES = [name for name, _, _ in MATH]


@pytest.mark.parametrize("dtype", FLOAT_NAMES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(("name", "ref", "interval"), MATH, ids=MATH_NAMES)
def test_math_ops_inside_their_domains(reg, device, rng, name, ref, interval, shape, dtype):
    x = rand(rng, shape, dtype, *interval)
    (y,) = run_op(reg, name, [x], device=device)
    assert y.dtype == x.dtype and y.shape == x.shape
    check_close(y, ref(as64(x)), dtype)


@pytest.mark.parametrize("dtype", FLOAT_NAMES)
@pytest.mark.parametrize(("name", "ref", "interval"), MATH, ids=MATH_NAMES)
def test_math_ops_follow_ieee_at_their_edges(reg, device, name, ref, interval, dtype):
    """+-0 keeps its sign where the function is odd, +-1 reaches the ends of the domains (atanh(+-1) =
    +-inf, acosh(1) = 0), out of the domain is NaN (asin(2), acosh(0.5), tan(inf)), sinh and cosh
    overflow to inf, NaN propagates; and no NumPy warning on the CPU."""
    x = np.array([-0.0, 0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 2.0, -2.0, 0.5, 1000.0])
    x = x.astype(get_dtype(dtype).numpy)
    with np.errstate(all="raise"):  # a warning would raise here: the kernel must silence its own
        (y,) = run_op(reg, name, [x], device=device)
    with np.errstate(all="ignore"):
        want = ref(as64(x))
    got = as64(y)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=name)
    inf = np.isinf(want)
    np.testing.assert_array_equal(got[inf], want[inf], err_msg=name)
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=TOL[dtype][0], atol=TOL[dtype][1])
    zeros = want == 0
    np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]), err_msg=name)


@pytest.mark.parametrize("name", [*MATH_NAMES, "silu"])
@pytest.mark.parametrize("dtype", ["int32", "int8", "uint8", "int64"])
def test_float_functions_refuse_integers(reg, name, dtype):
    desc = reg.get(name)
    with pytest.raises(DTypeMismatchError, match=dtype) as info:
        infer_outputs(desc, ((3, 7),), (dtype,), desc.resolve_attrs({}, where="s"), stage="s")
    assert info.value.code == ErrorCode.PIPELINK_ERR_DTYPE_MISMATCH


# ---------------------------------------------------------------------------------------------- shrink


def _shrink_ref(x: np.ndarray, lambd: float, bias: float) -> np.ndarray:
    x = as64(x)
    return np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, 0.0))


@pytest.mark.parametrize("dtype", FLOAT_NAMES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("attrs", [{}, {"lambd": 1.25, "bias": 0.5}, {"lambd": 0.0, "bias": -2.0}])
def test_shrink_of_floats(reg, device, rng, attrs, shape, dtype):
    x = rand(rng, shape, dtype)
    (y,) = run_op(reg, "shrink", [x], attrs, device=device)
    assert y.dtype == x.dtype and y.shape == x.shape
    check_close(y, _shrink_ref(x, attrs.get("lambd", 0.5), attrs.get("bias", 0.0)), dtype)


@pytest.mark.parametrize("dtype", FLOAT_NAMES)
def test_shrink_edges(reg, device, dtype):
    """+-lambd itself and NaN are in the band (0, +0 for -0 too); +-inf keep their sign."""
    x = np.array([1.25, -1.25, np.nan, -0.0, np.inf, -np.inf, 1.5, -1.5]).astype(get_dtype(dtype).numpy)
    (y,) = run_op(reg, "shrink", [x], {"lambd": 1.25, "bias": 0.25}, device=device)
    got = as64(y)
    np.testing.assert_array_equal(got, [0.0, 0.0, 0.0, 0.0, np.inf, -np.inf, 1.25, -1.25])
    assert not np.signbit(got[3])


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32"])
@pytest.mark.parametrize("attrs", [{}, {"lambd": 2.5, "bias": 1.5}, {"lambd": -3.0, "bias": 0.75}])
def test_shrink_of_integers_truncates_as_the_onnx_reference(reg, device, rng, dtype, attrs):
    """x +- bias in float64, truncated toward zero (5 - 1.5 = 3.5 gives 3, -5 + 1.5 = -3.5 gives -3); a
    negative lambd makes the branches overlap, and x < -lambd wins, as in the reference."""
    lambd, bias = attrs.get("lambd", 0.5), attrs.get("bias", 0.0)
    info = np.iinfo(dtype)
    x = rand(rng, (2, 4099), dtype)
    x.reshape(-1)[:6] = np.array([info.min, info.max, 5, -5 if info.min < 0 else 6, 0, 2], dtype=object)
    (y,) = run_op(reg, "shrink", [x], attrs, device=device)
    assert y.dtype == x.dtype
    want = [
        math.trunc(v + bias if v < -lambd else v - bias if v > lambd else 0.0) for v in x.reshape(-1).tolist()
    ]
    np.testing.assert_array_equal(y.reshape(-1).astype(object), np.array(want, dtype=object))


@pytest.mark.parametrize(
    ("dtype", "attrs", "why"),
    [
        ("int8", {"bias": -10.0}, r"x=-128 to -138\.0, outside int8's range \[-128, 127\]"),
        ("int8", {"bias": 10.0, "lambd": -200.0}, r"x=127 to 137\.0"),
        ("uint8", {"lambd": 0.5, "bias": 5.0}, r"x=1 to -4\.0, outside uint8's range"),
        ("int32", {"lambd": -1.0, "bias": 1e10}, "outside int32's range"),
        ("int8", {"bias": math.nan}, "to nan"),
    ],
)
def test_shrink_refuses_integer_results_out_of_range(reg, dtype, attrs, why):
    desc = reg.get("shrink")
    resolved = desc.resolve_attrs(attrs, where="stage 's'")
    with pytest.raises(InvalidArgumentError, match=why) as info:
        infer_outputs(desc, ((4,),), (dtype,), resolved, stage="s")
    assert info.value.code == ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT
    assert "stage 's'" in str(info.value)


@pytest.mark.parametrize("dtype", ["int64", "uint64"])
def test_shrink_refuses_64_bit_integers_and_says_what_to_do(reg, dtype):
    desc = reg.get("shrink")
    with pytest.raises(DTypeMismatchError, match=f"{dtype}.*cast x to float64") as info:
        infer_outputs(desc, ((4,),), (dtype,), desc.resolve_attrs({}, where="s"), stage="s")
    assert info.value.code == ErrorCode.PIPELINK_ERR_DTYPE_MISMATCH


def test_shrink_with_nan_or_infinite_lambd_is_defined_for_integers(reg, device):
    """A NaN lambd puts nothing outside the band (0 everywhere), -inf puts everything below it."""
    x = np.array([-128, -3, 0, 7, 127], np.int8)
    (y,) = run_op(reg, "shrink", [x], {"lambd": math.nan, "bias": 1.0}, device=device)
    np.testing.assert_array_equal(y, np.zeros(5, np.int8))
    (y,) = run_op(reg, "shrink", [x], {"lambd": -math.inf, "bias": 0.0}, device=device)
    np.testing.assert_array_equal(y, x)


# ------------------------------------------------------------------------------------- silu's alpha


@pytest.mark.parametrize("dtype", FLOAT_NAMES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("alpha", [1.0, 0.5, -1.5, 0.0, 3.0])
def test_silu_alpha_is_onnx_swish(reg, device, rng, alpha, shape, dtype):
    x = rand(rng, shape, dtype, -6.0, 6.0)
    (y,) = run_op(reg, "silu", [x], {"alpha": alpha}, device=device)
    x64 = as64(x)
    check_close(y, x64 / (1.0 + np.exp(-alpha * x64)), dtype)


def test_silu_alpha_saturates_without_nan(reg, device):
    """exp(-alpha x) overflowing gives x / inf = -0, not NaN; alpha 1 is silu's own default."""
    x = np.array([-1000.0, -60.0, 0.0, 60.0, 1000.0], np.float32)
    with np.errstate(all="raise"):
        (y,) = run_op(reg, "silu", [x], {"alpha": 2.0}, device=device)
    np.testing.assert_allclose(y, [0.0, -60.0 * math.exp(-120.0), 0.0, 60.0, 1000.0], atol=1e-30)
    assert np.signbit(y[0])
    assert reg.get("silu").resolve_attrs({}, where="s")["alpha"] == 1.0


# ------------------------------------------------------------------------------------------- bitwise


BITWISE = [
    ("bitwise_and", lambda a, b: a & b),
    ("bitwise_or", lambda a, b: a | b),
    ("bitwise_xor", lambda a, b: a ^ b),
]


@pytest.mark.parametrize(("name", "op"), BITWISE, ids=[n for n, _ in BITWISE])
@pytest.mark.parametrize("dtype", INT_NAMES)
@pytest.mark.parametrize(("sa", "sb"), BINARY_SHAPES)
def test_bitwise_ops_broadcast(reg, device, rng, name, op, dtype, sa, sb):
    """On every bit pattern of the dtype (negative values' two's complement), against Python's ints."""
    a, b = _full_range(rng, sa, dtype), _full_range(rng, sb, dtype)
    (c,) = run_op(reg, name, [a, b], device=device)
    assert c.shape == np.broadcast_shapes(sa, sb) and c.dtype == a.dtype
    np.testing.assert_array_equal(c.astype(object), _wrap(op(a.astype(object), b.astype(object)), dtype))


@pytest.mark.parametrize("dtype", INT_NAMES)
@pytest.mark.parametrize("shape", SHAPES)
def test_bitwise_not(reg, device, rng, dtype, shape):
    """~x = -x - 1 in two's complement: uint8 ~5 is 250, int8 ~-128 is 127."""
    x = _full_range(rng, shape, dtype)
    info = np.iinfo(dtype)
    x.reshape(-1)[:3] = [info.min, info.max, 0]
    (y,) = run_op(reg, "bitwise_not", [x], device=device)
    assert y.dtype == x.dtype
    np.testing.assert_array_equal(y.astype(object), _wrap(~x.astype(object), dtype))


def _shift_ref(a: np.ndarray, b: np.ndarray, left: bool, dtype: str) -> np.ndarray:
    """ONNX BitShift (opset 28) on Python ints: an amount outside [0, bits) gives 0, or -1 for a negative
    a shifted right; a left shift keeps the low bits."""
    bits = np.dtype(dtype).itemsize * 8
    a, b = np.broadcast_arrays(a.astype(object), b.astype(object))

    def one(x: int, s: int) -> int:
        if not 0 <= s < bits:
            return -1 if (not left and x < 0) else 0
        return x << s if left else x >> s

    return _wrap(np.vectorize(one, otypes=[object])(a, b), dtype)


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", INT_NAMES)
@pytest.mark.parametrize(("sa", "sb"), BINARY_SHAPES)
def test_bit_shift_broadcast(reg, device, rng, direction, dtype, sa, sb):
    """Amounts from below 0 (signed) to past the bit width, values of every bit pattern."""
    bits = np.dtype(dtype).itemsize * 8
    a = _full_range(rng, sa, dtype)
    low = -3 if np.iinfo(dtype).min < 0 else 0
    b = rng.integers(low, bits + 5, size=sb, endpoint=True).astype(dtype)
    (c,) = run_op(reg, "bit_shift", [a, b], {"direction": direction}, device=device)
    assert c.shape == np.broadcast_shapes(sa, sb) and c.dtype == a.dtype
    np.testing.assert_array_equal(c.astype(object), _shift_ref(a, b, direction == "LEFT", dtype))


@pytest.mark.parametrize("dtype", INT_NAMES)
def test_bit_shift_by_the_bit_width_or_more_gives_the_sign_fill(reg, device, dtype):
    """C leaves a shift by >= the width undefined (x86 takes the amount modulo the width); here 0, or
    -1 for a negative value shifted right, as NumPy gives for unsigned types and ONNX defines."""
    info = np.iinfo(dtype)
    bits = info.bits
    a = np.array([info.max, 1, info.min, info.max, -1 if info.min < 0 else 3], dtype)
    b = np.array([bits, bits + 1, bits, 2 * bits if 2 * bits <= info.max else bits, bits - 1], dtype)
    (left,) = run_op(reg, "bit_shift", [a, b], {"direction": "LEFT"}, device=device)
    (right,) = run_op(reg, "bit_shift", [a, b], {"direction": "RIGHT"}, device=device)
    np.testing.assert_array_equal(left[:4], 0)
    np.testing.assert_array_equal(right[:4], [0, 0, -1 if info.min < 0 else 0, 0])
    assert int(left[4]) == _shift_ref(a[4:], b[4:], True, dtype)[0]  # the top bit itself is kept
    if np.dtype(dtype).kind == "u":
        np.testing.assert_array_equal(left, np.left_shift(a, b))  # NumPy's own answer for unsigned
        np.testing.assert_array_equal(right, np.right_shift(a, b))


@pytest.mark.parametrize("name", ["bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "bit_shift"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bool"])
def test_bitwise_ops_refuse_floats_and_bool(reg, name, dtype):
    desc = reg.get(name)
    attrs = desc.resolve_attrs({"direction": "LEFT"} if name == "bit_shift" else {}, where="s")
    shapes = ((3, 7), (7,))[: len(desc.inputs)]
    with pytest.raises(DTypeMismatchError, match=dtype) as info:
        infer_outputs(desc, shapes, (dtype,) * len(shapes), attrs, stage="s")
    assert info.value.code == ErrorCode.PIPELINK_ERR_DTYPE_MISMATCH


def test_bitwise_ops_refuse_mixed_integer_dtypes(reg):
    desc = reg.get("bitwise_and")
    with pytest.raises(DTypeMismatchError, match="int8") as info:
        infer_outputs(desc, ((3,), (3,)), ("int32", "int8"), {}, stage="s")
    assert info.value.code == ErrorCode.PIPELINK_ERR_DTYPE_MISMATCH


@pytest.mark.parametrize(
    ("attrs", "why"), [({"direction": "UP"}, "UP"), ({"direction": "left"}, "left"), ({}, "direction")]
)
def test_bit_shift_refuses_a_bad_or_missing_direction(reg, attrs, why):
    with pytest.raises(InvalidArgumentError, match=why) as info:
        reg.get("bit_shift").resolve_attrs(attrs, where="stage 's'")
    assert info.value.code == ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT


# ------------------------------------------------------------------------------ ONNX, beyond opset 21


def _onnx_model(onnx, op, feeds, attrs, opset):
    node = onnx.helper.make_node(op, list(feeds), ["y"], name=f"the_{op.lower()}", **attrs)
    graph = onnx.helper.make_graph(
        [node],
        op,
        [
            onnx.helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in feeds.items()
        ],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.UNDEFINED, None)],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def _check_against_onnx(onnx, device, op, feeds, attrs, opset):
    from onnx.reference import ReferenceEvaluator

    model = _onnx_model(onnx, op, feeds, attrs, opset)
    (want,) = ReferenceEvaluator(model).run(None, feeds)
    got = np.asarray(pl.from_onnx(model, device=device).run(feeds)["y"].numpy())
    assert got.dtype == want.dtype and got.shape == want.shape
    return got, np.asarray(want)


@pytest.mark.parametrize("alpha", [None, 0.5, -2.0])
def test_onnx_swish_of_opset_24_is_silu_with_alpha(device, rng, alpha):
    onnx = pytest.importorskip("onnx")
    x = rng.standard_normal((2, 3, 4099)).astype(np.float32) * 4
    attrs = {} if alpha is None else {"alpha": alpha}
    got, want = _check_against_onnx(onnx, device, "Swish", {"x": x}, attrs, 24)
    rtol, atol = TOL["float32"]
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", INT_NAMES)
def test_onnx_bit_shift_of_opset_28_matches_the_reference_on_every_integer(device, rng, direction, dtype):
    """Opset 28 adds the signed types (an arithmetic right shift) and defines amounts outside [0, bits)."""
    onnx = pytest.importorskip("onnx")
    bits = np.dtype(dtype).itemsize * 8
    low = -3 if np.iinfo(dtype).min < 0 else 0
    feeds = {
        "a": _full_range(rng, (3, 5, 7), dtype),
        "b": rng.integers(low, bits + 3, size=(5, 7), endpoint=True).astype(dtype),
    }
    got, want = _check_against_onnx(onnx, device, "BitShift", feeds, {"direction": direction}, 28)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32"])
def test_onnx_shrink_of_integers_matches_the_reference(device, rng, dtype):
    onnx = pytest.importorskip("onnx")
    feeds = {"x": rand(rng, (3, 4099), dtype)}
    got, want = _check_against_onnx(onnx, device, "Shrink", feeds, {"lambd": 2.5, "bias": 1.5}, 21)
    np.testing.assert_array_equal(got, want)


def test_onnx_bitwise_ops_of_int64_match_the_reference(device, rng):
    onnx = pytest.importorskip("onnx")
    a, b = _full_range(rng, (4, 1, 6), "int64"), _full_range(rng, (5, 6), "int64")
    for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor"):
        got, want = _check_against_onnx(onnx, device, op, {"a": a, "b": b}, {}, 21)
        np.testing.assert_array_equal(got, want, err_msg=op)
    got, want = _check_against_onnx(onnx, device, "BitwiseNot", {"x": a}, {}, 21)
    np.testing.assert_array_equal(got, want)


def test_onnx_bit_shift_with_a_bad_direction_is_listed_unsupported():
    onnx = pytest.importorskip("onnx")
    feeds = {"a": np.arange(4, dtype=np.uint8), "b": np.ones(4, np.uint8)}
    model = _onnx_model(onnx, "BitShift", feeds, {"direction": "UP"}, 21)
    with pytest.raises(pl.PipeLinkError, match="UP") as info:
        import_model(model)
    assert info.value.code == ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT
    assert [u["node"] for u in info.value.context["unsupported"]] == ["the_bitshift"]


def test_onnx_shrink_of_int8_out_of_range_is_refused_when_the_pipeline_is_built(rng):
    onnx = pytest.importorskip("onnx")
    model = _onnx_model(onnx, "Shrink", {"x": rand(rng, (4,), "int8")}, {"bias": -100.0}, 21)
    with pytest.raises(pl.PipeLinkError, match="outside int8's range") as info:
        pl.from_onnx(model, device="cpu")
    assert info.value.code == ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT


# -------------------------------------------------------------------------- bitcast

_BITCASTS = [
    ("float32", "int32"),
    ("int32", "float32"),
    ("float32", "uint32"),
    ("float64", "int64"),
    ("uint64", "float64"),
    ("float16", "int16"),
    ("bfloat16", "uint16"),
    ("int8", "uint8"),
    ("uint8", "bool"),
    ("float8_e4m3fn", "int8"),
]


@pytest.mark.parametrize(("src", "dst"), _BITCASTS, ids=[f"{a}-{b}" for a, b in _BITCASTS])
def test_bitcast_keeps_every_bit_pattern(reg, device, rng, src, dst):
    """Random bytes (NaN payloads, subnormals, negative zero included) come out as the same bytes."""
    width = get_dtype(src).itemsize
    raw = rng.integers(0, 256, size=(3, 5, width), dtype=np.uint8)
    if dst == "bool":
        raw &= 1  # bool's only bit patterns are 0 and 1
    x = raw.view(get_dtype(src).numpy).reshape(3, 5)
    (y,) = run_op(reg, "bitcast", [x], {"dtype": dst}, device=device)
    assert y.dtype == get_dtype(dst).numpy and y.shape == x.shape
    np.testing.assert_array_equal(y.view(np.uint8), x.view(np.uint8))


@pytest.mark.parametrize(("src", "dst"), [("float32", "float16"), ("int8", "int32"), ("bool", "int64")])
def test_bitcast_between_widths_is_refused(src, dst):
    desc = make_registry().get("bitcast")
    with pytest.raises(DTypeMismatchError, match="same width") as info:
        infer_outputs(desc, ((4,),), (src,), desc.resolve_attrs({"dtype": dst}, where="s"), stage="s")
    assert info.value.code == ErrorCode.PIPELINK_ERR_DTYPE_MISMATCH


def test_onnx_bitcast_matches_the_reference(device, rng):
    onnx = pytest.importorskip("onnx")
    x = rng.standard_normal((4, 6)).astype(np.float32)
    x[0, :3] = [np.nan, -0.0, np.inf]
    got, want = _check_against_onnx(onnx, device, "BitCast", {"x": x}, {"to": onnx.TensorProto.INT32}, 26)
    np.testing.assert_array_equal(got, want)
    model = _onnx_model(onnx, "BitCast", {"x": x}, {"to": onnx.TensorProto.DOUBLE}, 26)
    with pytest.raises(pl.PipeLinkError, match="same width"):
        pl.from_onnx(model, device="cpu")
