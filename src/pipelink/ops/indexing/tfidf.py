"""tfidf_vectorizer (ONNX TfIdfVectorizer on integer tokens): the descriptor, the checks of its n-gram pool
at load, and its NumPy reference, a host computation (no CUDA kernel: on CUDA it runs on staged host
copies, the family's ``HOST_ONLY``).

The pool holds the n-grams counted, 1-grams first: ``ngram_counts[i]`` is where the (i + 1)-grams start
in ``pool_int64s``. The n-grams are numbered 1, 2, ... through the pool in order (the levels outside
``[min_gram_length, max_gram_length]`` keep their numbers but are not counted), and n-gram ``k`` counts
into output column ``ngram_indexes[k - 1]``; an n-gram the pool holds twice counts into the column of its
last occurrence (as onnx's reference and onnxruntime build their tables). Each row of x is scanned for
every n in that range: 1-grams once, longer ones at every skip ``d`` in ``1 .. max_skip_count + 1`` (the
tokens ``s, s + d, ..., s + (n - 1) d``). ``mode`` weighs the counts: TF the counts, IDF
``weights[column]`` where the count is nonzero (1 without weights), TFIDF ``weights[column] * count``; the
weights apply per output column, as onnx's reference and onnxruntime apply them. Never allocates at run
time beyond the matching of one level.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...descriptor import REQUIRED, Attr, KernelContext, OperatorDescriptor, Port
from ...errors import InvalidArgumentError, ShapeMismatchError
from ...limits import check_fits, shape_nbytes, total_bytes
from .._common import builtin_operator

__all__ = ["HOST_ONLY", "MAX_POOL", "MAX_COLUMNS", "TFIDF_MODES", "ngram_levels", "descriptors"]

HOST_ONLY = ("tfidf_vectorizer",)
"""This file's operators have no CUDA kernel: on CUDA their NumPy reference runs on staged host copies."""
TFIDF_MODES = ("TF", "IDF", "TFIDF")
MAX_POOL = 1 << 24
"""The most tokens ``pool_int64s`` may hold (its tables are built on the host at bind)."""
MAX_COLUMNS = 1 << 31
"""``ngram_indexes`` are output columns below this (an int32 index)."""
TOKENS = frozenset({"int32", "int64"})


def _refuse(message: str, attr: str, got: Any = None) -> InvalidArgumentError:
    return InvalidArgumentError(f"tfidf_vectorizer: {message}", attr=attr, got=got)


def ngram_levels(attrs: Mapping[str, Any]) -> tuple[list[tuple[int, np.ndarray, np.ndarray]], int]:
    """The pool's levels that count, and the output's width.

    Returns
    -------
    (levels, width)
        ``levels``: ``(n, grams, columns)`` for each n in ``[min_gram_length, max_gram_length]`` the pool
        holds n-grams of: ``grams`` ``[m, n]`` int64, distinct, ``columns`` ``[m]`` their output columns
        (a duplicate's last). ``width``: ``max(ngram_indexes) + 1``.

    Raises
    ------
    InvalidArgumentError
        Gram lengths below 1 or min above max, a negative skip count, ``ngram_counts`` not starting at 0,
        decreasing or past the pool, a level whose length is not a multiple of its n, ``ngram_indexes``
        empty, negative, at or past :data:`MAX_COLUMNS` or not one per n-gram, ``weights`` with mode TF,
        not one per n-gram or fewer than the columns, a pool of more than :data:`MAX_POOL` tokens.
    """
    lo, hi, skips = int(attrs["min_gram_length"]), int(attrs["max_gram_length"]), int(attrs["max_skip_count"])
    if lo < 1 or hi < lo:
        raise _refuse(
            f"gram lengths must be 1 <= min_gram_length <= max_gram_length (got {lo} and {hi})",
            "min_gram_length",
            [lo, hi],
        )
    if skips < 0:
        raise _refuse(f"'max_skip_count' must be >= 0 (got {skips})", "max_skip_count", skips)
    pool = np.asarray(attrs["pool_int64s"], dtype=np.int64).reshape(-1)
    if pool.size > MAX_POOL:
        raise _refuse(f"'pool_int64s' holds {pool.size} tokens, more than {MAX_POOL}", "pool_int64s")
    starts = [int(c) for c in attrs["ngram_counts"]]
    bounds = starts + [pool.size]
    if not starts or starts[0] != 0 or any(b < a for a, b in zip(bounds, bounds[1:], strict=False)):
        raise _refuse(
            f"'ngram_counts' must be where each level starts in the pool of {pool.size} tokens: from 0, "
            f"non-decreasing, at most {pool.size} (got {starts})",
            "ngram_counts",
            starts,
        )
    indexes = np.asarray(attrs["ngram_indexes"], dtype=np.int64).reshape(-1)
    sizes = []
    for level, (a, b) in enumerate(zip(bounds, bounds[1:], strict=False)):
        if (b - a) % (level + 1):
            raise _refuse(
                f"level {level + 1} of the pool ({level + 1}-grams, tokens {a}..{b}) holds {b - a} tokens, "
                f"not a multiple of {level + 1}",
                "ngram_counts",
                starts,
            )
        sizes.append((b - a) // (level + 1))
    if indexes.size != sum(sizes) or not indexes.size:
        raise _refuse(
            f"'ngram_indexes' needs one output column per n-gram of the pool ({sum(sizes)}, at least 1; "
            f"got {indexes.size})",
            "ngram_indexes",
        )
    if indexes.min() < 0 or indexes.max() >= MAX_COLUMNS:
        raise _refuse(
            f"'ngram_indexes' must be output columns in [0, {MAX_COLUMNS}) (got {indexes.min()} .. "
            f"{indexes.max()})",
            "ngram_indexes",
        )
    width = int(indexes.max()) + 1
    weights = list(attrs["weights"])
    if weights and attrs["mode"] == "TF":
        raise _refuse("'weights' apply to modes IDF and TFIDF, not TF (the counts); drop them", "weights")
    if weights and (len(weights) != indexes.size or len(weights) < width):
        raise _refuse(
            f"'weights' needs one weight per n-gram ({indexes.size}), applied per output column, so at "
            f"least {width} (got {len(weights)}); or none",
            "weights",
        )
    levels, first = [], 0
    for level, count in enumerate(sizes):
        n = level + 1
        if count and lo <= n <= hi:
            grams = pool[bounds[level] : bounds[level + 1]].reshape(count, n)
            columns = indexes[first : first + count]
            # a repeated n-gram counts into its last occurrence's column: keep the last of each
            _, last = np.unique(grams[::-1], axis=0, return_index=True)
            keep = np.sort(count - 1 - last)
            levels.append((n, np.ascontiguousarray(grams[keep]), columns[keep]))
        first += count
    return levels, width


def infer_tfidf_vectorizer(
    in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]
) -> tuple[tuple, tuple]:
    """Output rule: ``[width]`` for x ``[C]``, ``[N, width]`` for x ``[N, C]`` (``width =
    max(ngram_indexes) + 1``), float32; the attributes checked by :func:`ngram_levels`.

    Raises
    ------
    ShapeMismatchError
        x not 1-d or 2-d.
    """
    shape = tuple(in_shapes[0])
    if len(shape) not in (1, 2):
        raise ShapeMismatchError(
            f"tfidf_vectorizer: input 'x' must be [C] or [N, C] (got shape {list(shape)})",
            port="x",
            got=list(shape),
        )
    _, width = ngram_levels(attrs)
    return (shape[:-1] + (width,),), ("float32",)


class _Level:
    """One level's n-grams as fixed-size byte strings, sorted, to find windows of x among them."""

    def __init__(self, n: int, grams: np.ndarray, columns: np.ndarray):
        self.n = n
        self.kind = np.dtype((np.void, 8 * n))
        keys = grams.view(self.kind).reshape(-1)
        order = np.argsort(keys, kind="stable")
        self.keys, self.columns = keys[order], columns[order]

    def columns_of(self, windows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(which, columns)``: the windows (``[..., n]`` int64) that are n-grams, and their columns."""
        keys = np.ascontiguousarray(windows).view(self.kind).reshape(-1)
        at = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
        found = self.keys[at] == keys
        return np.flatnonzero(found), self.columns[at[found]]


def _tfidf_bind(ctx: KernelContext):
    shape = tuple(ctx.in_shapes[0])
    rows, length = (1, shape[0]) if len(shape) == 1 else shape
    levels, width = ngram_levels(ctx.attrs)
    mode, skips = ctx.attrs["mode"], int(ctx.attrs["max_skip_count"])
    weights = np.asarray(ctx.attrs["weights"], np.float32)[:width] if ctx.attrs["weights"] else None
    tables = [_Level(n, grams, columns) for n, grams, columns in levels]
    check_fits(
        shape_nbytes((rows, width), 8),
        f"stage {ctx.stage!r} tfidf_vectorizer counts ({rows} x {width})",
        limit=total_bytes("cpu"),
    )
    counts = np.zeros((rows, width), np.int64)
    tokens = np.empty((rows, length), np.int64)

    def kernel(inputs, outputs, stream):
        np.copyto(tokens, inputs[0].reshape(rows, length))
        counts.fill(0)
        for table in tables:
            n = table.n
            for d in range(1, (skips + 1 if n > 1 else 1) + 1):  # 1-grams once: a skip changes nothing
                starts = length - (n - 1) * d
                if starts <= 0:
                    break
                windows = np.stack([tokens[:, j * d : j * d + starts] for j in range(n)], axis=-1)
                which, columns = table.columns_of(windows)
                np.add.at(counts, (which // starts, columns), 1)
        y = outputs[0].reshape(rows, width)
        if mode == "TF" or (mode == "TFIDF" and weights is None):
            np.copyto(y, counts, casting="unsafe")
        elif mode == "IDF":
            np.copyto(y, np.float32(1) if weights is None else weights, casting="unsafe")
            y[counts == 0] = 0
        else:  # TFIDF with weights: the weight of the column times its count, rounded once
            np.multiply(counts, weights, out=y, casting="unsafe")

    return kernel


def descriptors() -> list[OperatorDescriptor]:
    """A fresh descriptor of tfidf_vectorizer (one per registry)."""
    return [
        builtin_operator(
            "tfidf_vectorizer",
            doc="Count the pool's n-grams (with skips) in each row of integer tokens, weighted as TF, IDF "
            "or TF-IDF, into the columns ngram_indexes gives (ONNX TfIdfVectorizer, integer pools).",
            inputs=[Port("x", dtype=TOKENS, doc="[C] or [N, C] tokens")],
            outputs=[Port("y", dtype="float32", doc="[W] or [N, W], W = max(ngram_indexes) + 1")],
            attrs=[
                Attr("mode", "str", REQUIRED, choices=TFIDF_MODES, doc="TF counts, IDF weights, TFIDF both"),
                Attr("min_gram_length", "int", REQUIRED, doc="the shortest n-grams counted, >= 1"),
                Attr("max_gram_length", "int", REQUIRED, doc="the longest n-grams counted"),
                Attr("max_skip_count", "int", REQUIRED, doc="n >= 2: most tokens skipped between two"),
                Attr("ngram_counts", "ints", REQUIRED, doc="where 1-grams, 2-grams, ... start in the pool"),
                Attr("ngram_indexes", "ints", REQUIRED, doc="the output column of each n-gram of the pool"),
                Attr("pool_int64s", "ints", REQUIRED, doc="the n-grams' tokens, 1-grams first"),
                Attr("weights", "floats", (), doc="IDF, TFIDF: the weight of each column; none: 1"),
            ],
            infer=infer_tfidf_vectorizer,
            bind=_tfidf_bind,
            onnx="TfIdfVectorizer",
        )
    ]
