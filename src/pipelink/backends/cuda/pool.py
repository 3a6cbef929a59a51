"""The CUDA backend's pooled allocator for per-run tensors (outputs, ``pl.empty``): size bins over a raw
allocator.

Its body is C (``_pool.c``, built at install): every output of every run comes from it, and ``run()``'s
hot path (``runtime/_hotpath.c``) takes blocks without running Python code. It works over two Python
callables (raw allocate, raw free), so its bookkeeping is tested on the CPU with a fake allocator. It never
calls CUDA itself and never returns a block to the raw allocator while a live tensor owns it.

:class:`BinnedPool`

- A request of up to 16 MiB is rounded up to a power-of-two bin (512 B .. 16 MiB) and served from that
  bin's free list, or by a new raw block of the bin's size; a released block goes back to its bin at once.
- Blocks are handed out for a stream (``acquire(nbytes, stream=tag)``; ``stream_tag(handle)`` is the tag of a
  stream by its raw handle, and 0, the default, the backend's main stream's), and a cached block is reused
  only for the stream it was last handed out for: that stream's order queues the new work after the old,
  which another stream's would not (a run whose output was dropped may still be writing it). PyTorch's
  caching allocator does the same.
- A larger request gets a raw block of its own size; once released, it goes back to the raw allocator at
  the pool's next call (a finalizer never calls the raw allocator; the raw allocator, a stream-ordered
  pool, does its own caching).
- When a raw allocation fails with ``MemoryError``, every cached block is freed and the request is
  retried once; a second failure propagates.
- While ``hold_frees`` is set (during a CUDA graph capture) raw frees are held, and :meth:`flush` performs
  them. ``base_bytes`` (the arenas beside the pool) and ``peak_bytes`` (the most of ``base_bytes`` +
  ``in_use_bytes`` seen) give the device's peak; ``on_change(delta_bytes)``, optional, hears every change
  of the bytes handed out (reported at the pool's next call for releases).

``BinnedPool(raw_alloc, raw_free, *, on_change=None)``: ``raw_alloc(size) -> (pointer, handle)`` raises
``MemoryError`` when out of memory; ``raw_free(handle)``. A :class:`PoolBlock` has ``ptr``, ``nbytes`` (what
was asked), ``size`` (what it holds), ``raw``, ``stream`` (its tag), ``released`` and ``release()``; a
``pl.Tensor`` returned to the user holds its block as ``_owner``, so dropping the last tensor (and view) of a
block releases it.
"""

from __future__ import annotations

from ...errors import ModuleLoadError

__all__ = ["MIN_BIN", "MAX_BIN", "BIN_SIZES", "bin_size", "stream_tag", "PoolBlock", "BinnedPool"]

MIN_BIN = 512
MAX_BIN = 16 << 20
BIN_SIZES: tuple[int, ...] = tuple(1 << k for k in range(MIN_BIN.bit_length() - 1, MAX_BIN.bit_length()))


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


try:
    from ._pool import MAX_BIN as _C_MAX_BIN
    from ._pool import MIN_BIN as _C_MIN_BIN
    from ._pool import BinnedPool, PoolBlock, stream_tag
except ImportError as _e:  # not built: no C compiler when PipeLink was installed
    _MISSING = str(_e)

    class BinnedPool:  # type: ignore[no-redef]
        """Stands in for the C pool when it was not built: using it says how to build it."""

        def __init__(self, *args, **kwargs):
            raise ModuleLoadError(
                f"PipeLink's C extension pipelink.backends.cuda._pool is not built ({_MISSING}): no C "
                "compiler was found when PipeLink was installed. Install gcc or clang and reinstall PipeLink "
                "(or run `python -m pipelink.native.build` in a checkout)"
            )

    PoolBlock = None  # type: ignore[assignment,misc]
    stream_tag = None  # type: ignore[assignment]  # no pool, no tags: the backend cannot start without it
else:
    if (_C_MIN_BIN, _C_MAX_BIN) != (MIN_BIN, MAX_BIN):
        raise ImportError(f"_pool.c's bins {(_C_MIN_BIN, _C_MAX_BIN)} are not pool.py's: rebuild PipeLink")
