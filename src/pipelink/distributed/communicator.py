"""The communicator contract: one process's end of a group of ranks, and the one-rank group.

A collective operator calls these methods with its stage's buffers; an engine (gloo through
torch.distributed on the CPU, NCCL on the GPU) fills them in. The rules every engine keeps: buffers are
contiguous, ``all_gather`` and ``reduce_scatter`` work on the first axis (rank ``r``'s block is the
``r``-th slice of it), and a wait longer than ``timeout_ms`` aborts the communicator and raises
:class:`~pipelink.errors.PipeLinkTimeoutError` instead of hanging.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InvalidArgumentError, ModuleCrashError, PipeLinkTimeoutError
from .reference import REDUCE_OPS

__all__ = ["REDUCE_OPS", "Communicator", "LocalCommunicator"]


class Communicator:
    """One rank of a group of ``size`` processes, on one device.

    An engine implements the private hooks; the public methods check what every engine needs.
    """

    engine = "none"

    def __init__(self, rank: int, size: int, device: str):
        self.rank = rank
        self.size = size
        self.device = device
        self.aborted: str | None = None  # why the communicator was aborted (then every call fails)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(rank={self.rank}, size={self.size}, device={self.device!r})"

    def check_peer(self, peer: int, *, what: str) -> None:
        """``peer`` must be another rank of this group.

        Raises
        ------
        InvalidArgumentError
            Naming the rank, the group size and ``what`` asked for it.
        """
        if not 0 <= peer < self.size or peer == self.rank:
            raise InvalidArgumentError(
                f"{what}: peer {peer} is not another rank of this group (rank {self.rank} of {self.size}); "
                "a peer is a rank in [0, world size) other than this process's own"
            )

    def check_live(self) -> None:
        """Raise the error that aborted the communicator, if any: an aborted group never runs again."""
        if self.aborted is not None:
            raise PipeLinkTimeoutError(
                f"the {self.engine} communicator (rank {self.rank} of {self.size}) was aborted: "
                f"{self.aborted}; restart the processes to run collectives again",
                rank=self.rank,
            )

    def timeout_error(self, what: str, timeout_ms: float) -> PipeLinkTimeoutError:
        """The error of a call that waited ``timeout_ms`` for its peers (the caller aborts first)."""
        return PipeLinkTimeoutError(
            f"{what} on rank {self.rank} of {self.size} did not complete within timeout_ms={timeout_ms:g}: "
            "a peer is missing or stuck; the communicator is aborted",
            rank=self.rank,
            timeout_ms=timeout_ms,
        )

    def peer_failed_error(self, what: str, detail: str) -> ModuleCrashError:
        """The error of a call whose peer failed or left (the caller aborts first)."""
        return ModuleCrashError(
            f"{what} failed on rank {self.rank} of {self.size}: a peer failed or left ({detail}); the "
            "communicator is aborted",
            rank=self.rank,
        )

    def abort(self, reason: str) -> None:
        """Stop the group for good: waiting peers are released, later calls fail with ``reason``."""
        if self.aborted is None:
            self.aborted = reason
            self._abort()

    def _abort(self) -> None:
        return None

    def all_reduce(self, src: Any, dst: Any, op: str, *, stream: Any, timeout_ms: float | None) -> None:
        self.check_live()
        self._all_reduce(src, dst, op, stream, timeout_ms)

    def all_gather(self, src: Any, dst: Any, *, stream: Any, timeout_ms: float | None) -> None:
        self.check_live()
        self._all_gather(src, dst, stream, timeout_ms)

    def reduce_scatter(self, src: Any, dst: Any, op: str, *, stream: Any, timeout_ms: float | None) -> None:
        self.check_live()
        self._reduce_scatter(src, dst, op, stream, timeout_ms)

    def broadcast(self, src: Any, dst: Any, root: int, *, stream: Any, timeout_ms: float | None) -> None:
        self.check_live()
        self._broadcast(src, dst, root, stream, timeout_ms)

    def send(self, src: Any, peer: int, *, stream: Any, timeout_ms: float | None) -> None:
        self.check_live()
        self._send(src, peer, stream, timeout_ms)

    def recv(self, dst: Any, peer: int, *, stream: Any, timeout_ms: float | None) -> None:
        self.check_live()
        self._recv(dst, peer, stream, timeout_ms)

    def _all_reduce(self, src, dst, op, stream, timeout_ms) -> None:
        raise NotImplementedError

    def _all_gather(self, src, dst, stream, timeout_ms) -> None:
        raise NotImplementedError

    def _reduce_scatter(self, src, dst, op, stream, timeout_ms) -> None:
        raise NotImplementedError

    def _broadcast(self, src, dst, root, stream, timeout_ms) -> None:
        raise NotImplementedError

    def _send(self, src, peer, stream, timeout_ms) -> None:
        raise NotImplementedError

    def _recv(self, dst, peer, stream, timeout_ms) -> None:
        raise NotImplementedError


class LocalCommunicator(Communicator):
    """The group of one CPU process: every collective is exact and is a copy (a sum, max, min or mean of
    one value is that value); there is no peer to send to."""

    engine = "local"

    def __init__(self, device: str = "cpu"):
        super().__init__(0, 1, device)

    def _all_reduce(self, src, dst, op, stream, timeout_ms) -> None:
        np.copyto(dst, src)

    def _all_gather(self, src, dst, stream, timeout_ms) -> None:
        np.copyto(dst, src)

    def _reduce_scatter(self, src, dst, op, stream, timeout_ms) -> None:
        np.copyto(dst, src)

    def _broadcast(self, src, dst, root, stream, timeout_ms) -> None:
        np.copyto(dst, src)

    def _send(self, src, peer, stream, timeout_ms) -> None:
        self.check_peer(peer, what="send")

    def _recv(self, dst, peer, stream, timeout_ms) -> None:
        self.check_peer(peer, what="recv")
