"""CPU reference kernels of the normalisation and linear-algebra built-ins, and their shape rules.

Every kernel runs on fresh random inputs into poisoned outputs and is compared with a float64 reference
written here (never by calling the kernel code).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from pipelink.descriptor import infer_outputs
from pipelink.errors import DTypeMismatchError, InvalidArgumentError, ShapeMismatchError

from .ops_helpers import FLOAT_NAMES, as64, check_close, make_registry, rand, ref_erf, run_op

SHAPES = [(3, 7), (2, 5, 33), (2, 4099)]  # 4099: vector tails, several warps per row


@pytest.fixture(scope="module")
def reg():
    return make_registry()


def _stats(dtype: str) -> str:
    return "float64" if dtype == "float64" else "float32"


# ---------------------------------------------------------------------------------------------- layer_norm


def _layer_norm_ref(x, gamma, beta, eps, axis=-1):
    """float64 layer norm over the axes from ``axis`` on; mean and rstd keep those axes as 1 (ONNX)."""
    x = as64(x)
    axes = tuple(range(axis % x.ndim, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    rstd = 1.0 / np.sqrt(var + eps)
    y = (x - mean) * rstd
    if gamma is not None:
        y = y * as64(gamma)
    if beta is not None:
        y = y + as64(beta)
    return y, mean, rstd


NORM_CASES = [(s, -1) for s in SHAPES + [(33,), (3, 40000)]] + [  # 40000: the *_big row kernels
    ((2, 5, 33), -2),
    ((2, 5, 33), 0),
    ((2, 5, 33), 1),
    ((3, 4, 5, 6), -3),
    ((2, 3, 100, 200), 2),
]


@pytest.mark.parametrize("dtype", FLOAT_NAMES)
@pytest.mark.parametrize(("shape", "axis"), NORM_CASES)
@pytest.mark.parametrize(("with_gamma", "with_beta"), [(True, True), (False, False), (True, False)])
def test_layer_norm(reg, device, rng, dtype, shape, axis, with_gamma, with_beta):
    eps = 1e-3
    normalized = shape[axis:]
    for _ in range(2):  # twice: scratch buffers kept by bind must not leak the previous run
        x = rand(rng, shape, dtype, -2.0, 4.0)
        gamma = rand(rng, normalized, dtype) if with_gamma else None
        beta = rand(rng, normalized, dtype) if with_beta else None
        y, mean, rstd = run_op(reg, "layer_norm", [x, gamma, beta], {"eps": eps, "axis": axis}, device=device)
        assert y.dtype == x.dtype and mean.dtype == rstd.dtype == np.dtype(_stats(dtype))
        assert mean.shape == rstd.shape == shape[: axis % len(shape)] + (1,) * len(normalized)
        ref_y, ref_mean, ref_rstd = _layer_norm_ref(x, gamma, beta, eps, axis)
        check_close(y, ref_y, dtype)
        # Statistics are stored in float32 (float64): they meet that dtype's tolerance, not the input's.
        check_close(mean, ref_mean)
        check_close(rstd, ref_rstd)


@pytest.mark.parametrize("dtype", FLOAT_NAMES)
def test_layer_norm_v1_reads_eps_from_a_0d_tensor(reg, device, rng, dtype):
    x, gamma, beta = rand(rng, (5, 33), dtype), rand(rng, (33,), dtype), rand(rng, (33,), dtype)
    for eps in (1e-5, 0.5):  # one bound kernel, two eps values: eps is read per run
        y, mean, rstd = run_op(
            reg, "layer_norm_v1", [x, gamma, beta, np.array(eps, dtype=np.float32)], device=device
        )
        ref_y, ref_mean, ref_rstd = _layer_norm_ref(x, gamma, beta, float(np.float32(eps)))
        assert mean.shape == rstd.shape == (5,)  # the seed's module keeps its [N] statistics
        check_close(y, ref_y, dtype)
        check_close(mean, ref_mean[:, 0])
        check_close(rstd, ref_rstd[:, 0])


def test_layer_norm_shape_and_dtype_inference(reg):
    desc = reg.get("layer_norm")
    attrs = desc.resolve_attrs({}, where="s")
    shapes, dtypes = infer_outputs(
        desc, (("B", 5, 33), (33,), None), ("bfloat16", "bfloat16", None), attrs, stage="ln"
    )
    assert shapes == (("B", 5, 33), ("B", 5, 1), ("B", 5, 1)) and dtypes == ("bfloat16", "float32", "float32")
    _, dtypes = infer_outputs(desc, ((3, 7), None, None), ("float64", None, None), attrs, stage="ln")
    assert dtypes == ("float64", "float64", "float64")
    attrs = desc.resolve_attrs({"axis": 1}, where="s")
    shapes, _ = infer_outputs(desc, (("B", 5, 33), (5, 33), (5, 33)), ("float32",) * 3, attrs, stage="ln")
    assert shapes == (("B", 5, 33), ("B", 1, 1), ("B", 1, 1))


def test_layer_norm_gamma_width_must_match_c(reg):
    desc = reg.get("layer_norm")
    with pytest.raises(ShapeMismatchError) as info:
        infer_outputs(
            desc,
            ((3, 7), (8,), None),
            ("float32", "float32", None),
            {"eps": 1e-5, "axis": -1},
            stage="ln1",
            tensors=("h", "g"),
        )
    err = info.value
    assert err.symbol == "C" and err.stage == "ln1" and err.port == "gamma"
    assert "'ln1'" in str(err) and "[7]" in str(err) and "[8]" in str(err)


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_norm_scale_must_have_the_normalised_shape(reg, op):
    """gamma (and beta) must be x.shape[axis:]: a last-axis gamma is wrong once axis covers two axes."""
    desc = reg.get(op)
    n_in = len(desc.inputs)
    attrs = desc.resolve_attrs({"axis": -2}, where="s")
    good = ((2, 5, 33), (5, 33)) + ((5, 33),) * (n_in - 2)
    infer_outputs(desc, good, ("float32",) * n_in, attrs, stage="n")
    bad = ((2, 5, 33), (33,)) + (None,) * (n_in - 2)
    with pytest.raises(ShapeMismatchError, match=r"x.shape\[axis:\] = \[5, 33\]") as info:
        infer_outputs(desc, bad, ("float32", "float32") + (None,) * (n_in - 2), attrs, stage="n")
    assert info.value.port == "gamma" and info.value.stage == "n"


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("axis", [3, -4])
def test_norm_axis_out_of_range_is_rejected(reg, op, axis):
    desc = reg.get(op)
    n_in = len(desc.inputs)
    attrs = desc.resolve_attrs({"axis": axis}, where="s")
    with pytest.raises(InvalidArgumentError, match=r"axis.*\[-3, 3\)"):
        infer_outputs(
            desc, ((2, 5, 33),) + (None,) * (n_in - 1), ("float32",) + (None,) * (n_in - 1), attrs, stage="n"
        )


def test_norm_rejects_a_0d_input(reg):
    desc = reg.get("rms_norm")
    with pytest.raises(ShapeMismatchError, match="at least 1 dimension"):
        infer_outputs(desc, ((), None), ("float32", None), desc.resolve_attrs({}, where="s"), stage="n")


def test_layer_norm_v1_eps_must_be_a_0d_float32(reg):
    desc = reg.get("layer_norm_v1")
    good = ((4, 7), (7,), (7,), ())
    shapes, _ = infer_outputs(desc, good, ("float16",) * 3 + ("float32",), {}, stage="s")
    assert shapes == ((4, 7), (4,), (4,))
    with pytest.raises(DTypeMismatchError, match="float32"):
        infer_outputs(desc, good, ("float32",) * 3 + ("float64",), {}, stage="s")
    with pytest.raises(ShapeMismatchError):
        infer_outputs(desc, good[:3] + ((1,),), ("float32",) * 4, {}, stage="s")


# ---------------------------------------------------------------------------------------------- rms_norm


@pytest.mark.parametrize("dtype", FLOAT_NAMES)
@pytest.mark.parametrize(("shape", "axis"), [(s, -1) for s in SHAPES] + [((2, 5, 33), -2), ((3, 4, 5, 6), 1)])
@pytest.mark.parametrize("with_gamma", [True, False])
def test_rms_norm(reg, device, rng, dtype, shape, axis, with_gamma):
    x = rand(rng, shape, dtype)
    gamma = rand(rng, shape[axis:], dtype) if with_gamma else None
    (y,) = run_op(reg, "rms_norm", [x, gamma], {"eps": 1e-2, "axis": axis}, device=device)
    x64 = as64(x)
    axes = tuple(range(axis % x.ndim, x.ndim))
    ref = x64 / np.sqrt((x64**2).mean(axis=axes, keepdims=True) + 1e-2)
    check_close(y, ref * as64(gamma) if with_gamma else ref, dtype)


# ---------------------------------------------------------------------------------------------- softmax


@pytest.mark.parametrize("dtype", FLOAT_NAMES)
@pytest.mark.parametrize(
    ("shape", "axis"),
    [((3, 7), -1), ((3, 7), 0), ((2, 5, 33), 1), ((2, 5, 33), -1), ((2, 4099), -1), ((6, 9, 11), 0)],
)
def test_softmax(reg, device, rng, dtype, shape, axis):
    x = rand(rng, shape, dtype, -8.0, 8.0)
    x.reshape(-1)[0] = 100.0  # exp(100) overflows float32: only a max-subtracting softmax survives
    (y,) = run_op(reg, "softmax", [x], {"axis": axis}, device=device)
    x64 = as64(x)
    e = np.exp(x64 - x64.max(axis=axis, keepdims=True))
    check_close(y, e / e.sum(axis=axis, keepdims=True), dtype)


def test_softmax_axis_is_checked_at_inference(reg):
    desc = reg.get("softmax")
    assert infer_outputs(desc, ((3, 7),), ("float16",), {"axis": -2}, stage="s") == (((3, 7),), ("float16",))
    with pytest.raises(InvalidArgumentError, match=r"axis.*\[-2, 2\).*got 2"):
        infer_outputs(desc, ((3, 7),), ("float32",), {"axis": 2}, stage="s")


@pytest.mark.parametrize(("dtype", "ok"), [("float32", False), ("float16", False), ("float64", True)])
def test_softmax_scale_must_be_finite_in_the_compute_dtype(reg, dtype, ok):
    desc = reg.get("softmax")
    attrs = {"axis": -1, "scale": 1e308}  # inf in float32 arithmetic (16-bit inputs compute in float32)
    if ok:
        assert infer_outputs(desc, ((3, 7), None), (dtype, None), attrs, stage="s")[0] == ((3, 7),)
        return
    with pytest.raises(InvalidArgumentError, match=r"'scale' \(1e\+308\) is not finite in float32"):
        infer_outputs(desc, ((3, 7), None), (dtype, None), attrs, stage="s")


def _scaled_softmax_ref(x, bias, scale, axis, dtype):
    """float64 softmax of x * scale + bias, scale rounded as the kernels take it (float32 below float64)."""
    s = float(np.float64(scale) if dtype == "float64" else np.float32(scale))
    t = as64(x) * s + (0.0 if bias is None else as64(bias))
    with np.errstate(invalid="ignore"):  # a row of all -inf: -inf - (-inf) is NaN, as in every softmax
        e = np.exp(t - t.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)


# x shape, bias shape (None: no bias), axis, scale; the CUDA kernels' paths: a mask [1, 1, T, T] read in
# vectors; a full-shape bias on odd rows (scalar loads); one bias value per row; long rows (the _big
# kernel); another axis (moved last, the bias's strides permuted); the scale alone.
SCALED_SOFTMAX = [
    ((2, 3, 8, 8), (1, 1, 8, 8), -1, 0.125),
    ((2, 3, 16, 16), (16, 16), -1, 1.0),
    ((2, 5, 33), (2, 5, 33), -1, -0.5),
    ((2, 5, 33), (5, 1), -1, 2.0),
    ((3, 4099), (1, 4099), -1, 0.3),
    ((2, 40000), (40000,), -1, 0.75),
    ((3, 7), (3, 1), 0, 1.5),
    ((6, 9, 11), (9, 11), 0, 0.7),
    ((6, 9, 11), (6, 1, 11), 1, 1.0),
    ((2, 5, 33), None, 1, 0.25),
    ((4, 1024), None, -1, 3.0),
]


@pytest.mark.parametrize("dtype", FLOAT_NAMES)
@pytest.mark.parametrize(("shape", "bias_shape", "axis", "scale"), SCALED_SOFTMAX)
def test_softmax_of_scaled_scores_plus_a_broadcast_bias(
    reg, device, rng, dtype, shape, bias_shape, axis, scale
):
    """softmax(x * scale + bias): a broadcast bias with -inf entries (a mask) gives exact zeros there."""
    x = rand(rng, shape, dtype, -8.0, 8.0)
    bias = None
    if bias_shape is not None:
        bias = rand(rng, bias_shape, dtype, -4.0, 4.0)
        along = axis % len(shape) - (len(shape) - len(bias_shape))  # the bias's dim along the axis
        if along >= 0 and bias_shape[along] > 1:  # a mask: -inf entries, none on a row's first (next test)
            bias[rng.random(bias_shape) < 0.3] = -np.inf
            first = np.zeros_like(bias.take([0], axis=along), dtype=np.int64)
            np.put_along_axis(bias, first, 0.0, axis=along)
    (y,) = run_op(reg, "softmax", [x, bias], {"axis": axis, "scale": scale}, device=device)
    ref = _scaled_softmax_ref(x, bias, scale, axis, dtype)
    check_close(y, ref, dtype)
    if bias is not None:
        zero = np.broadcast_to(np.isneginf(as64(bias)), shape)
        assert (as64(y)[zero] == 0.0).all(), "a -inf bias entry must give a probability of exactly 0"


@pytest.mark.parametrize("dtype", FLOAT_NAMES)
def test_softmax_of_a_row_whose_bias_is_all_minus_inf_is_nan(reg, device, rng, dtype):
    """NumPy's x * scale + bias then softmax gives NaN on a row of all -inf; the other rows are finite."""
    x = rand(rng, (2, 3, 8, 8), dtype, -4.0, 4.0)
    mask = np.where(np.tril(np.ones((8, 8), bool)), 0.0, -np.inf).astype(x.dtype).reshape(1, 1, 8, 8)
    mask[0, 0, 5, :] = -np.inf
    (y,) = run_op(reg, "softmax", [x, mask], {"scale": 0.5}, device=device)
    ref = _scaled_softmax_ref(x, mask, 0.5, -1, dtype)
    nan = np.isnan(ref)
    assert nan[:, :, 5, :].all() and nan.sum() == 2 * 3 * 8
    np.testing.assert_array_equal(np.isnan(as64(y)), nan)
    check_close(y[~nan], ref[~nan], dtype)


def test_softmax_scale_one_without_bias_is_the_plain_softmax(reg, device, rng):
    x = rand(rng, (3, 33), "float32", -8.0, 8.0)
    (plain,) = run_op(reg, "softmax", [x], device=device)
    (same,) = run_op(reg, "softmax", [x], {"scale": 1.0}, device=device)
    np.testing.assert_array_equal(plain, same)


@pytest.mark.parametrize(
    ("x", "bias", "ok"),
    [
        ((3, 7), (7,), True),
        ((3, 7), (3, 1), True),
        (("B", 4, 7), (1, 4, 7), True),
        (("B", 4, 7), ("B", 1, 1), True),
        ((3, 7), (2, 7), False),  # not 1 and not x's
        ((3, 7), (1, 3, 7), False),  # more dims: would broadcast x up
        ((3, 1), (3, 7), False),  # would stretch x's size-1 dim
        (("B", 7), ("S", 7), True),  # symbols unify: checked again when the shapes are known
        (("B", 7), (3, 7), True),  # B may be 3
        (("B", 1), ("B", 7), False),  # would stretch x's size-1 dim
    ],
)
def test_softmax_bias_must_broadcast_to_x_without_changing_it(reg, x, bias, ok):
    desc = reg.get("softmax")
    attrs = desc.resolve_attrs({"scale": 0.5}, where="s")
    if ok:
        assert infer_outputs(desc, (x, bias), ("float32",) * 2, attrs, stage="s") == ((x,), ("float32",))
        return
    with pytest.raises(ShapeMismatchError, match=r"stage 's'.*'bias'.*broadcast") as info:
        infer_outputs(desc, (x, bias), ("float32",) * 2, attrs, stage="s")
    assert info.value.port == "bias" and info.value.stage == "s"


def test_softmax_bias_has_the_dtype_of_x(reg):
    desc = reg.get("softmax")
    with pytest.raises(DTypeMismatchError, match="bias"):
        infer_outputs(
            desc, ((3, 7), (7,)), ("float32", "float16"), desc.resolve_attrs({}, where="s"), stage="s"
        )


# ---------------------------------------------------------------------------------------------- batch_norm


@pytest.mark.parametrize("dtype", FLOAT_NAMES)
@pytest.mark.parametrize("shape", [(3, 7), (2, 5, 33), (2, 3, 5, 7)])
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm(reg, device, rng, dtype, shape, affine):
    c = shape[1]
    x, mean = rand(rng, shape, dtype), rand(rng, (c,), dtype)
    var = rand(rng, (c,), dtype, 0.1, 3.0)
    gamma = rand(rng, (c,), dtype) if affine else None
    beta = rand(rng, (c,), dtype) if affine else None
    (y,) = run_op(reg, "batch_norm", [x, mean, var, gamma, beta], {"eps": 1e-3}, device=device)
    bshape = (c,) + (1,) * (len(shape) - 2)
    ref = (as64(x) - as64(mean).reshape(bshape)) / np.sqrt(as64(var).reshape(bshape) + 1e-3)
    if affine:
        ref = ref * as64(gamma).reshape(bshape) + as64(beta).reshape(bshape)
    check_close(y, ref, dtype)


def test_batch_norm_checks_the_channel_axis(reg):
    desc = reg.get("batch_norm")
    with pytest.raises(ShapeMismatchError) as info:
        infer_outputs(
            desc,
            ((2, 5, 9), (9,), (9,), None, None),
            ("float32",) * 3 + (None, None),
            {"eps": 1e-5},
            stage="bn",
        )
    assert info.value.symbol == "C" and info.value.stage == "bn"


# ---------------------------------------------------------------------------------------------- gemm


def _act(name, v):
    if name == "relu":
        return np.maximum(v, 0.0)
    if name == "gelu":
        return 0.5 * v * (1.0 + ref_erf(v / math.sqrt(2.0)))
    if name == "gelu_tanh":
        return 0.5 * v * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v**3)))
    return v


GEMM_CASES = [  # a shape, N, attrs, bias shape (None: no bias), residual?
    ((3, 7), 5, {}, None, False),
    ((3, 33), 17, {"alpha": 0.5, "activation": "relu"}, (17,), False),
    ((2, 5, 33), 9, {"activation": "gelu"}, (9,), True),
    ((2, 5, 33), 9, {"activation": "gelu_tanh", "trans_b": True, "alpha": -1.5}, None, True),
    ((33,), 6, {"trans_b": True}, (6,), False),
    ((4, 3, 7), 11, {"activation": "relu"}, None, True),
    ((2, 9, 40), 24, {"trans_b": True}, None, False),
    ((37, 72), 48, {"activation": "gelu", "alpha": 0.5}, (48,), True),
    # ONNX Gemm: trans_a, beta, and every C that broadcasts to [M, N]
    ((7, 3), 5, {"trans_a": True}, (3, 5), False),
    ((7, 3), 5, {"trans_a": True, "trans_b": True, "alpha": 0.25, "beta": 0.5}, (3, 1), False),
    ((3, 7), 5, {"beta": -2.0}, (5,), False),
    ((3, 7), 5, {"beta": 0.5, "activation": "relu"}, (), True),
    ((3, 7), 5, {"beta": 1.0}, (1, 5), True),
    ((3, 7), 5, {"beta": 1.0, "activation": "gelu_tanh"}, (3, 5), True),
    ((2, 4, 7), 5, {"beta": 2.0}, (4, 1), False),
    ((40, 64), 72, {"trans_a": True, "beta": 0.75, "activation": "gelu"}, (72,), False),
]


@pytest.mark.parametrize("dtype", FLOAT_NAMES)
@pytest.mark.parametrize(("a_shape", "n", "attrs", "bias_shape", "with_res"), GEMM_CASES)
def test_gemm(reg, device, rng, dtype, a_shape, n, attrs, bias_shape, with_res):
    trans_a, trans_b = attrs.get("trans_a", False), attrs.get("trans_b", False)
    k = a_shape[0] if trans_a else a_shape[-1]
    out_shape = (a_shape[1],) + (n,) if trans_a else a_shape[:-1] + (n,)
    for _ in range(2):  # twice: scratch buffers kept by bind must not leak the previous run
        a = rand(rng, a_shape, dtype, -1.0, 1.0)
        b = rand(rng, (n, k) if trans_b else (k, n), dtype, -1.0, 1.0)
        bias = None if bias_shape is None else rand(rng, bias_shape, dtype)
        residual = rand(rng, out_shape, dtype) if with_res else None
        (c,) = run_op(reg, "gemm", [a, b, bias, residual], attrs, device=device)
        assert c.shape == out_shape and c.dtype == a.dtype
        a64 = as64(a).T if trans_a else as64(a)
        b64 = as64(b).T if trans_b else as64(b)
        ref = attrs.get("alpha", 1.0) * np.einsum("...k,kn->...n", a64, b64)
        if bias is not None:
            ref = ref + attrs.get("beta", 1.0) * as64(bias)
        ref = _act(attrs.get("activation", "none"), ref)
        if with_res:
            ref = ref + as64(residual)
        check_close(c, ref, dtype)


def test_gemm_shape_inference(reg):
    desc = reg.get("gemm")
    four = ("float32",) * 4
    attrs = desc.resolve_attrs({}, where="s")
    assert infer_outputs(desc, ((2, "M", 7), (7, 5), (5,), None), four, attrs, stage="g") == (
        ((2, "M", 5),),
        ("float32",),
    )
    attrs_t = desc.resolve_attrs({"trans_b": True}, where="s")
    assert infer_outputs(desc, ((3, 7), (5, 7), None, (3, 5)), four, attrs_t, stage="g")[0] == ((3, 5),)
    attrs_ta = desc.resolve_attrs({"trans_a": True}, where="s")
    for bias in [(), (1,), (5,), ("M", 1), ("M", 5), (1, 5)]:  # ONNX's C: anything broadcasting to [M, N]
        shapes, _ = infer_outputs(desc, ((7, "M"), (7, 5), bias, None), four, attrs_ta, stage="g")
        assert shapes == (("M", 5),)


def test_gemm_k_mismatch_names_k_and_both_values(reg):
    desc = reg.get("gemm")
    attrs = desc.resolve_attrs({}, where="s")
    with pytest.raises(ShapeMismatchError) as info:
        infer_outputs(desc, ((3, 7), (8, 5), None, None), ("float32",) * 2 + (None, None), attrs, stage="g")
    err = info.value
    assert "K" in str(err) and "7" in str(err) and "8" in str(err)
    assert err.symbol == "K" and {err.expected, err.got} == {7, 8}
    # trans_b reads b as [N, K]: the [K, N] layout that was fine above is now a K mismatch.
    attrs_t = desc.resolve_attrs({"trans_b": True}, where="s")
    with pytest.raises(ShapeMismatchError, match="K"):
        infer_outputs(desc, ((3, 7), (7, 5), None, None), ("float32",) * 2 + (None, None), attrs_t, stage="g")
    # trans_a reads a as [K, M]: K is its first dimension.
    attrs_ta = desc.resolve_attrs({"trans_a": True}, where="s")
    with pytest.raises(ShapeMismatchError, match="trans_a") as info:
        infer_outputs(
            desc, ((3, 7), (7, 5), None, None), ("float32",) * 2 + (None, None), attrs_ta, stage="g"
        )
    assert info.value.symbol == "K" and {info.value.expected, info.value.got} == {3, 7}


def test_gemm_n_and_rank_mismatches(reg):
    desc = reg.get("gemm")
    attrs = desc.resolve_attrs({}, where="s")
    with pytest.raises(ShapeMismatchError, match="does not broadcast") as info:
        infer_outputs(desc, ((3, 7), (7, 5), (6,), None), ("float32",) * 3 + (None,), attrs, stage="g")
    assert info.value.symbol == "N" and info.value.port == "bias"
    with pytest.raises(ShapeMismatchError) as info:
        infer_outputs(
            desc, ((3, 7), (7, 5), None, (4, 5)), ("float32",) * 2 + (None, "float32"), attrs, stage="g"
        )
    assert info.value.stage == "g" and info.value.port == "residual"
    with pytest.raises(ShapeMismatchError, match="2-d"):
        infer_outputs(
            desc, ((3, 7), (2, 7, 5), None, None), ("float32",) * 2 + (None, None), attrs, stage="g"
        )
    with pytest.raises(ShapeMismatchError, match="at least 1 dimension"):
        infer_outputs(desc, ((), (7, 5), None, None), ("float32",) * 2 + (None, None), attrs, stage="g")


@pytest.mark.parametrize("bias", [(2, 5), (3, 2), (1, 3, 5), (5, 1)])
def test_gemm_bias_must_broadcast_to_m_n(reg, bias):
    """ONNX's C broadcasts one way only: to [M, N], never widening it."""
    desc = reg.get("gemm")
    with pytest.raises(ShapeMismatchError, match="does not broadcast to the output shape") as info:
        infer_outputs(
            desc,
            ((3, 7), (7, 5), bias, None),
            ("float32",) * 3 + (None,),
            desc.resolve_attrs({}, where="s"),
            stage="g",
        )
    assert info.value.port == "bias" and info.value.stage == "g"


def test_gemm_trans_a_needs_a_2d_a(reg):
    desc = reg.get("gemm")
    with pytest.raises(ShapeMismatchError, match="trans_a") as info:
        infer_outputs(
            desc,
            ((2, 7, 3), (7, 5), None, None),
            ("float32",) * 2 + (None, None),
            desc.resolve_attrs({"trans_a": True}, where="s"),
            stage="g",
        )
    assert info.value.port == "a" and info.value.symbol == "rank"


# ---------------------------------------------------------------------------------------------- matmul

MATMUL_CASES = [  # a shape, b shape: ONNX MatMul (NumPy matmul) shapes
    ((3, 7), (7, 5)),
    ((7,), (7, 5)),  # 1-d a: a row, M dropped
    ((3, 7), (7,)),  # 1-d b: a column, N dropped
    ((7,), (7,)),  # both: a 0-d dot product
    ((2, 3, 7), (7, 5)),  # b broadcast over the batch (folds into M on CUDA)
    ((7,), (2, 7, 5)),  # a 1-d, b batched: a broadcast (stride 0)
    ((2, 4, 3, 7), (4, 7, 5)),  # b broadcast over the leading batch dim
    ((2, 1, 3, 7), (1, 4, 7, 5)),  # both broadcast: one stride each cannot say it
    ((1, 4, 3, 7), (2, 1, 7, 5)),
    ((3, 2, 3, 7), (3, 2, 7, 1)),  # N = 1
    ((2, 3, 7), (1, 7, 2)),  # b batch of 1: folds into M
    ((5, 1, 33, 40), (6, 40, 24)),
    ((0, 3, 7), (7, 5)),  # empty dims: an empty output, nothing to compute
    ((2, 0, 7), (2, 7, 5)),
]


def _matmul_ref(a, b):
    """float64 ONNX MatMul without np.matmul: promote 1-d operands, broadcast the batch, einsum."""
    a64, b64 = as64(a), as64(b)
    a2 = a64[None, :] if a64.ndim == 1 else a64
    b2 = b64[:, None] if b64.ndim == 1 else b64
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    out = np.einsum(
        "...mk,...kn->...mn",
        np.broadcast_to(a2, batch + a2.shape[-2:]),
        np.broadcast_to(b2, batch + b2.shape[-2:]),
    )
    if a64.ndim == 1:
        out = out[..., 0, :]
    if b64.ndim == 1:
        out = out[..., 0]
    return out


@pytest.mark.parametrize("dtype", FLOAT_NAMES)
@pytest.mark.parametrize(("a_shape", "b_shape"), MATMUL_CASES)
def test_matmul(reg, device, rng, dtype, a_shape, b_shape):
    for _ in range(2):
        a = rand(rng, a_shape, dtype, -1.0, 1.0)
        b = rand(rng, b_shape, dtype, -1.0, 1.0)
        (c,) = run_op(reg, "matmul", [a, b], device=device)
        ref = _matmul_ref(a, b)
        assert c.dtype == a.dtype
        check_close(c, ref, dtype)


@pytest.mark.parametrize(("a_shape", "b_shape"), [((3, 0), (0, 5)), ((2, 3, 0), (0,))])
def test_matmul_with_k_0_gives_zeros_on_the_cpu(reg, a_shape, b_shape):
    """ONNX: an empty sum is 0. (CPU only: cuBLASLt's handling of K = 0 is to be checked on the GPU.)"""
    (c,) = run_op(reg, "matmul", [np.ones(a_shape, np.float32), np.ones(b_shape, np.float32)])
    assert c.shape == np.matmul(np.ones(a_shape), np.ones(b_shape)).shape and not c.any()


def test_matmul_shape_inference(reg):
    desc = reg.get("matmul")
    two = ("float32",) * 2
    cases = [
        (((2, "S", 7), (7, 5)), (2, "S", 5)),
        (((7,), (7, 5)), (5,)),
        ((("B", 3, 7), (7,)), ("B", 3)),
        (((7,), (7,)), ()),
        (((2, 1, 3, 7), (4, 7, 5)), (2, 4, 3, 5)),
        ((("B", 3, 7), (1, 7, 5)), ("B", 3, 5)),
    ]
    for shapes, out in cases:
        assert infer_outputs(desc, shapes, two, {}, stage="m") == ((out,), ("float32",))


def test_matmul_mismatches_name_the_dimension(reg):
    desc = reg.get("matmul")
    two = ("float32",) * 2
    with pytest.raises(ShapeMismatchError, match="K") as info:
        infer_outputs(desc, ((3, 7), (8, 5)), two, {}, stage="m")
    assert info.value.symbol == "K" and {info.value.expected, info.value.got} == {7, 8}
    assert info.value.stage == "m"
    with pytest.raises(ShapeMismatchError, match="do not broadcast") as info:
        infer_outputs(desc, ((2, 3, 7), (4, 7, 5)), two, {}, stage="m")
    assert info.value.symbol == "batch" and {info.value.expected, info.value.got} == {2, 4}
    with pytest.raises(ShapeMismatchError, match="0-d"):
        infer_outputs(desc, ((), (7, 5)), two, {}, stage="m")
    with pytest.raises(DTypeMismatchError):
        infer_outputs(desc, ((3, 7), (7, 5)), ("float32", "float16"), {}, stage="m")


def test_gemm_dtype_mismatch_between_a_and_b(reg):
    desc = reg.get("gemm")
    with pytest.raises(DTypeMismatchError) as info:
        infer_outputs(
            desc,
            ((3, 7), (7, 5), None, None),
            ("float32", "bfloat16", None, None),
            desc.resolve_attrs({}, where="s"),
            stage="g",
        )
    assert info.value.port == "b" and "'g'" in str(info.value)


def test_gemm_rejects_an_unknown_activation(reg):
    with pytest.raises(InvalidArgumentError, match="activation"):
        reg.get("gemm").resolve_attrs({"activation": "tanh"}, where="s")


# ---------------------------------------------------------------------------------------------- transpose


@pytest.mark.parametrize("dtype", FLOAT_NAMES + ("int8", "int64", "bool"))
@pytest.mark.parametrize(
    ("shape", "perm"),
    [((3, 7), None), ((2, 5, 33), (1, 2, 0)), ((2, 5, 33), None), ((2, 3, 5, 7), (0, 2, 1, 3))],
)
def test_transpose(reg, device, rng, dtype, shape, perm):
    x = rand(rng, shape, dtype)
    (y,) = run_op(reg, "transpose", [x], {} if perm is None else {"perm": list(perm)}, device=device)
    expected = np.transpose(x, perm)
    assert y.flags.c_contiguous and y.shape == expected.shape and y.dtype == x.dtype
    # Element by element through index arithmetic, not through the kernel's own call.
    order = perm if perm is not None else tuple(reversed(range(len(shape))))
    picks = rng.integers(0, y.shape, (20, len(shape)))
    for idx in [tuple(int(i) for i in t) for t in picks]:
        src = [0] * len(shape)
        for out_axis, in_axis in enumerate(order):
            src[in_axis] = idx[out_axis]
        assert y[idx].tobytes() == x[tuple(src)].tobytes()
    assert y.tobytes() == np.ascontiguousarray(expected).tobytes()


def test_transpose_inference(reg):
    desc = reg.get("transpose")
    assert infer_outputs(desc, ((2, "S", 4),), ("float16",), {"perm": (1, 2, 0)}, stage="t") == (
        (("S", 4, 2),),
        ("float16",),
    )
    assert infer_outputs(desc, ((2, 3, 4),), ("int8",), desc.resolve_attrs({}, where="t"), stage="t")[0] == (
        (4, 3, 2),
    )


@pytest.mark.parametrize("perm", [(0, 0, 1), (0, 1), (0, 1, 3), (2, 1, 0, 3)])
def test_transpose_rejects_a_non_permutation(reg, perm):
    with pytest.raises(InvalidArgumentError, match="permutation") as info:
        infer_outputs(reg.get("transpose"), ((2, 3, 4),), ("float32",), {"perm": perm}, stage="t")
    assert str(list(perm)) in str(info.value) and info.value.attr == "perm"


def test_linalg_shapes_are_checked_when_a_pipeline_loads():
    """The linker runs gemm's and matmul's shape rules at load: a bad shape never reaches a run."""
    import pipelink as pl

    def config(bias_shape, w_shape):
        return {
            "inputs": {
                "x": {"shape": ["B", 3, 7], "dtype": "float32"},
                "w": {"shape": w_shape, "dtype": "float32"},
                "c": {"shape": bias_shape, "dtype": "float32"},
            },
            "pipeline": [
                {"name": "matmul", "id": "mm", "inputs": ["x", "w"], "outputs": ["h"]},
                {
                    "name": "gemm",
                    "id": "proj",
                    "inputs": ["h", "w", "c"],
                    "outputs": ["y"],
                    "attrs": {"beta": 0.5},
                },
            ],
        }

    with pl.load(config([3, 1], [7, 7]), device="cpu") as pipe:
        x = np.ones((2, 3, 7), np.float32)
        y = pipe.run({"x": x, "w": np.eye(7, dtype=np.float32), "c": np.ones((3, 1), np.float32)})["y"]
        np.testing.assert_allclose(np.asarray(y), x + 0.5)
    with pytest.raises(ShapeMismatchError, match="'proj'.*does not broadcast"):
        pl.load(config([4, 1], [7, 7]), device="cpu")
    with pytest.raises(ShapeMismatchError, match="'mm'.*K = 7.*K = 6"):
        pl.load(config([3, 1], [6, 7]), device="cpu")
