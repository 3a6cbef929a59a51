"""The thread world: N ranks as threads of one process, exchanging NumPy arrays in memory.

It is the CPU reference world of the tests (docs/distributed.md), not a transport for real runs: it lets
CI, which has no torch, drive real pipelines with collective stages on several ranks. A test selects it
explicitly, ``ThreadWorld(n).run(fn)``; nothing else (no variable, no config) does. Each rank's output is
computed by :mod:`.reference` from every rank's posted input, so what the world checks is the plumbing
around it — pipelines, shapes per world size, ranks, ordering, timeouts and failing peers — which keep the
gloo and NCCL communicators' contract: a wait longer than ``timeout_ms`` (the world's own timeout without
one) aborts with ``PIPELINK_ERR_TIMEOUT``, a peer that failed, aborted or returned is
``PIPELINK_ERR_MODULE_CRASH``, never a hang.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from ..errors import HardwareUnsupportedError, InvalidArgumentError, ShapeMismatchError
from . import reference
from .communicator import Communicator
from .env import THREAD_RANK, LaunchEnv

__all__ = ["ThreadCommunicator", "ThreadWorld"]

T = TypeVar("T")


class _Exchange:
    """What the ranks of one :meth:`ThreadWorld.run` share, under one condition variable."""

    def __init__(self, size: int, timeout_ms: float):
        self.size = size
        self.timeout_ms = timeout_ms
        self.cond = threading.Condition()
        self.rounds: dict[int, dict[int, tuple[str, tuple, np.ndarray]]] = {}  # round -> rank -> post
        self.reads: dict[int, int] = {}  # round -> ranks that have read it
        self.next_round = [0] * size
        self.mail: dict[tuple[int, int], deque[np.ndarray]] = {}  # (src, dst) -> sent, oldest first
        self.gone: dict[int, str] = {}  # rank -> why it takes no further part

    def leave(self, rank: int, why: str) -> None:
        with self.cond:
            self.gone.setdefault(rank, why)
            self.cond.notify_all()


class ThreadCommunicator(Communicator):
    """One rank of a :class:`ThreadWorld`. Collectives must be called in the same order on every rank
    (as with NCCL); sends are buffered (a send returns at once, its recv takes the oldest message)."""

    engine = "thread"

    def __init__(self, exchange: _Exchange, rank: int):
        super().__init__(rank, exchange.size, "cpu")
        self._ex = exchange

    def _abort(self) -> None:
        # Its posts to rounds not yet complete are withdrawn: a peer arriving later must not complete a
        # round with an aborted rank (NCCL's peers fail after an abort too); it finds the rank gone.
        ex = self._ex
        with ex.cond:
            for posts in ex.rounds.values():
                if len(posts) < ex.size:
                    posts.pop(self.rank, None)
            ex.leave(self.rank, f"its communicator was aborted ({self.aborted})")

    def _wait(self, ready: Callable[[], bool], awaited: Callable[[], Sequence[int]], what: str, timeout_ms):
        """Wait (holding the condition) until ``ready()``; fail when an ``awaited()`` rank has gone, or past
        ``timeout_ms`` (the world's timeout when None)."""
        ex = self._ex
        limit = ex.timeout_ms if timeout_ms is None else timeout_ms
        deadline = time.monotonic() + limit / 1000
        while not ready():
            gone = [r for r in awaited() if r in ex.gone]
            if gone:
                detail = f"rank {gone[0]}: {ex.gone[gone[0]]}"
                self.abort(f"{what} failed: {detail}")
                raise self.peer_failed_error(what, detail)
            left = deadline - time.monotonic()
            if left <= 0:
                self.abort(f"{what} timed out after {limit:g} ms")
                raise self.timeout_error(what, limit)
            ex.cond.wait(left)

    def _round(self, what: str, params: tuple, src: np.ndarray, timeout_ms) -> list[np.ndarray]:
        """Post ``src`` to this rank's next round; every rank's posted input, once all have posted."""
        ex = self._ex
        with ex.cond:
            n = ex.next_round[self.rank]
            ex.next_round[self.rank] += 1
            posts = ex.rounds.setdefault(n, {})
            posts[self.rank] = (what, params, np.array(src, copy=True))
            ex.cond.notify_all()

            def missing() -> list[int]:
                return [r for r in range(ex.size) if r not in posts]

            self._wait(lambda: not missing(), missing, what, timeout_ms)
            ex.reads[n] = ex.reads.get(n, 0) + 1
            if ex.reads[n] == ex.size:
                del ex.rounds[n], ex.reads[n]
        for rank in range(ex.size):
            if posts[rank][:2] != (what, params):
                self.abort(f"{what}: the ranks ran different collectives")
                other, other_params = posts[rank][:2]
                raise InvalidArgumentError(
                    f"{what}{params} on rank {self.rank} met {other}{other_params} on rank {rank}: "
                    "every rank must run the same collectives in the same order (one config, SPMD)"
                )
        return [posts[rank][2] for rank in range(ex.size)]

    def _all_reduce(self, src, dst, op, stream, timeout_ms) -> None:
        xs = self._round("all_reduce", (op,), src, timeout_ms)
        np.copyto(dst, reference.all_reduce(xs, op)[self.rank])

    def _all_gather(self, src, dst, stream, timeout_ms) -> None:
        xs = self._round("all_gather", (), src, timeout_ms)
        np.copyto(dst, reference.all_gather(xs)[self.rank])

    def _reduce_scatter(self, src, dst, op, stream, timeout_ms) -> None:
        xs = self._round("reduce_scatter", (op,), src, timeout_ms)
        np.copyto(dst, reference.reduce_scatter(xs, op)[self.rank])

    def _broadcast(self, src, dst, root, stream, timeout_ms) -> None:
        xs = self._round("broadcast", (root,), src, timeout_ms)
        np.copyto(dst, reference.broadcast(xs, root)[self.rank])

    def _send(self, src, peer, stream, timeout_ms) -> None:
        self.check_peer(peer, what="send")
        ex = self._ex
        (sent,) = reference.exchange({(self.rank, peer): src}).values()
        with ex.cond:
            ex.mail.setdefault((self.rank, peer), deque()).append(sent)
            ex.cond.notify_all()

    def _recv(self, dst, peer, stream, timeout_ms) -> None:
        self.check_peer(peer, what="recv")
        ex = self._ex
        what = f"recv from rank {peer}"
        with ex.cond:
            box = ex.mail.setdefault((peer, self.rank), deque())
            self._wait(lambda: bool(box), lambda: [peer], what, timeout_ms)
            got = box.popleft()
        if got.shape != dst.shape or got.dtype != dst.dtype:
            raise ShapeMismatchError(
                f"{what}: rank {peer} sent {got.dtype}{list(got.shape)} but this recv declares "
                f"{dst.dtype}{list(dst.shape)}; make the recv's shape and dtype attributes match the send",
                port="y",
            )
        np.copyto(dst, got)


class ThreadWorld:
    """``size`` ranks as threads of this process, for tests: the CPU reference world, never a transport.

    ``timeout_ms`` bounds every wait of a collective stage that has no ``timeout_ms`` of its own (the
    engines' own timeouts play that part in a real run).
    """

    def __init__(self, size: int, *, timeout_ms: float = 30_000):
        if size < 1 or timeout_ms <= 0:
            raise InvalidArgumentError(
                f"ThreadWorld(size={size}, timeout_ms={timeout_ms}): a world has at least 1 rank and a "
                "positive timeout"
            )
        self.size = size
        self.timeout_ms = timeout_ms

    def run(self, fn: Callable[[int], T]) -> list[T]:
        """Call ``fn(rank)`` once per rank, each in its own thread playing that rank: there,
        ``launch_env()`` is the rank's and the CPU's communicator is the world's. Returns the results in
        rank order once every rank has returned; if ranks raised, the lowest rank's exception is raised
        (a rank that should survive its own failure catches it in ``fn``)."""
        ex = _Exchange(self.size, self.timeout_ms)
        results: list[Any] = [None] * self.size
        errors: list[BaseException | None] = [None] * self.size

        def play(rank: int) -> None:
            THREAD_RANK.env = LaunchEnv(rank, self.size, rank, launcher="thread_world")
            THREAD_RANK.communicator = ThreadCommunicator(ex, rank)
            why = "it returned"
            try:
                results[rank] = fn(rank)
            except BaseException as e:  # handed to the caller below
                errors[rank] = e
                why = f"it raised {type(e).__name__}: {e}"
            finally:
                ex.leave(rank, why)
                THREAD_RANK.env = THREAD_RANK.communicator = None

        threads = [threading.Thread(target=play, args=(r,), name=f"pipelink-rank{r}") for r in range(ex.size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for e in errors:
            if e is not None:
                raise e
        return results


def thread_communicator(backend: Any) -> Communicator | None:
    """The calling rank thread's communicator for ``backend`` (None outside a thread world).

    Raises
    ------
    HardwareUnsupportedError
        A GPU backend in a thread world: it is a CPU reference world.
    """
    comm = THREAD_RANK.communicator
    if comm is not None and backend.device != "cpu":
        raise HardwareUnsupportedError(
            f"a ThreadWorld runs its ranks on the CPU (it is the CPU reference world of the tests), not on "
            f"{backend.device}; GPU collectives run one process per GPU: pipelink run --nproc N"
        )
    return comm
