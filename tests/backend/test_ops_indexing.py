"""Indexing operators (gather_nd, scatter_elements, one_hot, eye_like) against loop references written
here and ONNX's reference evaluator, on every device; the index contract (negatives wrap, out of range: an
error on the CPU, zeros or nothing written on CUDA, check_indices); refusals at load and at import; the
ONNX converters GatherND, ScatterElements, OneHot, EyeLike and CastLike; the fold of ScatterElements.
"""

from __future__ import annotations

import importlib
import itertools

import numpy as np
import pytest

import pipelink as pl
from pipelink.descriptor import infer_outputs
from pipelink.errors import InvalidArgumentError, ShapeMismatchError

from .ops_helpers import make_registry, rand, run_op

DATA_TYPES = ("float32", "float16", "bfloat16", "int8", "int64", "bool")
CODE = pl.ErrorCode


@pytest.fixture(scope="module")
def reg():
    return make_registry()


def _infer(reg, name, shapes, dtypes, attrs):
    desc = reg.get(name)
    return infer_outputs(desc, tuple(shapes), tuple(dtypes), desc.resolve_attrs(attrs, where="t"), stage="t")


def _tuples(rng, dims, lead, dtype):
    """Index tuples over ``dims`` of shape ``lead + (len(dims),)``, about a third of them negative."""
    cols = [rng.integers(0, d, size=lead) for d in dims]
    idx = np.stack(cols, axis=-1)
    return np.where(rng.random(idx.shape) < 0.35, idx - np.array(dims), idx).astype(dtype)


# -- gather_nd ----------------------------------------------------------------------------------------
def _gather_nd_ref(data, indices, b):
    """Tuple by tuple in Python, batch by batch (the spec's definition)."""
    k = indices.shape[-1]
    out = np.empty(indices.shape[:-1] + data.shape[b + k :], data.dtype)
    for pos in itertools.product(*(range(d) for d in indices.shape[:-1])):
        at = tuple(int(v) + (data.shape[b + j] if v < 0 else 0) for j, v in enumerate(indices[pos]))
        out[pos] = data[pos[:b] + at]
    return out


GATHER_ND_CASES = [
    ((4, 5, 6), (3, 1), 0),  # whole [5, 6] slices
    ((4, 5, 6), (2, 3, 2), 0),  # rows of [6]
    ((4, 5, 6), (7, 3), 0),  # single elements
    ((3, 5, 6), (3, 4, 1), 1),  # a batch dim: rows of [6] from each batch's [5, 6]
    ((2, 3, 5, 4), (2, 3, 2), 2),  # two batch dims, single elements
    ((2, 3, 4), (2, 0, 1), 1),  # no tuples: an empty output
    ((9,), (), None),  # a 0-d tuple list: one element, rank 0
]


@pytest.mark.parametrize("itype", ["int64", "int32"])
@pytest.mark.parametrize("dtype", DATA_TYPES)
@pytest.mark.parametrize(("shape", "ishape", "b"), GATHER_ND_CASES)
def test_gather_nd_against_a_loop(reg, device, rng, dtype, itype, shape, ishape, b):
    if b is None:  # indices [1]: one tuple of one index, the output is a 0-d element
        ishape, b = (1,), 0
    data = rand(rng, shape, dtype)
    k = ishape[-1]
    indices = _tuples(rng, shape[b : b + k], ishape[:-1], itype)
    (y,) = run_op(reg, "gather_nd", [data, indices], {"batch_dims": b}, device=device)
    assert y.shape == ishape[:-1] + shape[b + k :]
    np.testing.assert_array_equal(y, _gather_nd_ref(data, indices, b))


@pytest.mark.parametrize("check", [False, True])
def test_gather_nd_out_of_range_index_is_an_error_naming_its_dim(reg, check):
    """On the CPU always; the dim named is the one the offending index addresses (its place in the tuple
    after the batch dims)."""
    data = np.zeros((2, 4, 3), np.float32)
    indices = np.array([[[0, 1]], [[3, 3]]], np.int64)  # 3 is out of range for dim 2 (size 3)
    with pytest.raises(
        InvalidArgumentError, match=r"stage 'g': gather_nd index 3 is out of range for axis 2 of size 3"
    ) as e:
        run_op(reg, "gather_nd", [data, indices], {"batch_dims": 1, "check_indices": check}, stage="g")
    assert e.value.code == CODE.PIPELINK_ERR_INVALID_ARGUMENT
    with pytest.raises(InvalidArgumentError, match=r"gather_nd index -5 .* axis 0 of size 2"):
        run_op(reg, "gather_nd", [data, np.array([[-5, 0]], np.int32)], stage="g")


@pytest.mark.gpu
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_gather_nd_check_indices_raises_on_cuda_as_on_the_cpu(reg, index_dtype):
    # Wrong if the device word missed an index, reported a later one than the first (or the dim of another
    # position of its tuple), or was not reset between runs.
    data = rand(np.random.default_rng(14), (6, 4, 3), "float16")
    bad = np.array([[2, -1], [1, 9], [0, 0], [-7, 0]] * 50, index_dtype)  # 9 (tuple 1, dim 1) comes first
    for _ in range(2):
        with pytest.raises(
            InvalidArgumentError, match=r"stage 'g': gather_nd index 9 is out of range for axis 1 of size 4"
        ):
            run_op(reg, "gather_nd", [data, bad], {"check_indices": True}, stage="g", device="cuda")
    good = np.array([[5, -4], [0, 3]], index_dtype)
    (y,) = run_op(reg, "gather_nd", [data, good], {"check_indices": True}, device="cuda")
    np.testing.assert_array_equal(y, _gather_nd_ref(data, good, 0))


@pytest.mark.gpu
def test_gather_nd_out_of_range_tuple_gives_zeros_on_cuda(reg):
    """gather's contract: no round trip without check_indices, so a bad tuple's slice becomes zeros."""
    data = rand(np.random.default_rng(13), (4, 3, 2), "float32")
    indices = np.array([[1, 2], [4, 0], [0, -4], [-1, -3]], np.int64)
    (y,) = run_op(reg, "gather_nd", [data, indices], device="cuda")
    np.testing.assert_array_equal(y, np.stack([data[1, 2], np.zeros(2), np.zeros(2), data[3, 0]]))


def test_gather_nd_refusals_at_load(reg):
    """batch_dims out of range, a tuple longer than data's rank after the batch dims (or empty), batch dims
    that differ and 0-d inputs: each named, with the rule, before anything runs."""
    f, i = "float32", "int64"
    with pytest.raises(InvalidArgumentError, match=r"'batch_dims' must be in \[0, 1\]") as e:
        _infer(reg, "gather_nd", [(4, 5), (4, 1)], [f, i], {"batch_dims": 2})
    assert e.value.code == CODE.PIPELINK_ERR_INVALID_ARGUMENT
    with pytest.raises(InvalidArgumentError, match="batch_dims"):
        _infer(reg, "gather_nd", [(4, 5), (4, 1)], [f, i], {"batch_dims": -1})
    with pytest.raises(ShapeMismatchError, match=r"in \[1, 2\]") as e:
        _infer(reg, "gather_nd", [(4, 5), (3, 3)], [f, i], {})
    assert e.value.code == CODE.PIPELINK_ERR_SHAPE_MISMATCH
    with pytest.raises(ShapeMismatchError, match=r"in \[1, 1\]"):
        _infer(reg, "gather_nd", [(4, 5), (4, 2)], [f, i], {"batch_dims": 1})
    with pytest.raises(ShapeMismatchError, match=r"in \[1, 2\]"):
        _infer(reg, "gather_nd", [(4, 5), (3, 0)], [f, i], {})
    with pytest.raises(ShapeMismatchError, match="batch dim 0 is 4 in 'data'"):
        _infer(reg, "gather_nd", [(4, 5), (3, 1)], [f, i], {"batch_dims": 1})
    with pytest.raises(ShapeMismatchError, match="need rank >= 1"):
        _infer(reg, "gather_nd", [(), (1,)], [f, i], {})
    # symbols: the batch dims unify, the rest follow
    (shape,), _ = _infer(reg, "gather_nd", [("B", 5, 6), ("B", "N", 1)], [f, i], {"batch_dims": 1})
    assert shape == ("B", "N", 6)


# -- scatter_elements -----------------------------------------------------------------------------------
def _scatter_elements_ref(data, indices, updates, axis, reduction):
    """Element by element in Python (the spec's loop), floats in float64."""
    is_float = data.dtype.kind == "f" or data.dtype.name == "bfloat16"
    out = data.astype(np.float64) if is_float else data.copy()
    combine = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}
    for pos in itertools.product(*(range(d) for d in indices.shape)):
        v = int(indices[pos])
        at = pos[:axis] + (v + (data.shape[axis] if v < 0 else 0),) + pos[axis + 1 :]
        value = np.float64(updates[pos]) if is_float else updates[pos]
        out[at] = value if reduction == "none" else combine[reduction](out[at], value)
    return out.astype(data.dtype)


SCATTER_CASES = [
    ((4, 5, 6), (3, 5, 6), 0),
    ((4, 5, 6), (2, 4, 3), 1),  # indices smaller than data off the axis too
    ((4, 5, 6), (4, 5, 6), -1),
    ((7,), (5,), 0),
    ((3, 4), (3, 0), 1),  # no updates: y is data
]


def _distinct(rng, shape, ishape, axis, dtype):
    """Indices that name every target once: a permutation's prefix per line along the axis."""
    axis = axis % len(shape)
    lines = np.moveaxis(np.zeros(ishape, np.int64), axis, -1)
    flat = lines.reshape(int(np.prod(lines.shape[:-1])), ishape[axis])
    for row in flat:
        row[...] = rng.permutation(shape[axis])[: ishape[axis]]
    idx = np.moveaxis(flat.reshape(lines.shape), -1, axis)
    return np.where(rng.random(ishape) < 0.35, idx - shape[axis], idx).astype(dtype)


@pytest.mark.parametrize("itype", ["int64", "int32"])
@pytest.mark.parametrize("dtype", DATA_TYPES)
@pytest.mark.parametrize(("shape", "ishape", "axis"), SCATTER_CASES)
def test_scatter_elements_replaces(reg, device, rng, dtype, itype, shape, ishape, axis):
    """Distinct targets (negative indices among them): every update lands, the rest of data is kept."""
    idx = _distinct(rng, shape, ishape, axis, itype)
    data, updates = rand(rng, shape, dtype), rand(rng, ishape, dtype)
    (y,) = run_op(reg, "scatter_elements", [data, idx, updates], {"axis": axis}, device=device)
    np.testing.assert_array_equal(y, _scatter_elements_ref(data, idx, updates, axis % len(shape), "none"))


def test_scatter_elements_duplicate_targets_keep_one_of_their_updates(reg, device, rng):
    """reduction none with duplicates: ONNX leaves the result undefined; PipeLink writes one of the
    updates aimed there (the CPU: the last in row-major order; CUDA: any one), never a mix or data."""
    data = rand(rng, (3, 6), "float32")
    idx = np.array([[1, 1, 4, 1], [0, 0, 0, 0], [5, -1, 2, 3]], np.int64)
    updates = rand(rng, (3, 4), "float32") + 10  # apart from data's values
    (y,) = run_op(reg, "scatter_elements", [data, idx, updates], {"axis": 1}, device=device)
    for r in range(3):
        for c in range(6):
            aimed = [updates[r, j] for j in range(4) if idx[r, j] % 6 == c]
            assert (y[r, c] in aimed) if aimed else y[r, c] == data[r, c], (r, c)
    if device == "cpu":
        np.testing.assert_array_equal(y, _scatter_elements_ref(data, idx, updates, 1, "none"))


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int32", "int64", "int8"])
def test_scatter_elements_combines_duplicates(reg, device, rng, dtype, reduction):
    """Repeated targets are combined in order; on CUDA the combining reductions run the reference on
    staged copies (declined as scatter_nd's are), the result the same."""
    data = rand(rng, (5, 4), dtype, low=0.5, high=1.5)
    idx = np.array([[1, 3, 1, 0], [1, -1, 1, 1], [4, 3, -4, 1]], np.int64)
    updates = rand(rng, (3, 4), dtype, low=0.5, high=1.5)
    attrs = {"reduction": reduction}
    (y,) = run_op(reg, "scatter_elements", [data, idx, updates], attrs, device=device, staged_ok=True)
    want = _scatter_elements_ref(data, idx, updates, 0, reduction)
    if dtype.startswith(("float", "bfloat")):  # the reference combines in float64, the operator in float32
        rtol = {"float32": 1e-6, "float16": 2e-3, "bfloat16": 1e-2}[dtype]
        np.testing.assert_allclose(y.astype(np.float64), want.astype(np.float64), rtol=rtol)
    else:
        np.testing.assert_array_equal(y, want)


def test_scatter_elements_cuda_declines_only_the_combining_reductions(reg):
    """The decline is the bind's (no device needed to see it): reduction none binds the GPU kernels."""
    from pipelink.descriptor import KernelContext, VariantDeclined
    from pipelink.ops.indexing.cuda import scatter_elements_bind

    ctx = KernelContext(
        "s",
        {"axis": 0, "reduction": "mul"},
        ((4, 5), (2, 5), (2, 5)),
        ("float32", "int64", "float32"),
        ((4, 5),),
        ("float32",),
        None,
    )
    with pytest.raises(VariantDeclined, match="reduction 'mul' combines updates on the host"):
        scatter_elements_bind(ctx)
    assert any(v.device == "cpu" and v.host_ok for v in reg.get("scatter_elements").variants)


def test_scatter_elements_refusals(reg):
    """updates of another shape, indices of another rank or larger than data off the axis, an axis out of
    range and an unknown reduction are load errors; an out-of-range index is a run error (the CPU)."""
    f, i = "float32", "int64"
    with pytest.raises(
        ShapeMismatchError, match=r"'updates' \[3, 4\] must have the shape of 'indices' \[3, 5\]"
    ) as e:
        _infer(reg, "scatter_elements", [(4, 5), (3, 5), (3, 4)], [f, i, f], {})
    assert e.value.code == CODE.PIPELINK_ERR_SHAPE_MISMATCH
    with pytest.raises(ShapeMismatchError, match="scatter_elements: input 'indices' .* same rank"):
        _infer(reg, "scatter_elements", [(4, 5), (3,), (3,)], [f, i, f], {})
    with pytest.raises(ShapeMismatchError, match="scatter_elements: .* larger than"):
        _infer(reg, "scatter_elements", [(4, 5), (3, 6), (3, 6)], [f, i, f], {})
    with pytest.raises(
        InvalidArgumentError, match=r"scatter_elements: attribute 'axis' must be in \[-2, 2\)"
    ):
        _infer(reg, "scatter_elements", [(4, 5), (3, 5), (3, 5)], [f, i, f], {"axis": 2})
    with pytest.raises(InvalidArgumentError, match="reduction"):
        reg.get("scatter_elements").resolve_attrs({"reduction": "sum"}, where="s")
    data, idx = np.zeros((4, 5), np.float32), np.array([[0, 1, 4, 0, 0]], np.int64)
    with pytest.raises(
        InvalidArgumentError,
        match=r"stage 's': scatter_elements index 4 is out of range for axis 0 of size 4",
    ) as e:
        run_op(reg, "scatter_elements", [data, idx, np.ones((1, 5), np.float32)], stage="s")
    assert e.value.code == CODE.PIPELINK_ERR_INVALID_ARGUMENT


@pytest.mark.gpu
def test_scatter_elements_out_of_range_index_writes_nothing_on_cuda(reg):
    data = rand(np.random.default_rng(3), (4, 3), "float32")
    idx = np.array([[1, 4, -5], [-1, 0, 10**6]], np.int64)
    updates = np.full((2, 3), 7.0, np.float32)
    (y,) = run_op(reg, "scatter_elements", [data, idx, updates], device="cuda")
    want = data.copy()
    want[1, 0], want[3, 0], want[0, 1] = 7.0, 7.0, 7.0
    np.testing.assert_array_equal(y, want)


# -- one_hot ------------------------------------------------------------------------------------------
def _one_hot_ref(indices, values, depth, axis):
    """Position by position: on where the one-hot coordinate equals the wrapped index."""
    axis = axis % (indices.ndim + 1)
    out_shape = indices.shape[:axis] + (depth,) + indices.shape[axis:]
    out = np.empty(out_shape, values.dtype)
    for pos in itertools.product(*(range(d) for d in out_shape)):
        v = int(indices[pos[:axis] + pos[axis + 1 :]])
        v = v + depth if v < 0 else v
        out[pos] = values[1] if v == pos[axis] else values[0]
    return out


@pytest.mark.parametrize("vtype", DATA_TYPES)
@pytest.mark.parametrize("itype", ["int64", "int32", "int8", "uint8", "int16", "uint16", "uint32", "uint64"])
@pytest.mark.parametrize(
    ("shape", "depth", "axis"),
    [((3, 4), 5, -1), ((3, 4), 5, 0), ((2, 3, 2), 7, 1), ((), 4, 0), ((4,), 1, -2)],
)
def test_one_hot_against_a_loop(reg, device, rng, vtype, itype, shape, depth, axis):
    """Indices in [-depth, depth) and beyond (all-off lines), negatives only where the dtype has them."""
    low = 0 if np.dtype(itype).kind == "u" else -depth - 2
    indices = rng.integers(low, depth + 2, size=shape).astype(itype)
    values = rand(rng, (2,), vtype)
    if vtype == "bool":
        values = np.array([False, True])
    (y,) = run_op(reg, "one_hot", [indices, values], {"depth": depth, "axis": axis}, device=device)
    np.testing.assert_array_equal(y, _one_hot_ref(indices, values, depth, axis))
    assert y.dtype == values.dtype


@pytest.mark.parametrize("itype", ["uint64", "uint32", "int64"])
def test_one_hot_indices_far_out_of_range_give_all_off_lines(reg, device, itype):
    """A uint64 index past 2**63 is out of range, not -1 wrapped to depth - 1 (a signed read of it would
    say so); the extremes of a signed type match nothing, while its -1 is depth - 1."""
    info = np.iinfo(itype)
    signed = info.min < 0
    indices = np.array([info.max, info.max // 2 + 1, 2, info.min, -1 if signed else 0], itype)
    (y,) = run_op(reg, "one_hot", [indices, np.array([0.0, 1.0], np.float32)], {"depth": 4}, device=device)
    hot = [None, None, 2, None if signed else 0, 3 if signed else 0]
    want = np.array([[float(k == h) for k in range(4)] for h in hot], np.float32)
    np.testing.assert_array_equal(y, want)


def test_one_hot_refusals(reg):
    with pytest.raises(InvalidArgumentError, match=r"'depth' must be >= 1 \(got 0\)") as e:
        _infer(reg, "one_hot", [(3,), (2,)], ["int64", "float32"], {"depth": 0})
    assert e.value.code == CODE.PIPELINK_ERR_INVALID_ARGUMENT
    with pytest.raises(
        ShapeMismatchError, match=r"'values' must be \[off_value, on_value\], shape \[2\] \(got \[3\]\)"
    ):
        _infer(reg, "one_hot", [(3,), (3,)], ["int64", "float32"], {"depth": 4})
    with pytest.raises(InvalidArgumentError, match=r"one_hot: attribute 'axis' must be in \[-3, 3\)"):
        _infer(reg, "one_hot", [(3, 2), (2,)], ["int64", "float32"], {"depth": 4, "axis": 3})
    with pytest.raises(InvalidArgumentError, match="needs attribute 'depth'"):
        reg.get("one_hot").resolve_attrs({}, where="o")
    with pytest.raises(pl.DTypeMismatchError):
        _infer(reg, "one_hot", [(3,), (2,)], ["float32", "float32"], {"depth": 4})


# -- eye_like -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["", *DATA_TYPES, "float64", "uint8", "int32"])
@pytest.mark.parametrize(
    ("shape", "k"),
    [((4, 6), 0), ((4, 6), 2), ((5, 3), -1), ((3, 3), 3), ((3, 4), -7), ((0, 3), 0), ((4, 6), 2**40)],
)
def test_eye_like_every_dtype(reg, device, dtype, shape, k):
    x = rand(np.random.default_rng(2), shape, "float16")
    attrs = {"k": k, "dtype": dtype} if dtype else {"k": k}
    (y,) = run_op(reg, "eye_like", [x], attrs, device=device)
    want = np.eye(shape[0], shape[1], k=max(-9, min(9, k)), dtype=np.float64)
    assert y.dtype == (np.dtype(pl.get_dtype(dtype).numpy) if dtype else x.dtype)
    np.testing.assert_array_equal(y.astype(np.float64), want)


def test_eye_like_refusals(reg):
    with pytest.raises(
        ShapeMismatchError, match=r"eye_like: input 'x' must be a matrix, 2-d \(got shape \[2, 3, 4\]\)"
    ) as e:
        _infer(reg, "eye_like", [(2, 3, 4)], ["float32"], {})
    assert e.value.code == CODE.PIPELINK_ERR_SHAPE_MISMATCH
    with pytest.raises(InvalidArgumentError, match="attribute 'dtype' must be one of") as e:
        reg.get("eye_like").resolve_attrs({"dtype": "complex64"}, where="e")
    assert e.value.code == CODE.PIPELINK_ERR_INVALID_ARGUMENT
    (_,), (dtype,) = _infer(reg, "eye_like", [("N", "M")], ["bfloat16"], {"dtype": "int8"})
    assert dtype == "int8"


# -- ONNX: one-node models against the reference evaluator, the refusals, the fold --------------------
def _onnx_model(op, feeds, inits, attrs, opset=21, out_type=None, order=None):
    """A one-node model of ``op``: ``feeds`` become typed graph inputs, ``inits`` initializers; the node
    reads them in ``order`` (default: feeds, then inits)."""
    onnx = pytest.importorskip("onnx")
    from onnx import helper, numpy_helper

    node = helper.make_node(op, order or list(feeds) + list(inits), ["y"], name="the_node", **attrs)
    graph = helper.make_graph(
        [node],
        op,
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in feeds.items()
        ],
        [helper.make_tensor_value_info("y", out_type or onnx.TensorProto.UNDEFINED, None)],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def _onnx_cases(rng):
    f = np.float32
    data = rand(rng, (2, 3, 4, 5), "float32")
    i64 = np.int64
    return {
        "GatherND": ({"data": data}, {"i": _tuples(rng, (4, 5), (2, 3, 2), i64)}, {"batch_dims": 2}),
        "GatherND-b0": ({"data": data, "i": _tuples(rng, (2, 3), (4, 2), i64)}, {}, {}),
        **{
            f"ScatterElements-{r}": (
                {"data": data},
                {"i": rng.integers(-4, 4, (2, 3, 6, 5)).astype(i64), "u": rand(rng, (2, 3, 6, 5), "float32")},
                {"axis": -2, "reduction": r},
            )
            for r in ("add", "mul", "max", "min")
        },
        "ScatterElements-none": (
            {"data": data, "u": rand(rng, (2, 3, 4, 5), "float32")},
            {"i": _distinct(rng, (2, 3, 4, 5), (2, 3, 4, 5), 2, i64)},
            {"axis": 2},
        ),
        "OneHot": (
            {"i": rng.integers(-7, 7, (3, 4)).astype(i64)},
            {"d": np.array(5.0, f), "v": np.array([-1, 3], i64)},
            {"axis": 1},
        ),
        "OneHot-values": (  # values a graph input: a stage input, not a constant
            {"i": rng.integers(-3, 3, (6,)).astype(np.int32), "v": np.array([0.5, 2.0], f)},
            {"d": np.array(3, np.int32)},
            {},
        ),
        "OneHot-float": (  # float indices: cast to int64 (whole values here: the reference agrees)
            {"i": np.array([[0.0, 2.0, -1.0], [4.0, -3.0, 3.0]], f)},
            {"d": np.array(3, i64), "v": np.array([0.0, 1.0], f)},
            {},
        ),
        "EyeLike": ({"x": rand(rng, (4, 6), "float32")}, {}, {"k": 2}),
        "EyeLike-dtype": ({"x": rand(rng, (5, 3), "int32")}, {}, {"k": -1, "dtype": 10}),  # FLOAT16
        "CastLike": ({"x": 10 * data}, {"like": np.array([1], np.int32)}, {}),
        "CastLike-input": ({"x": rand(rng, (3, 4), "int64"), "like": rand(rng, (2,), "float16")}, {}, {}),
    }


@pytest.mark.parametrize(
    "case",
    [
        "GatherND",
        "GatherND-b0",
        "ScatterElements-none",
        "ScatterElements-add",
        "ScatterElements-mul",
        "ScatterElements-max",
        "ScatterElements-min",
        "OneHot",
        "OneHot-values",
        "OneHot-float",
        "EyeLike",
        "EyeLike-dtype",
        "CastLike",
        "CastLike-input",
    ],
)
def test_one_node_onnx_models_match_the_onnx_reference(device, rng, case):
    pytest.importorskip("onnx")
    from onnx.reference import ReferenceEvaluator

    feeds, inits, attrs = _onnx_cases(rng)[case]
    order = {"ScatterElements": ["data", "i", "u"], "OneHot": ["i", "d", "v"]}.get(case.split("-")[0])
    model = _onnx_model(case.split("-")[0], feeds, inits, attrs, order=order)
    (ref,) = ReferenceEvaluator(model).run(None, feeds)
    with pl.from_onnx(model, device=device) as pipe:
        got = np.asarray(pipe.run(feeds)["y"].numpy())
    assert got.shape == ref.shape and got.dtype == ref.dtype, (got.shape, ref.shape, got.dtype, ref.dtype)
    if ref.dtype.kind == "f":
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)
    else:
        np.testing.assert_array_equal(got, ref)


def test_cast_like_reads_only_the_type_of_its_second_input(rng):
    """target_type's values are never needed: a constant one becomes no weight, and the stage is a cast
    of x alone."""
    pytest.importorskip("onnx")
    from pipelink.onnx import import_model

    feeds, inits, attrs = _onnx_cases(rng)["CastLike"]
    config, weights = import_model(_onnx_model("CastLike", feeds, inits, attrs))
    (stage,) = config["pipeline"]
    assert stage["name"] == "cast" and stage["attrs"] == {"dtype": "int32"} and len(stage["inputs"]) == 1
    assert not weights


def _onnx_refusal(model, match, code="PIPELINK_ERR_INVALID_ARGUMENT"):
    with pytest.raises(pl.PipeLinkError, match=match) as e:
        pl.from_onnx(model)
    assert e.value.code.name == code
    return e.value


def test_onnx_one_hot_casts_float_indices_toward_zero(device):
    """The spec: non-integer indices are cast to int64 before use (1.7 is class 1, -1.5 counts -1 from the
    end); onnx's reference compares them unconverted, so it is not the oracle here."""
    pytest.importorskip("onnx")
    i = np.array([1.7, -1.5, 0.2, 3.9], np.float32)
    model = _onnx_model(
        "OneHot", {"i": i}, {"d": np.array(3, np.int64), "v": np.array([0.0, 1.0], np.float32)}, {}
    )
    with pl.from_onnx(model, device=device) as pipe:
        got = np.asarray(pipe.run({"i": i})["y"].numpy())
    want = np.zeros((4, 3), np.float32)
    for row, k in enumerate(i.astype(np.int64)):
        if -3 <= k < 3:
            want[row, k % 3] = 1.0
    np.testing.assert_array_equal(got, want)


def test_onnx_import_refusals(rng):
    """Each refused at import (listed with the node) or at load (naming the stage), with its code."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    x, i64 = rand(rng, (4, 5), "float32"), np.int64
    ints = {"i": rng.integers(0, 3, (3,)).astype(i64)}
    # OneHot: depth computed, of two elements, below 1, not whole
    model = _onnx_model(
        "OneHot", {**ints, "d": np.array(3, i64)}, {"v": np.array([0.0, 1.0], np.float32)}, {}
    )
    err = _onnx_refusal(model, r"OneHot node 'the_node'.*input 1 \(the depth, 'd'\) must be a constant")
    assert err.unsupported[0]["op_type"] == "OneHot"
    for depth, why in (
        (np.array([2, 3], i64), "must be a constant scalar"),
        (np.array(0, i64), r"depth must be >= 1 \(got 0\)"),
        (np.array(2.5, np.float32), "whole number"),
    ):
        _onnx_refusal(
            _onnx_model("OneHot", ints, {"d": depth, "v": np.array([0.0, 1.0], np.float32)}, {}), why
        )
    old = _onnx_model(
        "OneHot", ints, {"d": np.array(3, i64), "v": np.array([0.0, 1.0], np.float32)}, {}, opset=9
    )
    _onnx_refusal(old, "OneHot of opset 9: a negative index means an all-off line")
    # EyeLike: a dtype PipeLink lacks (STRING), a 3-d input
    _onnx_refusal(
        _onnx_model("EyeLike", {"x": x}, {}, {"dtype": TensorProto.STRING}),
        "ONNX element type 8 has no PipeLink dtype",
    )
    _onnx_refusal(
        _onnx_model("EyeLike", {"x": rand(rng, (2, 3, 4), "float32")}, {}, {}),
        "must be a matrix, 2-d",
        "PIPELINK_ERR_SHAPE_MISMATCH",
    )
    # GatherND: batch_dims not below the ranks, a tuple longer than data's rank
    idx = {"i": np.zeros((4, 1), i64)}
    _onnx_refusal(
        _onnx_model("GatherND", {"x": x}, idx, {"batch_dims": 2}), r"'batch_dims' must be in \[0, 1\]"
    )
    _onnx_refusal(
        _onnx_model("GatherND", {"x": x}, {"i": np.zeros((2, 3), i64)}, {}),
        r"k.*in \[1, 2\]",
        "PIPELINK_ERR_SHAPE_MISMATCH",
    )
    # ScatterElements: updates of another shape than indices; an unknown reduction
    se = {"i": np.zeros((2, 5), i64), "u": np.zeros((2, 4), np.float32)}
    _onnx_refusal(
        _onnx_model("ScatterElements", {"x": x}, se, {}),
        "must have the shape of 'indices'",
        "PIPELINK_ERR_SHAPE_MISMATCH",
    )
    se = {"i": np.zeros((2, 5), i64), "u": np.zeros((2, 5), np.float32)}
    _onnx_refusal(_onnx_model("ScatterElements", {"x": x}, se, {"reduction": "sum"}, opset=16), "reduction")
    # CastLike: a target_type whose dtype the graph does not give
    node = helper.make_node("CastLike", ["x", "like"], ["y"], name="the_node")
    graph = helper.make_graph(
        [node],
        "castlike",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]), onnx.ValueInfoProto(name="like")],
        [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    _onnx_refusal(model, "CastLike needs the dtype of its target_type input 'like'")


def test_scatter_elements_of_constants_folds_by_the_operators_reference(rng, monkeypatch):
    """The import folds a ScatterElements of constants with scatter_elements' own reference (one
    implementation), and the folded value is onnx's."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    from pipelink.onnx import import_model
    from pipelink.ops.indexing import reference

    fold = importlib.import_module("pipelink.onnx.fold")  # the module (the package exports its function)

    calls = []

    def counted(*args, **kwargs):
        calls.append(kwargs["reduction"])
        return reference.scatter_elements(*args, **kwargs)

    monkeypatch.setattr(fold, "scatter_elements", counted)
    data = np.arange(12, dtype=np.int64).reshape(3, 4)
    idx, upd = np.array([[2, -1, 0, 2]], np.int64), np.array([[10, 20, 30, 40]], np.int64)
    nodes = [
        helper.make_node("ScatterElements", ["d", "i", "u"], ["s"], reduction="add"),
        helper.make_node("Add", ["x", "s"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "fold",
        [helper.make_tensor_value_info("x", TensorProto.INT64, [3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [3, 4])],
        [numpy_helper.from_array(a, n) for n, a in (("d", data), ("i", idx), ("u", upd))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    config, _ = import_model(model)
    assert [s["name"] for s in config["pipeline"]] == ["add"] and calls == ["add"]
    x = rng.integers(-5, 5, (3, 4)).astype(np.int64)
    (ref,) = ReferenceEvaluator(model).run(None, {"x": x})
    with pl.from_onnx(model) as pipe:
        np.testing.assert_array_equal(pipe.run(x=x)["y"].numpy(), ref)
