"""The CUDA binds of the copy-shaped operators (reshape, flatten, squeeze, unsqueeze, slice, expand, split),
checked without a GPU: they compute strided views of their inputs at bind and hand each to a prebuilt
``as_strided`` launch (slice, expand, split) or, for a reshape or a slice's negative step, to
``backend.copy``. Here a stand-in backend performs those copies on host memory, element by element through
the views' raw pointers and strides, and a stand-in launch runs each ``as_strided`` plan by emulating its
kernel from the plan's scalars (tests/unit/test_cuda_sources.py's emulator), so a wrong offset, stride,
part size or word in a view gives a wrong result against the CPU reference. (The kernels themselves run
on the GPU in tests/backend/test_ops_shape.py and test_ops_as_strided.py. concat runs a kernel of its
own: tests/unit/test_concat_plan.py.)
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import pipelink.ops.shape.cuda as shape_cuda
from pipelink.descriptor import KernelContext, infer_outputs
from pipelink.dtypes import get_dtype
from pipelink.errors import InvalidArgumentError
from pipelink.ops.shape.cuda import plan_gather, plan_where
from pipelink.tensor import Tensor
from tests.backend.ops_helpers import make_registry, poison, rand
from tests.unit.test_cuda_sources import _emulate_as_strided


def _host_view(t: Tensor) -> np.ndarray:
    """A NumPy array over the memory a tensor view describes (any stride sign, or zero)."""
    npd = t.dtype.numpy
    item = npd.itemsize
    lo = sum((d - 1) * s for d, s in zip(t.shape, t.strides, strict=True) if s < 0 and d > 0)
    hi = sum((d - 1) * s for d, s in zip(t.shape, t.strides, strict=True) if s > 0 and d > 0)
    buf = np.frombuffer((ctypes.c_char * ((hi - lo + 1) * item)).from_address(t.ptr + lo * item), dtype=npd)
    return np.lib.stride_tricks.as_strided(buf[-lo:], t.shape, [s * item for s in t.strides], writeable=True)


class HostCopyBackend:
    """Just what the copy-shaped binds use: ``copy(dst, src, stream=)`` with the real one's shape rule."""

    def __init__(self):
        self.copies = 0
        self.info = type("Info", (), {"features": {"sm_count": 132}})()  # what sm_count_of reads

    def copy(self, dst: Tensor, src: Tensor, *, stream=None) -> None:
        if tuple(dst.shape) != tuple(src.shape) or dst.dtype != src.dtype:
            raise InvalidArgumentError(f"copy needs equal shapes and dtypes ({src.shape} -> {dst.shape})")
        self.copies += 1
        if src.size:
            _host_view(dst)[...] = _host_view(src)


class EmulatedLaunch:
    """PlanLaunch's stand-in: the plan the bind makes (at 16-byte alignment, as the pointers of these tests
    allow), run by emulating its kernel on host memory."""

    made: list = []

    def __init__(self, backend, make_plan, slots, stage, alignment=16):
        self.plan, self.slots = make_plan(alignment), dict(slots)
        EmulatedLaunch.made.append(self.plan)

    def __call__(self, ins, outs, stream) -> None:
        x, y = ins[self.slots["x"][1]], outs[self.slots["y"][1]]
        flat = np.ascontiguousarray(_host_view(x)).reshape(-1)
        pad = -flat.nbytes % 16 // flat.itemsize  # the emulator views all of x in words, the kernel the view
        flat = np.concatenate([flat, np.zeros(pad, flat.dtype)])
        _host_view(y)[...] = _emulate_as_strided(self.plan, flat, tuple(y.shape))

    def native_launches(self) -> list:
        return [self.plan.kernel]


@pytest.fixture(autouse=True)
def emulated_launches(monkeypatch):
    EmulatedLaunch.made = []
    monkeypatch.setattr(shape_cuda, "PlanLaunch", EmulatedLaunch)


@pytest.fixture(scope="module")
def reg():
    return make_registry()


def _run_both(reg, name, inputs, attrs):
    """The CUDA bind run on HostCopyBackend, and the CPU variant; returns both outputs lists."""
    desc = reg.get(name)
    inputs = list(inputs) + [None] * (len(desc.inputs) - len(inputs))
    resolved = desc.resolve_attrs(attrs, where="stage 's'")
    in_shapes = tuple(None if a is None else a.shape for a in inputs)
    in_dtypes = tuple(None if a is None else get_dtype(a.dtype).name for a in inputs)
    out_shapes, out_dtypes = infer_outputs(desc, in_shapes, in_dtypes, resolved, stage="s")
    results = []
    for device in ("cuda", "cpu"):
        variant = next(v for v in desc.variants if v.device == device)
        backend = HostCopyBackend()
        ctx = KernelContext(
            stage="s",
            attrs=resolved,
            in_shapes=in_shapes,
            in_dtypes=in_dtypes,
            out_shapes=out_shapes,
            out_dtypes=out_dtypes,
            backend=backend,
        )
        outs = [poison(s, d) for s, d in zip(out_shapes, out_dtypes, strict=True)]
        kernel = variant.bind(ctx)
        if device == "cuda":
            kernel(
                [None if a is None else Tensor.from_numpy(a) for a in inputs],
                [Tensor.from_numpy(o) for o in outs],
                None,
            )
        else:
            kernel(inputs, outs, None)
        results.append(outs)
    return results


CASES = [
    ("reshape", [(4, 3, 2)], {"shape": [2, 0, -1]}),
    ("flatten", [(2, 3, 4)], {"axis": 2}),
    ("squeeze", [(1, 3, 1, 4)], {}),
    ("unsqueeze", [(3, 4)], {"axes": [0, -1]}),
    ("slice", [(4, 5, 6)], {"starts": [-1, 1], "ends": [-1000, 5], "axes": [0, 2], "steps": [-1, 2]}),
    ("slice", [(4, 5, 6)], {"starts": [10**18], "ends": [-(10**18)], "axes": [2], "steps": [-2]}),
    ("slice", [(4, 5, 6)], {"starts": [3, 0], "ends": [1, 5], "axes": [0, 1], "steps": [1, 3]}),  # empty
    ("slice", [(4, 5, 6)], {"starts": [1, 1, 1], "ends": [3, 4, 5], "steps": [1, 1, 1]}),
    ("expand", [(3, 1)], {"shape": [2, 1, 6]}),
    ("expand", [(1, 4)], {"shape": [3, 4]}),
    ("split", [(7, 2, 3)], {"num_outputs": 3}),
    ("split", [(2, 6, 3)], {"axis": 1, "split": [1, 0, 5]}),
]


@pytest.mark.parametrize(("name", "shapes", "attrs"), CASES)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8", "int64", "bool"])
def test_cuda_views_copy_what_the_cpu_reference_copies(reg, name, shapes, attrs, dtype):
    rng = np.random.default_rng(len(shapes) + len(name))
    inputs = [rand(rng, s, dtype) for s in shapes]
    cuda, cpu = _run_both(reg, name, inputs, attrs)
    for got, ref in zip(cuda, cpu, strict=True):
        assert got.shape == ref.shape
        np.testing.assert_array_equal(got.view(np.uint8), ref.view(np.uint8))  # every byte written
    negative = name == "slice" and any(s < 0 for s in attrs.get("steps", ()))
    launched = name in ("slice", "expand", "split") and not negative and any(o.size for o in cuda)
    assert bool(EmulatedLaunch.made) == launched, "as_strided launches for slice, expand and split"


@pytest.mark.parametrize(
    ("name", "shapes", "attrs", "kernels"),
    [
        ("split", [(4, 8, 96)], {"axis": 2, "num_outputs": 3}, ["pl_as_strided"] * 3),
        ("split", [(2, 3, 4)], {"axis": 0, "split": [1, 1]}, ["pl_as_strided"] * 2),
        ("expand", [(1, 64)], {"shape": [32, 64]}, ["pl_as_strided"]),
        ("slice", [(64, 64)], {"starts": [0], "ends": [64], "axes": [1], "steps": [2]}, ["pl_as_strided"]),
    ],
)
def test_slice_expand_and_split_are_prebuilt_launches_the_core_replays(reg, name, shapes, attrs, kernels):
    # One as_strided launch per non-empty part; a stage of such launches is what a CUDA plan holds.
    inputs = [rand(np.random.default_rng(1), s, "float32") for s in shapes]
    cuda, cpu = _run_both(reg, name, inputs, attrs)
    for got, ref in zip(cuda, cpu, strict=True):
        np.testing.assert_array_equal(got, ref)
    assert [p.kernel for p in EmulatedLaunch.made] == kernels
    words = [int(p.macros["PL_BYTES"]) for p in EmulatedLaunch.made]
    assert name != "split" or shapes[0][-1] % 12 or words[0] == 16, (
        "a split's rows are copied in 16-byte words"
    )


def _emulate(plan, prefix: str, src: np.ndarray) -> np.ndarray:
    ndim = int(plan.macros["PL_NDIM"])
    dims = [plan.scalars[f"d{k}"] for k in range(ndim)]
    idx = np.indices(dims).reshape(ndim, -1)
    return src.reshape(-1)[sum(idx[k] * plan.scalars[f"{prefix}{k}"] for k in range(ndim))]


@pytest.mark.parametrize(
    ("c", "x", "y"),
    [
        ((2, 3), (2, 3), (2, 3)),
        ((3,), (2, 3), (1,)),
        ((2, 1), (1, 3), (2, 3)),
        ((), (4,), (2, 1)),
        ((2, 1, 4, 1), (3, 1, 5), (1,)),
    ],
)
def test_where_plan_index_math(c, x, y):
    """The collapsed dims and broadcast strides pl_where reads reproduce numpy.where."""
    rng = np.random.default_rng(3)
    cond, a, b = rng.integers(0, 2, c).astype(bool), rng.standard_normal(x), rng.standard_normal(y)
    plan = plan_where("float64", c, x, y)
    got = np.where(_emulate(plan, "sc", cond), _emulate(plan, "sx", a), _emulate(plan, "sy", b))
    np.testing.assert_array_equal(got, np.where(cond, a, b).reshape(-1))
    assert plan.macros["PL_BYTES"] == "8" and plan.scalars["n"] == int(np.prod(np.broadcast_shapes(c, x, y)))


@pytest.mark.parametrize(
    ("shape", "index_shape", "axis"),
    [((10, 4), (3, 5), 0), ((3, 7, 2), (4,), 1), ((3, 7, 2), (), -2), ((3, 7, 2), (2, 0), -1)],
)
def test_gather_plan_index_math(shape, index_shape, axis):
    """pl_gather's decomposition of an output index (o, j, k) with the plan's sizes reproduces numpy.take,
    and an out-of-range index selects zeros."""
    rng = np.random.default_rng(4)
    data = rng.standard_normal(shape)
    n_axis = shape[axis]
    indices = rng.integers(-n_axis - 2, n_axis + 2, size=index_shape)
    plan = plan_gather("float64", shape, "int64", index_shape, axis)
    s = plan.scalars
    i = np.arange(s["n"])
    k, r = i % s["inner"], i // s["inner"]
    j, o = r % s["nidx"], r // s["nidx"]
    idx = indices.reshape(-1)[j] if indices.size else np.zeros(0, np.int64)
    idx = np.where(idx < 0, idx + s["axis_n"], idx)
    ok = (idx >= 0) & (idx < s["axis_n"])
    flat = data.reshape(-1)
    got = np.where(ok, flat[np.where(ok, (o * s["axis_n"] + idx) * s["inner"] + k, 0)], 0.0)
    fixed = np.where(indices < 0, indices + n_axis, indices)
    safe = np.take(data, np.clip(fixed, 0, n_axis - 1), axis=axis)
    bad = (fixed < 0) | (fixed >= n_axis)
    ax = axis % len(shape)
    expect = np.where(bad.reshape((1,) * ax + bad.shape + (1,) * (len(shape) - ax - 1)), 0.0, safe)
    np.testing.assert_array_equal(got, expect.reshape(-1))


def test_gather_plan_refuses_float_indices():
    with pytest.raises(InvalidArgumentError, match="indices must be int32 or int64"):
        plan_gather("float32", (4, 2), "float32", (3,), 0)


def _random_case(rng):
    """A random slice (positive steps), expand or split of a random 1- to 4-d tensor."""
    shape = tuple(int(d) for d in rng.integers(1, 9, rng.integers(1, 5)))
    kind = ("slice", "expand", "split")[int(rng.integers(3))]
    if kind == "slice":
        axes = sorted(rng.choice(len(shape), rng.integers(1, len(shape) + 1), replace=False).tolist())
        starts = [int(rng.integers(-shape[a], shape[a])) for a in axes]
        ends = [int(rng.integers(-shape[a], shape[a] + 3)) for a in axes]
        steps = [int(rng.integers(1, 4)) for _ in axes]
        return kind, shape, {"starts": starts, "ends": ends, "axes": axes, "steps": steps}
    if kind == "expand":
        small = tuple(1 if rng.random() < 0.5 else d for d in shape)
        lead = [int(d) for d in rng.integers(1, 4, rng.integers(0, 2))]
        return kind, small, {"shape": lead + list(shape)}
    axis = int(rng.integers(len(shape)))
    cuts = sorted(rng.integers(0, shape[axis] + 1, rng.integers(1, 4)).tolist())
    sizes = [b - a for a, b in zip([0, *cuts], [*cuts, shape[axis]], strict=True)]
    return kind, shape, {"axis": axis, "split": sizes}


@pytest.mark.parametrize("seed", range(40))
def test_random_views_launch_what_the_cpu_reference_copies(reg, seed):
    rng = np.random.default_rng(seed)
    name, shape, attrs = _random_case(rng)
    dtype = ("float32", "float16", "int8", "float64")[seed % 4]
    cuda, cpu = _run_both(reg, name, [rand(rng, shape, dtype)], attrs)
    for got, ref in zip(cuda, cpu, strict=True):
        np.testing.assert_array_equal(got.view(np.uint8), ref.view(np.uint8), f"{name} {shape} {attrs}")
