"""``pipelink run --nproc N``: the same command, run by N processes on this host under torchrun.

PipeLink starts no processes of its own kind: it hands the command to ``python -m torch.distributed.run
--standalone`` (torchrun), which picks a free port, sets RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT
for each process and reports their exit codes. On several hosts, run torchrun (or mpirun, srun) yourself
(docs/distributed.md).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence

from ..errors import InvalidArgumentError
from .env import LaunchEnv, launch_env
from .rendezvous import torch_distributed

__all__ = ["check_not_launched", "launcher_command", "run_launched", "without_option"]


def without_option(args: Sequence[str], option: str) -> list[str]:
    """``args`` without ``option`` and its value (``--nproc 2`` or ``--nproc=2``)."""
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg == option:
            skip = True
        elif not arg.startswith(option + "="):
            out.append(arg)
    return out


def launcher_command(nproc: int, pipelink_args: Sequence[str]) -> list[str]:
    """The torchrun command line that runs ``pipelink <pipelink_args>`` in ``nproc`` processes here."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        "-m",
        "pipelink",
        *pipelink_args,
    ]


def check_not_launched(env: LaunchEnv, nproc: int) -> None:
    """Refuse to start a world from a process of a world (N x N processes). A job step of one task
    (``srun`` in a one-task allocation) is not a world: it may start one.

    Raises
    ------
    InvalidArgumentError
        Naming the launcher and this process's rank.
    """
    if env.is_distributed or env.launcher == "torchrun":
        raise InvalidArgumentError(
            f"--nproc {nproc} inside a process that {env.launcher} already started (rank {env.rank} of "
            f"{env.world_size}): leave --nproc out, the launcher starts the processes"
        )


def run_launched(nproc: int, pipelink_args: Sequence[str]) -> int:
    """Run ``pipelink <pipelink_args>`` in ``nproc`` processes under torchrun; returns its exit code
    (0 when every process succeeded).

    Raises
    ------
    InvalidArgumentError
        ``nproc`` is below 1, or this process is already one of a launched world.
    HardwareUnsupportedError
        torch is not installed.
    """
    if nproc < 1:
        raise InvalidArgumentError(f"--nproc must be at least 1 (got {nproc})")
    check_not_launched(launch_env(), nproc)
    torch_distributed(f"pipelink run --nproc {nproc}")
    return subprocess.call(launcher_command(nproc, pipelink_args))
