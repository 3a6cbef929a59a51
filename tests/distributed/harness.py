"""Multi-process tests: a world of N processes started here as a launcher would (RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT), each running ``rank_main.py``; small tensors, hard timeouts. Also
the every-collective config and its check against the NumPy reference (``pipelink.distributed.reference``),
shared by the thread world (CI), gloo (CPU processes) and NCCL (GPUs)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pipelink.distributed import REDUCE_OPS, reference

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

    def rank_inputs(self) -> list[dict[str, np.ndarray]]:
        """Each rank's inputs by name, in rank order."""
        return [{k[3:]: r[k] for k in r.files if k.startswith("in.")} for r in self.ranks]

    def rank_outputs(self) -> list[dict[str, np.ndarray]]:
        """Each rank's outputs by name, in rank order."""
        return [{k[4:]: r[k] for k in r.files if k.startswith("out.")} for r in self.ranks]

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


def collective_stages(dtype: str, root: int) -> list[tuple[str, str, str, dict]]:
    """Every collective once as ``(output, operator, input, attrs)``: each reduction of x (``avg`` for
    floats only) and of the int32 k by all_reduce and reduce_scatter, x gathered and broadcast from
    ``root``. Operator and attribute names are those of :mod:`pipelink.distributed.reference`."""
    ops = REDUCE_OPS if dtype.startswith(("float", "bfloat")) else ("sum", "max", "min")
    stages = [(f"x_{op}", "all_reduce", "x", {"op": op}) for op in ops]
    stages += [(f"k_{op}", "all_reduce", "k", {"op": op}) for op in ("sum", "max", "min")]
    stages += [(f"rs_{op}", "reduce_scatter", "x", {"op": op}) for op in ops]
    stages += [("g", "all_gather", "x", {}), ("b", "broadcast", "x", {"root": root})]
    return stages


def every_collective_config(
    world: int, root: int, *, dtype: str = "float32", shape: tuple[int, ...] = (3, 5)
) -> dict:
    """:func:`collective_stages` as a config; x is ``[world * shape[0], *shape[1:]]`` (reduce_scatter
    splits it into one block per rank), k is int32 ``[5]``; every output returned."""
    stages = collective_stages(dtype, root)
    x_shape = [world * shape[0], *shape[1:]]
    return {
        "inputs": {"x": {"shape": x_shape, "dtype": dtype}, "k": {"shape": [5], "dtype": "int32"}},
        "pipeline": [
            {"name": operator, "id": out, "inputs": [port], "outputs": [out], "attrs": attrs}
            for out, operator, port, attrs in stages
        ],
        "outputs": [out for out, *_ in stages],
    }


def check_every_collective(
    inputs: list[dict[str, np.ndarray]], outputs: list[dict[str, np.ndarray]], root: int
) -> None:
    """Every rank's outputs of :func:`every_collective_config` against the reference on all ranks' inputs:
    maxima, minima, gathers and copies exact, sums and means within the reference's error bound."""
    world, dtype = len(inputs), inputs[0]["x"].dtype.name
    for out, operator, port, attrs in collective_stages(dtype, root):
        xs = [rank_inputs[port] for rank_inputs in inputs]
        want = getattr(reference, operator)(xs, **attrs)
        bound = reference.sum_error_bound(xs) if attrs.get("op") in ("sum", "avg") else None
        for rank in range(world):
            got, where = np.asarray(outputs[rank][out]), f"{out} on rank {rank} of {world}"
            assert got.dtype == want[rank].dtype and got.shape == want[rank].shape, where
            if bound is None:
                np.testing.assert_array_equal(got, want[rank], err_msg=where)
                continue
            slack = np.split(bound, world)[rank] if operator == "reduce_scatter" else bound
            error = np.abs(got.astype(np.float64) - want[rank].astype(np.float64))
            assert np.all(error <= slack), f"{where}: off by {error.max()} (bound {slack.max()})"
