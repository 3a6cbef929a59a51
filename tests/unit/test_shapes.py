"""Symbolic shape unification and broadcasting agree with NumPy and report both values on mismatch."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelink.descriptor import OperatorDescriptor, Port, infer_outputs
from pipelink.errors import DTypeMismatchError, ShapeMismatchError
from pipelink.shapes import Bindings, Mismatch, broadcast_shapes, match_pattern, substitute

shapes = st.lists(st.integers(1, 6), min_size=0, max_size=4).map(tuple)


@given(shapes, shapes)
@settings(max_examples=300, deadline=None)
def test_broadcast_matches_numpy(a, b):
    try:
        expected = np.broadcast_shapes(a, b)
    except ValueError:
        expected = None
    got = broadcast_shapes(a, b)
    if expected is None:
        assert isinstance(got, Mismatch)
    else:
        assert got == expected


@given(shapes, st.integers(0, 3))
@settings(max_examples=200, deadline=None)
def test_pattern_with_ellipsis_binds_leading_dims(shape, tail):
    tail = min(tail, len(shape))
    pattern = ["..."] + [f"D{i}" for i in range(tail)]
    b = Bindings()
    assert match_pattern(pattern, shape, b, "x") is None
    assert substitute(pattern, b) == shape
    assert substitute(["..."], b) == shape[: len(shape) - tail]


def test_symbol_bound_twice_reports_both_values():
    b = Bindings()
    assert match_pattern(["M", "K"], (4, 8), b, "input 'a'") is None
    problem = match_pattern(["K", "N"], (7, 3), b, "input 'b'")
    assert problem == Mismatch("K", 8, 7, "bound by input 'a'")


def test_symbolic_dims_unify_with_concrete():
    b = Bindings()
    assert match_pattern(["B", "C"], ("B", 16), b, "x") is None
    assert match_pattern(["B"], (5,), b, "y") is None
    assert b.values["B"] == 5
    assert broadcast_shapes(("B", 1), (1, 7)) == ("B", 7)


GEMM = OperatorDescriptor(
    "g",
    "1.0.0",
    inputs=(Port("a", ["M", "K"], "T"), Port("b", ["K", "N"], "T")),
    outputs=(Port("c", ["M", "N"], "T"),),
    dtype_vars={"T": frozenset({"float32", "float16"})},
)


def test_infer_outputs_names_stage_port_symbol_and_values():
    assert infer_outputs(GEMM, ((4, 8), (8, 3)), ("float32", "float32"), {}, stage="s") == (
        ((4, 3),),
        ("float32",),
    )
    with pytest.raises(ShapeMismatchError) as e:
        infer_outputs(GEMM, ((4, 8), (7, 3)), ("float32", "float32"), {}, stage="proj", tensors=("x", "w"))
    err = e.value
    assert (err.stage, err.port, err.symbol, err.expected, err.got) == ("proj", "b", "K", 8, 7)
    assert (
        "proj" in str(err) and "'b'" in str(err) and "K" in str(err) and "8" in str(err) and "7" in str(err)
    )


def test_infer_outputs_dtype_rules():
    with pytest.raises(DTypeMismatchError) as e:
        infer_outputs(GEMM, ((4, 8), (8, 3)), ("float32", "float16"), {}, stage="s")
    assert e.value.expected == "float32" and e.value.got == "float16"
    with pytest.raises(DTypeMismatchError):
        infer_outputs(GEMM, ((4, 8), (8, 3)), ("int8", "int8"), {}, stage="s")


def test_rank_mismatch_is_a_shape_error():
    with pytest.raises(ShapeMismatchError, match="expects 2 dimensions"):
        infer_outputs(GEMM, ((4, 8, 1), (8, 3)), ("float32", "float32"), {}, stage="s")
