"""Collectives and placement on one GPU: NCCL communicators of one rank, eager and in a CUDA graph, and
device_affinity against the real device count.

Every output is compared with the input it must equal (a one-rank all_reduce/all_gather/reduce_scatter/
broadcast is exact), on fresh random inputs each run so a stale buffer cannot pass. If one failed, the
GPU collectives would not reach NCCL on the stage's stream, would not replay from a graph, or a GPU that
does not exist would be accepted. Needs nccl4py (``nccl.core``) and PyTorch for the device inputs.
"""

from __future__ import annotations

import pytest

import pipelink as pl
from pipelink.backends.cuda import device_count
from pipelink.errors import ErrorCode, PipeLinkError
from tests.distributed.harness import check_every_collective, every_collective_config, run_world

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
pytest.importorskip("nccl.core")

OPS = ("sum", "max", "min", "avg")
OUTPUTS = [f"r_{op}" for op in OPS] + ["g", "rs", "b"]


@pytest.fixture(autouse=True)
def lone_process(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)


def _one_rank_collectives(extra_constraints: dict | None = None) -> dict:
    c = {"constraints": extra_constraints} if extra_constraints else {}
    stages = [
        {
            "name": "all_reduce",
            "id": f"r_{op}",
            "inputs": ["x"],
            "outputs": [f"r_{op}"],
            "attrs": {"op": op},
            **c,
        }
        for op in OPS
    ]
    stages += [
        {"name": "all_gather", "inputs": ["x"], "outputs": ["g"], **c},
        {"name": "reduce_scatter", "inputs": ["x"], "outputs": ["rs"], **c},
        {"name": "broadcast", "inputs": ["x"], "outputs": ["b"], **c},
    ]
    return {"name": "collectives", "pipeline": stages, "outputs": OUTPUTS}


def _check_runs(pipe, dtype, runs: int = 3) -> None:
    gen = torch.Generator(device="cuda").manual_seed(15)
    for _ in range(runs):
        x = torch.randn(64, 1024, device="cuda", generator=gen).to(dtype)
        outs = pipe.run(x=x)
        for name in OUTPUTS:
            got = torch.from_dlpack(outs[name])
            assert got.dtype == dtype and got.shape == x.shape, name
            assert torch.equal(got, x), f"{name}: differs from the input on a one-rank NCCL communicator"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_one_rank_nccl_collectives_are_exact(dtype):
    pipe = pl.load(_one_rank_collectives(), device="cuda", native=False)  # stage detail: the Python executor
    _check_runs(pipe, dtype)
    assert all(rep.variant == "cuda:nccl" for rep in pipe.last_report.stages.values())


def test_one_rank_nccl_collectives_replay_from_a_cuda_graph():
    pipe = pl.load(_one_rank_collectives(), device="cuda", cuda_graph=True)
    _check_runs(pipe, torch.float32)
    assert pipe.last_report.graph_replay, "the collectives were not captured into a CUDA graph"


def test_a_timeout_keeps_collectives_correct_and_out_of_the_graph():
    """timeout_ms makes each collective wait for itself on the host: correct, but run eagerly."""
    pipe = pl.load(_one_rank_collectives({"timeout_ms": 5000}), device="cuda", cuda_graph=True)
    _check_runs(pipe, torch.float32)
    assert not pipe.last_report.graph_replay
    assert any("running eagerly" in w and "'r_sum'" in w for w in pipe.load_report.warnings)


def test_gpu0_affinity_runs_on_gpu0():
    cfg = {
        "name": "placed",
        "pipeline": [
            {"name": "relu", "inputs": ["x"], "outputs": ["y"], "constraints": {"device_affinity": "gpu:0"}}
        ],
    }
    pipe = pl.load(cfg, device="cuda:0")
    x = torch.randn(1000, device="cuda")
    assert torch.equal(torch.from_dlpack(pipe.run(x=x)["y"]), torch.relu(x))


def test_a_gpu_this_host_does_not_have_is_refused_at_its_pointer():
    missing = device_count()  # cuda:<count> never exists
    cfg = {
        "pipeline": [
            {
                "name": "relu",
                "inputs": ["x"],
                "outputs": ["y"],
                "constraints": {"device_affinity": f"gpu:{missing}"},
            }
        ]
    }
    with pytest.raises(PipeLinkError) as info:
        pl.load(cfg, device="cuda")
    assert info.value.code == ErrorCode.PIPELINK_ERR_HARDWARE_UNSUPPORTED
    (problem,) = pl.validate(cfg, device="cuda")
    assert problem.path == "/pipeline/0/constraints/device_affinity"
    assert f"cuda:{missing}, which does not exist" in problem.message


def test_every_collective_across_every_gpu(tmp_path):
    """One process per GPU over NCCL (needs 2+ GPUs): the same checks against the NumPy reference as the
    thread world and gloo on the CPU."""
    n = device_count()
    if n < 2:
        pytest.skip(f"needs 2 or more GPUs (this host has {n})")
    for dtype, shape in (("float32", (3, 5)), ("float16", (1, 7, 3))):
        config = every_collective_config(n, root=n - 1, dtype=dtype, shape=shape)
        (tmp_path / dtype).mkdir()
        world = run_world(config, n, tmp_path / dtype, device="cuda", timeout=300)
        assert all(o["status"] == "ok" for o in world.outcomes), world.outcomes
        check_every_collective(world.rank_inputs(), world.rank_outputs(), root=n - 1)
