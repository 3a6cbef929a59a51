"""as_strided (a strided view of x's storage copied into a contiguous y) on every device, against a
reference that walks the view element by element (never NumPy's as_strided, which the CPU kernel uses);
and every refusal of its attributes, at inference and when a pipeline loads."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import pipelink as pl
from pipelink.descriptor import infer_outputs
from pipelink.errors import ErrorCode, InvalidArgumentError, PipeLinkError

from .ops_helpers import make_registry, rand, run_op

DATA_TYPES = ("float32", "float16", "bfloat16", "float64", "int8", "int64", "bool")
B, T, D, H = 2, 8, 48, 2  # a GPT-2-like c_attn output [B, T, 3 * 16]: q, k, v of 2 heads of 8
DH = D // 3 // H


@pytest.fixture(scope="module")
def reg():
    return make_registry()


def _walk(x: np.ndarray, shape, strides, offset) -> np.ndarray:
    """y[i] = x.flat[offset + sum(i_k * s_k)], one element at a time."""
    flat = x.reshape(-1)
    y = np.empty(shape, x.dtype)
    for idx in itertools.product(*(range(d) for d in shape)):
        y[idx] = flat[offset + sum(i * s for i, s in zip(idx, strides, strict=True))]
    return y


# (x shape, view shape, strides, offset): the CUDA paths are 16-byte words (the heads q, v), the tiled
# transpose (the keys kT, a transposing view with batches and ragged tiles), and the word-by-word walk
# (overlapping and broadcast reads, a misaligned offset, a 0-d view, short transposing views).
VIEWS = {
    "q_heads": ((B, T, D), (B, H, T, DH), (T * D, DH, D, 1), 0),
    "v_heads": ((B, T, D), (B, H, T, DH), (T * D, DH, D, 1), 2 * D // 3),
    "kT_heads": ((B, T, D), (B, H, DH, T), (T * D, DH, 1, D), D // 3),
    "ragged_transpose": ((3, 37, 41), (3, 41, 37), (37 * 41, 1, 41), 0),
    "transpose_with_offset": ((2, 40, 33), (2, 30, 20), (40 * 33, 1, 33), 5),
    "sliding_window": ((60,), (12, 8), (4, 1), 3),
    "broadcast_rows": ((4, 5), (6, 4, 5), (0, 5, 1), 0),
    "misaligned_offset": ((4, 64), (4, 60), (64, 1), 1),
    "short_transpose": ((2, 4099), (4099, 2), (1, 4099), 0),
    "scalar": ((3, 4), (), (), 7),
    "whole_copy": ((6, 70), (420,), (1,), 0),
    "last_element": ((5, 10), (2, 3), (7, 20), 2),  # reads element 2 + 7 + 40 = 49, the input's last
}


@pytest.mark.parametrize("dtype", DATA_TYPES)
@pytest.mark.parametrize("case", list(VIEWS))
def test_as_strided_copies_the_view(reg, device, rng, case, dtype):
    x_shape, shape, strides, offset = VIEWS[case]
    x = rand(rng, x_shape, dtype)
    attrs = {"shape": list(shape), "strides": list(strides), "offset": offset}
    (y,) = run_op(reg, "as_strided", [x], attrs, device=device)
    assert y.shape == tuple(shape) and y.dtype == x.dtype and y.flags.c_contiguous
    # bit for bit (NaN-free random data: the poison would show in any element not written)
    assert y.tobytes() == _walk(x, shape, strides, offset).tobytes()


def test_as_strided_of_an_empty_view_writes_nothing(reg, device, rng):
    x = rand(rng, (3, 4), "float32")
    (y,) = run_op(
        reg, "as_strided", [x], {"shape": [0, 5], "strides": [100, 100], "offset": 50}, device=device
    )
    assert y.shape == (0, 5)


def test_the_heads_of_a_split_are_three_views(reg, device, rng):
    """q, k^T and v of GPT-2's attention are as_strided views of c_attn's output: what Split, Reshape and
    Transpose would give, one copy each."""
    x = rand(rng, (B, T, D), "float32")
    q, k, v = (part.reshape(B, T, H, DH) for part in np.split(x, 3, axis=-1))
    expected = {"q_heads": q.transpose(0, 2, 1, 3), "kT_heads": k.transpose(0, 2, 3, 1)}
    expected["v_heads"] = v.transpose(0, 2, 1, 3)
    for case, want in expected.items():
        _, shape, strides, offset = VIEWS[case]
        attrs = {"shape": list(shape), "strides": list(strides), "offset": offset}
        (y,) = run_op(reg, "as_strided", [x], attrs, device=device)
        np.testing.assert_array_equal(y, want, err_msg=case)


@pytest.mark.parametrize(
    ("attrs", "match"),
    [
        ({"shape": [2, 3], "strides": [3]}, "one entry per dim"),
        ({"shape": [2, -3], "strides": [3, 1]}, "'shape' must be >= 0"),
        ({"shape": [2, 3], "strides": [3, -1]}, "'strides' must be >= 0"),
        ({"shape": [2, 3], "strides": [3, 1], "offset": -1}, "'offset' must be >= 0"),
        (
            {"shape": [2, 3], "strides": [3, 1], "offset": 19},
            r"reads element 24, but x \[4, 6\] has 24 elements",
        ),
        ({"shape": [5, 5], "strides": [6, 1]}, "reads element 28"),
        ({"shape": [], "strides": [], "offset": 24}, "reads element 24"),
    ],
)
def test_as_strided_refuses_bad_attributes(reg, attrs, match):
    desc = reg.get("as_strided")
    resolved = desc.resolve_attrs(attrs, where="stage 'v'")
    with pytest.raises(InvalidArgumentError, match=match) as info:
        infer_outputs(desc, ((4, 6),), ("float32",), resolved, stage="v")
    assert info.value.code == ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT and info.value.context["stage"] == "v"


def test_as_strided_bounds_wait_for_a_known_input_shape(reg):
    desc = reg.get("as_strided")
    attrs = desc.resolve_attrs({"shape": [2, 3], "strides": [100, 1]}, where="t")
    assert infer_outputs(desc, (("N", 6),), ("int8",), attrs, stage="t") == (((2, 3),), ("int8",))
    with pytest.raises(InvalidArgumentError, match="reads element 102"):
        infer_outputs(desc, ((4, 6),), ("int8",), attrs, stage="t")
    with pytest.raises(InvalidArgumentError, match="type ints"):
        desc.resolve_attrs({"shape": [2.5], "strides": [1]}, where="t")


def test_a_pipeline_with_an_out_of_bounds_view_is_refused_at_load():
    config = {
        "inputs": {"x": {"shape": [4, 6], "dtype": "float32"}},
        "pipeline": [
            {
                "name": "as_strided",
                "id": "view",
                "inputs": ["x"],
                "outputs": ["y"],
                "attrs": {"shape": [4, 6], "strides": [6, 2]},
            }
        ],
    }
    with pytest.raises(PipeLinkError) as info:  # every problem of the config, each with its code
        pl.load(config, device="cpu")
    (problem,) = info.value.errors
    assert problem.code == ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT and problem.path.startswith("/pipeline/0")
    assert "reads element 28" in problem.message and "'view'" in problem.message
