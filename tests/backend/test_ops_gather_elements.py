"""gather_elements (ONNX GatherElements) against an element-by-element loop and ONNX's reference: every
dtype on every device, every axis of ranks 1-4, negative indices, indices smaller than data off the axis,
int32 and int64 indices, large sizes; the refusals at load and the out-of-range index at run time; the
CUDA kernel's index arithmetic emulated from its plan (so a plan bug fails here, without a GPU).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import pipelink as pl
from pipelink.descriptor import infer_outputs
from pipelink.errors import DTypeMismatchError, ErrorCode, InvalidArgumentError, ShapeMismatchError
from pipelink.ops.shape.cuda import plan_gather_elements

from .ops_helpers import FLOAT_NAMES, INT_NAMES, make_registry, rand, run_op

ALL_TYPES = FLOAT_NAMES + INT_NAMES + ("bool",)
INDEX_TYPES = ("int32", "int64")


@pytest.fixture(scope="module")
def reg():
    return make_registry()


def _infer(reg, shapes, dtypes, attrs):
    desc = reg.get("gather_elements")
    return infer_outputs(desc, tuple(shapes), tuple(dtypes), desc.resolve_attrs(attrs, where="t"), stage="t")


def _indices(rng, data_shape, index_shape, axis, dtype):
    """Random indices over the whole valid range ``[-n, n)`` of the axis (negatives included)."""
    n = data_shape[axis]
    return rng.integers(-n, n, size=index_shape).astype(dtype)


def _loop(data: np.ndarray, indices: np.ndarray, axis: int) -> np.ndarray:
    """The ONNX definition, one element at a time: y[p] = data[p with p[axis] = indices[p] (mod n)]."""
    ax = axis % data.ndim
    out = np.empty(indices.shape, data.dtype)
    for pos in itertools.product(*(range(d) for d in indices.shape)):
        src = list(pos)
        i = int(indices[pos])
        src[ax] = i + data.shape[ax] if i < 0 else i
        out[pos] = data[tuple(src)]
    return out


def _take_along(data: np.ndarray, indices: np.ndarray, axis: int) -> np.ndarray:
    """numpy.take_along_axis on data cut to indices' dims off the axis (fast, for large cases)."""
    ax = axis % data.ndim
    cut = tuple(slice(None) if k == ax else slice(0, s) for k, s in enumerate(indices.shape))
    fixed = np.where(indices < 0, indices.astype(np.int64) + data.shape[ax], indices)
    return np.take_along_axis(data[cut], fixed, ax)


def _same_bits(got: np.ndarray, want: np.ndarray) -> None:
    """Elements are moved, never converted: the output must be the expected bytes exactly (a NaN or
    0xCD poison left anywhere, a neighbour's element, a rounding would all show)."""
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape, got.dtype)
    np.testing.assert_array_equal(
        np.ascontiguousarray(got).view(np.uint8), np.ascontiguousarray(want).view(np.uint8)
    )


# ------------------------------------------------------------------------------------------- results


@pytest.mark.parametrize("dtype", ALL_TYPES)
@pytest.mark.parametrize("index_dtype", INDEX_TYPES)
def test_every_dtype(reg, device, rng, dtype, index_dtype):
    # indices shorter than data on both dims off the axis and longer on it
    data = rand(rng, (4, 5, 6), dtype)
    indices = _indices(rng, data.shape, (3, 7, 2), 1, index_dtype)
    (y,) = run_op(reg, "gather_elements", [data, indices], {"axis": 1}, device=device)
    _same_bits(y, _loop(data, indices, 1))


@pytest.mark.parametrize("rank", [1, 2, 3, 4])
@pytest.mark.parametrize("index_dtype", INDEX_TYPES)
def test_every_axis_of_ranks_1_to_4(reg, device, rng, rank, index_dtype):
    """Each axis, given as k and as k - rank, with random shapes: on the axis indices may be shorter or
    longer than data, off it at most as long (often shorter)."""
    for axis in range(-rank, rank):
        ax = axis % rank
        shape = tuple(int(d) for d in rng.integers(1, 6, rank))
        ishape = tuple(
            int(rng.integers(1, 7)) if k == ax else int(rng.integers(1, d + 1)) for k, d in enumerate(shape)
        )
        data = rand(rng, shape, "float32")
        indices = _indices(rng, shape, ishape, ax, index_dtype)
        (y,) = run_op(reg, "gather_elements", [data, indices], {"axis": axis}, device=device)
        _same_bits(y, _loop(data, indices, axis))


def test_default_axis_is_0_and_negative_indices_count_from_the_end(reg, device):
    data = np.array([[1.5, 2.5], [3.5, 4.5], [5.5, 6.5]], np.float32)
    indices = np.array([[-1, 0], [-3, -2], [2, 1]], np.int64)
    (y,) = run_op(reg, "gather_elements", [data, indices], device=device)
    np.testing.assert_array_equal(y, [[5.5, 2.5], [1.5, 4.5], [5.5, 4.5]])
    column = np.array([[-1], [0], [-2]], np.int32)
    (y,) = run_op(reg, "gather_elements", [data, column], {"axis": -1}, device=device)
    np.testing.assert_array_equal(y, [[2.5], [3.5], [5.5]])


@pytest.mark.parametrize(
    ("shape", "index_shape", "axis"),
    [
        ((6, 7, 8), (2, 3, 4), -1),  # smaller on every dim, the axis too
        ((6, 7, 8), (1, 1, 9), 2),
        ((6, 7, 8), (6, 1, 8), 0),
        ((2, 3, 4, 5), (1, 2, 3, 4), 1),
        ((4, 5), (4, 0), 1),  # nothing to gather
        ((4, 5), (0, 5), 0),
        ((5,), (12,), 0),
    ],
)
def test_indices_smaller_than_data_off_the_axis(reg, device, rng, shape, index_shape, axis):
    data = rand(rng, shape, "float16")
    indices = _indices(rng, shape, index_shape, axis, "int64")
    (y,) = run_op(reg, "gather_elements", [data, indices], {"axis": axis}, device=device)
    _same_bits(y, _loop(data, indices, axis))


@pytest.mark.parametrize(
    ("dtype", "shape", "index_shape", "axis", "index_dtype"),
    [
        ("float32", (300, 257), (300, 1000), 1, "int32"),  # 300,000 outputs: a grid-stride loop
        ("bfloat16", (513, 300), (600, 250), 0, "int64"),
        ("int8", (70_000,), (90_000,), 0, "int32"),
        ("float64", (20, 70, 50), (17, 80, 49), -2, "int64"),
    ],
)
def test_large_sizes(reg, device, rng, dtype, shape, index_shape, axis, index_dtype):
    data = rand(rng, shape, dtype)
    indices = _indices(rng, shape, index_shape, axis, index_dtype)
    (y,) = run_op(reg, "gather_elements", [data, indices], {"axis": axis}, device=device)
    _same_bits(y, _take_along(data, indices, axis))


def test_loop_and_take_along_agree():
    """The two references of this file agree (the fast one stands in for the loop on large cases)."""
    rng = np.random.default_rng(0)
    data = rng.standard_normal((4, 6, 5))
    for axis in range(-3, 3):
        ishape = tuple(7 if k == axis % 3 else d - 1 for k, d in enumerate(data.shape))
        indices = _indices(rng, data.shape, ishape, axis % 3, np.int64)
        np.testing.assert_array_equal(_loop(data, indices, axis), _take_along(data, indices, axis))


# -------------------------------------------------------------------------------- refusals at load


@pytest.mark.parametrize(
    ("shapes", "attrs", "error", "code", "match"),
    [
        ([(3, 4), (3, 4)], {"axis": 2}, InvalidArgumentError, "INVALID_ARGUMENT", r"must be in \[-2, 2\)"),
        ([(3, 4), (3, 4)], {"axis": -3}, InvalidArgumentError, "INVALID_ARGUMENT", r"\(got -3\)"),
        ([(), ()], {}, InvalidArgumentError, "INVALID_ARGUMENT", "for a 0-d input"),
        ([(3, 4), (3,)], {}, ShapeMismatchError, "SHAPE_MISMATCH", "has 1 dimensions, but 'data'"),
        ([(3, 4), (3, 4, 1)], {"axis": 1}, ShapeMismatchError, "SHAPE_MISMATCH", "same rank"),
        ([(3, 4), (2, 5)], {"axis": 0}, ShapeMismatchError, "SHAPE_MISMATCH", "size 5 on axis 1"),
        ([(3, 4, 5), (4, 9, 5)], {"axis": -2}, ShapeMismatchError, "SHAPE_MISMATCH", "size 4 on axis 0"),
        ([("B", 4), ("B", 5)], {"axis": 0}, ShapeMismatchError, "SHAPE_MISMATCH", "size 5 on axis 1"),
    ],
)
def test_refusals_at_load(reg, shapes, attrs, error, code, match):
    with pytest.raises(error, match=match) as info:
        _infer(reg, shapes, ["float32", "int64"], attrs)
    assert info.value.code == ErrorCode[f"PIPELINK_ERR_{code}"]


def test_sizes_on_the_axis_and_unknown_dims_are_accepted(reg):
    (shape,), (dtype,) = _infer(reg, [(3, 4), (9, 4)], ["bfloat16", "int32"], {"axis": -2})
    assert tuple(shape) == (9, 4) and dtype == "bfloat16"
    (shape,), _ = _infer(reg, [("B", 4), ("T", "K")], ["int8", "int64"], {})
    assert tuple(shape) == ("T", "K")


def test_float_indices_are_refused(reg):
    with pytest.raises(DTypeMismatchError) as info:
        _infer(reg, [(3, 4), (3, 4)], ["float32", "float32"], {})
    assert info.value.code == ErrorCode.PIPELINK_ERR_DTYPE_MISMATCH


def _config(data_shape, index_shape, attrs):
    return {
        "inputs": {
            "d": {"shape": list(data_shape), "dtype": "float32"},
            "i": {"shape": list(index_shape), "dtype": "int64"},
        },
        "pipeline": [
            {"name": "gather_elements", "id": "g", "inputs": ["d", "i"], "outputs": ["y"], "attrs": attrs}
        ],
    }


def test_a_config_with_a_bad_stage_is_refused_with_pointers():
    problems = pl.validate(_config((3, 4), (2, 4), {"axis": 2}))
    assert [(p.code, p.path) for p in problems] == [(ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT, "/pipeline/0")]
    problems = pl.validate(_config((3, 4), (2, 5), {"axis": 0}))
    assert [(p.code, p.path) for p in problems] == [
        (ErrorCode.PIPELINK_ERR_SHAPE_MISMATCH, "/pipeline/0/inputs/1")
    ]
    with pytest.raises(ShapeMismatchError, match="size 5 on axis 1"):
        pl.load(_config((3, 4), (2, 5), {"axis": 0}), device="cpu")


def test_a_dim_known_only_at_run_time_is_checked_then(reg):
    """Symbolic at load, too large when the pipeline runs: an error before any element is read."""
    with pl.load(_config(("B", 4), (2, "K"), {"axis": 0}), device="cpu") as pipe:
        data = rand(np.random.default_rng(5), (3, 4), "float32")
        good = np.array([[0, -1, 2], [-3, 1, 0]], np.int64)
        np.testing.assert_array_equal(pipe.run(d=data, i=good)["y"].numpy(), _loop(data, good, 0))
        with pytest.raises(ShapeMismatchError, match="size 5 on axis 1") as info:
            pipe.run(d=data, i=np.zeros((2, 5), np.int64))
        assert info.value.code == ErrorCode.PIPELINK_ERR_SHAPE_MISMATCH


# ------------------------------------------------------------------------- out-of-range at run time


@pytest.mark.parametrize("index_dtype", INDEX_TYPES)
@pytest.mark.parametrize("check", [False, True])
def test_out_of_range_index_is_an_error_on_the_cpu(reg, index_dtype, check):
    """The CPU raises whatever check_indices says (CUDA writes zeros unless check_indices, below), naming
    the stage and the first bad index in row-major order, before it writes anything."""
    data = np.zeros((3, 4), np.float32)
    for bad, first in (([[1, 4, 0, -5]], 4), ([[0, -5, 4, 3]], -5), ([[0, 1, 2, 2**31 - 1]], 2**31 - 1)):
        indices = np.array(bad, index_dtype)
        with pytest.raises(InvalidArgumentError) as info:
            run_op(reg, "gather_elements", [data, indices], {"axis": 1, "check_indices": check}, stage="g")
        assert info.value.code == ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT
        assert str(info.value).startswith(
            f"stage 'g': gather_elements index {first} is out of range for axis 1 of size 4 (valid: -4 .. 3)"
        )


def test_out_of_range_index_in_a_pipeline_raises_and_the_next_run_works():
    data = rand(np.random.default_rng(6), (3, 4), "float32")
    with pl.load(_config((3, 4), (2, 4), {"axis": 0}), device="cpu") as pipe:
        with pytest.raises(InvalidArgumentError, match="stage 'g': gather_elements index -4 is out of range"):
            pipe.run(d=data, i=np.array([[0, 1, 2, -4], [0, 0, 0, 0]]))
        good = np.array([[0, 1, 2, -3], [2, 2, 1, 0]])
        np.testing.assert_array_equal(pipe.run(d=data, i=good)["y"].numpy(), _loop(data, good, 0))


@pytest.mark.gpu
@pytest.mark.parametrize("index_dtype", INDEX_TYPES)
def test_out_of_range_index_gives_a_zero_on_cuda(reg, index_dtype):
    """The CUDA kernel never reads out of bounds: an out-of-range index writes a zero at its own position
    (gather's contract, element by element), the others are gathered."""
    data = rand(np.random.default_rng(13), (4, 3), "float32")
    indices = np.array([[1, 4, -5], [10**6, -1, 0]], index_dtype)
    (y,) = run_op(reg, "gather_elements", [data, indices], device="cuda")
    np.testing.assert_array_equal(y, [[data[1, 0], 0, 0], [0, data[3, 1], data[0, 2]]])


@pytest.mark.gpu
@pytest.mark.parametrize("index_dtype", INDEX_TYPES)
def test_check_indices_raises_on_cuda_as_on_the_cpu(reg, index_dtype):
    # Wrong if the device word missed an index, reported a later one than the first, or was not reset
    # between runs (the in-range run after a failing one must pass and be correct).
    data = rand(np.random.default_rng(14), (6, 300), "float16")
    bad = np.tile(np.array([2, -1, 0, -6, 5], index_dtype), (2, 60))
    bad[1, 7], bad[1, 9] = 9, -7  # position 307 holds the first out-of-range index, 9
    for _ in range(2):
        with pytest.raises(
            InvalidArgumentError, match="stage 'g': gather_elements index 9 is out of range .* 6"
        ):
            run_op(reg, "gather_elements", [data, bad], {"check_indices": True}, stage="g", device="cuda")
    good = np.array([[5, -6, 0], [0, 3, -1]], index_dtype)
    (y,) = run_op(reg, "gather_elements", [data, good], {"check_indices": True}, device="cuda")
    _same_bits(y, _loop(data, good, 0))


# ------------------------------------------------------------------------ the CUDA plan, emulated


def _emulate(plan, data: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, int | None]:
    """pl_gather_elements step by step from the plan's scalars, in 64-bit arithmetic: each output
    position i's offset in data under d / sd, plus the wrapped index times axis_stride; zero (and the
    first such i for the ``bad`` word) where the index is out of range."""
    s, ndim = plan.scalars, int(plan.macros["PL_NDIM"])
    assert s["n"] == indices.size
    dims = [s[f"d{k}"] for k in range(ndim)]
    pos = np.indices(dims).reshape(ndim, -1) if indices.size else np.zeros((ndim, 0), np.int64)
    off = sum(pos[k] * s[f"sd{k}"] for k in range(ndim))
    idx = indices.reshape(-1).astype(np.int64)
    idx = np.where(idx < 0, idx + s["axis_n"], idx)
    inside = (idx >= 0) & (idx < s["axis_n"])
    flat = data.reshape(-1)
    where = np.where(inside, off + idx * s["axis_stride"], 0)
    assert (where >= 0).all() and (where < max(flat.size, 1)).all(), "an out-of-bounds read"
    y = np.where(inside, flat[where] if flat.size else 0, 0).astype(data.dtype)
    bad = np.flatnonzero(~inside)
    return y.reshape(indices.shape), (int(bad[0]) if bad.size else None)


@pytest.mark.parametrize(
    ("shape", "index_shape", "axis"),
    [
        ((5, 7, 3), (4, 6, 3), -2),
        ((5, 7, 3), (5, 9, 3), 1),  # merges to [5, 27] with the axis inside
        ((6, 7, 8), (2, 3, 4), 2),
        ((2, 3, 4, 5), (2, 1, 4, 5), 1),  # a size-1 axis dim drops out
        ((9,), (4,), 0),
        ((3,) * 8, (2,) * 8, 3),  # eight dims that do not collapse
        ((4, 5), (4, 0), 1),
        ((3, 0), (2, 4), 1),  # an empty axis: every index is out of range, nothing is read
    ],
)
def test_cuda_plan_index_math(shape, index_shape, axis):
    rng = np.random.default_rng(4)
    data = rng.standard_normal(shape)
    n = shape[axis]
    indices = rng.integers(-n - 2, n + 2, size=index_shape) if n else np.zeros(index_shape, np.int64)
    plan = plan_gather_elements("float64", shape, "int64", index_shape, axis)
    assert plan.kernel == "pl_gather_elements" and plan.macros["PL_INDEX64"] == "0"
    got, first_bad = _emulate(plan, data, indices)
    ok = (indices >= -n) & (indices < n)
    want = np.where(ok, _take_along(data, np.where(ok, indices, 0), axis) if n else 0, 0.0)
    np.testing.assert_array_equal(got, want)
    bad = np.flatnonzero(~ok)
    assert first_bad == (int(bad[0]) if bad.size else None)


def test_cuda_plan_arguments_and_refusals():
    plan = plan_gather_elements("float16", (5, 7, 3), "int32", (4, 6, 3), 1)
    names = [a.name for a in plan.arg_specs]
    assert names[:7] == ["data", "indices", "y", "n", "axis_n", "axis_stride", "bad"]
    assert names[7:] == [f"d{k}" for k in range(8)] + [f"sd{k}" for k in range(8)]
    assert plan.macros["PL_INDEX_T"] == "int" and plan.macros["PL_BYTES"] == "2" and plan.scalars["bad"] == 0
    assert plan_gather_elements("int8", (2**31, 2), "int64", (3, 2), 0).macros["PL_INDEX64"] == "1"
    with pytest.raises(InvalidArgumentError, match="indices must be int32 or int64"):
        plan_gather_elements("float32", (4, 2), "float32", (4, 2), 0)
    with pytest.raises(InvalidArgumentError, match="rank of data"):
        plan_gather_elements("float32", (4, 2), "int64", (4, 3), 0)
    with pytest.raises(InvalidArgumentError, match="rank of data"):
        plan_gather_elements("float32", (4, 2), "int64", (4,), 0)
    with pytest.raises(InvalidArgumentError, match="must be in"):
        plan_gather_elements("float32", (4, 2), "int64", (4, 2), 2)
    with pytest.raises(InvalidArgumentError, match="dims after collapsing"):
        plan_gather_elements("int8", (3,) * 9, "int64", (2,) * 9, 0)


# ---------------------------------------------------------------------------------- ONNX as oracle


@pytest.mark.parametrize(
    ("shape", "index_shape", "axis", "index_dtype"),
    [
        ((3, 4), (2, 4), 0, np.int64),
        ((3, 4, 5), (3, 6, 5), -2, np.int32),
        ((2, 3, 4, 5), (2, 3, 4, 2), 3, np.int64),
        ((7,), (10,), 0, np.int32),
        ((2, 3, 4, 5), (1, 2, 3, 5), -1, np.int64),  # smaller off the axis: the loop only (below)
    ],
)
def test_one_node_model_matches_onnx(device, rng, shape, index_shape, axis, index_dtype):
    onnx = pytest.importorskip("onnx")
    from pipelink.onnx import import_model

    from .onnx_models import make_model, run_reference

    data = rand(rng, shape, "float32")
    indices = _indices(rng, shape, index_shape, axis % len(shape), index_dtype)
    node = onnx.helper.make_node("GatherElements", ["data", "idx"], ["y"], name="ge", axis=axis)
    model = make_model(
        [node], [("data", list(shape))], [("y", list(index_shape))], {"idx": indices}, "ge", opset=13
    )
    config, _ = import_model(model)
    assert [(s["name"], s["attrs"]) for s in config["pipeline"]] == [("gather_elements", {"axis": axis})]
    with pl.from_onnx(model, device=device) as pipe:
        got = np.asarray(pipe.run(data=data)["y"].numpy())
    _same_bits(got, _loop(data, indices, axis))
    ax = axis % len(shape)
    if all(i == d for k, (i, d) in enumerate(zip(index_shape, shape, strict=True)) if k != ax):
        # onnx's ReferenceEvaluator (1.23) refuses indices smaller than data off the axis, which the
        # spec and onnxruntime allow, and mis-checks the shapes for axis -1: the oracle only here
        (ref,) = run_reference(model, {"data": data})
        _same_bits(got, ref)
