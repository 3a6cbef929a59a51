"""The launch environment: which rank this process is, read from what a standard launcher sets.

torchrun (and ``python -m torch.distributed.run``) sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR`` and ``MASTER_PORT``; Open MPI's mpirun sets ``OMPI_COMM_WORLD_*``, Slurm's srun
``SLURM_PROCID``/``SLURM_NTASKS``/``SLURM_LOCALID``. Reading it starts nothing and connects to nothing.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidArgumentError

__all__ = ["THREAD_RANK", "LaunchEnv", "launch_env"]

# (rank, world size, local rank) variable names, in the order they are looked for.
_LAUNCHERS = (
    ("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"),
    ("mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
)


class _ThreadRank(threading.local):
    """The rank a thread plays in a :class:`~pipelink.distributed.threads.ThreadWorld` (the CPU reference
    world of the tests); unset in every other thread. It wins over the process's launcher variables."""

    env: LaunchEnv | None = None
    communicator: Any = None


@dataclass(frozen=True)
class LaunchEnv:
    """This process's place in a multi-process run (a lone process is rank 0 of a world of 1)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    master_addr: str | None = None
    master_port: int | None = None
    launcher: str | None = None  # "torchrun" | "mpirun" | "srun" | "thread_world" | None (not launched)

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1


THREAD_RANK = _ThreadRank()


def launch_env(environ: Mapping[str, str] | None = None) -> LaunchEnv:
    """The launch environment of this process (``environ`` defaults to ``os.environ``; in a rank thread of
    a :class:`~pipelink.distributed.threads.ThreadWorld`, that thread's rank wins over it).

    Raises
    ------
    InvalidArgumentError
        A variable is not a number, the rank is outside ``[0, world size)``, or a world of several
        processes has no ``MASTER_ADDR``/``MASTER_PORT`` to meet at.
    """
    if environ is None and THREAD_RANK.env is not None:
        return THREAD_RANK.env
    env = os.environ if environ is None else environ
    found = next((names for names in _LAUNCHERS if names[1] in env and names[2] in env), None)
    if found is None:
        return LaunchEnv()
    launcher, rank_var, size_var, local_var = found
    rank, size = _int(env, rank_var), _int(env, size_var)
    local = _int(env, local_var) if local_var in env else rank
    if size < 1 or not 0 <= rank < size or local < 0:
        raise InvalidArgumentError(
            f"{launcher} environment: {rank_var}={rank} must lie in [0, {size_var}={size}) and "
            f"{local_var}={local} must be >= 0; check the launcher's arguments"
        )
    addr = env.get("MASTER_ADDR") or None
    port = _int(env, "MASTER_PORT") if env.get("MASTER_PORT") else None
    if size > 1 and (addr is None or port is None):
        raise InvalidArgumentError(
            f"{launcher} started {size} processes but MASTER_ADDR/MASTER_PORT are not set: they name the "
            "host and port where the processes meet (torchrun sets them; with mpirun or srun, export "
            "MASTER_ADDR=<first host> MASTER_PORT=<free port>)"
        )
    return LaunchEnv(rank, size, local, addr, port, launcher)


def _int(env: Mapping[str, str], name: str) -> int:
    try:
        return int(env[name])
    except ValueError:
        raise InvalidArgumentError(f"environment variable {name}={env[name]!r} must be an integer") from None
