"""ONNX text converters: TfIdfVectorizer on integer tokens (string pools stay refused)."""

from __future__ import annotations

from .convert_common import _attr
from .graph import Graph, Node, Unsupported, float32_attr

__all__: list[str] = []

_REQUIRED = ("mode", "min_gram_length", "max_gram_length", "max_skip_count", "ngram_counts", "ngram_indexes")


def _tfidf_vectorizer(g: Graph, node: Node) -> None:
    """TfIdfVectorizer: its attributes as tfidf_vectorizer's (the weights float32, as their shortest
    decimals; mode TF ignores them, as the spec says, so they are not passed there); the pool must be
    ``pool_int64s`` (a string pool needs string tokens, which PipeLink has not). tfidf_vectorizer checks
    the pool's lengths and indexes at load."""
    if node.attrs.get("pool_strings"):
        raise Unsupported("attribute pool_strings: PipeLink's tokens are integers; use pool_int64s")
    missing = [name for name in (*_REQUIRED, "pool_int64s") if name not in node.attrs]
    if missing:
        raise Unsupported(f"TfIdfVectorizer needs the attributes {missing}")
    mode = str(_attr(node, "mode"))
    g.stage(
        node,
        "tfidf_vectorizer",
        node.inputs[:1],
        node.outputs[:1],
        mode=mode,
        min_gram_length=int(node.attrs["min_gram_length"]),
        max_gram_length=int(node.attrs["max_gram_length"]),
        max_skip_count=int(node.attrs["max_skip_count"]),
        ngram_counts=[int(v) for v in node.attrs["ngram_counts"]],
        ngram_indexes=[int(v) for v in node.attrs["ngram_indexes"]],
        pool_int64s=[int(v) for v in node.attrs["pool_int64s"]],
        weights=[] if mode == "TF" else [float32_attr(v) for v in node.attrs.get("weights", ())],
    )
