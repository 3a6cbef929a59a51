"""The NumPy reference of the collectives against values written out by hand.

If one failed, the one definition that the thread world, gloo and NCCL are all compared with would be
wrong — every other collective test would then check the wrong thing.
"""

from __future__ import annotations

import numpy as np
import pytest

from pipelink.distributed import reference
from pipelink.errors import ErrorCode, PipeLinkError

A = np.array([[1, -2], [3, 4]], np.float32)
B = np.array([[5, 6], [-7, 0]], np.float32)
C = np.array([[0, 1], [1, 9]], np.float32)


@pytest.mark.parametrize(
    ("op", "want"),
    [
        ("sum", [[6, 5], [-3, 13]]),
        ("max", [[5, 6], [3, 9]]),
        ("min", [[0, -2], [-7, 0]]),
        ("avg", [[2, 5 / 3], [-1, 13 / 3]]),
    ],
)
def test_all_reduce_gives_every_rank_the_reduction(op, want):
    got = reference.all_reduce([A, B, C], op)
    assert len(got) == 3
    for y in got:
        assert y.dtype == np.float32
        np.testing.assert_allclose(y, np.array(want, np.float32), rtol=1e-7)


def test_integer_sums_wrap_in_their_dtype_as_the_engines_do():
    xs = [np.array([100, -100], np.int8), np.array([100, -100], np.int8)]
    (y, _) = reference.all_reduce(xs, "sum")
    assert y.dtype == np.int8 and y.tolist() == [-56, 56]


def test_all_gather_concatenates_along_the_first_axis_in_rank_order():
    y = reference.all_gather([A, B, C])[2]
    assert y.tolist() == [[1, -2], [3, 4], [5, 6], [-7, 0], [0, 1], [1, 9]]


def test_reduce_scatter_gives_rank_r_block_r_of_the_reduction():
    got = reference.reduce_scatter([A, B], "sum")
    assert [y.tolist() for y in got] == [[[6, 4]], [[-4, 4]]]
    assert [y.tolist() for y in reference.reduce_scatter([A, B], "max")] == [[[5, 6]], [[3, 4]]]


def test_broadcast_gives_every_rank_the_roots_x():
    assert [y.tolist() for y in reference.broadcast([A, B, C], root=1)] == [B.tolist()] * 3


def test_exchange_delivers_each_sent_tensor_to_its_receiver_as_a_copy():
    got = reference.exchange({(0, 1): A, (1, 0): B})
    assert got[(0, 1)].tolist() == A.tolist() and got[(1, 0)].tolist() == B.tolist()
    assert got[(0, 1)] is not A


def test_the_sum_error_bound_is_n_eps_times_the_absolute_sum():
    xs = [np.array([1.0, -2.0], np.float16), np.array([3.0, 2.0], np.float16)]
    np.testing.assert_allclose(reference.sum_error_bound(xs), 2 * 2.0**-10 * np.array([4.0, 4.0]))
    assert not reference.sum_error_bound([np.array([1], np.int32)]).any()


@pytest.mark.parametrize(
    ("call", "code", "words"),
    [
        (
            lambda: reference.all_reduce([np.ones(2, np.int32)], "avg"),
            ErrorCode.PIPELINK_ERR_DTYPE_MISMATCH,
            "avg",
        ),
        (lambda: reference.all_reduce([A], "prod"), ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT, "'prod'"),
        (lambda: reference.all_reduce([A, B[:1]]), ErrorCode.PIPELINK_ERR_SHAPE_MISMATCH, "rank 1's x"),
        (lambda: reference.all_reduce([]), ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT, "at least one rank"),
        (lambda: reference.reduce_scatter([A, B, C]), ErrorCode.PIPELINK_ERR_SHAPE_MISMATCH, "3 equal"),
        (lambda: reference.all_gather([np.float32(1)]), ErrorCode.PIPELINK_ERR_SHAPE_MISMATCH, "scalar"),
        (lambda: reference.broadcast([A, B], root=2), ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT, "root=2"),
        (lambda: reference.exchange({(1, 1): A}), ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT, "itself"),
    ],
)
def test_what_the_operators_refuse_the_reference_refuses(call, code, words):
    with pytest.raises(PipeLinkError) as info:
        call()
    assert info.value.code == code and words in info.value.message, info.value.message
