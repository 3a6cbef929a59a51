"""top_k and hardmax (reduce family) against references written here (each line sorted in Python by the
ONNX order: value, ties to the lower index, NaN above every number) and onnx's ReferenceEvaluator; every
dtype, every axis form, short and long lines (a 50,257-entry vocabulary), ties, NaN, k = 0 and k = the
axis length; the CUDA kernel's decline (k too large for its slots on a long line: the staged reference);
refusals, at load, at run and at ONNX import.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import pipelink as pl
from pipelink.descriptor import KernelContext, VariantDeclined
from pipelink.dtypes import get_dtype
from pipelink.errors import DTypeMismatchError, ErrorCode, InvalidArgumentError, ShapeMismatchError
from pipelink.ops.reduce import topk_cuda

from .ops_helpers import FLOAT_NAMES, INT_NAMES, make_registry, rand, run_op

ALL = FLOAT_NAMES + INT_NAMES


@pytest.fixture(scope="module")
def reg():
    return make_registry()


def _top_k_ref(x: np.ndarray, axis: int, k: int, largest: bool) -> np.ndarray:
    """The int64 indices of the k first elements of each line along ``axis`` in the ONNX order, by
    Python's sort of (NaN last or first, value, index) keys; values as Python floats or ints (exact)."""
    is_float = x.dtype.name in FLOAT_NAMES
    v = np.moveaxis(x.astype(np.float64) if is_float else x, axis, -1)
    out = np.zeros(v.shape[:-1] + (k,), np.int64)
    for idx in np.ndindex(v.shape[:-1]):
        line = [float(e) if is_float else int(e) for e in v[idx]]

        def key(i, line=line):
            e = line[i]
            if is_float and math.isnan(e):
                return (0 if largest else 1, 0, i)  # NaN: above every number
            return (1 if largest else 0, -e if largest else e, i)

        out[idx] = sorted(range(len(line)), key=key)[:k]
    return np.moveaxis(out, -1, axis)


def _check_top_k(x: np.ndarray, values: np.ndarray, indices: np.ndarray, axis: int, k: int, largest: bool):
    want = _top_k_ref(x, axis, k, largest)
    assert indices.dtype == np.int64 and indices.shape == want.shape, (indices.dtype, indices.shape)
    assert values.dtype == x.dtype and values.shape == want.shape
    np.testing.assert_array_equal(indices, want)  # the 0xCD poison would show as a huge index
    picked = np.take_along_axis(x, want, axis=axis)
    # the values are x's own elements, bit for bit (the NaN poison fails; -0.0 stays -0.0)
    assert picked.tobytes() == values.tobytes()


def _draw(rng, shape, dtype):
    """Random values with ties: floats rounded to quarters in half the places, integers in [-100, 100]."""
    x = rand(rng, shape, dtype)
    if dtype in FLOAT_NAMES:
        x = np.where(rng.random(shape) < 0.5, np.round(x.astype(np.float64) * 4) / 4, x).astype(x.dtype)
    return x


TOP_K_CASES = [
    ((3, 40, 5), 1, 7),  # a strided line (inner 5)
    ((3, 4, 5), -1, 5),  # k = the axis length: the whole line sorted
    ((6,), 0, 0),  # k = 0: empty outputs
    ((2, 0, 3), 1, 0),  # an empty axis
    ((0, 7), 1, 3),  # an empty other axis
    ((7, 1, 3), 0, 4),
    ((2, 4096), 1, 4096),  # the largest line the kernel sorts whole
    ((2, 4096), 1, 100),
    ((3, 5000), -1, 2048),  # longer than the slots: windows, k = half the slots
    ((2, 50257), 1, 50),  # a vocabulary
    ((1, 70000), 1, 1000),  # 4-byte indices (2048 slots for 8-byte values)
    ((20000, 3), 1, 2),  # more lines than the grid covers at once on CUDA: the grid-stride loop
]


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize(("shape", "axis", "k"), TOP_K_CASES)
def test_top_k_every_dtype(reg, device, rng, dtype, shape, axis, k, largest):
    """Random values with many ties; wrong indices, a wrong tie rule, values not copied from x, or an
    unwritten output fails."""
    x = _draw(rng, shape, dtype)
    values, indices = run_op(reg, "top_k", [x], {"k": k, "axis": axis, "largest": largest}, device=device)
    _check_top_k(x, values, indices, axis % len(shape), k, largest)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32", "int64"])
@pytest.mark.parametrize("order", ["ascending", "descending", "constant"])
@pytest.mark.parametrize("k", [1, 64, 2048])
def test_top_k_long_lines_in_every_order(reg, device, dtype, order, k):
    """Lines past the CUDA kernel's slots, sorted either way or constant: ascending lines make every window
    improve the best k (largest), descending ones none (smallest: the other way round), a constant line
    is all ties (the first k indices either way)."""
    n = 9000
    base = {"ascending": np.arange(n), "descending": np.arange(n)[::-1], "constant": np.zeros(n)}[order]
    x = np.stack([base, np.roll(base, 1234)]).astype(get_dtype(dtype).numpy)  # bfloat16: many ties
    for largest in (True, False):
        values, indices = run_op(reg, "top_k", [x], {"k": k, "largest": largest}, device=device)
        _check_top_k(x, values, indices, 1, k, largest)


@pytest.mark.parametrize("dtype", FLOAT_NAMES)
def test_top_k_nan_is_above_every_number(reg, device, dtype):
    """NaN comes first among the largest and last among the smallest (onnx's reference: np.lexsort puts
    it after +inf), NaNs among themselves by index; -0.0 and +0.0 are a tie (the lower index first); on a
    long line too (the windows of the CUDA kernel)."""
    npd = get_dtype(dtype).numpy
    x = np.array([[1.0, np.nan, -np.inf, 0.0, np.inf, np.nan, -0.0, 1.0]], npd)
    values, indices = run_op(reg, "top_k", [x], {"k": 8}, device=device)
    assert indices.tolist() == [[1, 5, 4, 0, 7, 3, 6, 2]]
    assert np.signbit(values[0, 6]) and not np.signbit(values[0, 5])  # -0.0 copied as it is
    values, indices = run_op(reg, "top_k", [x], {"k": 8, "largest": False}, device=device)
    assert indices.tolist() == [[2, 3, 6, 0, 7, 4, 1, 5]]
    long = np.ones((2, 9000), npd)
    long[0, [17, 4000, 8999]] = np.nan
    long[1, 5000] = np.nan
    _, indices = run_op(reg, "top_k", [long], {"k": 3}, device=device)
    assert indices.tolist() == [[17, 4000, 8999], [5000, 0, 1]]
    _, indices = run_op(reg, "top_k", [long], {"k": 2048, "largest": False}, device=device)
    assert indices[:, -1].tolist() == [2048, 2047]  # the NaN at 17 is not among the smallest
    for largest in (True, False):
        values, indices = run_op(reg, "top_k", [long], {"k": 2048, "largest": largest}, device=device)
        _check_top_k(long, values, indices, 1, 2048, largest)


def test_top_k_integer_extremes(reg, device):
    """The lowest and highest values of each integer type (int64's beyond float64's exact range)."""
    for dtype in INT_NAMES:
        info = np.iinfo(get_dtype(dtype).numpy)
        x = np.array([[info.max - 1, info.min, info.max, info.min + 1, info.max, info.min]], info.dtype)
        _, largest = run_op(reg, "top_k", [x], {"k": 6}, device=device)
        _, smallest = run_op(reg, "top_k", [x], {"k": 6, "largest": False}, device=device)
        assert largest.tolist() == [[2, 4, 0, 3, 1, 5]], dtype
        assert smallest.tolist() == [[1, 5, 3, 0, 2, 4]], dtype


def test_top_k_sorted_false_is_sorted(reg, device, rng):
    """sorted=0 leaves the order to the implementation (ONNX); PipeLink's is the sorted one."""
    x = _draw(rng, (4, 300), "float32")
    a = run_op(reg, "top_k", [x], {"k": 20, "sorted": False}, device=device)
    b = run_op(reg, "top_k", [x], {"k": 20}, device=device)
    np.testing.assert_array_equal(a[1], b[1])


def test_top_k_refusals(reg, device):
    """k past the axis is PIPELINK_ERR_SHAPE_MISMATCH (at load, and when a symbolic size is bound); a
    negative k, an axis outside [-rank, rank), a 0-d input and a missing k are
    PIPELINK_ERR_INVALID_ARGUMENT; bool is not a dtype top_k takes."""
    x = np.zeros((2, 3, 4), np.float32)
    with pytest.raises(ShapeMismatchError, match=r"top_k: k=5 is larger than axis -1 .* has 4 elements") as e:
        run_op(reg, "top_k", [x], {"k": 5}, device=device)
    assert e.value.code == ErrorCode.PIPELINK_ERR_SHAPE_MISMATCH
    with pytest.raises(InvalidArgumentError, match=r"top_k: attribute 'k' must be >= 0 \(got -1\)") as e:
        run_op(reg, "top_k", [x], {"k": -1}, device=device)
    assert e.value.code == ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT
    with pytest.raises(InvalidArgumentError, match=r"attribute 'axis' must be in \[-3, 3\)") as e:
        run_op(reg, "top_k", [x], {"k": 1, "axis": 3}, device=device)
    assert e.value.code == ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT
    with pytest.raises(InvalidArgumentError, match=r"must be in \[-0, 0\)"):
        run_op(reg, "top_k", [np.float32(1.0).reshape(())], {"k": 1}, device=device)
    with pytest.raises(InvalidArgumentError, match="needs attribute 'k'"):
        run_op(reg, "top_k", [x], {}, device=device)
    with pytest.raises(InvalidArgumentError, match="attribute 'k' must be of type int"):
        run_op(reg, "top_k", [x], {"k": 2.0}, device=device)
    with pytest.raises(DTypeMismatchError, match="not supported"):
        run_op(reg, "top_k", [np.zeros((2, 3), np.bool_)], {"k": 1}, device=device)

    config = {
        "inputs": {"x": {"shape": ["N", "L"], "dtype": "float32"}},
        "outputs": ["v", "i"],
        "pipeline": [{"name": "top_k", "inputs": ["x"], "outputs": ["v", "i"], "attrs": {"k": 3}}],
    }
    with pl.load(config, device=device) as pipe:
        x = rand(np.random.default_rng(31), (2, 5), "float32")
        out = pipe.run(x=x)
        assert out["i"].numpy().tolist() == _top_k_ref(x, 1, 3, True).tolist()
        with pytest.raises(ShapeMismatchError, match="k=3 is larger than axis -1") as e:
            pipe.run(x=np.zeros((2, 2), np.float32))
        assert e.value.code == ErrorCode.PIPELINK_ERR_SHAPE_MISMATCH


def _cuda_ctx(reg, shape, dtype, attrs) -> KernelContext:
    desc = reg.get("top_k")
    resolved = desc.resolve_attrs(attrs, where="t")
    return KernelContext(
        stage="t",
        attrs=resolved,
        in_shapes=(shape,),
        in_dtypes=(dtype,),
        out_shapes=(),
        out_dtypes=(),
        backend=None,
    )


def test_top_k_cuda_declines_what_its_slots_cannot_hold(reg):
    """The CUDA bind declines (before touching a device) a k above half the slots on a line longer than
    them, with the reason the load report gives; any k on a line up to 4096 and k <= 2048 past it are
    taken. No GPU needed: the decline is decided from the shapes."""
    cuda = next(v for v in reg.get("top_k").variants if v.device == "cuda")
    for dtype, shape, k in (
        ("float32", (2, 5000), 2049),
        ("float64", (1, 70000), 1025),
        ("int8", (3, 9000), 9000),
    ):
        with pytest.raises(
            VariantDeclined, match=rf"k={k} on lines of {shape[1]} elements: the CUDA kernel "
        ):
            cuda.bind(_cuda_ctx(reg, shape, dtype, {"k": k}))
    assert topk_cuda.top_k_decline("float32", 4096, 4096) is None
    assert topk_cuda.top_k_decline("float64", 4096, 4096) is None
    assert topk_cuda.top_k_decline("bfloat16", 50257, 2048) is None
    assert topk_cuda.top_k_decline("int64", 70000, 1024) is None
    assert topk_cuda.top_k_slots("int64", 70000) == (2048, True)
    assert topk_cuda.top_k_slots("float16", 70000) == (4096, True)
    with pytest.raises(InvalidArgumentError, match="keeps at most 2048 candidates"):
        topk_cuda.plan_top_k("float32", (2, 5000), 1, 3000)


def test_top_k_decline_runs_staged_and_is_reported(device, rng):
    """A top_k the CUDA kernel declines runs the NumPy reference on staged copies, listed in the load
    report with its reason; the result is the same. On the CPU nothing is staged."""
    config = {
        "inputs": {"x": {"shape": [2, 6000], "dtype": "float16"}},
        "outputs": ["v", "i", "w", "j"],
        "pipeline": [
            {"name": "top_k", "id": "big", "inputs": ["x"], "outputs": ["v", "i"], "attrs": {"k": 5000}},
            {"name": "top_k", "id": "small", "inputs": ["x"], "outputs": ["w", "j"], "attrs": {"k": 10}},
        ],
    }
    x = _draw(rng, (2, 6000), "float16")
    with pl.load(config, device=device) as pipe:
        report = pipe.load_report
        out = {name: t.numpy() for name, t in pipe.run(x=x).items()}
    assert report.staged == (["big"] if device == "cuda" else [])
    if device == "cuda":
        assert any("candidates" in why for why in report.skipped_variants["big"]), report.skipped_variants
    _check_top_k(x, out["v"], out["i"], 1, 5000, True)
    _check_top_k(x, out["w"], out["j"], 1, 10, True)


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "int8", "int32", "int64", "uint8"])
@pytest.mark.parametrize(
    ("shape", "axis", "k", "largest"),
    [
        ((3, 40, 5), 1, 6, 1),
        ((3, 40, 5), -1, 5, 0),
        ((6, 7), 0, 2, 0),
        ((2, 3000), -1, 40, 1),
        ((4, 9), 1, 0, 1),
    ],
)
def test_top_k_onnx_matches_the_reference(device, dtype, shape, axis, k, largest):
    """A one-node TopK (opset 11, K a constant input) imported and run, against onnx's
    ReferenceEvaluator; the float inputs hold ties and NaNs, so the two agree on both rules."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    from .onnx_models import make_model

    npd = get_dtype(dtype).numpy
    x = _draw(np.random.default_rng(32), shape, dtype)
    if dtype.startswith("float"):
        flat = x.reshape(-1)
        flat[[1, 7, 8, len(flat) - 1]] = np.nan
    node = helper.make_node("TopK", ["x", "K"], ["v", "i"], name="the_topk", axis=axis, largest=largest)
    model = make_model([node], [("x", list(shape))], [("v", None), ("i", None)], {}, "topk", opset=11)
    model.graph.initializer.append(numpy_helper.from_array(np.array([k], np.int64), "K"))
    model.graph.input[0].type.tensor_type.elem_type = helper.np_dtype_to_tensor_dtype(npd)
    model.graph.output[0].type.tensor_type.elem_type = helper.np_dtype_to_tensor_dtype(npd)
    model.graph.output[1].type.tensor_type.elem_type = TensorProto.INT64
    ref_v, ref_i = ReferenceEvaluator(model).run(None, {"x": x})
    with pl.from_onnx(model, device=device) as pipe:
        out = pipe.run(x=x)
        got_v, got_i = out["v"].numpy(), out["i"].numpy()
    assert got_i.dtype == np.int64 and got_i.shape == ref_i.shape
    np.testing.assert_array_equal(got_i, ref_i)
    assert got_v.dtype == ref_v.dtype and got_v.tobytes() == ref_v.tobytes()


def test_top_k_onnx_k_must_be_a_constant_int64_element():
    """A computed K, a K of two elements and an int32 K are refused at import, the node named."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    from .onnx_models import make_model

    def model(k_init=None):
        node = helper.make_node("TopK", ["x", "K"], ["v", "i"], name="picky")
        m = make_model([node], [("x", [2, 9])], [("v", None), ("i", None)], {}, "topk", opset=11)
        if k_init is None:
            m.graph.input.append(helper.make_tensor_value_info("K", TensorProto.INT64, [1]))
        else:
            m.graph.initializer.append(numpy_helper.from_array(k_init, "K"))
        return m

    with pytest.raises(
        pl.PipeLinkError, match=r"TopK node 'picky'.*input 1 \(K, 'K'\) must be a constant"
    ) as e:
        pl.from_onnx(model())
    assert e.value.code == ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT
    for bad, got in (
        (np.array([2, 3], np.int64), r"int64 of shape \[2\]"),
        (np.array([2], np.int32), "int32"),
    ):
        with pytest.raises(pl.PipeLinkError, match=rf"TopK node 'picky'.*1-element int64 tensor \(got {got}"):
            pl.from_onnx(model(bad))
    with pytest.raises(pl.PipeLinkError, match=r"stage 'picky': top_k: k=10 is larger than axis -1"):
        pl.from_onnx(model(np.array([10], np.int64)))


# -- hardmax --------------------------------------------------------------------------------------------
def _hardmax_ref(x: np.ndarray, axis: int) -> np.ndarray:
    """1 at the first maximum of each line (the first NaN where there is one), found by a Python walk."""
    v = np.moveaxis(x.astype(np.float64), axis, -1)
    out = np.zeros(v.shape, np.float64)
    for idx in np.ndindex(v.shape[:-1]):
        line = [float(e) for e in v[idx]]
        if not line:
            continue
        nans = [i for i, e in enumerate(line) if math.isnan(e)]
        out[idx + (nans[0] if nans else line.index(max(line)),)] = 1.0
    return np.moveaxis(out, -1, axis)


HARDMAX_CASES = [
    ((3, 4, 5), -1),
    ((3, 4, 5), 1),  # strided lines
    ((3, 4, 5), 0),
    ((7,), 0),
    ((6, 1, 5), 1),  # lines of one element: all ones
    ((4, 0, 3), 1),  # an empty axis: an empty output
    ((0, 3), 1),
    ((2, 3000), 1),  # past 1024: the whole block per line on CUDA
    ((20000, 3), 1),  # the grid-stride loop
]


@pytest.mark.parametrize("dtype", FLOAT_NAMES)
@pytest.mark.parametrize(("shape", "axis"), HARDMAX_CASES)
def test_hardmax_every_dtype(reg, device, rng, dtype, shape, axis):
    """Random values with ties (the first maximum wins) and a NaN in some lines (the NaN wins); every
    element is written (the NaN poison fails), 1 and 0 exactly."""
    x = _draw(rng, shape, dtype)
    if x.size:
        x.reshape(-1)[rng.integers(0, x.size, 3)] = np.nan
    (y,) = run_op(reg, "hardmax", [x], {"axis": axis}, device=device)
    assert y.dtype == x.dtype and y.shape == x.shape
    np.testing.assert_array_equal(y.astype(np.float64), _hardmax_ref(x, axis % len(shape)))


def test_hardmax_refusals(reg, device):
    with pytest.raises(InvalidArgumentError, match=r"hardmax: attribute 'axis' must be in \[-2, 2\)") as e:
        run_op(reg, "hardmax", [np.zeros((2, 3), np.float32)], {"axis": 2}, device=device)
    assert e.value.code == ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT
    with pytest.raises(DTypeMismatchError, match="not supported"):
        run_op(reg, "hardmax", [np.zeros((2, 3), np.int32)], {}, device=device)


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
@pytest.mark.parametrize("axis", [-1, 0, 1, 2])
def test_hardmax_onnx_matches_the_reference(device, dtype, axis):
    """A one-node Hardmax (opset 13) against onnx's ReferenceEvaluator, ties and NaNs included."""
    pytest.importorskip("onnx")
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    from .onnx_models import make_model

    x = np.round(rand(np.random.default_rng(33), (3, 8, 5), dtype))
    x[1, 2, 3] = x[2, 5, 0] = np.nan
    node = helper.make_node("Hardmax", ["x"], ["y"], name="the_hardmax", axis=axis)
    model = make_model([node], [("x", list(x.shape))], [("y", None)], {}, "hardmax", opset=13)
    for info in (model.graph.input[0], model.graph.output[0]):
        info.type.tensor_type.elem_type = helper.np_dtype_to_tensor_dtype(x.dtype)
    (ref,) = ReferenceEvaluator(model).run(None, {"x": x})
    with pl.from_onnx(model, device=device) as pipe:
        got = pipe.run(x=x)["y"].numpy()
    assert got.dtype == ref.dtype and got.shape == ref.shape
    np.testing.assert_array_equal(got, ref)


def test_hardmax_before_opset_13_takes_every_dim_from_the_axis(device):
    """Hardmax-11 sees x as 2-d at the axis (onnx's reference applies the opset-13 rule to every opset,
    so the spec's rule is written here): one 1 per [prod(dims before), prod(dims from axis)] row."""
    pytest.importorskip("onnx")
    from onnx import helper

    from .onnx_models import make_model

    x = rand(np.random.default_rng(34), (3, 6, 5), "float32")
    node = helper.make_node("Hardmax", ["x"], ["y"], name="old_hardmax", axis=1)
    model = make_model([node], [("x", list(x.shape))], [("y", None)], {}, "hardmax", opset=11)
    with pl.from_onnx(model, device=device) as pipe:
        got = pipe.run(x=x)["y"].numpy()
    rows = x.reshape(3, 30)
    want = np.zeros_like(rows)
    want[np.arange(3), rows.argmax(axis=1)] = 1
    np.testing.assert_array_equal(got, want.reshape(x.shape))
