"""ONNX's own reference implementation as a test oracle (not a test module).

``run_onnx`` builds a one-node ONNX model and runs it with ``onnx.reference.ReferenceEvaluator``; tests
that use it call ``pytest.importorskip("onnx")`` first. bfloat16 arrays go to ONNX as float32 (exact):
compare a bfloat16 result with the ONNX result rounded to bfloat16.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

__all__ = ["run_onnx", "to_onnx_input"]


def to_onnx_input(a: np.ndarray) -> np.ndarray:
    """An array ONNX's reference evaluator accepts: bfloat16 widens to float32 (every value is exact)."""
    return a.astype(np.float32) if a.dtype == np.dtype(ml_dtypes.bfloat16) else a


def run_onnx(
    op_type: str, inputs: list, attrs: dict | None = None, *, n_outputs: int = 1, opset: int = 21
) -> list[np.ndarray]:
    """Run one ONNX operator on ``inputs`` (None: an absent optional input) and return its outputs."""
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    while inputs and inputs[-1] is None:
        inputs = inputs[:-1]
    names = ["" if a is None else f"in{k}" for k, a in enumerate(inputs)]
    feeds = {n: to_onnx_input(np.asarray(a)) for n, a in zip(names, inputs, strict=True) if n}
    outs = [f"out{k}" for k in range(n_outputs)]
    node = helper.make_node(op_type, names, outs, **(attrs or {}))
    graph = helper.make_graph(
        [node],
        "oracle",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in feeds.items()
        ],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return [np.asarray(r) for r in ReferenceEvaluator(model).run(None, feeds)]
