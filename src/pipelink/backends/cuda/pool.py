"""The CUDA backend's pooled allocator for per-run tensors (outputs, ``pl.empty``): size bins over a raw
allocator.

Pure Python over two callables (raw allocate, raw free), so its bookkeeping is tested on the CPU with a
fake allocator. It never calls CUDA itself and never returns a block to the raw allocator while a live
tensor owns it.
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

__all__ = ["MIN_BIN", "MAX_BIN", "BIN_SIZES", "bin_size", "PoolBlock", "BinnedPool"]

MIN_BIN = 512
MAX_BIN = 16 << 20
BIN_SIZES: tuple[int, ...] = tuple(1 << k for k in range(MIN_BIN.bit_length() - 1, MAX_BIN.bit_length()))

RawAlloc = Callable[[int], tuple[int, Any]]  # size -> (pointer, handle the raw free needs)
RawFree = Callable[[Any], None]


def bin_size(nbytes: int) -> int | None:
    """The bin a request of ``nbytes`` is served from: the smallest power of two >= ``nbytes`` (at least
    512 B), or None when it is larger than 16 MiB (such a block is allocated and freed on its own).

    Raises
    ------
    ValueError
        For a negative size.
    """
    if nbytes < 0:
        raise ValueError(f"a block size must be >= 0 (got {nbytes})")
    if nbytes > MAX_BIN:
        return None
    return max(MIN_BIN, 1 << max(int(nbytes) - 1, 0).bit_length())


class PoolBlock:
    """One block handed out by a :class:`BinnedPool`; it goes back to the pool when it is garbage.

    A ``pl.Tensor`` returned to the user holds its block as ``_owner``: dropping the last tensor (and any
    view) of a block releases it, with no call from the user.
    """

    __slots__ = ("ptr", "nbytes", "size", "raw", "pool", "released", "__weakref__")

    def __init__(self, ptr: int, nbytes: int, size: int, raw: Any, pool: BinnedPool):
        self.ptr = ptr
        self.nbytes = nbytes  # what was asked
        self.size = size  # what the block holds (its bin, or the exact size of a large block)
        self.raw = raw
        self.pool = pool
        self.released = False

    def release(self) -> None:
        """Give the block back now (idempotent); tensors still pointing at it must not be used again."""
        if not self.released:
            self.released = True
            self.pool._release(self)

    def __del__(self):
        with contextlib.suppress(Exception):  # at interpreter exit the pool may already be gone
            self.release()

    def __repr__(self) -> str:
        return f"PoolBlock(ptr=0x{self.ptr:x}, nbytes={self.nbytes}, size={self.size})"


class BinnedPool:
    """A caching allocator of device blocks.

    - A request of up to 16 MiB is rounded up to a power-of-two bin (512 B .. 16 MiB) and served from that
      bin's free list, or by a new raw block of the bin's size; a released block goes back to its bin.
    - A larger request gets a raw block of its own size, returned to the raw allocator when released (the
      raw allocator, a stream-ordered pool, does its own caching).
    - When a raw allocation fails with ``MemoryError``, every cached block is freed and the request is
      retried once; a second failure propagates.

    A block released by the garbage collector is only queued (a finalizer may run in the middle of any
    allocation, even one of this pool); the queue is drained by the next :meth:`acquire`, :meth:`stats`
    or :meth:`clear`. While ``hold_frees`` is set (during a CUDA graph capture) raw frees are queued too,
    and :meth:`flush` performs them.

    Parameters
    ----------
    raw_alloc : callable
        ``raw_alloc(size) -> (pointer, handle)``; raises ``MemoryError`` when out of memory.
    raw_free : callable
        ``raw_free(handle)``.
    on_change : callable, optional
        ``on_change(delta_bytes)`` with the change of the bytes handed out (for the backend's statistics).
    """

    def __init__(
        self, raw_alloc: RawAlloc, raw_free: RawFree, *, on_change: Callable[[int], None] | None = None
    ):
        self._raw_alloc = raw_alloc
        self._raw_free = raw_free
        self._on_change = on_change
        self._free: dict[int, list[tuple[int, Any]]] = {size: [] for size in BIN_SIZES}
        self._lock = threading.RLock()
        self._deferred: list[Any] = []
        self._returned: deque[PoolBlock | tuple] = deque()  # released blocks not yet accounted
        self.hold_frees = False
        self.in_use_bytes = 0
        self.in_use_blocks = 0
        self.raw_bytes = 0  # bytes currently obtained from the raw allocator (in use + cached)

    # -- public ------------------------------------------------------------------------------------
    def acquire(self, nbytes: int) -> PoolBlock:
        """A block of at least ``nbytes`` bytes (``nbytes`` may be 0: a 512 B block)."""
        if self._returned:
            self.drain()
        nbytes = int(nbytes)
        # bin_size() inlined: this runs once per output of every run.
        if nbytes <= MAX_BIN:
            if nbytes < 0:
                raise ValueError(f"a block size must be >= 0 (got {nbytes})")
            size = MIN_BIN if nbytes <= MIN_BIN else 1 << (nbytes - 1).bit_length()
            with self._lock:
                cached = self._free[size]
                if cached:
                    ptr, raw = cached.pop()
                    self.in_use_bytes += size
                    self.in_use_blocks += 1
                    block = PoolBlock(ptr, nbytes, size, raw, self)
                else:
                    block = None
            if block is None:
                ptr, raw = self._raw(size)
                block = self._count(PoolBlock(ptr, nbytes, size, raw, self))
        else:
            ptr, raw = self._raw(nbytes)
            block = self._count(PoolBlock(ptr, nbytes, nbytes, raw, self))
        if self._on_change is not None:
            self._on_change(block.size)
        return block

    def _count(self, block: PoolBlock) -> PoolBlock:
        with self._lock:
            self.in_use_bytes += block.size
            self.in_use_blocks += 1
        return block

    def clear(self) -> int:
        """Free every cached block (and the queued frees unless frees are held); returns the bytes freed."""
        self.drain()
        with self._lock:
            entries = [e for size in BIN_SIZES for e in self._free[size]]
            sizes = [size for size in BIN_SIZES for _ in self._free[size]]
            for size in BIN_SIZES:
                self._free[size] = []
        freed = 0
        for (_, raw), size in zip(entries, sizes, strict=True):
            self._free_raw(raw, size)
            freed += size
        if not self.hold_frees:
            self.flush()
        return freed

    def flush(self) -> None:
        """Perform the raw frees queued while ``hold_frees`` was set."""
        with self._lock:
            queued, self._deferred = self._deferred, []
        for raw, size in queued:
            self._free_raw(raw, size)

    def stats(self) -> dict[str, Any]:
        """``in_use_bytes``, ``in_use_blocks``, ``cached_bytes``, ``raw_bytes`` and ``bins`` (bin size ->
        number of cached blocks, for every bin that holds one)."""
        self.drain()
        with self._lock:
            bins = {size: len(v) for size, v in self._free.items() if v}
            return {
                "in_use_bytes": self.in_use_bytes,
                "in_use_blocks": self.in_use_blocks,
                "cached_bytes": sum(size * n for size, n in bins.items()),
                "raw_bytes": self.raw_bytes,
                "bins": bins,
            }

    # -- internals ---------------------------------------------------------------------------------
    def _raw(self, size: int) -> tuple[int, Any]:
        try:
            entry = self._raw_alloc(size)
        except MemoryError:
            # Cached blocks of other bins may be what stands between us and success: free them, retry.
            if not self.clear():
                raise
            entry = self._raw_alloc(size)
        with self._lock:
            self.raw_bytes += size
        return entry

    def _free_raw(self, raw: Any, size: int) -> None:
        with self._lock:
            if self.hold_frees:
                self._deferred.append((raw, size))
                return
            self.raw_bytes -= size
        self._raw_free(raw)

    def _release(self, block: PoolBlock) -> None:
        # Only queue it: this may run inside a finalizer, in the middle of another pool operation.
        self._returned.append((block.ptr, block.raw, block.size, block.nbytes))

    def drain(self) -> None:
        """Account the released blocks: binned ones go back to their free list, large ones are freed."""
        returned, large = self._returned, []
        delta = 0
        with self._lock:
            while returned:
                try:
                    ptr, raw, size, nbytes = returned.popleft()
                except IndexError:  # another thread drained it
                    break
                self.in_use_bytes -= size
                self.in_use_blocks -= 1
                delta -= size
                if nbytes <= MAX_BIN:  # cache it for the next request of its bin
                    self._free[size].append((ptr, raw))
                else:
                    large.append((raw, size))
        for raw, size in large:
            self._free_raw(raw, size)
        if delta and self._on_change is not None:
            self._on_change(delta)
