"""The node list as the fusion patterns read and rewrite it (``fuse.py``), and the small matching helpers
they share. It matches no pattern itself.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np

from ..dtypes import get_dtype
from ..errors import PipeLinkError
from ..ops._common import FLOATS
from .graph import ONNX_DOMAINS, Graph, Node

__all__ = ["CONST_RTOL"]

#: Relative tolerance of a pattern's constants (float32 rounds sqrt(2/pi) and 0.044715 by ~6e-8).
CONST_RTOL = 1e-6


class _View:
    """The node list as the patterns read it: who produces and who reads each tensor, constants,
    known shapes and dtypes, the graph outputs. A rewrite updates it in place (a removed node's slot
    becomes None), so a model with many matches costs time in proportion to its size."""

    def __init__(self, g: Graph, nodes: list[Node], outputs: set[str]):
        self.g = g
        self.slots: list[Node | None] = list(nodes)
        self.outputs = outputs
        self.position: dict[int, int] = {}  # id(node) -> its slot
        self.producer: dict[str, Node] = {}
        self.readers: dict[str, list[Node]] = {}  # one entry per input slot
        for k, node in enumerate(nodes):
            self._add(node, k)

    def _add(self, node: Node, slot: int) -> None:
        self.position[id(node)] = slot
        for out in node.outputs:
            if out:
                self.producer[out] = node
        for name in node.inputs:
            if name:
                self.readers.setdefault(name, []).append(node)

    def _remove(self, node: Node) -> None:
        del self.position[id(node)]
        for out in node.outputs:
            if out and self.producer.get(out) is node:
                del self.producer[out]
        for name in set(node.inputs):
            if name:
                self.readers[name] = [r for r in self.readers[name] if r is not node]

    @property
    def nodes(self) -> list[Node]:
        return [node for node in self.slots if node is not None]

    # -- reading ------------------------------------------------------------------------------------
    def made_by(self, name: str, op_type: str) -> Node | None:
        """The ONNX node of ``op_type`` producing ``name``, if that is what produces it."""
        node = self.producer.get(name)
        return node if node is not None and _is_onnx(node, op_type) else None

    def only_reader(self, name: str, op_type: str) -> Node | None:
        """The one ONNX node of ``op_type`` reading ``name`` (in one slot), if it is its only reader."""
        readers = self.readers.get(name, [])
        if len(readers) != 1 or not _is_onnx(readers[0], op_type):
            return None
        return readers[0]

    def shape(self, name: str) -> tuple | None:
        """The shape of ``name`` (a constant's, or one shape inference found with every dim known)."""
        if name in self.g.constants:
            return tuple(self.g.constants[name].shape)
        shape = self.g.shapes.get(name)
        return shape if shape is not None and None not in shape else None

    def scalar(self, name: str, value: float, like: str, *, kinds: str = "f") -> bool:
        """Whether ``name`` is a one-element constant (NumPy kind in ``kinds``) equal to ``value`` (within
        CONST_RTOL) that broadcasts against ``like`` without changing its shape."""
        array = self.g.constants.get(name)
        if array is None or array.size != 1 or array.dtype.kind not in kinds:
            return False
        like_shape = self.g.shapes.get(like)
        if array.ndim > (0 if like_shape is None else len(like_shape)):
            return False
        return bool(np.isclose(float(array.reshape(-1)[0]), value, rtol=CONST_RTOL, atol=0.0))

    def internal(self, chain: list[Node], result: str | Collection[str]) -> bool:
        """Whether every tensor the chain makes, except ``result`` (one name, or several), is read by the
        chain alone and is not a graph output (else fusing would lose a tensor someone reads)."""
        results = {result} if isinstance(result, str) else set(result)
        for node in chain:
            for out in node.outputs:
                if not out or out in results:
                    continue
                if out in self.outputs:
                    return False
                if any(not _member(reader, chain) for reader in self.readers.get(out, [])):
                    return False
        return True

    # -- writing ------------------------------------------------------------------------------------
    def replace(self, chain: list[Node], fused: Node | list[Node]) -> bool:
        """Replace ``chain`` by ``fused`` at the place of its last node (every input of the chain is made
        before it, every reader of its result after); False (nothing changed) when an intermediate of
        the chain is read elsewhere or is a graph output.

        Several fused nodes (one per output of the chain's first node, as for a Split's parts) go at the
        place of the chain's first node instead: each reads only what that node reads (made before it),
        and every reader of their results comes after it."""
        many = isinstance(fused, list)
        nodes = fused if many else [fused]
        if not self.internal(chain, [n.outputs[0] for n in nodes]):
            return False
        slots = [self.position[id(node)] for node in chain]
        for node, slot in zip(chain, slots, strict=True):
            self._remove(node)
            self.slots[slot] = None
        at = min(slots) if many else max(slots)
        self.slots[at : at + 1] = nodes
        if len(nodes) > 1:  # the nodes after an insertion moved
            for k in range(at + len(nodes), len(self.slots)):
                node = self.slots[k]
                if node is not None:
                    self.position[id(node)] = k
        for k, node in enumerate(nodes):
            self._add(node, at + k)
        return True


def _member(node: Node, chain: list[Node]) -> bool:
    return any(node is other for other in chain)


def _is_onnx(node: Node, op_type: str) -> bool:
    return node.op_type == op_type and node.domain in ONNX_DOMAINS


def _other(node: Node, name: str) -> str | None:
    """The other operand of a binary node that reads ``name``; None when it does not."""
    a, b = (node.inputs + ["", ""])[:2]
    if a == name:
        return b
    return a if b == name else None


def _common_prefix(names: list[str]) -> str:
    """The longest common ``/``-path prefix of node names ("/block/mlp/act/" of its nodes)."""
    prefix = names[0].rpartition("/")[0] + "/" if "/" in names[0] else ""
    for name in names[1:]:
        while prefix and not name.startswith(prefix):
            prefix = prefix[:-1].rpartition("/")[0] + "/" if "/" in prefix[:-1] else ""
    return prefix


def _is_float(array: np.ndarray) -> bool:
    try:
        return get_dtype(array.dtype).name in FLOATS
    except PipeLinkError:
        return False
