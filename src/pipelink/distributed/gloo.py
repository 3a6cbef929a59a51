"""The CPU engine: collectives of NumPy buffers over gloo, through torch.distributed.

Buffers cross as zero-copy ``torch.from_numpy`` views. Each call waits at most ``timeout_ms`` (the
process group's own timeout otherwise); a wait that runs out, or a peer that fails, aborts the group.
"""

from __future__ import annotations

import atexit
import datetime
from typing import Any

import numpy as np

from .communicator import Communicator
from .env import LaunchEnv
from .rendezvous import RENDEZVOUS_TIMEOUT_S, store_for, torch_distributed

__all__ = ["GLOO_DTYPES", "GlooCommunicator"]

GLOO_DTYPES = frozenset({"float16", "float32", "float64", "int8", "uint8", "int32", "int64"})
"""The dtypes gloo reduces (bfloat16 has no NumPy-to-torch zero-copy path)."""


class GlooCommunicator(Communicator):
    """This process's rank in a gloo process group of the launch environment's world."""

    engine = "gloo"

    def __init__(self, env: LaunchEnv):
        super().__init__(env.rank, env.world_size, "cpu")
        dist = torch_distributed("collectives on the CPU")
        self._dist = dist
        self._ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}
        self._scratch: dict[tuple, np.ndarray] = {}
        self._group = dist.new_group(backend="gloo") if dist.is_initialized() else None
        if self._group is None:
            dist.init_process_group(
                "gloo",
                store=dist.PrefixStore("pipelink/gloo", store_for(env)),
                rank=env.rank,
                world_size=env.world_size,
                timeout=datetime.timedelta(seconds=RENDEZVOUS_TIMEOUT_S),
            )
            atexit.register(self._close)

    def _close(self) -> None:
        """At exit, tear down the default group this communicator made, unless it was aborted (then a
        peer may be stuck, and destroying would wait for it). Left to the interpreter's teardown, gloo's
        threads could still be joinable when the process exits: ``terminate called without an active
        exception``, and the rank dies by SIGABRT after its work is done (seen under load)."""
        if self.aborted is None and self._dist.is_initialized():
            self._dist.destroy_process_group()

    def _torch(self, array: np.ndarray) -> Any:
        import torch

        return torch.from_numpy(array)

    def _wait(self, work: Any, what: str, timeout_ms: float | None) -> None:
        """Wait for one operation; a timeout or a failed peer aborts the group and raises."""
        try:
            if timeout_ms is None:
                work.wait()
                return
            done = work.wait(timeout=datetime.timedelta(milliseconds=timeout_ms))
        except RuntimeError as e:
            timed_out = "timed out" in str(e).lower() or "timeout" in str(e).lower()
            self.abort(f"{what} failed: {e}")
            if timed_out and timeout_ms is not None:
                raise self.timeout_error(what, timeout_ms) from e
            raise self.peer_failed_error(what, str(e)) from e
        if done is False:
            self.abort(f"{what} timed out after {timeout_ms:g} ms")
            raise self.timeout_error(what, timeout_ms)

    def _abort(self) -> None:
        # gloo has no abort, and destroying the group waits for the stuck peer: the group is left as it is
        # (every later call fails on ``aborted`` first) and goes with the process.
        return None

    def _reduce(self, t: Any, op: str, what: str, timeout_ms: float | None) -> None:
        reduce_op = self._ops["sum" if op == "avg" else op]
        self._wait(self._dist.all_reduce(t, reduce_op, group=self._group, async_op=True), what, timeout_ms)
        if op == "avg":
            t.div_(self.size)

    def _all_reduce(self, src, dst, op, stream, timeout_ms) -> None:
        if dst is not src:
            np.copyto(dst, src)
        self._reduce(self._torch(dst), op, "all_reduce", timeout_ms)

    def _all_gather(self, src, dst, stream, timeout_ms) -> None:
        blocks = list(self._torch(dst).chunk(self.size, dim=0))
        work = self._dist.all_gather(blocks, self._torch(src), group=self._group, async_op=True)
        self._wait(work, "all_gather", timeout_ms)

    def _reduce_scatter(self, src, dst, op, stream, timeout_ms) -> None:
        # gloo has no reduce_scatter: reduce a copy of the whole buffer (kept per shape and dtype, so a
        # replayed plan allocates nothing), keep this rank's block.
        key = (src.shape, src.dtype)
        if key not in self._scratch:
            self._scratch[key] = np.empty_like(src)
        whole = self._scratch[key]
        np.copyto(whole, src)
        t = self._torch(whole)
        self._reduce(t, op, "reduce_scatter", timeout_ms)
        self._torch(dst).copy_(t.chunk(self.size, dim=0)[self.rank])

    def _broadcast(self, src, dst, root, stream, timeout_ms) -> None:
        if self.rank == root and dst is not src:
            np.copyto(dst, src)
        work = self._dist.broadcast(self._torch(dst), src=root, group=self._group, async_op=True)
        self._wait(work, "broadcast", timeout_ms)

    def _send(self, src, peer, stream, timeout_ms) -> None:
        self.check_peer(peer, what="send")
        work = self._dist.isend(self._torch(np.ascontiguousarray(src)), dst=peer, group=self._group)
        self._wait(work, f"send to rank {peer}", timeout_ms)

    def _recv(self, dst, peer, stream, timeout_ms) -> None:
        self.check_peer(peer, what="recv")
        work = self._dist.irecv(self._torch(dst), src=peer, group=self._group)
        self._wait(work, f"recv from rank {peer}", timeout_ms)
