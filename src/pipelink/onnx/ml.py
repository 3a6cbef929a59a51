"""Op types of ONNX's classical machine-learning domain (``ai.onnx.ml``) that PipeLink's operators express
exactly, lowered at import:

- Binarizer: ``y = (x > threshold)`` as x's dtype (``greater``, then ``cast``);
- ArrayFeatureExtractor: the last axis's entries at the indices (``gather`` along it; indices of any shape
  are flattened, a 1-d x gives a ``[1, n]`` row, as onnx's reference and onnxruntime).

The rest of the domain (tree ensembles, linear models, encoders of strings, ZipMap's maps) is refused by
the converter table as op types without a converter.
"""

from __future__ import annotations

import math

import numpy as np

from ..dtypes import get_dtype
from .graph import Graph, Node, Unsupported, dtype_of, shape_of

__all__ = ["ML_CONVERTERS", "ML_DOMAIN"]

ML_DOMAIN = "ai.onnx.ml"


def _binarizer(g: Graph, node: Node) -> None:
    x, y = node.inputs[0], node.outputs[0]
    dtype = dtype_of(g, x)
    if dtype is None or not get_dtype(dtype).is_floating and dtype not in ("int32", "int64"):
        raise Unsupported(
            f"Binarizer of x {dtype or 'of unknown dtype'}: the spec's are floats, int32, int64"
        )
    threshold = f"{y}__threshold"
    value = float(np.float32(node.attrs.get("threshold", 0.0)))
    if not get_dtype(dtype).is_floating:  # an integer x exceeds t exactly when it exceeds floor(t)
        if not math.isfinite(value):
            raise Unsupported(f"Binarizer of an integer x with threshold {value}: give a finite one")
        info = np.iinfo(get_dtype(dtype).numpy)
        value = min(max(math.floor(value), int(info.min)), int(info.max))
    g.constants[threshold] = np.array(value, dtype=get_dtype(dtype).numpy)
    g.dtypes[threshold] = dtype
    g.stage(node, "greater", [x, threshold], [f"{y}__above"])
    g.stage(node, "cast", [f"{y}__above"], [y], dtype=dtype)


def _array_feature_extractor(g: Graph, node: Node) -> None:
    x, indices = node.inputs[:2]
    y = node.outputs[0]
    shape = shape_of(g, x)
    if shape is None:
        raise Unsupported("ArrayFeatureExtractor needs x's rank known at import (a 1-d x gives a row)")
    flat = f"{y}__indices"
    g.stage(node, "reshape", [indices], [flat], shape=[-1], allowzero=False)
    if len(shape) > 1:
        g.stage(node, "gather", [x, flat], [y], axis=-1)
        return
    g.stage(node, "gather", [x, flat], [f"{y}__picked"], axis=-1)
    g.stage(node, "unsqueeze", [f"{y}__picked"], [y], axes=[0])


#: Op type (domain ai.onnx.ml) -> converter.
ML_CONVERTERS = {"Binarizer": _binarizer, "ArrayFeatureExtractor": _array_feature_extractor}
