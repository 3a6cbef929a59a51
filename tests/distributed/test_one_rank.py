"""Collectives in a world of one process (no launcher): exact, and their rules checked at load.

If one failed, a pipeline with collectives could not run on one device, or a world-size rule (a
reduce_scatter that does not divide, a peer that does not exist) would surface only at run time.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import pipelink as pl
from pipelink.backends import get_backend
from pipelink.distributed import LocalCommunicator, communicator_for
from pipelink.errors import ErrorCode, PipeLinkError

WORLD_OF_TWO = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}


@pytest.fixture(autouse=True)
def lone_process(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)


def test_the_cpu_of_a_lone_process_has_a_one_rank_communicator():
    comm = communicator_for(get_backend("cpu"))
    assert isinstance(comm, LocalCommunicator) and (comm.rank, comm.size) == (0, 1)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
def test_every_collective_is_exact_in_a_world_of_one(dtype):
    ops = ["sum", "max", "min"] + (["avg"] if dtype != "int32" else [])
    stages = [
        {"name": "all_reduce", "id": op, "inputs": ["x"], "outputs": [op], "attrs": {"op": op}} for op in ops
    ]
    stages += [
        {"name": "all_gather", "inputs": ["x"], "outputs": ["g"]},
        {"name": "reduce_scatter", "inputs": ["x"], "outputs": ["rs"]},
        {"name": "broadcast", "inputs": ["x"], "outputs": ["b"]},
    ]
    outputs = ops + ["g", "rs", "b"]
    pipe = pl.load({"pipeline": stages, "outputs": outputs}, device="cpu")
    x = (np.random.default_rng(7).standard_normal((3, 5)) * 10).astype(dtype)
    for _ in range(2):  # the replayed plan too
        outs = pipe.run(x=x)
        for name in outputs:
            got = np.asarray(outs[name])
            assert got.dtype == x.dtype and got.shape == x.shape, name
            np.testing.assert_array_equal(got, x, err_msg=name)


def _load_problem(stages, inputs=None) -> PipeLinkError:
    with pytest.raises(PipeLinkError) as info:
        pl.load(
            {"inputs": inputs or {"x": {"shape": [3, 2], "dtype": "float32"}}, "pipeline": stages},
            device="cpu",
        )
    return info.value


@pytest.mark.parametrize(
    ("stage", "code", "words"),
    [
        ({"name": "send", "attrs": {"peer": 0}}, ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT, "own rank"),
        ({"name": "send", "attrs": {"peer": 1}}, ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT, "world of 1"),
        ({"name": "broadcast", "attrs": {"root": 1}}, ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT, "root=1"),
        (
            {"name": "all_reduce", "inputs": ["k"], "attrs": {"op": "avg"}},
            ErrorCode.PIPELINK_ERR_DTYPE_MISMATCH,
            "'avg'",
        ),
        ({"name": "all_reduce", "attrs": {"op": "prod"}}, ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT, "op"),
    ],
)
def test_collective_rules_are_checked_at_load(stage, code, words):
    stage = {"inputs": ["x"], "outputs": ["y"], **stage}
    inputs = {"x": {"shape": [3, 2], "dtype": "float32"}, "k": {"shape": [3], "dtype": "int32"}}
    err = _load_problem([stage], inputs)
    assert err.code == code and words in err.message, err.message


def test_recv_from_own_rank_is_refused():
    err = _load_problem(
        [{"name": "recv", "inputs": [], "outputs": ["y"], "attrs": {"peer": 0, "shape": [2]}}]
    )
    assert err.code == ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT and "own rank" in err.message


def test_world_size_shapes_at_load(monkeypatch):
    """Under a launcher of 2 processes, load (which meets nobody) infers the gathered and scattered
    shapes from WORLD_SIZE, and refuses a first axis that 2 ranks cannot split."""
    for name, value in WORLD_OF_TWO.items():
        monkeypatch.setenv(name, value)
    pipe = pl.load(
        {
            "inputs": {"x": {"shape": [4, 3], "dtype": "float32"}},
            "pipeline": [
                {"name": "all_gather", "inputs": ["x"], "outputs": ["g"]},
                {"name": "reduce_scatter", "inputs": ["x"], "outputs": ["rs"]},
            ],
        },
        device="cpu",
    )
    assert pipe.graph.tensors["g"].shape == (8, 3) and pipe.graph.tensors["rs"].shape == (2, 3)
    err = _load_problem([{"name": "reduce_scatter", "inputs": ["x"], "outputs": ["y"]}])
    assert err.code == ErrorCode.PIPELINK_ERR_SHAPE_MISMATCH and "into 2 equal blocks" in err.message


def test_an_isolated_collective_is_refused_at_load():
    """A worker process would join the world as a second copy of this rank (and wait for ever)."""
    cfg = {"pipeline": [{"name": "all_reduce", "inputs": ["x"], "outputs": ["y"], "isolation": "process"}]}
    (problem,) = pl.validate(cfg, device="cpu")
    assert problem.path == "/pipeline/0/isolation" and problem.code == ErrorCode.PIPELINK_ERR_INVALID_CONFIG
    assert "second copy of this rank" in problem.message


@pytest.mark.parametrize("streams", [True, False])
def test_the_benchmark_overlap_composition_is_layer_norm_of_the_all_reduce(streams):
    """benchmarks/distributed.py's chunked AllReduce + LayerNorm on two streams: in a world of one it must
    equal layer_norm(x) (the all_reduce of one rank is x), whatever the stream layout."""
    from benchmarks.distributed import overlap_config

    cfg = overlap_config(4, 64, 32, streams=streams)
    for decl in cfg["inputs"].values():
        decl["dtype"] = "float32"
    rng = np.random.default_rng(3)
    x, gamma, beta = (rng.standard_normal(s).astype(np.float32) for s in ((64, 32), 32, 32))
    y = np.asarray(pl.load(cfg, device="cpu").run(x=x, gamma=gamma, beta=beta)["y"])
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    np.testing.assert_allclose(y, (x - mean) / np.sqrt(var + 1e-5) * gamma + beta, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("comm", "compute", "share"),
    [
        ([(0, 4)], [(0, 4)], 1.0),
        ([(0, 4)], [(4, 8)], 0.0),  # touching is not overlapping
        ([(0, 4), (4, 8)], [(2, 6)], 0.5),
        ([(0, 2), (1, 3)], [(2, 10)], 1 / 3),  # overlapping comm spans count once
        ([(0, 10)], [(1, 2), (3, 4), (5, 9)], 0.6),
        ([(5, 6), (0, 1)], [(0.5, 5.5)], 0.5),  # any order
    ],
)
def test_the_hidden_share_is_comm_time_under_compute_over_comm_time(comm, compute, share):
    from benchmarks.distributed import hidden_fraction

    assert hidden_fraction(comm, compute) == pytest.approx(share)
    assert math.isnan(hidden_fraction([], compute))


def test_the_overlap_spans_come_from_a_profiled_runs_device_timestamps():
    from benchmarks.distributed import stage_spans
    from pipelink.runtime.report import RunReport, StageReport

    report = RunReport()
    for sid, start, dur in (("ar0", 0.0, 2.0), ("ln0", 2.0, 3.0), ("ar1", 2.0, 2.0), ("split", None, None)):
        report.stages[sid] = StageReport(sid, "op", device_start_s=start, device_time_s=dur)
    assert stage_spans(report, "ar") == [(0.0, 2.0), (2.0, 4.0)] and stage_spans(report, "ln") == [(2.0, 5.0)]


def test_an_aborted_communicator_fails_every_later_call():
    """After a timeout aborts a group, a collective must fail at once, not wait for peers again."""
    comm = LocalCommunicator()
    x = np.ones(3, np.float32)
    comm.abort("all_reduce timed out after 400 ms")
    with pytest.raises(PipeLinkError) as info:
        comm.all_reduce(x, np.empty_like(x), "sum", stream=None, timeout_ms=None)
    assert info.value.code == ErrorCode.PIPELINK_ERR_TIMEOUT
    assert "aborted: all_reduce timed out after 400 ms" in info.value.message


def test_reset_forgets_the_communicators():
    from pipelink.distributed import reset

    backend = get_backend("cpu")
    first = communicator_for(backend)
    reset()
    assert first.aborted is not None
    second = communicator_for(backend)
    assert second is not first and second.aborted is None
