"""Real pipelines with collective stages on 2 and 4 ranks of the thread world (no torch: these run in CI),
compared with the NumPy reference; timeouts and failing peers as the gloo and NCCL communicators have them.

If one failed, a collective stage would not combine the ranks' tensors as the reference defines (wrong
block, wrong rank order, a shape inferred for the wrong world size), or a stuck or failed peer would hang
a run instead of failing with PIPELINK_ERR_TIMEOUT / PIPELINK_ERR_MODULE_CRASH.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

import pipelink as pl
from pipelink.backends import get_backend
from pipelink.distributed import ThreadWorld, communicator_for, launch_env
from pipelink.distributed.gloo import GLOO_DTYPES
from pipelink.errors import ErrorCode, PipeLinkError

from .harness import check_every_collective, every_collective_config
from .rank_main import draw


def _run_config(world: int, config: dict, runs: int = 2) -> tuple[list[dict], list[dict]]:
    """Each rank loads ``config`` and runs it ``runs`` times on fresh inputs; the last run's inputs and
    outputs per rank."""

    def rank(r: int) -> tuple[dict, dict]:
        pipe = pl.load(config, device="cpu")
        rng = np.random.default_rng(100 + r)
        for _ in range(runs):  # the replayed plan too, on new inputs
            inputs = {name: draw(rng, d["shape"], d["dtype"]) for name, d in config["inputs"].items()}
            outputs = {name: np.asarray(t).copy() for name, t in pipe.run(dict(inputs)).items()}
        return inputs, outputs

    results = ThreadWorld(world, timeout_ms=10_000).run(rank)
    return [i for i, _ in results], [o for _, o in results]


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("dtype", sorted(GLOO_DTYPES))
def test_every_collective_matches_the_reference(world, dtype):
    root = world - 1
    inputs, outputs = _run_config(world, every_collective_config(world, root, dtype=dtype, shape=(3, 5)))
    check_every_collective(inputs, outputs, root)


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("shape", [(1,), (1, 7), (5, 1, 3)])
def test_odd_shapes_match_the_reference(world, shape):
    inputs, outputs = _run_config(world, every_collective_config(world, 0, shape=shape))
    check_every_collective(inputs, outputs, 0)


def test_send_recv_round_a_ring_of_four():
    """Each rank sends its x to the next and receives the previous rank's: y_r = x_(r-1)."""
    world = 4

    def rank(r: int):
        config = {
            "inputs": {"x": {"shape": [2, 3], "dtype": "int64"}},
            "pipeline": [
                {"name": "send", "inputs": ["x"], "outputs": ["sent"], "attrs": {"peer": (r + 1) % world}},
                {
                    "name": "recv",
                    "inputs": [],
                    "outputs": ["y"],
                    "attrs": {"peer": (r - 1) % world, "shape": [2, 3], "dtype": "int64"},
                },
            ],
            "outputs": ["sent", "y"],
        }
        x = np.arange(6, dtype=np.int64).reshape(2, 3) * (r + 1)
        outs = pl.load(config, device="cpu").run(x=x)
        return x, np.asarray(outs["sent"]).copy(), np.asarray(outs["y"]).copy()

    got = ThreadWorld(world).run(rank)
    sent = pl.distributed.reference.exchange({(r, (r + 1) % world): got[r][0] for r in range(world)})
    for r, (x, passed_on, y) in enumerate(got):
        np.testing.assert_array_equal(passed_on, x)
        np.testing.assert_array_equal(y, sent[((r - 1) % world, r)])


def test_each_rank_thread_sees_its_own_rank_and_the_process_keeps_its_own():
    got = ThreadWorld(3).run(lambda r: (launch_env().rank, launch_env().world_size, launch_env().launcher))
    assert got == [(0, 3, "thread_world"), (1, 3, "thread_world"), (2, 3, "thread_world")]
    assert launch_env().launcher != "thread_world"


def test_world_size_shapes_are_inferred_per_rank_thread():
    config = {
        "inputs": {"x": {"shape": [6, 2], "dtype": "float32"}},
        "pipeline": [
            {"name": "all_gather", "inputs": ["x"], "outputs": ["g"]},
            {"name": "reduce_scatter", "inputs": ["x"], "outputs": ["rs"]},
        ],
    }
    shapes = ThreadWorld(3).run(lambda r: (pl.load(config, device="cpu").graph.tensors["g"].shape,))
    assert shapes == [((18, 2),)] * 3


STUCK = {
    "inputs": {"x": {"shape": [4], "dtype": "float32"}},
    "pipeline": [
        {
            "name": "all_reduce",
            "id": "tolerant",
            "inputs": ["x"],
            "outputs": ["y"],
            "constraints": {"timeout_ms": 300},
            "on_error": "skip",
        },
        {"name": "relu", "inputs": ["x"], "outputs": ["z"]},
        {"name": "all_reduce", "id": "strict", "inputs": ["z"], "outputs": ["w"]},
    ],
    "outputs": ["y", "z", "w"],
}


def test_a_stuck_peer_fails_within_timeout_and_policies_apply():
    """As over gloo: rank 1 runs once, then stalls. Rank 0's second run: the all_reduce with on_error
    'skip' times out after ~300 ms and is skipped (relu still runs); the next all_reduce finds the
    communicator aborted and fails the run with PIPELINK_ERR_TIMEOUT, long before the stall ends."""

    def rank(r: int):
        pipe = pl.load(STUCK, device="cpu")
        x = np.ones(4, np.float32)
        pipe.run(x=x)
        if r == 1:
            time.sleep(1.5)
            return None
        t0 = time.perf_counter()
        with pytest.raises(PipeLinkError) as info:
            pipe.run(x=x)
        return info.value, time.perf_counter() - t0, pipe.last_report.stages

    err, seconds, stages = ThreadWorld(2).run(rank)[0]
    assert err.code == ErrorCode.PIPELINK_ERR_TIMEOUT and "aborted" in err.message, err.message
    assert seconds < 1.2, seconds
    assert stages["tolerant"].status == "skipped" and "timeout_ms=300" in stages["tolerant"].error.message
    assert stages["relu"].status == "ok"


def test_a_peer_that_leaves_fails_the_collective_without_timeout():
    """As over gloo: rank 1 runs once and returns; rank 0's next all_reduce (no timeout_ms) fails with
    PIPELINK_ERR_MODULE_CRASH at once, not after the world's timeout."""
    config = {"inputs": {"x": {"shape": [4], "dtype": "float32"}}, "pipeline": STUCK["pipeline"][2:]}
    config["pipeline"][0]["inputs"] = ["x"]

    def rank(r: int):
        pipe = pl.load(config, device="cpu")
        pipe.run(x=np.ones(4, np.float32))
        if r == 1:
            return None
        t0 = time.perf_counter()
        with pytest.raises(PipeLinkError) as info:
            pipe.run(x=np.ones(4, np.float32))
        return info.value, time.perf_counter() - t0

    err, seconds = ThreadWorld(2, timeout_ms=20_000).run(rank)[0]
    assert err.code == ErrorCode.PIPELINK_ERR_MODULE_CRASH and "a peer failed or left" in err.message
    assert "rank 1: it returned" in err.message and seconds < 5, (err.message, seconds)


def test_without_timeout_ms_the_worlds_own_timeout_bounds_the_wait():
    def rank(r: int):
        if r == 1:
            time.sleep(0.8)
            return None
        comm = communicator_for(get_backend("cpu"))
        x = np.ones(2, np.float32)
        with pytest.raises(PipeLinkError) as info:
            comm.all_reduce(x, np.empty_like(x), "sum", stream=None, timeout_ms=None)
        return info.value

    err = ThreadWorld(2, timeout_ms=200).run(rank)[0]
    assert err.code == ErrorCode.PIPELINK_ERR_TIMEOUT and "timeout_ms=200" in err.message


def test_ranks_running_different_collectives_are_refused():
    def rank(r: int):
        comm = communicator_for(get_backend("cpu"))
        x = np.ones(2, np.float32)
        with pytest.raises(PipeLinkError) as info:
            if r == 0:
                comm.all_reduce(x, np.empty_like(x), "sum", stream=None, timeout_ms=None)
            else:
                comm.broadcast(x, np.empty_like(x), 0, stream=None, timeout_ms=None)
        return info.value

    for err in ThreadWorld(2).run(rank):
        assert err.code == ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT and "same collectives" in err.message


def test_a_recv_declaring_another_shape_than_the_send_is_refused():
    def rank(r: int):
        comm = communicator_for(get_backend("cpu"))
        if r == 0:
            comm.send(np.ones((2, 3), np.float32), 1, stream=None, timeout_ms=None)
            return None
        with pytest.raises(PipeLinkError) as info:
            comm.recv(np.empty((3, 2), np.float32), 0, stream=None, timeout_ms=None)
        return info.value

    err = ThreadWorld(2).run(rank)[1]
    assert err.code == ErrorCode.PIPELINK_ERR_SHAPE_MISMATCH and "float32[2, 3]" in err.message


def test_a_rank_that_raises_is_raised_to_the_caller_and_releases_its_peers():
    def rank(r: int):
        if r == 1:
            raise ValueError("rank 1 broke")
        comm = communicator_for(get_backend("cpu"))
        x = np.ones(2, np.float32)
        with pytest.raises(PipeLinkError) as info:
            comm.all_gather(x, np.empty(4, np.float32), stream=None, timeout_ms=None)
        assert "it raised ValueError: rank 1 broke" in info.value.message
        return info.value

    with pytest.raises(ValueError, match="rank 1 broke"):
        ThreadWorld(2).run(rank)


class _FakeGPU:
    device = "cuda:0"


def test_a_gpu_backend_in_a_thread_world_is_refused():
    def rank(r: int):
        with pytest.raises(PipeLinkError) as info:
            communicator_for(_FakeGPU())
        return info.value

    (err,) = ThreadWorld(1).run(rank)
    assert err.code == ErrorCode.PIPELINK_ERR_HARDWARE_UNSUPPORTED and "CPU reference world" in err.message


@pytest.mark.parametrize("args", [(0,), (2, 0)])
def test_a_thread_world_needs_ranks_and_a_positive_timeout(args):
    size, *timeout = args
    with pytest.raises(PipeLinkError) as info:
        ThreadWorld(size, **({"timeout_ms": timeout[0]} if timeout else {}))
    assert info.value.code == ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT
