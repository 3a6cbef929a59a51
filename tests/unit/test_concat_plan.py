"""concat's one-launch CUDA plan (``plan_concat``, ``pl_concat`` in ops/shape/shape.cu) without a GPU: the
plan's words, rows, per-part lengths and block ranges are replayed in NumPy exactly as the kernel walks
them and compared with ``numpy.concatenate``; the bind drops empty and absent parts from the launch, and
its launch replayed on its inputs gives the CPU variant's bytes; bad plans are refused. The kernel compiles
in tests/unit/test_cuda_sources.py; it runs on the H200 in tests/cuda/test_conv_gemm_cuda.py.
"""

from __future__ import annotations

import types

import numpy as np
import pytest

from pipelink.descriptor import KernelContext, infer_outputs
from pipelink.dtypes import get_dtype
from pipelink.errors import InvalidArgumentError
from pipelink.modules.registry import OperatorRegistry
from pipelink.ops import register_builtins
from pipelink.ops.shape.cuda import concat_bind, plan_concat
from pipelink.ops.shape.rules import MAX_PARTS
from tests.backend.ops_helpers import poison, rand


def _replay(plan, parts: list[np.ndarray]) -> np.ndarray:
    """The output bytes pl_concat writes: block b copies words b*BLOCK+t, +step, ... of its part."""
    word, count = int(plan.macros["PL_BYTES"]), int(plan.macros["PL_PARTS"])
    block, sc = plan.block[0], plan.scalars
    rows, row = sc["rows"], sc["row"]
    y = np.full((rows * row, word), 0xCD, np.uint8)
    written = np.zeros(rows * row, np.int64)
    start, col = 0, 0
    for i in range(MAX_PARTS):
        length, blocks = sc[f"len{i}"], sc[f"blocks{i}"]
        if i >= count:
            assert (length, blocks) == (0, 0), "slots past the parts are unused"
            continue
        assert blocks >= 1, "every part has a block"
        src = np.ascontiguousarray(parts[i]).reshape(-1).view(np.uint8).reshape(-1, word)
        n = rows * length
        assert src.shape[0] == n
        step = blocks * block
        mine = np.concatenate(
            [np.arange(b * block, n, step)[:, None] + np.arange(block) for b in range(blocks)]
        )
        idx = np.sort(mine[mine < n].reshape(-1))
        r, c = idx // length, idx % length
        y[r * row + col + c] = src[idx]
        np.add.at(written, r * row + col + c, 1)
        start += blocks
        col += length
    assert start == plan.grid[0], "the grid is the parts' blocks"
    assert col == row
    assert (written == 1).all(), "every output word written exactly once"
    return y.reshape(-1)


CASES = [
    # dtype, part shapes, axis
    ("float16", [(8, 3, 5), (8, 2, 5), (8, 1, 5)], 1),  # 2-byte words (rows of 10, 20... bytes)
    ("float32", [(4, 8), (4, 4), (4, 12)], 1),  # 16-byte words
    ("float32", [(4, 8), (4, 3)], -1),  # odd row: 4-byte words
    ("int8", [(3, 5), (3, 7), (3, 1)], 1),
    ("float64", [(2, 3, 4)] * 5, 0),  # rows 1
    ("bfloat16", [(2, 3, 1, 7)] * MAX_PARTS, 2),  # every slot
    ("bool", [(1, 1), (1, 2)], 1),
    ("float32", [(3, 70000), (3, 5)], 1),  # unequal parts: blocks in proportion, each at least one
]


@pytest.mark.parametrize(("dtype", "shapes", "axis"), CASES)
@pytest.mark.parametrize("alignment", [16, 1])
def test_plan_replays_numpy_concatenate(dtype, shapes, axis, alignment):
    rng = np.random.default_rng(11)
    npd = get_dtype(dtype).numpy
    parts = [rng.integers(0, 255, size=s, dtype=np.uint8).view(np.uint8).astype(npd) for s in shapes]
    plan = plan_concat(dtype, shapes, axis, alignment=alignment)
    want = np.concatenate(parts, axis=axis)
    got = _replay(plan, parts)
    np.testing.assert_array_equal(got, np.ascontiguousarray(want).reshape(-1).view(np.uint8))
    word = int(plan.macros["PL_BYTES"])
    assert word <= max(get_dtype(dtype).itemsize, alignment)
    assert all(a.align == word for a in plan.arg_specs if a.kind == "ptr")


def test_words_are_as_wide_as_every_row_allows():
    assert plan_concat("float32", [(4, 8), (4, 4)], 1).macros["PL_BYTES"] == "16"
    assert plan_concat("float32", [(4, 8), (4, 2)], 1).macros["PL_BYTES"] == "8"
    assert plan_concat("float16", [(4, 8), (4, 3)], 1).macros["PL_BYTES"] == "2"
    assert plan_concat("float16", [(4, 8), (4, 8)], 1, alignment=1).macros["PL_BYTES"] == "2"
    wide = plan_concat("int8", [(2**21, 1025), (2**21, 1)], 1)  # 1-byte words, 2^21 * 1026 >= 2^31
    assert (wide.macros["PL_BYTES"], wide.macros["PL_INDEX64"]) == ("1", "1")
    assert plan_concat("int8", [(2**20, 1025), (2**20, 1)], 1).macros["PL_INDEX64"] == "0"
    capped = plan_concat("float32", [(2**20, 2**10), (1, 2**10)], 0, sm_count=4)
    assert capped.grid[0] <= 4 * capped.params["max_blocks_per_sm"] + 2


@pytest.mark.parametrize(
    ("shapes", "axis", "match"),
    [
        ([], 0, "1 to 64 parts"),
        ([(2, 2)] * (MAX_PARTS + 1), 0, "1 to 64 parts"),
        ([(2, 2), (3, 3)], 0, "match off axis"),
        ([(2, 2), (2, 0)], 1, "non-empty"),
        ([(2, 2)], 2, "axis"),
    ],
)
def test_bad_plans_are_refused(shapes, axis, match):
    with pytest.raises(InvalidArgumentError, match=match):
        plan_concat("float32", shapes, axis)


class _Backend:
    info = types.SimpleNamespace(features={"sm_count": 132})

    def compile_kernel(self, source, name, options):
        return name

    def kernel_function(self, kernel):
        return kernel


def test_bind_launches_only_the_parts_with_elements():
    shapes = ((2, 3), None, (2, 0), (2, 5))
    ctx = KernelContext(
        stage="cat",
        attrs={"axis": 1},
        in_shapes=shapes + (None,) * (MAX_PARTS - len(shapes)),
        in_dtypes=("float32", None, "float32", "float32") + (None,) * (MAX_PARTS - len(shapes)),
        out_shapes=((2, 8),),
        out_dtypes=("float32",),
        backend=_Backend(),
    )
    launch = concat_bind(ctx)
    assert launch._slots == {"y": ("out", 0), "src0": ("in", 0), "src1": ("in", 3)}
    assert launch.plan.macros["PL_PARTS"] == "2"
    assert [launch.plan.scalars[f"len{i}"] for i in range(3)] == [3, 5, 0]


def test_bind_of_only_empty_parts_launches_nothing():
    ctx = KernelContext(
        stage="cat",
        attrs={"axis": 0},
        in_shapes=((0, 3), (0, 3)) + (None,) * (MAX_PARTS - 2),
        in_dtypes=("float32", "float32") + (None,) * (MAX_PARTS - 2),
        out_shapes=((0, 3),),
        out_dtypes=("float32",),
        backend=_Backend(),
    )
    kernel = concat_bind(ctx)
    assert kernel([], [], None) is None and kernel.native_launches() == []


@pytest.mark.parametrize(
    ("shapes", "axis"),
    [([(2, 3, 4), (2, 1, 4), (2, 0, 4), (2, 5, 4)], -2), ([(2, 3), (4, 3)], 0), ([(3, 8), (3, 8)], 1)],
)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8", "int64", "bool"])
def test_bound_launch_replays_the_cpu_reference(shapes, axis, dtype):
    """The bind's launch (its slots and plan), replayed on the inputs, gives the CPU variant's bytes."""
    registry = OperatorRegistry()
    register_builtins(registry)
    desc = registry.get("concat")
    rng = np.random.default_rng(len(shapes))
    parts = [rand(rng, s, dtype) for s in shapes]
    inputs = parts + [None] * (MAX_PARTS - len(parts))
    attrs = desc.resolve_attrs({"axis": axis}, where="stage 's'")
    in_shapes = tuple(None if a is None else a.shape for a in inputs)
    in_dtypes = tuple(None if a is None else dtype for a in inputs)
    out_shapes, out_dtypes = infer_outputs(desc, in_shapes, in_dtypes, attrs, stage="s")
    ctx = KernelContext("s", attrs, in_shapes, in_dtypes, out_shapes, out_dtypes, _Backend())
    launch = next(v for v in desc.variants if v.device == "cuda").bind(ctx)
    count = int(launch.plan.macros["PL_PARTS"])
    got = _replay(launch.plan, [inputs[launch._slots[f"src{j}"][1]] for j in range(count)])
    ref = poison(out_shapes[0], dtype)
    next(v for v in desc.variants if v.device == "cpu").bind(ctx)(inputs, [ref], None)
    np.testing.assert_array_equal(got, ref.reshape(-1).view(np.uint8))


def test_native_launch_names_each_part_by_its_port():
    """What the native core replays: one launch, y and each part's pointer by port, the rest null."""
    backend = _Backend()
    backend.compiler = types.SimpleNamespace(cubin_of=lambda kernel: b"cubin of " + kernel.encode())
    shapes = ((2, 4), None, (2, 8)) + (None,) * (MAX_PARTS - 3)
    ctx = KernelContext(
        "cat",
        {"axis": 1},
        shapes,
        ("float32", None, "float32") + (None,) * (MAX_PARTS - 3),
        ((2, 12),),
        ("float32",),
        backend,
    )
    (launch,) = concat_bind(ctx).native_launches()
    assert launch.name == "pl_concat" and launch.dims[:6] == (2, 1, 1, 256, 1, 1)
    assert len(launch.params) == 3 + 3 * MAX_PARTS
    pointers = [p for p in launch.params if p[0] == "ptr"]
    assert pointers[:3] == [("ptr", ("out", 0), 16), ("ptr", ("in", 0), 16), ("ptr", ("in", 2), 16)]
    assert all(p[1] is None for p in pointers[3:])
    scalars = [p[1] for p in launch.params if p[0] == "i64"]
    assert scalars[:8] == [2, 3, 1, 1, 2, 1, 0, 0]  # rows, row (16-byte words), len0, blocks0, len1, ...
