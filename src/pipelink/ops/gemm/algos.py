"""Choosing one product's cuBLASLt algorithm among the heuristic's candidates, by timing them at bind.

Pure Python, no device: when timing is worth it (:func:`worth_timing`), how candidates are timed and the
fastest kept (:func:`choose_fastest`: a failure scores ``inf``, as in Triton's autotuner), and the
process's memory of choices (:data:`CHOICES`), so a second bind of the same product (a second load, the
plan a ``.plk`` compile makes, the native path's compile) takes the same algorithm without timing again.
``gemm/lt.py`` does the timing on the device; nothing here may ever run during a run or a capture.
"""

from __future__ import annotations

import math
import os
import statistics
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass

__all__ = [
    "CANDIDATES",
    "CHOICES",
    "NEAR_TIE",
    "ROUNDS",
    "TIMING_MIN_BYTES",
    "TIMING_MIN_FLOPS",
    "AlgoChoice",
    "ChoiceMemo",
    "calls_per_sample",
    "choose_fastest",
    "is_large",
    "timing_enabled",
    "worth_timing",
]

#: How many heuristic results a bind asks for and times. cuBLASLt orders them by its own estimate; on the
#: H200 the fastest fp32 algorithm of the GPT-2 block's products sits within its first few (measured
#: with scripts/gemm_algos.py, which lists 16).
CANDIDATES = 8

#: Products below this are not timed: the heuristic's first is kept. 2^30 FLOP is ~20 us of fp32 SIMT on
#: an H200 (~50 TFLOP/s) and ~2 us on its bf16 tensor cores. Below it a product is launch-bound: launch
#: overhead and event resolution (~1 us) blur the differences between algorithms, and what a better
#: algorithm saves per run is a few microseconds. Above it timing costs a few milliseconds per distinct
#: product, once per process (the memo), against up to ~30% of a product that takes hundreds of
#: microseconds per run (the GPT-2 block's four fp32 GEMMs: 0.17-0.47 ms each at batch 32).
TIMING_MIN_FLOPS = 1 << 30

#: ... or, for a product on the SIMT cores (fp32 with TF32 off, fp64), a product whose operands span at
#: least this many bytes: a few rows against a large weight (a decode step, the T=8 MLP block) is bound
#: by reading the weight, and the small product's workspace cap (``lt.workspace_limit``) withholds the
#: split-K algorithms that read it fastest. H200, the service benchmark's T=8 MLP block (d=1024, 16 MiB
#: fp32 weights, 67 MFLOP a product): one thread 12.4k -> 22.6k runs/s, 16 threads 44.3k -> 68.1k. Not
#: for tensor-core products: the bf16 block's (8 MiB weights), measured the same way in one run, kept
#: one thread's rate (25-30k) but lost 16 threads' (137-142k -> 108-112k; 311k -> 156-172k with graphs),
#: split-K's extra CTAs and reduction contending across streams. 8 MiB is ~2 us of HBM traffic.
TIMING_MIN_BYTES = 8 << 20

#: Rounds over the candidates (interleaved, so clock and thermal drift weigh on all alike); the median
#: of each candidate's samples is its time.
ROUNDS = 3

#: A candidate within this fraction of the fastest counts as a tie, and among ties the heuristic's
#: order decides: the choice stays the same from one process to the next unless a candidate is clearly
#: faster (timing noise on a loaded GPU is ~1-2%).
NEAR_TIE = 0.02

#: Enough work per timed sample that event resolution and launch gaps do not matter (~100-300 us of
#: fp32 work on an H200), but never more than this many calls per sample.
_SAMPLE_FLOPS = 1 << 34
_MAX_CALLS_PER_SAMPLE = 32


def timing_enabled() -> bool:
    """False when ``PIPELINK_GEMM_TIMING=0``: every product then takes the heuristic's first algorithm
    (deterministic, no work at bind)."""
    return os.environ.get("PIPELINK_GEMM_TIMING", "1").strip() not in ("0", "off", "false", "no")


def is_large(flops: float, nbytes: float = 0, *, on_tensor_cores: bool = False) -> bool:
    """Whether a product of ``flops`` over operands of ``nbytes`` is large enough to be worth choosing its
    algorithm for (:data:`TIMING_MIN_FLOPS`; :data:`TIMING_MIN_BYTES` off the tensor cores)."""
    return flops >= TIMING_MIN_FLOPS or (not on_tensor_cores and nbytes >= TIMING_MIN_BYTES)


def worth_timing(flops: float, candidates: int, nbytes: float = 0, *, on_tensor_cores: bool = False) -> bool:
    """Whether a product of ``flops`` over ``nbytes`` of operands with ``candidates`` heuristic results is
    timed at bind (:func:`is_large`)."""
    return candidates > 1 and is_large(flops, nbytes, on_tensor_cores=on_tensor_cores) and timing_enabled()


def calls_per_sample(flops: float) -> int:
    """How many back-to-back calls one timed sample of a product of ``flops`` makes (1 to 32)."""
    if flops <= 0:
        return _MAX_CALLS_PER_SAMPLE
    return max(1, min(_MAX_CALLS_PER_SAMPLE, math.ceil(_SAMPLE_FLOPS / flops)))


@dataclass(frozen=True)
class AlgoChoice:
    """The algorithm a product runs: its ``rank`` in the heuristic's list (0: cuBLASLt's first) and the
    ``workspace`` bytes that candidate needs. ``source`` is ``"heuristic"`` (not timed: one candidate, a
    small product, timing off or impossible), ``"timed"`` (timed at this bind) or ``"memo"`` (timed by an
    earlier bind of the same product in this process); ``times_s`` the seconds per call of each candidate
    when timed (``inf``: it failed), ``why`` a word on the choice for logs and reports."""

    rank: int
    workspace: int
    source: str = "heuristic"
    times_s: tuple[float, ...] = ()
    why: str = ""


def choose_fastest(
    count: int,
    measure: Callable[[int], float],
    *,
    rounds: int = ROUNDS,
    near_tie: float = NEAR_TIE,
) -> tuple[int, list[float]]:
    """Time ``count`` candidates and pick one.

    Each candidate is called once untimed (its warm-up: lazy kernel loading, first-call work), then
    ``rounds`` times in turn; a candidate whose warm-up or any sample raises scores ``inf`` and is not
    called again. Its time is the median of its samples. The pick is the lowest rank within ``near_tie``
    of the fastest; when every candidate failed it is rank 0 (the heuristic's first: the deterministic
    fallback).

    Parameters
    ----------
    count : int
        Number of candidates, ranked 0 (best by the heuristic) to ``count - 1``.
    measure : callable
        ``measure(rank)`` runs candidate ``rank`` and returns seconds per call (may raise).

    Returns
    -------
    rank : int
        The chosen candidate.
    times : list of float
        Seconds per call of each candidate (``inf`` for a failed one).
    """
    failed = [False] * count
    samples: list[list[float]] = [[] for _ in range(count)]
    for rank in range(count):
        try:
            measure(rank)
        except Exception:  # noqa: BLE001 - any failure disqualifies this candidate, not the search
            failed[rank] = True
    for _ in range(rounds):
        for rank in range(count):
            if failed[rank]:
                continue
            try:
                t = float(measure(rank))
            except Exception:  # noqa: BLE001 - as above
                failed[rank] = True
                continue
            if not math.isfinite(t) or t < 0:
                failed[rank] = True
            else:
                samples[rank].append(t)
    times = [math.inf if failed[r] or not samples[r] else statistics.median(samples[r]) for r in range(count)]
    best = min(times, default=math.inf)
    if not math.isfinite(best):
        return 0, times
    pick = next(r for r, t in enumerate(times) if t <= best * (1.0 + near_tie))
    return pick, times


class ChoiceMemo:
    """The choices made in this process, by a key holding everything the heuristic's list depends on
    (the device, the product's types, transposes, epilogue, layouts, alignments and workspace limit).
    Thread-safe; never persisted (a new process times again, once per distinct product)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._choices: dict[Hashable, AlgoChoice] = {}

    def get(self, key: Hashable) -> AlgoChoice | None:
        with self._lock:
            return self._choices.get(key)

    def put(self, key: Hashable, choice: AlgoChoice) -> None:
        with self._lock:
            self._choices[key] = choice

    def clear(self) -> None:
        with self._lock:
            self._choices.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._choices)


#: The process's memo of timed choices (ops/gemm/lt.py reads and fills it).
CHOICES = ChoiceMemo()
