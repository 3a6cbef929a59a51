"""Import-time fusions: chains of ONNX nodes that one PipeLink stage computes, rewritten before the
per-node converters run (``import_model(..., fuse=True)``, the default).

Each pattern is one small function that matches exactly or leaves the nodes alone: constants are checked
(within :data:`CONST_RTOL`), shapes and dtypes where they matter, and every intermediate tensor of a chain
must be read by the chain alone and not be a graph output. A fusion must never change what a model
computes beyond the rounding of the fused operator. The result of a match is a node of
:data:`FUSED_DOMAIN`: its op type is a PipeLink operator and its attributes are that operator's. A fold of
constants (a BatchNormalization into the Conv before it) gives an ONNX node instead, reading new constants,
so that the patterns after it still see a Conv.

The pass and :data:`PATTERNS` are here; the node list the patterns read is ``fuse_view.py``, the patterns
``fuse_chains.py`` (GELU, LayerNorm, Cast), ``fuse_gemm.py`` (gemm, conv2d) and ``fuse_attention.py``
(softmax, split views).
"""

from __future__ import annotations

from collections.abc import Callable

from .fuse_attention import _softmax_scale_bias, _split_views
from .fuse_chains import _cast_to_same, _gelu_chain, _layer_norm_chain
from .fuse_gemm import (
    _conv_activation,
    _conv_batch_norm,
    _conv_residual,
    _gemm_activation,
    _gemm_reshapes,
    _gemm_residual,
    _matmul_bias,
)
from .fuse_view import CONST_RTOL, _View
from .graph import FUSED_DOMAIN, Graph, Node

__all__ = ["FUSED_DOMAIN", "CONST_RTOL", "PATTERNS", "fuse"]


Pattern = Callable[[_View, Node], "tuple[list[Node], Node | list[Node]] | None"]

#: The patterns, in the order they run (each until it matches no more): the GELU chains first, so that
#: the gemm patterns see one gelu node; the gemm's reshapes before its residual, whose shape is the 3-d one;
#: the split views after the gemm's reshapes, which give c_attn's output its 3-d shape; the BatchNormalization
#: fold before the conv patterns, which then see one Conv.
PATTERNS: tuple[tuple[str, Pattern], ...] = (
    ("gelu", _gelu_chain),
    ("layer_norm", _layer_norm_chain),
    ("matmul_bias", _matmul_bias),
    ("gemm_reshapes", _gemm_reshapes),
    ("gemm_activation", _gemm_activation),
    ("gemm_residual", _gemm_residual),
    ("conv_batch_norm", _conv_batch_norm),
    ("conv_residual", _conv_residual),
    ("conv_activation", _conv_activation),
    ("cast_to_same", _cast_to_same),
    ("softmax_scale_bias", _softmax_scale_bias),
    ("split_views", _split_views),
)


def fuse(g: Graph, nodes: list[Node], outputs: set[str]) -> tuple[list[Node], dict[str, int]]:
    """Rewrite ``nodes`` (in graph order) with every pattern of :data:`PATTERNS`.

    Parameters
    ----------
    g : Graph
        The converters' graph: its constants, dtypes and shapes are read.
    nodes : list of Node
        The model's nodes, Constant nodes already folded.
    outputs : set of str
        The graph outputs (never fused away).

    Returns
    -------
    nodes : list of Node
        The rewritten nodes, in an order where every tensor is made before it is read; fused ones have
        the domain :data:`FUSED_DOMAIN`.
    counts : dict
        How many times each pattern matched.
    """
    counts: dict[str, int] = {}
    view = _View(g, nodes, outputs)
    for label, pattern in PATTERNS:
        # Passes over the nodes until one matches nothing (a rewrite can make a new match further on).
        changed = True
        while changed:
            changed = False
            for slot in range(len(view.slots)):
                node = view.slots[slot]
                match = pattern(view, node) if node is not None else None
                if match is not None and view.replace(*match):
                    counts[label] = counts.get(label, 0) + 1
                    changed = True
    return view.nodes, counts
