"""Multi-process tests: a world of N processes started here as a launcher would (RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT), each running ``rank_main.py``; small tensors, hard timeouts. Also
the every-collective config and its NumPy check, shared by the gloo (CPU) and NCCL (GPU) worlds."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

RANK_MAIN = Path(__file__).with_name("rank_main.py")
SRC = Path(__file__).resolve().parents[2] / "src"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class World:
    """What each rank of one run saved: inputs, outputs, outcome."""

    def __init__(self, out: Path, nproc: int):
        self.ranks = [np.load(out / f"rank{r}.npz") for r in range(nproc)]
        self.outcomes = [json.loads((out / f"rank{r}.json").read_text()) for r in range(nproc)]

    def inputs(self, name: str) -> list[np.ndarray]:
        return [r[f"in.{name}"] for r in self.ranks]

    def output(self, rank: int, name: str) -> np.ndarray:
        return self.ranks[rank][f"out.{name}"]


def launch_env(rank: int, nproc: int, port: int, extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env.update(
        RANK=str(rank),
        WORLD_SIZE=str(nproc),
        LOCAL_RANK=str(rank),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        PYTHONPATH=str(SRC) + os.pathsep + env.get("PYTHONPATH", ""),
    )
    env.update(extra or {})
    return env


def run_world(
    config: dict,
    nproc: int,
    tmp_path: Path,
    *,
    runs: int = 1,
    extra_env: dict | None = None,
    per_rank: dict[int, dict] | None = None,
    device: str = "cpu",
    timeout: float = 90,
) -> World:
    """Start ``nproc`` ranks on ``config`` (``per_rank[r]`` for rank r where given) on ``device`` ("cuda":
    each rank's own GPU, cuda:LOCAL_RANK), and wait for all of them (killed past ``timeout``)."""
    pytest.importorskip("torch.distributed")
    paths = []
    for r in range(nproc):
        path = tmp_path / f"pipeline{r}.json"
        path.write_text(json.dumps((per_rank or {}).get(r, config)))
        paths.append(path)
    port = free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, str(RANK_MAIN), str(paths[r]), str(tmp_path), device, str(runs)],
            env=launch_env(r, nproc, port, extra_env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(nproc)
    ]
    logs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=timeout)
            logs.append(out)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for r, (p, log) in enumerate(zip(procs, logs, strict=True)):
        assert p.returncode == 0, f"rank {r} exited with {p.returncode}:\n{log}"
    return World(tmp_path, nproc)


REDUCE = {"sum": np.sum, "max": np.max, "min": np.min, "avg": np.mean}


def every_collective_config(root: int) -> dict:
    """Every collective once (each all_reduce op on a float and an int tensor), all outputs returned."""
    stages = [
        {"name": "all_reduce", "id": f"f_{op}", "inputs": ["x"], "outputs": [f"f_{op}"], "attrs": {"op": op}}
        for op in REDUCE
    ]
    stages += [
        {"name": "all_reduce", "id": f"i_{op}", "inputs": ["k"], "outputs": [f"i_{op}"], "attrs": {"op": op}}
        for op in ("sum", "max", "min")
    ]
    stages += [
        {"name": "all_gather", "inputs": ["x"], "outputs": ["g"]},
        {"name": "reduce_scatter", "inputs": ["g"], "outputs": ["rs"], "attrs": {"op": "sum"}},
        {
            "name": "reduce_scatter",
            "id": "rs_max",
            "inputs": ["g"],
            "outputs": ["rs_max"],
            "attrs": {"op": "max"},
        },
        {"name": "broadcast", "inputs": ["x"], "outputs": ["b"], "attrs": {"root": root}},
    ]
    return {
        "inputs": {"x": {"shape": [2, 3], "dtype": "float32"}, "k": {"shape": [5], "dtype": "int32"}},
        "pipeline": stages,
        "outputs": [s["outputs"][0] for s in stages],
    }


def check_every_collective(world: World, nproc: int, root: int) -> None:
    """Every rank's outputs of :func:`every_collective_config` against NumPy on all ranks' inputs."""
    xs, ks = world.inputs("x"), world.inputs("k")
    stacked = np.stack(xs)
    gathered = np.concatenate(xs, axis=0)
    for rank in range(nproc):
        for op, fn in REDUCE.items():
            got = world.output(rank, f"f_{op}")
            assert got.dtype == np.float32
            np.testing.assert_allclose(got, fn(stacked, axis=0), rtol=1e-6, err_msg=f"{op}, rank {rank}")
        for op in ("sum", "max", "min"):
            got = world.output(rank, f"i_{op}")
            assert got.dtype == np.int32
            np.testing.assert_array_equal(got, REDUCE[op](np.stack(ks), axis=0), err_msg=f"int {op}")
        np.testing.assert_array_equal(world.output(rank, "g"), gathered)
        # Every rank gathered the same g: block r of their sum is nproc * (rank r's x), of their max x_r.
        np.testing.assert_allclose(world.output(rank, "rs"), nproc * xs[rank], rtol=1e-6)
        np.testing.assert_array_equal(world.output(rank, "rs_max"), xs[rank])
        np.testing.assert_array_equal(world.output(rank, "b"), xs[root])
