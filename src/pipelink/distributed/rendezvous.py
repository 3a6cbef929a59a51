"""Where the processes of a run meet: the launcher's own rendezvous, through torch.distributed's store.

Under torchrun the store is the one its agent serves (``TORCHELASTIC_USE_AGENT_STORE``); under mpirun or
srun, rank 0 serves a ``TCPStore`` at ``MASTER_ADDR:MASTER_PORT``. torch is imported here only, when a
world of several processes meets: a lone process needs neither torch nor a store.
"""

from __future__ import annotations

import datetime
import threading
from typing import Any

from ..errors import HardwareUnsupportedError, PipeLinkTimeoutError
from .env import LaunchEnv

__all__ = ["RENDEZVOUS_TIMEOUT_S", "store_for", "torch_distributed"]

RENDEZVOUS_TIMEOUT_S = 300.0
"""How long a process waits for the others to arrive (also the store's timeout)."""

_stores: dict[tuple, Any] = {}
_lock = threading.Lock()


def torch_distributed(what: str) -> Any:
    """``torch.distributed``, or a HardwareUnsupportedError saying how to get it."""
    try:
        import torch.distributed as dist
    except ImportError as e:
        raise HardwareUnsupportedError(
            f"{what} needs PyTorch (torch.distributed) to meet the other processes: pip install torch"
        ) from e
    return dist


def store_for(env: LaunchEnv) -> Any:
    """The store this world meets at (one per process and world), created on first use.

    Raises
    ------
    PipeLinkTimeoutError
        The other processes did not arrive within :data:`RENDEZVOUS_TIMEOUT_S`.
    """
    key = (env.master_addr, env.master_port, env.world_size)
    with _lock:
        if key in _stores:
            return _stores[key]
        dist = torch_distributed("a multi-process run")
        try:
            store, _, _ = next(
                dist.rendezvous(
                    "env://",
                    rank=env.rank,
                    world_size=env.world_size,
                    timeout=datetime.timedelta(seconds=RENDEZVOUS_TIMEOUT_S),
                )
            )
        except (RuntimeError, TimeoutError) as e:  # torch's DistStoreError is a RuntimeError
            raise PipeLinkTimeoutError(
                f"rank {env.rank} of {env.world_size} could not meet the others at "
                f"{env.master_addr}:{env.master_port} within {RENDEZVOUS_TIMEOUT_S:g} s ({e}); check that "
                "every process was started and that the port is reachable",
                rank=env.rank,
            ) from e
        _stores[key] = store
        return store
