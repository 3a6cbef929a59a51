"""One rank of a multi-process test: load a config, run it ``runs`` times on inputs drawn from this rank's
seed, save inputs, outputs and the outcome to ``OUT/rank<R>.npz`` / ``.json``.

Run by the tests with the launcher's variables set (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT...). With
``PIPELINK_TEST_STALL_RANK=R``, rank R runs once, then stalls instead of running again (a stuck peer).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

import pipelink as pl
from pipelink.distributed import launch_env
from pipelink.errors import PipeLinkError


def draw(rng: np.random.Generator, shape: list[int], dtype: str) -> np.ndarray:
    if dtype.startswith(("int", "uint")):
        return rng.integers(-50 if dtype.startswith("int") else 0, 50, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def record(outcome: dict, pipe) -> None:
    """Each stage's status and error message in the last run."""
    stages = pipe.last_report.stages if pipe.last_report is not None else {}
    outcome["stages"] = {sid: rep.status for sid, rep in stages.items()}
    outcome["errors"] = {sid: rep.error.message for sid, rep in stages.items() if rep.error is not None}


def main() -> int:
    config_path, out_dir, device, runs = sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    config = json.loads(Path(config_path).read_text())
    env = launch_env()
    rng = np.random.default_rng(1000 + env.rank)
    inputs = {name: draw(rng, d["shape"], d["dtype"]) for name, d in config.get("inputs", {}).items()}
    stall = os.environ.get("PIPELINK_TEST_STALL_RANK")
    outcome: dict = {"rank": env.rank, "world_size": env.world_size, "status": "ok"}
    outputs: dict = {}
    t0 = time.perf_counter()
    pipe = None
    try:
        pipe = pl.load(config, device=device)
        for i in range(runs):
            if stall is not None and int(stall) == env.rank and i > 0:
                time.sleep(float(os.environ.get("PIPELINK_TEST_STALL_S", "5")))
                break
            t0 = time.perf_counter()
            outs = pipe.run(dict(inputs))
            outcome["seconds"] = time.perf_counter() - t0
            outputs = {name: t.numpy() for name, t in outs.items()}  # a copy to the host on a GPU
            record(outcome, pipe)
    except PipeLinkError as e:
        outcome.update(status=e.code.name, message=e.message, seconds=time.perf_counter() - t0)
        if pipe is not None:
            record(outcome, pipe)
    np.savez(
        out_dir / f"rank{env.rank}.npz",
        **{f"in.{k}": v for k, v in inputs.items()},
        **{f"out.{k}": v for k, v in outputs.items()},
    )
    (out_dir / f"rank{env.rank}.json").write_text(json.dumps(outcome))
    return 0


if __name__ == "__main__":
    sys.exit(main())
