"""Collective operators across CPU processes over gloo, compared with the NumPy reference
(``pipelink.distributed.reference``) on every rank's inputs.

If one failed, a collective would not combine the ranks' tensors the way NCCL does (the CPU run is the
reference of the GPU path), or a stuck peer would hang a run instead of failing within timeout_ms. Each
world costs a few seconds (every rank imports torch): the tests share worlds, the 4-rank one is slow.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from .harness import check_every_collective, every_collective_config, run_world


def test_every_collective_on_two_ranks(tmp_path):
    world = run_world(every_collective_config(2, root=1), 2, tmp_path)
    check_every_collective(world.rank_inputs(), world.rank_outputs(), root=1)


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("PIPELINK_LONG"), reason="4 processes: set PIPELINK_LONG=1")
def test_every_collective_on_four_ranks(tmp_path):
    world = run_world(every_collective_config(4, root=2, dtype="float16", shape=(1, 7)), 4, tmp_path)
    check_every_collective(world.rank_inputs(), world.rank_outputs(), root=2)


def test_send_recv_ring(tmp_path):
    """Rank 0 sends x to 1, which receives it and sends it back: it comes round unchanged."""
    first = {
        "inputs": {"x": {"shape": [3, 4], "dtype": "float32"}},
        "pipeline": [
            {"name": "send", "inputs": ["x"], "outputs": ["sent"], "attrs": {"peer": 1}},
            {"name": "recv", "inputs": [], "outputs": ["back"], "attrs": {"peer": 1, "shape": [3, 4]}},
        ],
    }
    second = {
        "pipeline": [
            {"name": "recv", "inputs": [], "outputs": ["got"], "attrs": {"peer": 0, "shape": [3, 4]}},
            {"name": "send", "inputs": ["got"], "outputs": ["fwd"], "attrs": {"peer": 0}},
        ],
    }
    # The two ranks run different stages, so each gets its own config.
    world = run_world(first, 2, tmp_path, per_rank={1: second})
    x0 = world.ranks[0]["in.x"]
    np.testing.assert_array_equal(world.output(0, "sent"), x0)
    np.testing.assert_array_equal(world.output(0, "back"), x0)
    np.testing.assert_array_equal(world.output(1, "fwd"), x0)


def test_stuck_peer_fails_within_timeout_and_policies_apply(tmp_path):
    """Rank 1 runs once, then stalls for 5 s. On rank 0's second run, the all_reduce with on_error 'skip'
    times out after ~400 ms and is skipped (relu still runs); the next all_reduce ('fail') finds the group
    aborted and fails the run with PIPELINK_ERR_TIMEOUT — well before the peer's stall ends."""
    config = {
        "inputs": {"x": {"shape": [4], "dtype": "float32"}},
        "pipeline": [
            {
                "name": "all_reduce",
                "id": "tolerant",
                "inputs": ["x"],
                "outputs": ["y"],
                "constraints": {"timeout_ms": 400},
                "on_error": "skip",
            },
            {"name": "relu", "inputs": ["x"], "outputs": ["z"]},
            {"name": "all_reduce", "id": "strict", "inputs": ["z"], "outputs": ["w"]},
        ],
        "outputs": ["y", "z", "w"],
    }
    world = run_world(config, 2, tmp_path, runs=2, extra_env={"PIPELINK_TEST_STALL_RANK": "1"})
    outcome = world.outcomes[0]
    assert outcome["status"] == "PIPELINK_ERR_TIMEOUT", outcome
    assert outcome["seconds"] < 3.0, outcome
    assert "aborted" in outcome["message"], outcome
    assert outcome["stages"]["tolerant"] == "skipped", outcome
    assert "timeout_ms=400" in outcome["errors"]["tolerant"], outcome
    assert outcome["stages"]["relu"] == "ok", outcome


def test_a_peer_that_exits_fails_the_collective_without_timeout(tmp_path):
    """Rank 1 runs once and exits: rank 0's next all_reduce (no timeout_ms) fails with
    PIPELINK_ERR_MODULE_CRASH as soon as gloo sees the connection close, instead of waiting for ever."""
    config = {
        "inputs": {"x": {"shape": [4], "dtype": "float32"}},
        "pipeline": [{"name": "all_reduce", "inputs": ["x"], "outputs": ["y"]}],
    }
    extra = {"PIPELINK_TEST_STALL_RANK": "1", "PIPELINK_TEST_STALL_S": "0"}
    world = run_world(config, 2, tmp_path, runs=2, extra_env=extra)
    outcome = world.outcomes[0]
    assert outcome["status"] == "PIPELINK_ERR_MODULE_CRASH", outcome
    assert "a peer failed or left" in outcome["message"] and outcome["seconds"] < 30, outcome
