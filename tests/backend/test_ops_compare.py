"""The compare family (equal, less, greater, less_equal, greater_equal, logical_and/or/xor/not) on every
device: every op x dtype on fresh random inputs with many ties, broadcasting, the IEEE edges (NaN, inf,
-0.0), integers compared in their own type, one-node ONNX models against ONNX's reference, a pipeline that
feeds a comparison into where, and the inputs the operators refuse.

The expected results are written here with Python's operators on exactly widened values (float64, int64),
never by calling the kernel code. Outputs are poisoned (0xCD bytes) before each run, and every output byte
must be 0 or 1: an element left unwritten, or a bool stored as anything but one byte 0/1, fails.
"""

from __future__ import annotations

import operator

import numpy as np
import pytest

import pipelink as pl
from pipelink.backends import get_backend
from pipelink.descriptor import KernelContext, infer_outputs
from pipelink.dtypes import get_dtype
from pipelink.errors import DTypeMismatchError, ErrorCode, PipeLinkError, ShapeMismatchError
from pipelink.ops.kernel import PlanLaunch

from .ops_helpers import FLOAT_NAMES, INT_NAMES, as64, make_registry, rand, run_op

COMPARE = {
    "equal": operator.eq,
    "less": operator.lt,
    "greater": operator.gt,
    "less_equal": operator.le,
    "greater_equal": operator.ge,
}
LOGICAL = {"logical_and": operator.and_, "logical_or": operator.or_, "logical_xor": operator.xor}
ONNX_NAMES = {
    "equal": "Equal",
    "less": "Less",
    "greater": "Greater",
    "less_equal": "LessOrEqual",
    "greater_equal": "GreaterOrEqual",
    "logical_and": "And",
    "logical_or": "Or",
    "logical_xor": "Xor",
    "logical_not": "Not",
}
# same shape (vector tails: 4099 and 17 are no multiple of any vector width), row and column broadcasts,
# a scalar against a matrix, and 8-d shapes that collapse to fewer dims
SHAPES = [
    ((2, 4099), (2, 4099)),
    ((17,), (17,)),
    ((2, 5, 33), (33,)),
    ((4, 1, 3), (5, 3)),
    ((1, 7), (3, 1)),
    ((), (3, 5)),
    ((2, 1, 3, 1, 2, 1, 2, 3), (1, 4, 3, 2, 1, 5, 1, 3)),
]


@pytest.fixture(scope="module")
def reg():
    return make_registry()


def _values(rng: np.random.Generator, shape, dtype: str) -> np.ndarray:
    """Random inputs with many ties: floats on a grid of halves (exact in every float dtype), ints over a
    small range (around 0 for the signed ones, so signs matter), bool at random."""
    if dtype == "bool":
        return rand(rng, shape, "bool")
    npd = get_dtype(dtype).numpy
    if dtype in FLOAT_NAMES:
        return (rng.integers(-4, 5, size=shape) * 0.5).astype(npd)
    low = 0 if npd.kind == "u" else -3
    return rng.integers(low, low + 7, size=shape).astype(npd)


def _exact(a: np.ndarray) -> np.ndarray:
    """``a`` widened without rounding: floats to float64, ints to Python ints, bool as it is."""
    if a.dtype == np.bool_:
        return a
    if np.issubdtype(a.dtype, np.integer):
        return a.astype(object)
    return as64(a)


def _check_bool(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == np.bool_, got.dtype
    assert got.shape == want.shape, (got.shape, want.shape)
    raw = got.reshape(-1).view(np.uint8)
    assert np.isin(raw, (0, 1)).all(), f"{int((~np.isin(raw, (0, 1))).sum())} element(s) not written as 0/1"
    np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------------------------------------- kernels


@pytest.mark.parametrize(
    ("name", "dtype"),
    [(n, d) for n in COMPARE for d in FLOAT_NAMES + INT_NAMES + (("bool",) if n == "equal" else ())],
)
@pytest.mark.parametrize(("sa", "sb"), SHAPES)
def test_comparisons_match_python_on_every_dtype_and_broadcast(reg, device, rng, name, dtype, sa, sb):
    a, b = _values(rng, sa, dtype), _values(rng, sb, dtype)
    (c,) = run_op(reg, name, [a, b], device=device)
    want = np.asarray(COMPARE[name](_exact(a), _exact(b)), dtype=np.bool_)
    _check_bool(c, want)
    if want.size >= 100:  # ties and both orders drawn: a kernel that ignored equality or order would fail
        assert want.any() and not want.all()


@pytest.mark.parametrize("dtype", ["uint32", "uint64", "int16", "uint16"])
def test_comparisons_of_the_wide_unsigned_values_are_unsigned(reg, device, dtype):
    """The top bit of uint32 and uint64 is a magnitude, not a sign: 2**63 > 1 in uint64 (a kernel that
    compared in int or long long would call it negative); int16 keeps its sign."""
    info = np.iinfo(dtype)
    a = np.array([info.max, info.max // 2 + 1, 0, info.min, 1, info.max], dtype=dtype)
    b = np.array([1, info.max // 2, info.max, info.max, info.min, info.max], dtype=dtype)
    for name, ref in COMPARE.items():
        (c,) = run_op(reg, name, [a, b], device=device)
        _check_bool(c, np.asarray(ref(a.astype(object), b.astype(object)), dtype=np.bool_))


@pytest.mark.parametrize("name", list(LOGICAL))
@pytest.mark.parametrize(("sa", "sb"), SHAPES)
def test_logical_ops_match_python(reg, device, rng, name, sa, sb):
    a, b = rand(rng, sa, "bool"), rand(rng, sb, "bool")
    (c,) = run_op(reg, name, [a, b], device=device)
    _check_bool(c, np.asarray(LOGICAL[name](a, b), dtype=np.bool_))


@pytest.mark.parametrize("shape", [(2, 4099), (17,), (), (3, 5, 7)])
def test_logical_not(reg, device, rng, shape):
    x = rand(rng, shape, "bool")
    (y,) = run_op(reg, "logical_not", [x], device=device)
    _check_bool(y, ~x)


@pytest.mark.parametrize("dtype", FLOAT_NAMES)
def test_ieee_edges_nan_inf_and_signed_zero(reg, device, dtype):
    """Any comparison with NaN is false (equal(NaN, NaN) too), -0.0 == 0.0, inf == inf, -inf < everything
    finite; also at the vector tail (the pairs repeat into a length that is no multiple of any width)."""
    nan, inf = np.nan, np.inf
    pairs = [
        (nan, nan),
        (nan, 1.0),
        (1.0, nan),
        (nan, inf),
        (-0.0, 0.0),
        (0.0, -0.0),
        (inf, inf),
        (-inf, -inf),
        (inf, -inf),
        (-inf, 3.0),
        (65504.0, inf),
        (-0.0, -0.0),
    ]
    npd = get_dtype(dtype).numpy
    a = np.array([p[0] for p in pairs] * 3 + [nan], npd)
    b = np.array([p[1] for p in pairs] * 3 + [nan], npd)
    for name, op in COMPARE.items():
        (c,) = run_op(reg, name, [a, b], device=device)
        _check_bool(c, np.array([op(float(x), float(y)) for x, y in zip(as64(a), as64(b), strict=True)]))
        assert not c[0] and not c[-1], f"{name}(NaN, NaN) must be false"
    (eq,) = run_op(reg, "equal", [a, b], device=device)
    assert eq[4] and eq[5], "-0.0 == 0.0"
    # the same through the broadcast path: NaN and -0.0 against a row
    row = np.array([nan, 0.0, -0.0, 1.0], npd)
    col = np.array([[nan], [-0.0], [1.0]], npd)
    (eqb,) = run_op(reg, "equal", [col, row], device=device)
    _check_bool(eqb, np.array([[False] * 4, [False, True, True, False], [False, False, False, True]]))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16_bit_neighbours_compare_as_their_values(reg, device, rng, dtype):
    """Adjacent 16-bit values (one ulp apart, both signs, subnormals included) are told apart, in the
    right order: the kernel compares the converted values, not rounded or truncated ones."""
    npd = get_dtype(dtype).numpy
    x = np.concatenate([rng.uniform(-100, 100, 997), [0.0, 1e-7, -1e-7, 1.0, -1.0]]).astype(npd)
    bits = x.view(np.uint16)
    y = (bits + np.uint16(1)).view(npd)  # the next value away from zero (for +-0: the smallest subnormal)
    for name, op in COMPARE.items():
        (c,) = run_op(reg, name, [x, y], device=device)
        _check_bool(c, op(as64(x), as64(y)))
    (ne,) = run_op(reg, "equal", [x, y], device=device)
    assert not ne.any(), "neighbours are never equal"


def test_integers_compare_in_their_own_type(reg, device):
    """uint8 above 127 is not negative, int8 below 0 is, int64 beyond 2**53 keeps every bit (a compare
    through float or double would call these equal or order them wrongly)."""
    u_a, u_b = np.array([200, 127, 255, 0, 128], np.uint8), np.array([100, 128, 0, 255, 127], np.uint8)
    i_a, i_b = np.array([-1, -128, 127, 0, -5], np.int8), np.array([1, 127, -128, 0, -6], np.int8)
    big = 2**62
    l_a = np.array([big + 1, -big, big, 2**53 + 1, -(2**63)], np.int64)
    l_b = np.array([big, -big - 1, big, 2**53, 2**63 - 1], np.int64)
    m_a = np.array([2**31 - 1, -(2**31), 5], np.int32)
    m_b = np.array([-(2**31), 2**31 - 1, 5], np.int32)
    for a, b in ((u_a, u_b), (i_a, i_b), (l_a, l_b), (m_a, m_b)):
        for name, op in COMPARE.items():
            (c,) = run_op(reg, name, [a, b], device=device)
            want = [op(int(x), int(y)) for x, y in zip(a, b, strict=True)]
            _check_bool(c, np.array(want))


def test_bool_equal_and_logical_ops_on_every_pair(reg, device):
    a = np.array([False, False, True, True])
    b = np.array([False, True, False, True])
    for name, want in (
        ("equal", [True, False, False, True]),
        ("logical_and", [False, False, False, True]),
        ("logical_or", [False, True, True, True]),
        ("logical_xor", [False, True, True, False]),
    ):
        (c,) = run_op(reg, name, [a, b], device=device)
        _check_bool(c, np.array(want))


@pytest.mark.parametrize(
    ("name", "dtype"),
    [("less", "float16"), ("greater_equal", "float32"), ("equal", "int64"), ("logical_or", "bool")]
    + [("logical_not", "bool"), ("equal", "bool")],
)
def test_views_off_the_vector_alignment_are_compared_element_by_element(reg, device, rng, name, dtype):
    """Inputs one element past a 256-byte boundary and the output one byte past one (views with an offset,
    as DLPack gives): the CUDA launch switches to its element-aligned plan; every element is still right
    and the bytes either side of the output are left as they were."""
    desc, dt, n = reg.get(name), get_dtype(dtype), 4099
    host = [_values(rng, (n,), dtype) for _ in desc.inputs]
    backend = get_backend(device)
    stream = backend.default_stream()
    span = 256 * (2 + n * dt.itemsize // 256)  # one region per operand, each starting 256-byte aligned
    alloc = backend.allocate(span * (len(host) + 1))
    ins = []
    for k, a in enumerate(host):
        ins.append(backend.view(alloc, k * span + dt.itemsize, (n,), dt))
        backend.copy(ins[-1], backend.import_input(a, stream=stream), stream=stream)
    guarded = backend.view(alloc, len(host) * span, (n + 2,), get_dtype("uint8"))
    backend.copy(guarded, backend.import_input(np.full(n + 2, 0xCD, np.uint8), stream=stream), stream=stream)
    out = backend.view(alloc, len(host) * span + 1, (n,), get_dtype("bool"))
    ctx = KernelContext(
        stage="s",
        attrs=desc.resolve_attrs({}, where="s"),
        in_shapes=((n,),) * len(host),
        in_dtypes=(dtype,) * len(host),
        out_shapes=((n,),),
        out_dtypes=("bool",),
        backend=backend,
    )
    variant = next(v for v in desc.variants if v.device == device)
    launch = variant.bind(ctx)
    if isinstance(launch, PlanLaunch):  # the planned launch is vectorised: these pointers cannot take it
        assert launch.plan.params["vec"] > 1
    try:
        assert launch(ins, [out], stream) is None
        backend.synchronize(stream)
        raw = np.array(backend.to_host(backend.wrap(guarded)).numpy())
    finally:
        backend.free(alloc)
    assert raw[0] == 0xCD and raw[-1] == 0xCD, "a byte outside the output was written"
    if name == "logical_not":
        want = ~host[0]
    else:
        want = {**COMPARE, **LOGICAL}[name](_exact(host[0]), _exact(host[1]))
    _check_bool(raw[1:-1].view(np.bool_), np.asarray(want, dtype=np.bool_))


# ---------------------------------------------------------------------------------------------- descriptors


def test_descriptors_declare_bool_outputs_onnx_names_and_both_variants(reg):
    for name, onnx_name in ONNX_NAMES.items():
        desc = reg.get(name)
        assert desc.onnx == onnx_name and desc.doc and "\n" not in desc.doc
        assert [v.name for v in desc.variants] == ["cpu:numpy", "cuda:nvrtc"], name
        cpu, cuda = desc.variants
        assert cpu.dtypes == cuda.dtypes, f"{name}: the CUDA kernel covers every dtype the reference does"
        ins = tuple((3, 4) for _ in desc.inputs)
        dtype = "bool" if name.startswith("logical") else "float16"
        shapes, dtypes = infer_outputs(desc, ins, (dtype,) * len(ins), {}, stage="s")
        assert shapes == ((3, 4),) and dtypes == ("bool",)
    for name in COMPARE:
        allowed = reg.get(name).dtype_vars["T"]
        assert set(FLOAT_NAMES + INT_NAMES) <= allowed and (("bool" in allowed) == (name == "equal"))


def test_broadcast_shape_inference_keeps_symbols(reg):
    shapes, dtypes = infer_outputs(reg.get("less"), (("B", 1, 3), (5, 3)), ("int8", "int8"), {}, stage="lt")
    assert shapes == (("B", 5, 3),) and dtypes == ("bool",)


# ---------------------------------------------------------------------------------------------- bad inputs


def test_mismatched_dtypes_are_a_dtype_mismatch_naming_the_stage(reg):
    with pytest.raises(DTypeMismatchError, match="cast") as info:
        infer_outputs(reg.get("less"), ((3,), (3,)), ("float32", "float16"), {}, stage="cmp")
    err = info.value
    assert isinstance(err, PipeLinkError) and err.code == ErrorCode.PIPELINK_ERR_DTYPE_MISMATCH
    assert err.stage == "cmp" and "'cmp'" in str(err)


@pytest.mark.parametrize(
    ("name", "dtypes"),
    [
        ("less", ("bool", "bool")),  # order of bools: not an operator here (ONNX Less has none either)
        ("greater_equal", ("bool", "bool")),
        ("logical_and", ("float32", "float32")),  # logical operators take bool only
        ("logical_xor", ("int8", "int8")),
        ("logical_not", ("uint8",)),
        ("equal", ("float8_e4m3fn", "float8_e4m3fn")),
    ],
)
def test_unsupported_dtypes_are_refused(reg, name, dtypes):
    with pytest.raises(DTypeMismatchError) as info:
        infer_outputs(reg.get(name), ((3,),) * len(dtypes), dtypes, {}, stage="s")
    assert info.value.code == ErrorCode.PIPELINK_ERR_DTYPE_MISMATCH


def test_shapes_that_do_not_broadcast_name_the_axis(reg):
    with pytest.raises(ShapeMismatchError) as info:
        infer_outputs(reg.get("equal"), ((4, 3), (4, 2)), ("int32", "int32"), {}, stage="eq")
    assert info.value.code == ErrorCode.PIPELINK_ERR_SHAPE_MISMATCH and info.value.stage == "eq"


def test_a_pipeline_fed_mismatched_dtypes_refuses_the_run(device):
    pipe = pl.load({"pipeline": [{"name": "equal", "inputs": ["a", "b"], "outputs": ["c"]}]}, device=device)
    with pytest.raises(DTypeMismatchError) as info:
        pipe.run(a=np.ones(3, np.float32), b=np.ones(3, np.int32))
    assert info.value.code == ErrorCode.PIPELINK_ERR_DTYPE_MISMATCH


# ---------------------------------------------------------------------------------------------- pipelines


def test_a_comparison_feeds_where(device, rng):
    """less -> logical_not -> where: the bool a kernel writes is the bool where reads (one byte, 0/1)."""
    config = {
        "inputs": {"a": {"shape": ["N", 33], "dtype": "float16"}, "b": {"shape": [33], "dtype": "float16"}},
        "pipeline": [
            {"name": "less", "id": "lt", "inputs": ["a", "b"], "outputs": ["m"]},
            {"name": "logical_not", "id": "ge", "inputs": ["m"], "outputs": ["k"]},
            {"name": "where", "id": "pick", "inputs": ["k", "a", "b"], "outputs": ["y"]},
        ],
        "outputs": ["y", "k"],
    }
    pipe = pl.load(config, device=device)
    for rows in (
        7,
        7,
        300,
    ):  # a signature's first run, its replay (the native core's where it has one), another
        a, b = _values(rng, (rows, 33), "float16"), _values(rng, (33,), "float16")
        out = pipe.run(a=a, b=b)
        y, k = np.asarray(out["y"].numpy()), np.asarray(out["k"].numpy())
        _check_bool(k, ~(as64(a) < as64(b)))
        np.testing.assert_array_equal(as64(y), np.maximum(as64(a), as64(b)))


# ---------------------------------------------------------------------------------------------- ONNX


def _one_node(op_type: str, feeds: dict):
    onnx = pytest.importorskip("onnx")
    helper = onnx.helper
    node = helper.make_node(op_type, list(feeds), ["out"], name=f"the_{op_type.lower()}")
    graph = helper.make_graph(
        [node],
        op_type,
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in feeds.items()
        ],
        [helper.make_tensor_value_info("out", onnx.TensorProto.UNDEFINED, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


def _onnx_feeds(rng, name: str, dtype: str) -> dict:
    if name == "logical_not":
        return {"x": rand(rng, (3, 4, 5), "bool")}
    a, b = _values(rng, (3, 4, 5), dtype), _values(rng, (4, 1), dtype)
    if dtype in FLOAT_NAMES:  # the IEEE edges, on both sides of the broadcast
        a.reshape(-1)[:4] = [np.nan, -0.0, np.inf, 0.0]
        b.reshape(-1)[:2] = [np.nan, 0.0]
    return {"a": a, "b": b}


_ONNX_CASES = [
    (name, dtype)
    for name in ONNX_NAMES
    for dtype in (
        ("bool",)
        if name.startswith("logical")
        else ("float32", "float16", "int32", "uint8", "int64") + (("bool",) if name == "equal" else ())
    )
]


@pytest.mark.parametrize(("name", "dtype"), _ONNX_CASES)
def test_one_node_onnx_models_match_the_onnx_reference(device, rng, name, dtype):
    pytest.importorskip("onnx")
    from tests.backend import onnx_models as om

    feeds = _onnx_feeds(rng, name, dtype)
    model = _one_node(ONNX_NAMES[name], feeds)
    config, _ = pl.onnx.import_model(model)
    assert [s["name"] for s in config["pipeline"]] == [name]
    pipe = pl.from_onnx(model, device=device)
    (want,) = om.run_reference(model, feeds)
    got = np.asarray(pipe.run(feeds)["out"].numpy())
    _check_bool(got, want)


# ------------------------------------------------------------------------------------- is_nan / is_inf
def _specials(rng, n: int, dtype: str) -> np.ndarray:
    """Random values with NaN, +inf, -inf, -0.0 and the largest finite value spread through them."""
    x = rand(rng, (n,), dtype)
    npd = get_dtype(dtype).numpy
    picks = rng.integers(0, n, size=(5, max(1, n // 7)))
    for k, value in enumerate((np.nan, np.inf, -np.inf, -0.0, float(np.finfo(np.float32).max))):
        with np.errstate(over="ignore"):  # float16's max is below float32's: inf, which is right for it
            x[picks[k]] = np.asarray(value).astype(npd)
    return x


@pytest.mark.parametrize("dtype", FLOAT_NAMES)
@pytest.mark.parametrize("n", [4099, 17, 1])
def test_is_nan_and_is_inf_every_float_type(reg, device, rng, dtype, n):
    """Each element tested on its float64 value with math.isnan / math.isinf; is_inf with each
    attribute pair (both, +inf only, -inf only, neither)."""
    import math

    x = _specials(rng, n, dtype)
    values = [float(v) for v in as64(x)]
    (y,) = run_op(reg, "is_nan", [x], device=device)
    _check_bool(y, np.array([math.isnan(v) for v in values]))
    for pos, neg in ((True, True), (True, False), (False, True), (False, False)):
        attrs = {"detect_positive": pos, "detect_negative": neg}
        (y,) = run_op(reg, "is_inf", [x], attrs, device=device)
        want = [(pos and v == math.inf) or (neg and v == -math.inf) for v in values]
        _check_bool(y, np.array(want))


def test_is_nan_refuses_integers(reg, device):
    for name in ("is_nan", "is_inf"):
        with pytest.raises(DTypeMismatchError, match="not supported"):
            run_op(reg, name, [np.zeros(3, np.int32)], device=device)


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_is_nan_is_inf_onnx_match_the_reference(device, rng, dtype):
    """One-node IsNaN and IsInf (every attribute pair) models against onnx's ReferenceEvaluator."""
    pytest.importorskip("onnx")
    from .onnx_oracle import run_onnx

    x = _specials(rng, 300, dtype).reshape(3, 100)
    cases = [("IsNaN", {}, "is_nan")] + [
        ("IsInf", {"detect_positive": p, "detect_negative": q}, "is_inf") for p in (0, 1) for q in (0, 1)
    ]
    for op_type, attrs, _ in cases:
        (ref,) = run_onnx(op_type, [x], attrs, opset=20)
        from onnx import TensorProto, helper

        node = helper.make_node(op_type, ["x"], ["y"], **attrs)
        graph = helper.make_graph(
            [node],
            "pred",
            [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)],
            [helper.make_tensor_value_info("y", TensorProto.BOOL, x.shape)],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
        with pl.from_onnx(model, device=device) as pipe:
            got = pipe.run(x=x)["y"].numpy()
        assert got.dtype == np.bool_ and np.array_equal(got, ref), (op_type, attrs)
