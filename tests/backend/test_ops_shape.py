"""Shape operators (reshape ... expand) against ONNX's semantics: output shapes from hand-written tables,
data from independent loop references and from ONNX's reference evaluator, edge cases the ONNX spec names,
errors at load, and a pipeline that plans memory for them.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pipelink as pl
from pipelink.descriptor import infer_outputs
from pipelink.errors import DTypeMismatchError, InvalidArgumentError, ShapeMismatchError
from pipelink.ops.shape import MAX_PARTS

from .ops_helpers import make_registry, rand, run_op

DATA_TYPES = ("float32", "float16", "bfloat16", "int8", "int64", "bool")


@pytest.fixture(scope="module")
def reg():
    return make_registry()


def _infer(reg, name, shapes, dtypes, attrs):
    desc = reg.get(name)
    pad = [None] * (len(desc.inputs) - len(shapes))  # absent trailing optional ports
    return infer_outputs(
        desc,
        tuple(shapes) + tuple(pad),
        tuple(dtypes) + tuple(pad),
        desc.resolve_attrs(attrs, where="t"),
        stage="t",
    )


# -------------------------------------------------------------------------------------- reshape family


@pytest.mark.parametrize(
    ("shape", "target", "allowzero", "expected"),
    [
        ((2, 3, 4), [4, 6], False, (4, 6)),
        ((2, 3, 4), [0, -1], False, (2, 12)),  # 0 copies dimension 0
        ((2, 3, 4), [-1], False, (24,)),
        ((2, 3, 4), [2, 0, 2, -1], False, (2, 3, 2, 2)),
        ((0, 3), [3, 0], True, (3, 0)),  # allowzero: a literal empty dimension
        ((0, 3), [0, 3], False, (0, 3)),
        ((1,), [], False, ()),  # to a scalar
    ],
)
@pytest.mark.parametrize("dtype", DATA_TYPES)
def test_reshape_shapes_and_order(reg, device, shape, target, allowzero, expected, dtype):
    x = rand(np.random.default_rng(1), shape, dtype)
    (y,) = run_op(reg, "reshape", [x], {"shape": target, "allowzero": allowzero}, device=device)
    assert y.shape == expected and y.dtype == x.dtype
    assert np.array_equal(y.ravel(), x.ravel()), "reshape keeps the row-major element order"


@pytest.mark.parametrize(
    ("shape", "target", "allowzero", "error"),
    [
        ((2, 3), [-1, -1], False, InvalidArgumentError),
        ((2, 3), [5, -1], False, ShapeMismatchError),
        ((2, 3), [7], False, ShapeMismatchError),
        ((2, 3), [2, -2], False, InvalidArgumentError),
        ((2, 3), [0, 0, 0], False, InvalidArgumentError),  # 0 past the input's rank
        ((0, 3), [0, -1], True, InvalidArgumentError),  # allowzero with 0 and -1
        ((0, 3), [0, -1], False, ShapeMismatchError),  # -1 next to a 0 dimension is ambiguous
    ],
)
def test_reshape_errors_at_load(reg, shape, target, allowzero, error):
    with pytest.raises(error, match="reshape"):
        _infer(reg, "reshape", [shape], ["float32"], {"shape": target, "allowzero": allowzero})


def test_reshape_keeps_symbols_and_derives_the_rest(reg):
    (shape,), _ = _infer(reg, "reshape", [("B", 3, 4)], ["float32"], {"shape": [0, -1]})
    assert shape == ("B", 12)
    (shape,), _ = _infer(reg, "reshape", [("B", 3, 4)], ["float32"], {"shape": [-1, 4]})
    assert shape[1] == 4 and isinstance(shape[0], str) and "(" in shape[0], "a derived symbol, not a user one"


@pytest.mark.parametrize(
    ("shape", "axis", "expected"),
    [
        ((2, 3, 4), 1, (2, 12)),
        ((2, 3, 4), 0, (1, 24)),
        ((2, 3, 4), 3, (24, 1)),
        ((2, 3, 4), -1, (6, 4)),
        ((2, 0, 4), 2, (0, 4)),
    ],
)
def test_flatten(reg, device, shape, axis, expected):
    x = rand(np.random.default_rng(2), shape, "float16")
    (y,) = run_op(reg, "flatten", [x], {"axis": axis}, device=device)
    assert y.shape == expected and np.array_equal(y.ravel(), x.ravel())


def test_flatten_axis_out_of_range(reg):
    with pytest.raises(InvalidArgumentError, match=r"flatten: attribute 'axis' must be in \[-3, 3\]"):
        _infer(reg, "flatten", [(2, 3, 4)], ["float32"], {"axis": 4})


@pytest.mark.parametrize(
    ("shape", "axes", "expected"),
    [
        ((1, 3, 1, 4), [], (3, 4)),
        ((1, 3, 1, 4), [0], (3, 1, 4)),
        ((1, 3, 1, 4), [-2, 0], (3, 4)),
        ((1,), [], ()),
    ],
)
def test_squeeze(reg, device, shape, axes, expected):
    x = rand(np.random.default_rng(3), shape, "int8")
    (y,) = run_op(reg, "squeeze", [x], {"axes": axes}, device=device)
    assert y.shape == expected and np.array_equal(y.ravel(), x.ravel())


def test_squeeze_refuses_an_axis_that_is_not_1(reg):
    with pytest.raises(ShapeMismatchError, match="axis 1 of input 'x' \\[1, 3\\] has size 3"):
        _infer(reg, "squeeze", [(1, 3)], ["float32"], {"axes": [1]})
    with pytest.raises(InvalidArgumentError, match="names an axis twice"):
        _infer(reg, "squeeze", [(1, 3, 1)], ["float32"], {"axes": [2, -1]})


@pytest.mark.parametrize(
    ("shape", "axes", "expected"),
    [
        ((3, 4), [0], (1, 3, 4)),
        ((3, 4), [-1], (3, 4, 1)),
        ((3, 4), [0, 3], (1, 3, 4, 1)),
        ((3, 4), [1, -2], (3, 1, 1, 4)),
        ((), [0], (1,)),
    ],
)
def test_unsqueeze(reg, device, shape, axes, expected):
    x = rand(np.random.default_rng(4), shape, "bfloat16")
    (y,) = run_op(reg, "unsqueeze", [x], {"axes": axes}, device=device)
    assert y.shape == expected and np.array_equal(y.ravel(), x.ravel())


# -------------------------------------------------------------------------------------- concat / split


@pytest.mark.parametrize("dtype", DATA_TYPES)
@pytest.mark.parametrize(
    ("shapes", "axis"),
    [
        ([(2, 3), (2, 5)], 1),
        ([(2, 3), (4, 3), (1, 3)], 0),
        ([(2, 3, 4)] * MAX_PARTS, -2),
        ([(2, 0), (2, 3)], -1),
        ([(5,)], 0),
    ],
)
def test_concat_against_a_loop(reg, device, dtype, shapes, axis):
    rng = np.random.default_rng(5)
    parts = [rand(rng, s, dtype) for s in shapes]
    (y,) = run_op(reg, "concat", parts, {"axis": axis}, device=device)
    ax = axis % len(shapes[0])
    offset = 0
    for p in parts:  # every part lands at its offset along the axis
        n = p.shape[ax]
        index = (slice(None),) * ax + (slice(offset, offset + n),)
        assert np.array_equal(y[index], p)
        offset += n
    assert y.shape[ax] == offset


def test_concat_errors(reg):
    with pytest.raises(ShapeMismatchError, match="input 'x1' \\[3, 3\\] has size 3 on axis 0"):
        _infer(reg, "concat", [(2, 3), (3, 3)], ["float32"] * 2, {"axis": 1})
    with pytest.raises(ShapeMismatchError, match="has 3 dimensions"):
        _infer(reg, "concat", [(2, 3), (2, 3, 1)], ["float32"] * 2, {"axis": 0})
    with pytest.raises(DTypeMismatchError):
        _infer(reg, "concat", [(2, 3), (2, 3)], ["float32", "float16"], {"axis": 0})


@pytest.mark.parametrize(
    ("dim", "attrs", "sizes"),
    [
        (6, {"split": [1, 2, 3]}, (1, 2, 3)),
        (6, {"num_outputs": 3}, (2, 2, 2)),
        (7, {"num_outputs": 3}, (3, 3, 1)),  # ONNX 18: ceil-sized parts, a smaller last one
        (5, {"split": [0, 5]}, (0, 5)),
    ],
)
@pytest.mark.parametrize("axis", [0, -1])
def test_split(reg, device, dim, attrs, sizes, axis):
    shape = (dim, 3) if axis == 0 else (3, dim)
    x = rand(np.random.default_rng(6), shape, "float32")
    outs = run_op(reg, "split", [x], {"axis": axis, **attrs}, device=device)
    assert len(outs) == MAX_PARTS
    start = 0
    for k, out in enumerate(outs):
        n = sizes[k] if k < len(sizes) else 0  # ports past the part count hold empty tensors
        expect = x[start : start + n] if axis == 0 else x[:, start : start + n]
        assert out.shape == expect.shape and np.array_equal(out, expect)
        start += n


@pytest.mark.parametrize(
    ("attrs", "error", "match"),
    [
        ({}, InvalidArgumentError, "exactly one of"),
        ({"split": [3, 3], "num_outputs": 2}, InvalidArgumentError, "exactly one of"),
        ({"split": [2, 3]}, ShapeMismatchError, "add up to 5, but the axis has size 6"),
        ({"num_outputs": MAX_PARTS + 1}, InvalidArgumentError, f"between 1 and {MAX_PARTS}"),
        ({"split": [7, -1]}, InvalidArgumentError, ">= 0"),
    ],
)
def test_split_errors(reg, attrs, error, match):
    with pytest.raises(error, match=match):
        _infer(reg, "split", [(6, 2)], ["float32"], attrs)


# ---------------------------------------------------------------------------------------------- slice


def _slice_ref(x, starts, ends, axes, steps):
    """Index lists walked one step at a time with ONNX's clamping (no Python slice objects)."""
    index = [list(range(d)) for d in x.shape]
    for a, s, e, step in zip(axes, starts, ends, steps, strict=True):
        d = x.shape[a]
        s, e = (s + d if s < 0 else s), (e + d if e < 0 else e)
        s = min(max(s, 0), d) if step > 0 else min(max(s, 0), d - 1)
        e = min(max(e, 0), d) if step > 0 else min(max(e, -1), d - 1)
        picked, i = [], s
        while (step > 0 and i < e) or (step < 0 and i > e):
            picked.append(i)
            i += step
        index[a] = picked
    return x[np.ix_(*index)] if x.ndim else x


SLICES = [
    ([1], [3], [0], [1]),
    ([0, 1], [2, 4], [], []),
    ([-3], [-1], [1], [1]),
    ([0], [1000], [-1], [2]),
    ([-1], [-1000], [2], [-1]),  # the whole axis reversed
    ([2], [0], [1], [-1]),
    ([3], [1], [0], [1]),  # backwards range; an empty forward one
    ([10**18], [-(10**18)], [2], [-2]),  # INT64-style clamping
    ([0, -1], [2, 0], [0, 2], [1, -2]),
]


@pytest.mark.parametrize(("starts", "ends", "axes", "steps"), SLICES)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int64"])
def test_slice_against_a_loop(reg, device, starts, ends, axes, steps, dtype):
    x = rand(np.random.default_rng(7), (4, 5, 6), dtype)
    attrs = {"starts": starts, "ends": ends, "axes": axes, "steps": steps}
    (y,) = run_op(reg, "slice", [x], attrs, device=device)
    ref = _slice_ref(x, starts, ends, axes or list(range(len(starts))), steps or [1] * len(starts))
    assert y.shape == ref.shape and np.array_equal(y, ref)


@pytest.mark.parametrize(
    ("attrs", "match"),
    [
        ({"starts": [0], "ends": [1], "steps": [0]}, "cannot hold 0"),
        ({"starts": [0, 1], "ends": [1]}, "one entry per sliced axis"),
        ({"starts": [0], "ends": [1], "axes": [3]}, r"must be in \[-2, 2\)"),
        ({"starts": [0, 0], "ends": [1, 1], "axes": [0, -2]}, "names an axis twice"),
    ],
)
def test_slice_errors(reg, attrs, match):
    with pytest.raises(InvalidArgumentError, match=match):
        _infer(reg, "slice", [(4, 5)], ["float32"], attrs)


# ------------------------------------------------------------------------------------- gather / where


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int8"])
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
@pytest.mark.parametrize(
    ("shape", "index_shape", "axis"),
    [
        ((10, 4), (3, 5), 0),  # embedding lookup
        ((3, 7, 2), (4,), 1),
        ((3, 7, 2), (), -2),
        ((3, 7, 2), (2, 0), -1),
    ],
)
def test_gather_against_a_loop(reg, device, dtype, index_dtype, shape, index_shape, axis):
    rng = np.random.default_rng(8)
    data = rand(rng, shape, dtype)
    n = shape[axis]
    indices = rng.integers(-n, n, size=index_shape).astype(index_dtype)  # negatives included
    (y,) = run_op(reg, "gather", [data, indices], {"axis": axis}, device=device)
    ax = axis % len(shape)
    assert y.shape == shape[:ax] + index_shape + shape[ax + 1 :]
    moved = np.moveaxis(data, ax, 0)
    for pos in itertools.product(*(range(d) for d in index_shape)):
        i = int(indices[pos]) if pos else int(indices)
        got = y[(slice(None),) * ax + pos] if pos else y[(slice(None),) * ax]
        assert np.array_equal(got, moved[i % n]), (pos, i)


@pytest.mark.parametrize("check", [False, True])
def test_gather_out_of_range_index_is_an_error_naming_the_stage(reg, check):
    """On the CPU always (check_indices or not); CUDA writes zeros unless check_indices (below)."""
    data, indices = np.zeros((4, 2), np.float32), np.array([1, 4], np.int64)
    with pytest.raises(InvalidArgumentError, match="stage 'g': gather index 4 is out of range for axis 0"):
        run_op(reg, "gather", [data, indices], {"check_indices": check}, stage="g")
    with pytest.raises(DTypeMismatchError):
        _infer(reg, "gather", [(4, 2), (3,)], ["float32", "float32"], {})


@pytest.mark.gpu
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_gather_check_indices_raises_on_cuda_as_on_the_cpu(reg, index_dtype):
    # Wrong if the device word missed an index, reported a later one than the first, or was not reset
    # between runs (the in-range run after a failing one must pass and be correct).
    data = rand(np.random.default_rng(14), (6, 3), "float16")
    bad = np.array([2, -1, 9, 0, -7] * 50, index_dtype)  # 9 (position 2) is the first out of range
    for _ in range(2):
        with pytest.raises(InvalidArgumentError, match="stage 'g': gather index 9 is out of range .* size 6"):
            run_op(reg, "gather", [data, bad], {"check_indices": True}, stage="g", device="cuda")
    good = np.array([[5, -6], [0, 3]], index_dtype)
    (y,) = run_op(reg, "gather", [data, good], {"check_indices": True}, device="cuda")
    np.testing.assert_array_equal(y, data[good % 6])


@pytest.mark.gpu
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_gather_out_of_range_index_gives_zeros_on_cuda(reg, index_dtype):
    """A device index cannot be checked without a round trip: the CUDA kernel never reads out of bounds
    and writes zeros for the entries of an out-of-range index (its documented difference from the CPU)."""
    data = rand(np.random.default_rng(13), (4, 3), "float32")
    indices = np.array([1, 4, -5, 10**6, -1], index_dtype)
    (y,) = run_op(reg, "gather", [data, indices], device="cuda")
    np.testing.assert_array_equal(y, np.stack([data[1], np.zeros(3), np.zeros(3), np.zeros(3), data[3]]))


@pytest.mark.parametrize(
    ("c", "x", "y"),
    [
        ((2, 3), (2, 3), (2, 3)),
        ((3,), (2, 3), (1,)),
        ((2, 1), (1, 3), (2, 3)),
        ((), (4,), (2, 1)),
        ((0, 3), (1, 3), (3,)),
    ],
)
@pytest.mark.parametrize("dtype", ["float16", "int64", "bfloat16"])
def test_where_broadcasts(reg, device, c, x, y, dtype):
    rng = np.random.default_rng(9)
    cond, a, b = rand(rng, c, "bool"), rand(rng, x, dtype), rand(rng, y, dtype)
    (z,) = run_op(reg, "where", [cond, a, b], device=device)
    shape = np.broadcast_shapes(c, x, y)
    assert z.shape == shape
    for pos in itertools.product(*(range(d) for d in shape)):

        def at(arr, pos=pos):
            return arr[
                tuple(p if d != 1 else 0 for p, d in zip(pos[len(pos) - arr.ndim :], arr.shape, strict=True))
            ]

        assert z[pos] == (at(a) if at(cond) else at(b)), pos


def test_where_errors(reg):
    with pytest.raises(ShapeMismatchError, match="do not broadcast"):
        _infer(reg, "where", [(2,), (3,), (3,)], ["bool", "float32", "float32"], {})
    with pytest.raises(DTypeMismatchError):
        _infer(reg, "where", [(3,), (3,), (3,)], ["float32", "float32", "float32"], {})


@pytest.mark.parametrize(
    ("shape", "target", "expected"),
    [
        ((3, 1), [2, 1, 6], (2, 3, 6)),
        ((3, 1), [3, 4], (3, 4)),
        ((1,), [0], (0,)),
        ((2, 3), [1, 1], (2, 3)),
    ],
)
def test_expand(reg, device, shape, target, expected):
    x = rand(np.random.default_rng(10), shape, "float16")
    (y,) = run_op(reg, "expand", [x], {"shape": target}, device=device)
    assert y.shape == expected
    assert np.array_equal(y, np.broadcast_to(x, expected))


def test_expand_errors(reg):
    with pytest.raises(ShapeMismatchError, match="expand"):
        _infer(reg, "expand", [(2, 3)], ["float32"], {"shape": [4, 3]})


# ------------------------------------------------------------------------------------- ONNX as oracle

ONNX_CASES = [
    ("reshape", "Reshape", (4, 3, 2), {"shape": [2, 0, -1]}, lambda a: [np.array(a["shape"], np.int64)], {}),
    ("flatten", "Flatten", (2, 3, 4), {"axis": -2}, None, {"axis": -2}),
    ("squeeze", "Squeeze", (1, 3, 1), {"axes": [-1]}, lambda a: [np.array(a["axes"], np.int64)], {}),
    ("unsqueeze", "Unsqueeze", (3, 2), {"axes": [0, -1]}, lambda a: [np.array(a["axes"], np.int64)], {}),
    (
        "slice",
        "Slice",
        (5, 6),
        {"starts": [-1, 1], "ends": [-100, 100], "axes": [0, 1], "steps": [-2, 3]},
        lambda a: [np.array(a[k], np.int64) for k in ("starts", "ends", "axes", "steps")],
        {},
    ),
    ("expand", "Expand", (3, 1), {"shape": [2, 1, 4]}, lambda a: [np.array(a["shape"], np.int64)], {}),
]


@pytest.mark.parametrize(("name", "onnx_op", "shape", "attrs", "extra", "onnx_attrs"), ONNX_CASES)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_shape_ops_match_onnx(reg, device, name, onnx_op, shape, attrs, extra, onnx_attrs, dtype):
    pytest.importorskip("onnx")
    from .onnx_oracle import run_onnx

    x = rand(np.random.default_rng(11), shape, dtype)
    (y,) = run_op(reg, name, [x], attrs, device=device)
    (ref,) = run_onnx(onnx_op, [x] + (extra(attrs) if extra else []), onnx_attrs)
    assert y.shape == ref.shape and np.array_equal(y.astype(np.float32), ref.astype(np.float32))


def test_concat_split_gather_where_match_onnx(reg, device):
    pytest.importorskip("onnx")
    from .onnx_oracle import run_onnx

    rng = np.random.default_rng(12)
    a, b = rand(rng, (2, 3), "float32"), rand(rng, (2, 5), "float32")
    assert np.array_equal(
        run_op(reg, "concat", [a, b], {"axis": -1}, device=device)[0],
        run_onnx("Concat", [a, b], {"axis": -1})[0],
    )
    x = rand(rng, (7, 2), "float32")
    ours = run_op(reg, "split", [x], {"num_outputs": 3}, device=device)[:3]
    refs = run_onnx("Split", [x], {"axis": 0, "num_outputs": 3}, n_outputs=3)
    for got, ref in zip(ours, refs, strict=True):
        assert np.array_equal(got, ref)
    data, idx = rand(rng, (5, 4), "float32"), np.array([[-1, 0], [4, 2]], np.int64)
    assert np.array_equal(
        run_op(reg, "gather", [data, idx], {"axis": 0}, device=device)[0],
        run_onnx("Gather", [data, idx], {"axis": 0})[0],
    )
    cond, p, q = rand(rng, (2, 1), "bool"), rand(rng, (3,), "float32"), rand(rng, (2, 3), "float32")
    assert np.array_equal(
        run_op(reg, "where", [cond, p, q], device=device)[0], run_onnx("Where", [cond, p, q])[0]
    )


# -------------------------------------------------------------------------------------------- pipeline


def test_pipeline_of_shape_ops_plans_and_runs():
    config = {
        "name": "shapes",
        "inputs": {
            "tokens": {"shape": [2, 5], "dtype": "int64"},
            "table": {"shape": [11, 8], "dtype": "float32"},
        },
        "outputs": ["out", "rest"],
        "pipeline": [
            {"name": "gather", "inputs": ["table", "tokens"], "outputs": ["emb"]},  # [2, 5, 8]
            {"name": "reshape", "inputs": ["emb"], "outputs": ["flat"], "attrs": {"shape": [0, -1]}},
            {
                "name": "slice",
                "inputs": ["flat"],
                "outputs": ["head"],
                "attrs": {"starts": [-1], "ends": [-1000], "axes": [1], "steps": [-4]},
            },  # [2, 10]
            {
                "name": "split",
                "inputs": ["head"],
                "outputs": ["h0", "rest"],
                "attrs": {"axis": 1, "split": [4, 6]},
            },
            {"name": "unsqueeze", "inputs": ["h0"], "outputs": ["h1"], "attrs": {"axes": [0]}},
            {"name": "concat", "id": "cat", "inputs": ["h1", "h1"], "outputs": ["out"], "attrs": {"axis": 0}},
        ],
    }
    rng = np.random.default_rng(13)
    tokens = rng.integers(-11, 11, size=(2, 5)).astype(np.int64)
    table = rng.standard_normal((11, 8)).astype(np.float32)
    with pl.load(config, device="cpu") as pipe:
        plan = pipe.memory_plan
        assert plan.peak_bytes > 0 and plan.peak_bytes <= plan.naive_bytes
        outs = pipe.run(tokens=tokens, table=table)
        flat = table[tokens % 11].reshape(2, 40)[:, ::-4]
        assert np.array_equal(np.asarray(outs["out"]), np.stack([flat[:, :4]] * 2))
        assert np.array_equal(np.asarray(outs["rest"]), flat[:, 4:])


def test_pipeline_shape_error_is_reported_at_load_with_its_stage():
    config = {
        "inputs": {"x": {"shape": [2, 6], "dtype": "float32"}},
        "pipeline": [
            {"name": "reshape", "id": "r", "inputs": ["x"], "outputs": ["y"], "attrs": {"shape": [5, -1]}}
        ],
    }
    with pytest.raises(ShapeMismatchError) as info:
        pl.load(config, device="cpu")
    (problem,) = info.value.errors  # every problem found at load, with its JSON Pointer
    assert problem.code.name == "PIPELINK_ERR_SHAPE_MISMATCH" and "stage 'r'" in problem.message
    assert problem.path == "/pipeline/0/inputs/0"


# -------------------------------------------------------------------------------------- property tests

_dims = st.lists(st.integers(0, 5), min_size=1, max_size=4)
_index = st.integers(-12, 12) | st.sampled_from([2**62, -(2**62)])


@settings(max_examples=150, deadline=None)
@given(shape=_dims, data=st.data())
def test_slice_equals_python_slicing(reg, shape, data):
    # ONNX's clamping equals Python's slice semantics but for one corner (tested below).
    axes = data.draw(
        st.lists(
            st.integers(-len(shape), len(shape) - 1), max_size=len(shape), unique_by=lambda a: a % len(shape)
        )
    )
    starts = data.draw(st.lists(_index, min_size=len(axes), max_size=len(axes)))
    ends = data.draw(st.lists(_index, min_size=len(axes), max_size=len(axes)))
    steps = data.draw(st.lists(st.integers(-3, 3).filter(bool), min_size=len(axes), max_size=len(axes)))
    x = np.arange(math.prod(shape), dtype=np.int32).reshape(shape)
    if not axes:
        return
    (y,) = run_op(reg, "slice", [x], {"starts": starts, "ends": ends, "axes": axes, "steps": steps})
    index = [slice(None)] * len(shape)
    for a, s, e, k in zip(axes, starts, ends, steps, strict=True):
        if k < 0 and s + shape[a % len(shape)] < 0:
            s = 0  # the spec clamps such a start to 0 where Python's slice is empty: see the test below
        index[a % len(shape)] = slice(s, e, k)
    assert np.array_equal(y, x[tuple(index)])


def test_slice_clamps_a_start_before_the_first_element_to_0_when_stepping_back(reg):
    # ONNX's spec (and onnxruntime) clamp start to [0, dim - 1] for a negative step, so x[-10:-20:-1] of
    # 3 elements is [x[0]]; onnx.reference uses Python slicing and gives [] here. PipeLink follows the spec.
    x = np.array([1.0, 2.0, 3.0], np.float32)
    (y,) = run_op(reg, "slice", [x], {"starts": [-10], "ends": [-20], "steps": [-1]})
    assert y.tolist() == [1.0]


@settings(max_examples=150, deadline=None)
@given(shape=_dims, data=st.data())
def test_reshape_matches_numpy_for_any_factorisation(reg, shape, data):
    total = math.prod(shape)
    target = list(data.draw(st.permutations(shape)))
    if target and total:
        target[data.draw(st.integers(0, len(target) - 1))] = -1  # NumPy infers the same dimension
    x = np.arange(total, dtype=np.int64).reshape(shape)
    (y,) = run_op(reg, "reshape", [x], {"shape": target, "allowzero": True})
    assert np.array_equal(y, x.reshape(target))


def test_a_stage_naming_more_split_parts_than_the_split_makes_is_refused_at_load():
    # Wrong if the extra name silently became an empty tensor (the descriptor has 8 part ports).
    doc = {
        "inputs": {"x": {"shape": [6, 4], "dtype": "float32"}},
        "pipeline": [
            {
                "name": "split",
                "id": "s",
                "inputs": ["x"],
                "outputs": ["a", "b", "c"],
                "attrs": {"axis": 0, "num_outputs": 2},
            }
        ],
    }
    with pytest.raises(pl.ConfigError) as info:
        pl.load(doc, device="cpu")
    (problem,) = info.value.errors
    assert problem.path == "/pipeline/0/outputs/2" and "makes 2 output(s)" in problem.message
    doc["pipeline"][0]["attrs"] = {"axis": 0, "split": [1, 2, 3]}
    doc["pipeline"][0]["outputs"] = ["a", "b", "c"]
    with pl.load(doc, device="cpu") as pipe:
        outs = pipe.run(x=np.arange(24, dtype=np.float32).reshape(6, 4))
    assert [outs[n].shape for n in "abc"] == [(1, 4), (2, 4), (3, 4)]


# -- trilu --------------------------------------------------------------------------------------------
def _trilu_ref(x: np.ndarray, k: int, upper: bool) -> np.ndarray:
    """Element by element: (i, j) of each matrix is kept when j - i >= k (upper) or <= k (lower)."""
    out = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        i, j = idx[-2], idx[-1]
        if (j - i >= k) if upper else (j - i <= k):
            out[idx] = x[idx]
    return out


@pytest.mark.parametrize("upper", [True, False])
@pytest.mark.parametrize(
    "dtype", DATA_TYPES + ("float64", "int32", "uint8", "int16", "uint16", "uint32", "uint64")
)
@pytest.mark.parametrize(
    ("shape", "k"),
    [
        ((5, 5), 0),
        ((3, 4, 6), 1),  # a stack of wide matrices
        ((2, 6, 4), -2),  # tall ones, below the diagonal
        ((2, 1, 3, 7), 3),
        ((4, 3), 9),  # beyond every column: nothing (upper) or everything (lower)
        ((4, 3), -9),
        ((3, 3), 2**62),  # a huge k is clamped, not overflowed
        ((2, 0, 3), 0),  # empty
        ((1, 1), 0),
    ],
)
def test_trilu_every_dtype(reg, device, rng, dtype, shape, k, upper):
    x = rand(rng, shape, dtype)
    if dtype != "bool":
        x[x == 0] = 1  # a kept element is told from a zeroed one
    else:
        x[...] = True
    (y,) = run_op(reg, "trilu", [x], {"k": k, "upper": upper}, device=device)
    assert y.dtype == x.dtype and y.shape == x.shape
    np.testing.assert_array_equal(y, _trilu_ref(x, k, upper))


def test_trilu_needs_matrices(reg):
    with pytest.raises(ShapeMismatchError, match="at least 2 dims"):
        _infer(reg, "trilu", [(5,)], ["float32"], {})


@pytest.mark.parametrize("k", [None, 0, 2, -1])
@pytest.mark.parametrize("upper", [0, 1])
def test_trilu_onnx_matches_the_reference(device, rng, k, upper):
    """One-node Trilu (k absent or a constant input) against onnx's ReferenceEvaluator."""
    pytest.importorskip("onnx")
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    from .onnx_models import make_model

    x = rand(rng, (2, 5, 7), "float32")
    inputs = ["x"] if k is None else ["x", "k"]
    node = helper.make_node("Trilu", inputs, ["y"], name="the_trilu", upper=upper)
    model = make_model([node], [("x", [2, 5, 7])], [("y", [2, 5, 7])], {}, "trilu", opset=14)
    if k is not None:
        model.graph.initializer.append(numpy_helper.from_array(np.array(k, np.int64), "k"))
    (ref,) = ReferenceEvaluator(model).run(None, {"x": x})
    with pl.from_onnx(model, device=device) as pipe:
        np.testing.assert_array_equal(pipe.run(x=x)["y"].numpy(), ref)


# -- scatter_nd ---------------------------------------------------------------------------------------
def _scatter_nd_ref(data, indices, updates, reduction):
    """Row by row in Python: each row of k indices (negatives from the end) names a data slice, which the
    update replaces or is combined with (in float64 for floats)."""
    k = indices.shape[-1]
    is_float = data.dtype.kind == "f" or data.dtype.name == "bfloat16"
    out = data.astype(np.float64) if is_float else data.copy()
    rows = indices.reshape(-1, k)
    parts = updates.reshape((len(rows),) + data.shape[k:])
    combine = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}
    for row, part in zip(rows, parts, strict=True):
        at = tuple(int(v) + (data.shape[j] if v < 0 else 0) for j, v in enumerate(row))
        value = part.astype(np.float64) if is_float else part
        out[at] = value if reduction == "none" else combine[reduction](out[at], value)
    return out.astype(data.dtype)


SCATTER_CASES = [
    ((4, 5, 6), (3, 1)),  # whole [5, 6] slices
    ((4, 5, 6), (2, 3, 2)),  # rows of [6]
    ((4, 5, 6), (7, 3)),  # single elements
    ((8,), (4, 1)),
    ((2, 3), (0, 2)),  # no updates: y is data
]


@pytest.mark.parametrize("itype", ["int64", "int32"])
@pytest.mark.parametrize("dtype", DATA_TYPES)
@pytest.mark.parametrize(("shape", "ishape"), SCATTER_CASES)
def test_scatter_nd_replaces(reg, device, rng, dtype, itype, shape, ishape):
    """Distinct rows (negative indices among them): every update lands, the rest of data is kept."""
    k = ishape[-1]
    rows = int(np.prod(ishape[:-1]))
    flat = rng.choice(int(np.prod(shape[:k])), size=rows, replace=False)
    idx = np.stack(np.unravel_index(flat, shape[:k]), axis=-1) if rows else np.zeros((0, k), np.int64)
    idx = np.where(rng.random(idx.shape) < 0.3, idx - np.array(shape[:k]), idx).astype(itype).reshape(ishape)
    data = rand(rng, shape, dtype)
    updates = rand(rng, ishape[:-1] + shape[k:], dtype)
    (y,) = run_op(reg, "scatter_nd", [data, idx, updates], device=device)
    np.testing.assert_array_equal(y, _scatter_nd_ref(data, idx, updates, "none"))


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "int64"])
def test_scatter_nd_combines_duplicates(reg, device, rng, dtype, reduction):
    """Repeated rows are combined in order (add, mul, max, min); on CUDA the stage runs its reference on
    staged copies (reported), the result the same."""
    data = rand(rng, (5, 4), dtype)
    idx = np.array([[1], [3], [1], [1], [-1]], np.int64)
    updates = rand(rng, (5, 4), dtype)
    (y,) = run_op(
        reg, "scatter_nd", [data, idx, updates], {"reduction": reduction}, device=device, staged_ok=True
    )
    want = _scatter_nd_ref(data, idx, updates, reduction)
    if dtype.startswith("float"):  # the reference combines in float64, the operator in float32
        rtol = 2e-3 if dtype == "float16" else 1e-6
        np.testing.assert_allclose(y.astype(np.float64), want.astype(np.float64), rtol=rtol)
    else:
        np.testing.assert_array_equal(y, want)


def test_scatter_nd_refusals(reg):
    """updates of the wrong shape, k above data's rank and an unknown reduction are load errors; an
    out-of-range index is a run error naming the row (the CPU reference)."""
    with pytest.raises(ShapeMismatchError, match=r"indices\[:-1\] \+ data\[k:\]"):
        _infer(reg, "scatter_nd", [(4, 5), (3, 1), (3, 4)], ["float32", "int64", "float32"], {})
    with pytest.raises(ShapeMismatchError, match="k <= rank"):
        _infer(reg, "scatter_nd", [(4, 5), (3, 3), (3,)], ["float32", "int64", "float32"], {})
    with pytest.raises(InvalidArgumentError, match="reduction"):
        reg.get("scatter_nd").resolve_attrs({"reduction": "sum"}, where="s")
    data = np.zeros((4, 5), np.float32)
    with pytest.raises(InvalidArgumentError, match=r"scatter_nd index 4 \(row 1 .*valid: -4 .. 3") as e:
        run_op(reg, "scatter_nd", [data, np.array([[0], [4]], np.int64), np.ones((2, 5), np.float32)])
    assert e.value.code == pl.ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT


@pytest.mark.parametrize("reduction", ["none", "add"])
def test_scatter_nd_onnx_matches_the_reference(device, rng, reduction):
    """One-node ScatterND (a BART export's shift of the decoder ids) against onnx's ReferenceEvaluator."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    data = rand(rng, (2, 6, 3), "float32")
    idx = np.array([[[0, 1], [1, 5]], [[1, 0], [0, 1]]], np.int64) if reduction == "add" else None
    if idx is None:
        idx = np.array([[[0, 1], [1, 5]], [[1, 0], [0, 2]]], np.int64)
    updates = rand(rng, (2, 2, 3), "float32")
    node = helper.make_node("ScatterND", ["data", "idx", "upd"], ["y"], reduction=reduction)
    graph = helper.make_graph(
        [node],
        "scatter",
        [
            helper.make_tensor_value_info("data", TensorProto.FLOAT, data.shape),
            helper.make_tensor_value_info("upd", TensorProto.FLOAT, updates.shape),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, data.shape)],
        [numpy_helper.from_array(idx, "idx")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    (ref,) = ReferenceEvaluator(model).run(None, {"data": data, "upd": updates})
    with pl.from_onnx(model, device=device) as pipe:
        got = pipe.run(data=data, upd=updates)["y"].numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-6)


def test_trilu_onnx_k_must_be_a_constant_scalar():
    """A computed k, or a k of two elements, is refused at import with the node named."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    from .onnx_models import make_model

    node = helper.make_node("Trilu", ["x", "k"], ["y"], name="moving_diagonal")
    model = make_model([node], [("x", [3, 3])], [("y", None)], {}, "trilu")
    model.graph.input.append(helper.make_tensor_value_info("k", TensorProto.INT64, []))
    with pytest.raises(pl.PipeLinkError, match=r"Trilu node 'moving_diagonal'.*must be a constant") as e:
        pl.from_onnx(model)
    assert e.value.code == pl.ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT
    model = make_model([node], [("x", [3, 3])], [("y", None)], {}, "trilu")
    model.graph.initializer.append(numpy_helper.from_array(np.array([1, 2], np.int64), "k"))
    with pytest.raises(
        pl.PipeLinkError, match=r"Trilu node 'moving_diagonal'.*k \(input 1\) must be a scalar"
    ):
        pl.from_onnx(model)
