"""Multi-process tests: a world of N processes started here as a launcher would (RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT), each running ``rank_main.py``; small tensors, hard timeouts."""

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
    timeout: float = 90,
) -> World:
    """Start ``nproc`` ranks on ``config`` (``per_rank[r]`` for rank r where given), device cpu, and wait
    for all of them (killed past ``timeout``)."""
    pytest.importorskip("torch.distributed")
    paths = []
    for r in range(nproc):
        path = tmp_path / f"pipeline{r}.json"
        path.write_text(json.dumps((per_rank or {}).get(r, config)))
        paths.append(path)
    port = free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, str(RANK_MAIN), str(paths[r]), str(tmp_path), "cpu", str(runs)],
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
