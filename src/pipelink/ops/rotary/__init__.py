"""The rotary family: rotary_embedding (ONNX RotaryEmbedding, opset 23), rotary positional embeddings of
attention heads, with its NumPy reference (``reference.py``) and CUDA kernel (``cuda.py``, ``rotary.cu``)."""

from __future__ import annotations

from ...descriptor import Attr, OperatorDescriptor, Port
from .._common import builtin_operator
from ..kernel import cuda_variant
from ..shape import INDEX
from . import cuda
from .reference import infer_rotary_embedding, rotary_embedding_bind

__all__ = ["descriptors"]


def descriptors() -> list[OperatorDescriptor]:
    """A fresh ``rotary_embedding`` descriptor (one per registry)."""
    dtypes = frozenset(cuda.ROTARY_DTYPES)
    cache_doc = "[max_pos, rotary_dim/2] with position_ids, else [B, S, rotary_dim/2]"
    return [
        builtin_operator(
            "rotary_embedding",
            doc="Rotary positional embedding (RoPE) of each head: its first rotary_dim elements rotated in "
            "pairs by the token's cos/sin, the rest copied. A position id out of the caches' range is an "
            "error on the CPU; on CUDA only with check_indices, else its token's rotated elements become "
            "zeros (never an out-of-bounds read).",
            inputs=[
                Port("x", dtype="T", doc="[B, S, hidden] (hidden = num_heads * D) or [B, H, S, D]"),
                Port("cos_cache", dtype="T", doc=cache_doc),
                Port("sin_cache", dtype="T", doc=cache_doc),
                Port(
                    "position_ids",
                    dtype=INDEX,
                    optional=True,
                    doc="[B, S] rows of the caches; negative counts from the end",
                ),
            ],
            outputs=[Port("y", shape="x", dtype="T")],
            attrs=[
                Attr(
                    "interleaved",
                    "bool",
                    False,
                    doc="pairs are adjacent elements (2k, 2k+1); else element k and k + rotary_dim/2",
                ),
                Attr(
                    "rotary_embedding_dim", "int", 0, doc="elements rotated per head, even; 0: the whole head"
                ),
                Attr("num_heads", "int", 0, doc="heads of a 3-d x (required there); 0 or H for a 4-d x"),
                Attr(
                    "check_indices",
                    "bool",
                    False,
                    doc="on CUDA, raise on an out-of-range position id as the CPU does (the stage then waits "
                    "for the device each run and is not captured in a CUDA graph); the CPU always raises",
                ),
            ],
            dtype_vars={"T": dtypes},
            variant_dtypes=dtypes | INDEX,  # a variant lists every input's dtype: the position ids too
            infer=infer_rotary_embedding,
            bind=rotary_embedding_bind,
            cuda=cuda_variant(cuda.rotary_embedding_bind, dtypes | INDEX),
            onnx="RotaryEmbedding",
        ),
    ]
