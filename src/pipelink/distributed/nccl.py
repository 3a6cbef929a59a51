"""The GPU engine: collectives on the stage's stream through NCCL (``nccl4py``, imported as ``nccl.core``).

A world of several processes shares NCCL's unique id through the launcher's store; a lone process makes
a one-rank communicator of its own. Calls only enqueue work, so they can be captured in a CUDA graph. A
call with ``timeout_ms`` waits for its own completion on the host (eagerly, never inside a capture) and,
when the time runs out, aborts the communicator, which releases the stream, and raises.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

from ..errors import HardwareUnsupportedError, ModuleCrashError
from .communicator import Communicator
from .env import LaunchEnv
from .rendezvous import store_for

__all__ = ["NCCL_DTYPES", "NCCLCommunicator", "nccl_core"]

NCCL_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64", "int8", "uint8", "int32", "int64"})
"""The dtypes NCCL reduces."""

_POLL_S = 50e-6  # how often a timed wait looks at its event
_generation = itertools.count()  # communicators made by this process so far


def nccl_core() -> Any:
    """``nccl.core``, or a HardwareUnsupportedError saying how to install it."""
    try:
        import nccl.core as nccl
    except ImportError as e:
        raise HardwareUnsupportedError(
            "GPU collectives need NCCL's Python bindings: pip install nccl4py (with nvidia-nccl-cu13)"
        ) from e
    return nccl


class NCCLCommunicator(Communicator):
    """This process's rank in an NCCL communicator on its backend's GPU."""

    engine = "nccl"

    def __init__(self, env: LaunchEnv, backend: Any):
        super().__init__(env.rank, env.world_size, backend.device)
        nccl = nccl_core()
        self._backend = backend
        self._ops = {"sum": nccl.SUM, "max": nccl.MAX, "min": nccl.MIN, "avg": nccl.AVG}
        if env.world_size == 1:
            uid = nccl.get_unique_id()
        else:
            store = store_for(env)
            # Every rank makes its communicators in the same order (one config, SPMD), so the n-th
            # communicator of each rank reads the n-th id; the device differs per rank, so it is not
            # part of the key.
            key = f"pipelink/nccl/{next(_generation)}/unique_id"
            if env.rank == 0:
                store.set(key, bytes(nccl.get_unique_id()))
            store.wait([key])
            uid = nccl.UniqueId.from_bytes(store.get(key))
        # NCCL binds the communicator to the current device: make it the backend's (synchronize binds the
        # calling thread to the backend's device first).
        backend.synchronize()
        self._comm = nccl.Communicator.init(env.world_size, env.rank, uid)

    def _abort(self) -> None:
        self._comm.abort()

    def _finish(self, what: str, stream: Any, timeout_ms: float | None) -> None:
        """With a timeout: wait on the host for this call's completion, abort and raise past it."""
        if timeout_ms is None:
            return
        event = self._backend.record_event(stream)
        deadline = time.perf_counter() + timeout_ms / 1000
        while not event.is_done:
            if time.perf_counter() > deadline:
                self.abort(f"{what} timed out after {timeout_ms:g} ms")
                raise self.timeout_error(what, timeout_ms)
            time.sleep(_POLL_S)
        error = self._comm.get_async_error()
        if int(error) != 0:
            self.abort(f"{what} failed: NCCL error {error!r}")
            raise ModuleCrashError(
                f"{what} failed on rank {self.rank} of {self.size}: NCCL reports {error!r} ("
                f"{self._comm.get_last_error()}); the communicator is aborted",
                rank=self.rank,
            )

    def _all_reduce(self, src, dst, op, stream, timeout_ms) -> None:
        self._comm.allreduce(src, dst, self._ops[op], stream=stream)
        self._finish("all_reduce", stream, timeout_ms)

    def _all_gather(self, src, dst, stream, timeout_ms) -> None:
        self._comm.allgather(src, dst, stream=stream)
        self._finish("all_gather", stream, timeout_ms)

    def _reduce_scatter(self, src, dst, op, stream, timeout_ms) -> None:
        self._comm.reduce_scatter(src, dst, self._ops[op], stream=stream)
        self._finish("reduce_scatter", stream, timeout_ms)

    def _broadcast(self, src, dst, root, stream, timeout_ms) -> None:
        self._comm.broadcast(src, dst, root, stream=stream)
        self._finish("broadcast", stream, timeout_ms)

    def _send(self, src, peer, stream, timeout_ms) -> None:
        self.check_peer(peer, what="send")
        self._comm.send(src, peer, stream=stream)
        self._finish(f"send to rank {peer}", stream, timeout_ms)

    def _recv(self, dst, peer, stream, timeout_ms) -> None:
        self.check_peer(peer, what="recv")
        self._comm.recv(dst, peer, stream=stream)
        self._finish(f"recv from rank {peer}", stream, timeout_ms)
