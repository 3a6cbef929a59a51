"""ONNX FlexAttention (domain ``ai.onnx.preview``, its opset 1) lowered at import into the plain nodes of
its function body, so that folding, the attention fusion and the converters see a graph of standard ops:

- ``Scores = (Q * sqrt(scale)) @ (K * sqrt(scale))^T``, scale 1/sqrt(head_size) unless given, the K and
  V heads repeated for grouped queries (query head ``h`` reads K/V head ``h // (Hq / Hkv)``);
- the scores cast to ``softmax_precision`` (float32 for inputs narrower than that, else the input's
  dtype), ``score_mod`` inlined on them, ``Softmax`` over the last axis, ``prob_mod`` inlined on the
  probabilities, then ``@ V`` in that precision and a cast back to the inputs' dtype.

The modifier subgraphs are copied like an If branch (``control_inline.py``: fresh names, outer-scope
names resolved, typed by inference); a nested If, Loop or Scan in them is lowered in turn. This module
makes no stage and evaluates nothing (``fold.py`` does); what it cannot lower is refused with
:class:`~pipelink.onnx.control_scope.ControlError`, naming the attribute or input.
"""

from __future__ import annotations

import numpy as np

from .control_inline import _Inlining
from .control_scope import FLEX_ATTENTION, ControlError, _describe, _describe_type, _elem_type, _Scope

__all__ = ["FLEX_ATTENTION", "MIN_OPSET"]

#: The oldest default-domain opset its function body's nodes exist in (Shape's start and end).
MIN_OPSET = 15

# softmax_precision (a TensorProto element type) -> the dtype the softmax is computed in
_PRECISIONS = {1: "float32", 10: "float16", 16: "bfloat16", 11: "float64"}
_INPUT_DTYPES = ("float16", "bfloat16", "float32", "float64")
_MODS = ("score_mod", "prob_mod")
_KNOWN = {"scale", "softmax_precision", *_MODS}


class _FlexAttention(_Inlining):
    """The FlexAttention lowering of one model's lowering (``control.py``'s ``_Lowering``)."""

    def _flex_attention(self, proto, inputs, outputs, label, scope: _Scope, depth: int):
        """The nodes computing one FlexAttention node on ``inputs`` (inlined names) into ``outputs``."""
        helper = self.onnx.helper
        if self.g.opset < MIN_OPSET:
            raise ControlError(
                f"FlexAttention is imported as its function body's plain nodes, which need opset "
                f"{MIN_OPSET} or later of the default domain (the model imports opset {self.g.opset})"
            )
        if len(inputs) != 3 or not all(inputs) or len(outputs) != 1 or not outputs[0]:
            raise ControlError(
                f"FlexAttention takes Q, K and V and makes Y (got inputs {inputs}, outputs {outputs})"
            )
        versions = {entry.version for entry in self.model.opset_import if entry.domain == FLEX_ATTENTION[0]}
        if versions != {1}:
            raise ControlError(
                f"the model imports opset {sorted(versions) or 'none'} of domain {FLEX_ATTENTION[0]!r}; "
                "PipeLink imports FlexAttention of its opset 1"
            )
        attrs = {a.name: a for a in proto.attribute}
        unknown = sorted(set(attrs) - _KNOWN)
        if unknown:
            raise ControlError(f"attribute {unknown[0]!r} is not one of FlexAttention's ({sorted(_KNOWN)})")
        kinds = self.onnx.AttributeProto
        for name, kind in (
            ("scale", kinds.FLOAT),
            ("softmax_precision", kinds.INT),
            *((m, kinds.GRAPH) for m in _MODS),
        ):
            if name in attrs and attrs[name].type != kind:
                raise ControlError(
                    f"attribute {name} must be of type {kinds.AttributeType.Name(kind)} (got "
                    f"{kinds.AttributeType.Name(attrs[name].type)})"
                )
        q, k, v = inputs
        y = outputs[0]
        dtype = self.dtype(q)
        if dtype not in _INPUT_DTYPES or self.dtype(k) != dtype or self.dtype(v) != dtype:
            raise ControlError(
                f"Q, K and V must share one of {', '.join(_INPUT_DTYPES)}, known at import (got "
                f"{self.dtype(q)}, {self.dtype(k)}, {self.dtype(v)})"
            )
        shapes = [self.shape(name) for name in inputs]
        for what, shape in zip("QKV", shapes, strict=True):
            if shape is not None and len(shape) != 4:
                raise ControlError(f"{what} has shape {_describe(shape)}; FlexAttention takes rank-4 tensors")
        q_shape, k_shape, v_shape = (shape or (None,) * 4 for shape in shapes)
        for what, a, b in (
            ("the batch size of Q and K", q_shape[0], k_shape[0]),
            ("the batch size of K and V", k_shape[0], v_shape[0]),
            ("the head count of K and V", k_shape[1], v_shape[1]),
            ("the sequence length of K and V", k_shape[2], v_shape[2]),
            ("the head size of Q and K", q_shape[3], k_shape[3]),
        ):
            if isinstance(a, int) and isinstance(b, int) and a != b:
                raise ControlError(
                    f"{what} must agree (got {a} and {b}; Q, K, V {', '.join(map(_describe, shapes))})"
                )
        heads, kv_heads = q_shape[1], k_shape[1]
        if isinstance(heads, int) and isinstance(kv_heads, int) and (kv_heads < 1 or heads % kv_heads):
            raise ControlError(
                f"Q has {heads} heads and K {kv_heads}; the query heads must be a multiple of the K/V heads"
            )
        precision = self._precision(attrs, dtype)
        p_elem, t_elem = _elem_type(helper, precision), _elem_type(helper, dtype)
        scores_shape = (q_shape[0], heads, q_shape[2], k_shape[2])

        def made(what: str) -> str:
            return self._fresh(label, what)

        def node(op_type: str, ins: list[str], what: str, out: str | None = None, **kw):
            return self._glue(op_type, ins, [out or made(what)], f"{label}/{what}", **kw)

        # grouped queries: K and V [B, Hkv, S, E] -> [B, Hkv, Hq/Hkv, S, E] -> [B, Hq, S, E]
        if isinstance(heads, int) and heads == kv_heads:
            k_aligned, v_aligned = k, v
        else:
            dims = {}
            for what, source, start in (
                ("BatchSize", q, 0),
                ("KVSeqLen", k, 2),
                ("QNumHeads", q, 1),
                ("KVNumHeads", k, 1),
            ):
                dims[what] = made(what)
                yield node("Shape", [source], what, dims[what], start=start, end=start + 1)
            repeat = node("Div", [dims["QNumHeads"], dims["KVNumHeads"]], "KVRepeat")
            yield repeat
            aligned = []
            for tag, source in (("K", k), ("V", v)):
                unsqueezed, size = made(f"{tag}Unsqueezed"), made(f"{tag}HeadSize1D")
                yield self._unsqueeze(source, unsqueezed, 2, f"{label}/{tag}Unsqueezed")
                yield node("Shape", [source], f"{tag}HeadSize1D", size, start=3, end=4)
                batch, seq = dims["BatchSize"], dims["KVSeqLen"]
                expand = [batch, dims["KVNumHeads"], repeat.output[0], seq, size]
                target = node("Concat", expand, f"{tag}ExpandShape", axis=0)
                expanded = node("Expand", [unsqueezed, target.output[0]], f"{tag}Expanded")
                shape = node("Concat", [batch, dims["QNumHeads"], seq, size], f"{tag}AlignedShape", axis=0)
                reshaped = node("Reshape", [expanded.output[0], shape.output[0]], f"{tag}Aligned")
                yield from (target, expanded, shape, reshaped)
                aligned.append(reshaped.output[0])
            k_aligned, v_aligned = aligned
        # the scale, in float32; its square root in the inputs' dtype scales Q and K both
        if "scale" in attrs:
            scale = made("ScaleFactorF32")
            self._constant(scale, np.array(helper.get_attribute_value(attrs["scale"]), np.float32))
        else:
            whole = node("Shape", [q], "QShapeAll")
            index = made("Idx3Head")
            self._constant(index, np.array(3, np.int64))
            size = node("Gather", [whole.output[0], index], "QKHeadSize", axis=0)
            size_f = node("Cast", [size.output[0]], "QKHeadSizeF", to=1)
            root = node("Sqrt", [size_f.output[0]], "SqrtHeadSize")
            one = made("OneF")
            self._constant(one, np.array(1.0, np.float32))
            calculated = node("Div", [one, root.output[0]], "CalculatedScale")
            yield from (whole, size, size_f, root, calculated)
            scale = calculated.output[0]
        root_f32 = node("Sqrt", [scale], "ScaleFactorSqrtF32")
        root = node("Cast", [root_f32.output[0]], "ScaleFactorSqrt", to=t_elem)
        q_scaled = node("Mul", [q, root.output[0]], "QScaled")
        k_scaled = node("Mul", [k_aligned, root.output[0]], "KScaled")
        k_t = node("Transpose", [k_scaled.output[0]], "KTranspose", perm=[0, 1, 3, 2])
        score = node("MatMul", [q_scaled.output[0], k_t.output[0]], "Score")
        yield from (root_f32, root, q_scaled, k_scaled, k_t, score)
        scores = score.output[0]
        if precision != dtype:  # the body's cast to the dtype it has already is left out
            cast = node("Cast", [scores], "SoftmaxCast", to=p_elem)
            yield cast
            scores = cast.output[0]
        self._record(scores, precision, scores_shape)
        scores = yield from self._modify(attrs, "score_mod", scores, label, scope, depth)
        prob = node("Softmax", [scores], "Prob", axis=3)
        yield prob
        probs = prob.output[0]
        self._record(probs, precision, scores_shape)
        probs = yield from self._modify(attrs, "prob_mod", probs, label, scope, depth)
        if precision == dtype:
            yield node("MatMul", [probs, v_aligned], "Y", y)
        else:
            v_cast = node("Cast", [v_aligned], "VSp", to=p_elem)
            product = node("MatMul", [probs, v_cast.output[0]], "YSp")
            yield from (v_cast, product, node("Cast", [product.output[0]], "Y", y, to=t_elem))
        self._record(y, dtype, (q_shape[0], heads, q_shape[2], v_shape[3]))

    def _precision(self, attrs: dict, dtype: str) -> str:
        """The dtype the softmax is computed in: softmax_precision's, else float32 for the half types."""
        if "softmax_precision" not in attrs:
            return "float64" if dtype == "float64" else "float32"
        value = self.onnx.helper.get_attribute_value(attrs["softmax_precision"])
        if value not in _PRECISIONS:
            raise ControlError(
                f"softmax_precision={value}: it is a float element type, one of {sorted(_PRECISIONS)} "
                "(FLOAT, FLOAT16, DOUBLE, BFLOAT16)"
            )
        return _PRECISIONS[value]

    def _modify(self, attrs: dict, what: str, x: str, label: str, scope: _Scope, depth: int):
        """``x`` through the subgraph ``what`` (score_mod or prob_mod) inlined; the name of its result."""
        attr = attrs.get(what)
        if attr is None:
            return x
        sub = attr.g
        if len(sub.input) != 1 or len(sub.output) != 1:
            raise ControlError(
                f"{what} has {len(sub.input)} inputs and {len(sub.output)} outputs; a modifier takes the one "
                "rank-4 tensor and makes one of its shape and dtype"
            )
        kind = sub.output[0].type.WhichOneof("value")
        if kind not in (None, "tensor_type"):
            raise ControlError(f"{what}'s output is a {kind.replace('_type', '')}; a modifier makes a tensor")
        prefix = f"{label}/{what}"
        made_here = {o for node in sub.node for o in node.output if o}
        out = sub.output[0].name
        direct = {out: self._fresh(label, what)} if out in made_here else {}
        inner = self._instance(sub, scope, {sub.input[0].name: x}, prefix, direct)
        # the copy is typed by inference before any node of it is made: a bad result is refused first
        result = inner.lookup(out)
        given = (self.dtype(x), self.shape(x))
        got = (self.dtype(result), self.shape(result))
        if not _may_agree(given, got):
            raise ControlError(
                f"{what} makes {_describe_type(got)} from {_describe_type(given)}; a modifier keeps the "
                "shape and the dtype (softmax_precision's) of its input"
            )
        yield from self._emit(sub, inner, prefix, depth)
        return inner.resolve(out)


def _may_agree(given: tuple, got: tuple) -> bool:
    """No known difference between two (dtype, shape): a dtype, the rank, or a dim known in both."""
    (a_dtype, a_shape), (b_dtype, b_shape) = given, got
    if a_dtype and b_dtype and a_dtype != b_dtype:
        return False
    if a_shape is None or b_shape is None:
        return True
    return len(a_shape) == len(b_shape) and all(
        a is None or b is None or a == b or not (isinstance(a, int) and isinstance(b, int))
        for a, b in zip(a_shape, b_shape, strict=True)
    )
