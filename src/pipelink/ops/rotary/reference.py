"""The rotary family's shape rule and NumPy reference: rotary_embedding (ONNX RotaryEmbedding, opset 23).

The rule (:func:`rotary_geometry`) is the one place the layouts are read: the reference, the CUDA plan and
the shape inference all take their batch, sequence, head and rotary sizes from it. The reference computes
in float32 (the half types too) and rounds once on the store; it never allocates per run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...descriptor import KernelContext
from ...errors import InvalidArgumentError, ShapeMismatchError
from ...shapes import unify
from .._dims import derived, is_known
from ..shape.rules import index_out_of_range

__all__ = [
    "RotaryGeometry",
    "rotary_geometry",
    "infer_rotary_embedding",
    "check_positions",
    "rotary_embedding_bind",
]

OP = "rotary_embedding"


@dataclass(frozen=True)
class RotaryGeometry:
    """How rotary_embedding reads x: ``batch`` x ``seq`` tokens of ``heads`` heads of ``head_size``, the
    first ``rotary_dim`` elements of each head rotated (``rotary_dim / 2`` pairs). ``heads_outer``: x is
    ``[B, H, S, D]`` (else ``[B, S, H * D]``). Dims may be symbols where the shape has them."""

    batch: Any
    seq: Any
    heads: Any
    head_size: Any
    rotary_dim: Any
    heads_outer: bool

    @property
    def half(self) -> Any:
        """Pairs rotated per head: one cos and one sin entry each."""
        return self.rotary_dim // 2 if is_known(self.rotary_dim) else derived(OP, f"{self.rotary_dim}/2")


def rotary_geometry(shape: tuple, attrs: Mapping[str, Any]) -> RotaryGeometry:
    """The geometry of x under rotary_embedding's attributes (``num_heads``, ``rotary_embedding_dim``).

    Raises
    ------
    ShapeMismatchError
        x is not 3-d or 4-d, its hidden size does not split into ``num_heads`` heads, or the rotary
        dimension is odd or larger than the head.
    InvalidArgumentError
        ``num_heads`` is missing for a 3-d x, negative, or differs from a 4-d x's heads;
        ``rotary_embedding_dim`` is negative.
    """
    shape = tuple(shape)
    num_heads, dim = int(attrs["num_heads"]), int(attrs["rotary_embedding_dim"])
    if len(shape) not in (3, 4):
        raise ShapeMismatchError(
            f"{OP}: input 'x' must be [B, S, hidden] (with num_heads) or [B, H, S, D] (got {list(shape)})",
            port="x",
            symbol="rank",
            expected="3 or 4",
            got=len(shape),
        )
    if num_heads < 0 or dim < 0:
        bad = "num_heads" if num_heads < 0 else "rotary_embedding_dim"
        raise InvalidArgumentError(
            f"{OP}: attribute {bad!r} must be >= 0 (got {attrs[bad]})", attr=bad, got=attrs[bad]
        )
    if len(shape) == 4:
        batch, heads, seq, head_size = shape
        if num_heads and is_known(heads) and num_heads != heads:
            raise InvalidArgumentError(
                f"{OP}: num_heads={num_heads} differs from the {heads} heads of x {list(shape)} "
                "([B, H, S, D]); leave it 0 for a 4-d x",
                attr="num_heads",
                got=num_heads,
            )
    else:
        batch, seq, hidden = shape
        if not num_heads:
            raise InvalidArgumentError(
                f"{OP}: a 3-d x {list(shape)} ([B, S, hidden]) needs num_heads > 0 to split its hidden size",
                attr="num_heads",
                got=num_heads,
            )
        if is_known(hidden) and hidden % num_heads:
            raise ShapeMismatchError(
                f"{OP}: hidden size {hidden} of x {list(shape)} does not split into num_heads={num_heads}",
                port="x",
                symbol="hidden",
                expected=f"a multiple of {num_heads}",
                got=hidden,
            )
        heads = num_heads
        head_size = hidden // num_heads if is_known(hidden) else derived(OP, f"{hidden}/{num_heads}")
    rotary = dim or head_size
    if is_known(rotary) and (rotary % 2 or (is_known(head_size) and rotary > head_size)):
        raise ShapeMismatchError(
            f"{OP}: the rotary dimension {rotary} must be even and at most the head size {head_size} "
            f"(rotary_embedding_dim={dim}, x {list(shape)})",
            port="x",
            symbol="D",
            expected=f"an even number <= {head_size}",
            got=rotary,
        )
    return RotaryGeometry(batch, seq, heads, head_size, rotary, len(shape) == 4)


def _cache_rule(cache: tuple, positions: tuple | None, geo: RotaryGeometry) -> tuple:
    """The shape each cache must have: ``[max_pos, rotary_dim/2]`` with position ids ``[B, S]``, else
    ``[B, S, rotary_dim/2]`` (max_pos taken from the cache itself)."""
    if positions is not None:
        return (cache[0] if len(cache) == 2 else "max_pos", geo.half)
    return (geo.batch, geo.seq, geo.half)


def infer_rotary_embedding(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple:
    """Output rule of rotary_embedding: y like x, after checking the caches and the position ids.

    Raises
    ------
    ShapeMismatchError
        A cache or the position ids do not have the shape the layout needs (see the descriptor), or
        :func:`rotary_geometry` refuses x.
    InvalidArgumentError
        As :func:`rotary_geometry`.
    """
    x, cos, sin, positions = in_shapes
    geo = rotary_geometry(x, attrs)
    if positions is not None and unify(tuple(positions), (geo.batch, geo.seq)) is None:
        raise ShapeMismatchError(
            f"{OP}: input 'position_ids' {list(positions)} must be [B, S] = {[geo.batch, geo.seq]} "
            f"(x {list(x)})",
            port="position_ids",
            symbol="S",
            expected=[geo.batch, geo.seq],
            got=list(positions),
        )
    for port, cache in (("cos_cache", tuple(cos)), ("sin_cache", tuple(sin))):
        want = _cache_rule(cache, positions, geo)
        if len(cache) != len(want) or unify(cache, want) is None:
            layout = (
                "[max_pos, rotary_dim/2] with position_ids"
                if positions is not None
                else "[B, S, rotary_dim/2]"
            )
            raise ShapeMismatchError(
                f"{OP}: input {port!r} {list(cache)} must be {layout} = {list(want)} (x {list(x)}, rotary "
                f"dim {geo.rotary_dim})",
                port=port,
                symbol="rotary_dim/2",
                expected=list(want),
                got=list(cache),
            )
    if unify(tuple(cos), tuple(sin)) is None:
        raise ShapeMismatchError(
            f"{OP}: cos_cache {list(cos)} and sin_cache {list(sin)} must have one shape",
            port="sin_cache",
            symbol="cache",
            expected=list(cos),
            got=list(sin),
        )
    return (tuple(x),), (in_dtypes[0],)


def check_positions(stage: str, positions: np.ndarray, max_pos: int) -> None:
    """Raise as gather does when a position id is outside ``[-max_pos, max_pos)`` (negative ids count from
    the cache's end, as NumPy indexing in ONNX's reference does).

    Raises
    ------
    InvalidArgumentError
        The first position id out of range, with the valid range.
    """
    bad = (positions < -max_pos) | (positions >= max_pos)
    if bad.any():
        first = positions.reshape(-1)[int(np.argmax(bad.reshape(-1)))]
        raise index_out_of_range(stage, int(first), 0, max_pos, op=f"{OP} position id (cache)")


def rotary_embedding_bind(ctx: KernelContext):
    """The NumPy kernel of one rotary_embedding stage (ONNX's reference, in float32)."""
    shape = tuple(ctx.in_shapes[0])
    geo = rotary_geometry(shape, ctx.attrs)
    b, s, h, d, rd, half = geo.batch, geo.seq, geo.heads, geo.head_size, geo.rotary_dim, geo.half
    has_positions = ctx.in_shapes[3] is not None
    max_pos = int(ctx.in_shapes[1][0]) if has_positions else 0
    interleaved = bool(ctx.attrs["interleaved"])
    pair = (b, s, h, half)
    x1, x2, real, imag, tmp = (np.empty(pair, np.float32) for _ in range(5))
    cos, sin = np.empty((b, s, 1, half), np.float32), np.empty((b, s, 1, half), np.float32)

    def tokens(a: np.ndarray) -> np.ndarray:
        """x or y as [B, S, H, D] (a view, no copy)."""
        return a.transpose(0, 2, 1, 3) if geo.heads_outer else a.reshape(b, s, h, d)

    def kernel(inputs, outputs, stream):
        x, cos_cache, sin_cache, positions = inputs
        xt, yt = tokens(x), tokens(outputs[0])
        if has_positions:
            check_positions(ctx.stage, positions, max_pos)
            cos_cache, sin_cache = cos_cache[positions], sin_cache[positions]
        np.copyto(cos, cos_cache[:, :, None, :], casting="unsafe")
        np.copyto(sin, sin_cache[:, :, None, :], casting="unsafe")
        # The two halves of each pair: even/odd elements (interleaved) or the first/second half.
        first, second = (
            (slice(0, rd, 2), slice(1, rd, 2)) if interleaved else (slice(0, half), slice(half, rd))
        )
        np.copyto(x1, xt[..., first], casting="unsafe")
        np.copyto(x2, xt[..., second], casting="unsafe")
        np.multiply(cos, x1, out=real)
        np.multiply(sin, x2, out=tmp)
        np.subtract(real, tmp, out=real)  # cos * x1 - sin * x2
        np.multiply(sin, x1, out=imag)
        np.multiply(cos, x2, out=tmp)
        np.add(imag, tmp, out=imag)  # sin * x1 + cos * x2
        np.copyto(yt[..., first], real, casting="unsafe")
        np.copyto(yt[..., second], imag, casting="unsafe")
        np.copyto(yt[..., rd:], xt[..., rd:])

    return kernel
