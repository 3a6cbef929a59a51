"""matmul's mapping onto cuBLASLt calls (``plan_batches``), checked without a GPU: each planned call is
replayed on flat NumPy buffers exactly as cuBLASLt reads them (a matrix every stride elements from the
call's offset) and the result compared with NumPy's matmul."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelink.ops.gemm.lt import offset_alignment, plan_batches
from pipelink.ops.gemm.reference import matmul_dims

CASES = [
    ((3, 7), (7, 5)),
    ((7,), (7, 5)),
    ((3, 7), (7,)),
    ((7,), (7,)),
    ((2, 3, 7), (7, 5)),
    ((7,), (2, 7, 5)),
    ((2, 4, 3, 7), (4, 7, 5)),
    ((2, 1, 3, 7), (1, 4, 7, 5)),
    ((1, 4, 3, 7), (2, 1, 7, 5)),
    ((3, 2, 3, 7), (3, 2, 7, 1)),
    ((2, 3, 7), (1, 7, 2)),
    ((5, 1, 3, 4), (6, 4, 2)),
    ((2, 3, 1, 2, 7), (3, 4, 7, 5)),
    ((1, 1, 3, 7), (7, 5)),
]


def _plan(a_shape, b_shape):
    batch, m, k, n = matmul_dims(a_shape, b_shape)
    return plan_batches(a_shape[:-2], b_shape[:-2], batch, m, k, n), m, k, n


def _replay(a, b, plan, k, n, size):
    fa, fb, c = a.ravel(), b.ravel(), np.full(size, np.nan)
    sa, sb, sc = plan.strides
    for oa, ob, oc in plan.offsets:
        for i in range(plan.count):
            lhs = fa[oa + i * sa : oa + i * sa + plan.m * k].reshape(plan.m, k)
            rhs = fb[ob + i * sb : ob + i * sb + k * n].reshape(k, n)
            c[oc + i * sc : oc + i * sc + plan.m * n] = (lhs @ rhs).ravel()
    return c


@pytest.mark.parametrize(("a_shape", "b_shape"), CASES)
def test_planned_calls_compute_numpy_matmul(a_shape, b_shape):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(a_shape), rng.standard_normal(b_shape)
    plan, _, k, n = _plan(a_shape, b_shape)
    expected = np.matmul(a, b)
    got = _replay(a, b, plan, k, n, expected.size)
    np.testing.assert_allclose(got, expected.ravel(), rtol=1e-12, atol=1e-12)


def test_plans_use_strides_before_calls():
    # b shared by the whole batch: a's batch folds into M, one plain call
    plan = _plan((2, 3, 7), (7, 5))[0]
    assert (plan.count, plan.m, plan.offsets) == (1, 6, ((0, 0, 0),))
    # a shared: one strided-batched call with a's stride 0
    plan = _plan((7,), (2, 7, 5))[0]
    assert plan.count == 2 and plan.strides == (0, 35, 5) and len(plan.offsets) == 1
    # complete on both sides: one strided-batched call
    plan = _plan((2, 4, 3, 7), (2, 4, 7, 5))[0]
    assert plan.count == 8 and plan.strides == (21, 35, 15) and len(plan.offsets) == 1
    # [2, 1] x [1, 4]: no one stride per operand covers both dims: 2 calls of a strided batch of 4
    plan = _plan((2, 1, 3, 7), (1, 4, 7, 5))[0]
    assert plan.count == 4 and plan.strides == (0, 35, 15) and len(plan.offsets) == 2


def test_offset_alignment_is_what_every_call_pointer_keeps():
    assert offset_alignment([0]) == 256
    assert offset_alignment([0, 512, 1024]) == 256
    assert offset_alignment([0, 80]) == 16
    assert offset_alignment([0, 84]) == 4  # one [3, 7] float32 matrix further
    assert offset_alignment([0, 2 * 21]) == 2  # float16


@st.composite
def _broadcasting_operands(draw):
    """Two operand shapes whose batch dims broadcast (each dim equal, or 1 on one side), 1-d included."""
    out_batch = draw(st.lists(st.integers(1, 3), max_size=4))
    a_batch = [d if draw(st.booleans()) else 1 for d in out_batch][draw(st.integers(0, len(out_batch))) :]
    b_batch = [d if draw(st.booleans()) else 1 for d in out_batch][draw(st.integers(0, len(out_batch))) :]
    m, k, n = (draw(st.integers(1, 4)) for _ in range(3))
    a = (k,) if not a_batch and draw(st.booleans()) else (*a_batch, m, k)
    b = (k,) if not b_batch and draw(st.booleans()) else (*b_batch, k, n)
    return a, b


@settings(max_examples=200, deadline=None)
@given(_broadcasting_operands())
def test_any_broadcast_maps_onto_calls_that_compute_numpy_matmul(shapes):
    """Property: for every pair of broadcasting shapes, the planned calls write every output element once
    with NumPy's matmul value (a wrong stride, offset or fold would leave NaN or a wrong value)."""
    test_planned_calls_compute_numpy_matmul(*shapes)
