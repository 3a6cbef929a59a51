"""The memory planner: buffer lifetimes packed into one arena (seed section 3.2; docs/architecture.md,
"From JSON to kernel").

Algorithm (offline, in step order):
- each buffer is live from the step that writes it to the last step that reads it;
- at each step, buffers that die are returned to a free list (coalescing neighbours) and new buffers take
  the best-fitting free block (smallest that fits, split), else the arena grows at its end;
- if the packed arena were ever larger than the no-reuse layout, the no-reuse layout is used instead;
- a request that aliases another (``alias_of``: a stage run as a view) takes no space: it sits at its
  source's offset, and the source lives on until the alias's last reader.
Offsets are aligned to each buffer's alignment (the stage's ``memory_alignment``). In checked mode every
buffer is followed by ``guard_bytes`` of its own (canary bytes that catch a kernel writing past it).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace

__all__ = ["BufferRequest", "PlannedBuffer", "MemoryPlan", "plan_memory", "align_up"]


def align_up(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


@dataclass(frozen=True)
class BufferRequest:
    """A buffer the plan must place: ``nbytes`` live over steps ``[first, last]`` (inclusive)."""

    name: str
    nbytes: int
    first: int
    last: int
    alignment: int = 256
    alias_of: str = ""  # the buffer whose memory this one is (a view stage's output), "" for its own


@dataclass(frozen=True)
class PlannedBuffer:
    name: str
    offset: int
    nbytes: int
    first: int
    last: int
    alignment: int
    guard: int = 0  # canary bytes reserved right after the buffer (checked mode)
    alias_of: str = ""  # the buffer whose bytes these are ("" when it has its own)

    @property
    def end(self) -> int:
        """One past the last byte the buffer holds, its guard included."""
        return self.offset + self.nbytes + self.guard

    def overlaps_in_time(self, other: PlannedBuffer) -> bool:
        return self.first <= other.last and other.first <= self.last

    def overlaps_in_space(self, other: PlannedBuffer) -> bool:
        return self.offset < other.end and other.offset < self.end


@dataclass(frozen=True)
class MemoryPlan:
    """Where every intermediate buffer lives in the arena.

    Attributes
    ----------
    peak_bytes : int
        Arena size the plan needs.
    naive_bytes : int
        Bytes needed with no reuse (every buffer its own aligned slot).
    buffers : dict of name -> PlannedBuffer
        Aliases included, at their source's offset.
    """

    buffers: dict[str, PlannedBuffer]
    peak_bytes: int
    naive_bytes: int

    @property
    def views(self) -> dict[str, str]:
        """Buffers that are views of another (a stage run as a view): name -> the buffer owning the bytes."""
        return {b.name: b.alias_of for b in self.buffers.values() if b.alias_of}

    @property
    def view_bytes(self) -> int:
        """Arena bytes the views save: what their buffers would take with a copy each."""
        return sum(b.nbytes for b in self.buffers.values() if b.alias_of)

    @property
    def reuse_ratio(self) -> float:
        return self.peak_bytes / self.naive_bytes if self.naive_bytes else 1.0

    def __repr__(self) -> str:
        return (
            f"MemoryPlan({len(self.buffers)} buffers, peak_bytes={self.peak_bytes}, "
            f"naive_bytes={self.naive_bytes}, views={len(self.views)}, view_bytes={self.view_bytes})"
        )

    def table(self) -> list[dict]:
        return [
            dict(
                name=b.name, offset=b.offset, nbytes=b.nbytes, first=b.first, last=b.last, alias_of=b.alias_of
            )
            for b in sorted(self.buffers.values(), key=lambda b: (b.offset, b.first))
        ]


def _naive(requests: list[BufferRequest]) -> dict[str, int]:
    offsets, end = {}, 0
    for r in requests:
        start = align_up(end, r.alignment)
        offsets[r.name] = start
        end = start + r.nbytes
    return offsets


def plan_memory(requests: list[BufferRequest], *, guard_bytes: int = 0) -> MemoryPlan:
    """Pack buffers with best fit over their lifetimes (see the module docstring); each buffer owns the
    ``guard_bytes`` after it. Aliases name a request that is not itself an alias."""
    for r in requests:
        if r.nbytes < 0 or r.first > r.last or r.alignment <= 0 or r.alignment & (r.alignment - 1):
            raise ValueError(f"bad buffer request {r}")
    aliases = [r for r in requests if r.alias_of]
    requests = [r for r in requests if not r.alias_of]
    owners = {r.name: r for r in requests}
    for a in aliases:
        owner = owners.get(a.alias_of)
        if owner is None or a.nbytes > owner.nbytes or a.first < owner.first:
            raise ValueError(f"bad alias request {a}: it must view an earlier buffer at least as large")
        owners[owner.name] = owner = replace(owner, last=max(owner.last, a.last))
    requests = [owners[r.name] for r in requests]
    if guard_bytes < 0:
        raise ValueError(f"guard_bytes must be >= 0 (got {guard_bytes})")
    sizes = {r.name: r.nbytes for r in requests}
    requests = [replace(r, nbytes=r.nbytes + guard_bytes) for r in requests] if guard_bytes else requests
    naive_offsets = _naive(requests)
    naive_bytes = max((naive_offsets[r.name] + r.nbytes for r in requests), default=0)

    free = _FreeBlocks()
    arena_end = 0
    offsets: dict[str, int] = {}
    by_first: dict[int, list[BufferRequest]] = {}
    by_last: dict[int, list[BufferRequest]] = {}
    for r in requests:
        by_first.setdefault(r.first, []).append(r)
        by_last.setdefault(r.last, []).append(r)
    steps = sorted(set(by_first) | set(by_last))
    for step in steps:
        # Larger buffers first: they are the hardest to fit.
        for r in sorted(by_first.get(step, ()), key=lambda r: (-r.nbytes, r.name)):
            offsets[r.name], arena_end = _place(free, arena_end, r)
        for r in by_last.get(step, ()):
            free.release(offsets[r.name], offsets[r.name] + r.nbytes)
    peak = max((offsets[r.name] + r.nbytes for r in requests), default=0)
    if peak > naive_bytes:
        offsets, peak = naive_offsets, naive_bytes
    buffers = {
        r.name: PlannedBuffer(
            r.name, offsets[r.name], sizes[r.name], r.first, r.last, r.alignment, guard_bytes
        )
        for r in requests
    }
    for a in aliases:
        buffers[a.name] = PlannedBuffer(
            a.name, offsets[a.alias_of], a.nbytes, a.first, a.last, a.alignment, alias_of=a.alias_of
        )
    return MemoryPlan(buffers, peak, naive_bytes)


class _FreeBlocks:
    """The free ``[start, end)`` blocks, coalesced, held twice: by address (``blocks``: neighbours and the
    arena's tail) and by ``(size, start)`` (``by_size``: best fit by bisection, not a scan; a pipeline of
    thousands of like-sized tensors, an unrolled LSTM's, keeps a long free list, and scanning it was most
    of its load time)."""

    def __init__(self) -> None:
        self.blocks: list[list[int]] = []
        self.by_size: list[tuple[int, int]] = []

    def _insert(self, i: int, start: int, end: int) -> None:
        self.blocks.insert(i, [start, end])
        bisect.insort(self.by_size, (end - start, start))

    def _remove(self, i: int) -> tuple[int, int]:
        start, end = self.blocks.pop(i)
        del self.by_size[bisect.bisect_left(self.by_size, (end - start, start))]
        return start, end

    def release(self, start: int, end: int) -> None:
        """Return ``[start, end)``, merged with the free blocks it touches."""
        if end <= start:
            return
        i = bisect.bisect_left(self.blocks, [start])  # the first block starting at or after start
        if i < len(self.blocks) and self.blocks[i][0] == end:
            end = self._remove(i)[1]
        if i > 0 and self.blocks[i - 1][1] == start:
            start = self._remove(i - 1)[0]
            i -= 1
        self._insert(i, start, end)

    def take_best_fit(self, nbytes: int, alignment: int) -> int | None:
        """The offset of ``nbytes`` in the smallest free block it fits (aligned), the lowest of equals,
        with the block's rest freed again; None when none fits."""
        for size, start in self.by_size[bisect.bisect_left(self.by_size, (nbytes, -1)) :]:
            offset = align_up(start, alignment)
            if offset + nbytes <= start + size:
                self._remove(bisect.bisect_left(self.blocks, [start]))
                self.release(start, offset)
                self.release(offset + nbytes, start + size)
                return offset
        return None

    def take_tail(self, arena_end: int) -> int:
        """Where growing the arena starts: the free block touching its end, taken, else the end."""
        if self.blocks and self.blocks[-1][1] == arena_end:
            return self._remove(len(self.blocks) - 1)[0]
        return arena_end


def _place(free: _FreeBlocks, arena_end: int, r: BufferRequest) -> tuple[int, int]:
    offset = free.take_best_fit(r.nbytes, r.alignment)
    if offset is not None:
        return offset, arena_end
    tail = free.take_tail(arena_end)  # grow, reusing a free block at the arena's end
    offset = align_up(tail, r.alignment)
    free.release(tail, offset)
    return offset, offset + r.nbytes
