"""Several processes, one pipeline: the launch environment, the rendezvous and the communicators that
collective operators run on (docs/distributed.md).

One process drives one device. :func:`communicator_for` gives a backend its communicator, made on first
use from the launch environment: a lone process gets a one-rank group (no rendezvous, no torch), a world
started by torchrun, mpirun or srun meets through the launcher's store. ``reference`` defines what each
collective computes; ``ThreadWorld`` runs N ranks as threads for the tests (the CPU reference world).
Nothing here runs at import.
"""

from __future__ import annotations

import threading
from typing import Any

from .communicator import REDUCE_OPS, Communicator, LocalCommunicator
from .env import LaunchEnv, launch_env
from .gloo import GlooCommunicator
from .nccl import NCCLCommunicator
from .threads import ThreadCommunicator, ThreadWorld, thread_communicator

__all__ = [
    "REDUCE_OPS",
    "Communicator",
    "LaunchEnv",
    "LocalCommunicator",
    "ThreadCommunicator",
    "ThreadWorld",
    "communicator_for",
    "launch_env",
    "reset",
]

_communicators: dict[str, Communicator] = {}
_lock = threading.Lock()


def communicator_for(backend: Any) -> Communicator:
    """The communicator of ``backend``'s device in this process's world (made on first use).

    The CPU uses gloo through torch.distributed (a lone process: :class:`LocalCommunicator`), a GPU uses
    NCCL. Every process of the world must reach its first collective: creating a group is collective.

    Raises
    ------
    InvalidArgumentError
        The launch environment is inconsistent.
    HardwareUnsupportedError
        The engine's package (torch, nccl4py) is missing.
    PipeLinkTimeoutError
        The other processes did not arrive.
    """
    threaded = thread_communicator(backend)  # a rank thread of a ThreadWorld (tests only)
    if threaded is not None:
        return threaded
    with _lock:
        comm = _communicators.get(backend.device)
        if comm is None:
            comm = _make(launch_env(), backend)
            _communicators[backend.device] = comm
        return comm


def _make(env: LaunchEnv, backend: Any) -> Communicator:
    if backend.device == "cpu":
        return GlooCommunicator(env) if env.is_distributed else LocalCommunicator()
    return NCCLCommunicator(env, backend)


def reset() -> None:
    """Forget every communicator (aborting those still live): the next collective makes new ones."""
    with _lock:
        for comm in _communicators.values():
            comm.abort("reset by pipelink.distributed.reset()")
        _communicators.clear()
