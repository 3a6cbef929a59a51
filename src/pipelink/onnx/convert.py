"""ONNX nodes to PipeLink stages: one converter per ONNX op type, in one table (``CONVERTERS``).

A converter reads one node through a :class:`Graph` and adds the stages that compute it. It raises
:class:`Unsupported` with the reason when PipeLink cannot express the node (an attribute value it lacks, an
input that must be a constant but is computed); :func:`convert` collects every such node before failing,
so a model is imported whole or not at all.
"""

from __future__ import annotations

from .convert_cast import _bitcast, _cast, _cast_like, _dequantize, _quantize
from .convert_common import Converter, _attr, _one_to_one
from .convert_elementwise import (
    _along_axis,
    _clip,
    _dropout,
    _extremum,
    _gelu,
    _hard_sigmoid,
    _log_softmax,
    _pow,
    _selu,
    _variadic_sum,
    _with_alpha,
)
from .convert_indexing import (
    _compress,
    _eye_like,
    _gather,
    _gather_elements,
    _gather_nd,
    _one_hot,
    _reverse_sequence,
    _scatter_elements,
    _slice,
    _trilu,
)
from .convert_linear import _attention, _einsum, _gemm, _recurrent, _rotary_embedding, gemm_attrs
from .convert_norm import (
    _batch_norm,
    _group_norm,
    _grouped_norm,
    _layer_norm,
    _lp_normalization,
    _lrn,
    _mean_variance_normalization,
    _rms_norm,
)
from .convert_quantized import _conv_integer, _matmul_integer, _qlinear_conv, _qlinear_matmul
from .convert_reduce import (
    _COMPOSED_REDUCTIONS,
    _arg_reduce,
    _composed_reduction,
    _loss,
    _reduce,
    _reduce_log_sum_exp,
    _scan,
    _top_k,
)
from .convert_roi import _col2im, _roi_align
from .convert_sampling import _affine_grid, _grid_sample, _resize, _upsample
from .convert_shape import (
    _center_crop_pad,
    _concat,
    _constant_of_shape,
    _depth_to_space,
    _expand,
    _flatten,
    _pad,
    _range,
    _reshape,
    _space_to_depth,
    _split,
    _squeeze,
    _tile,
    _transpose,
    _unsqueeze,
)
from .convert_text import _tfidf_vectorizer
from .convert_window import (
    _average_pool,
    _conv,
    _conv_transpose,
    _deform_conv,
    _global_lp_pool,
    _global_max_pool,
    _lp_pool,
    _max_pool,
    conv2d_stage,
    conv_stage,
)
from .fold import FOLD_ONLY, unfolded_needs, unfolded_reason
from .graph import FUSED_DOMAIN, ONNX_DOMAINS, Graph, Node, Rejected, Unsupported, float32_attr, onnx_dtype
from .losses import negative_log_likelihood_loss, softmax_cross_entropy_loss
from .lowerings import dynamic_quantize_linear, max_unpool, swiglu, tensor_scatter
from .ml import ML_CONVERTERS, ML_DOMAIN
from .recurrent import RECURRENT_OPS
from .spectral import dft, stft
from .stateful import causal_conv_with_state, linear_attention
from .training import TRAINING_CONVERTERS, TRAINING_DOMAIN

__all__ = [
    "CONVERTERS",
    "FUSED_DOMAIN",
    "ONNX_DOMAINS",
    "Graph",
    "Node",
    "Unsupported",
    "Rejected",
    "convert",
    "conv2d_stage",
    "conv_stage",
    "gemm_attrs",
    "onnx_dtype",
    "float32_attr",
]


#: ONNX op type (default domain) -> converter. Every operator PipeLink imports is listed here once.
CONVERTERS: dict[str, Converter] = {
    "Gemm": _gemm,
    "MatMul": _one_to_one("matmul", 2),
    "Einsum": _einsum,
    "Det": _one_to_one("det", 1),
    "TfIdfVectorizer": _tfidf_vectorizer,
    "DFT": dft,
    "STFT": stft,
    **dict.fromkeys(RECURRENT_OPS, _recurrent),
    "Add": _one_to_one("add", 2),
    "Sub": _one_to_one("sub", 2),
    "Mul": _one_to_one("mul", 2),
    "Div": _one_to_one("div", 2),
    "Pow": _pow,
    "Relu": _one_to_one("relu", 1),
    "Sigmoid": _one_to_one("sigmoid", 1),
    "Tanh": _one_to_one("tanh", 1),
    "Gelu": _gelu,
    "Erf": _one_to_one("erf", 1),
    "Exp": _one_to_one("exp", 1),
    "Sqrt": _one_to_one("sqrt", 1),
    "HardSwish": _one_to_one("hardswish", 1),
    "Neg": _one_to_one("neg", 1),
    "Abs": _one_to_one("abs", 1),
    "Log": _one_to_one("log", 1),
    "Reciprocal": _one_to_one("reciprocal", 1),
    "LeakyRelu": _with_alpha("leaky_relu", 0.01),
    "Elu": _with_alpha("elu", 1.0),
    "Celu": _with_alpha("celu", 1.0),
    "ThresholdedRelu": _with_alpha("thresholded_relu", 1.0),
    "Selu": _selu,
    "PRelu": _one_to_one("prelu", 2),
    "Sin": _one_to_one("sin", 1),
    "Cos": _one_to_one("cos", 1),
    "Tan": _one_to_one("tan", 1),
    "Asin": _one_to_one("asin", 1),
    "Acos": _one_to_one("acos", 1),
    "Atan": _one_to_one("atan", 1),
    "Sinh": _one_to_one("sinh", 1),
    "Cosh": _one_to_one("cosh", 1),
    "Asinh": _one_to_one("asinh", 1),
    "Acosh": _one_to_one("acosh", 1),
    "Atanh": _one_to_one("atanh", 1),
    "Swish": _with_alpha("silu", 1.0),  # x * sigmoid(alpha * x): silu's alpha
    "SwiGLU": swiglu,
    "Shrink": lambda g, node: g.stage(
        node,
        "shrink",
        node.inputs[:1],
        node.outputs[:1],
        lambd=float32_attr(_attr(node, "lambd", 0.5)),
        bias=float32_attr(_attr(node, "bias", 0.0)),
    ),
    "BitwiseAnd": _one_to_one("bitwise_and", 2),
    "BitwiseOr": _one_to_one("bitwise_or", 2),
    "BitwiseXor": _one_to_one("bitwise_xor", 2),
    "BitwiseNot": _one_to_one("bitwise_not", 1),
    "BitShift": lambda g, node: g.stage(
        node, "bit_shift", node.inputs[:2], node.outputs[:1], direction=str(_attr(node, "direction", ""))
    ),
    "Floor": _one_to_one("floor", 1),
    "Ceil": _one_to_one("ceil", 1),
    "Round": _one_to_one("round", 1),
    "Sign": _one_to_one("sign", 1),
    "Softplus": _one_to_one("softplus", 1),
    "Softsign": _one_to_one("softsign", 1),
    "Mish": _one_to_one("mish", 1),
    "Sum": _variadic_sum(mean=False),
    "Mean": _variadic_sum(mean=True),
    "Dropout": _dropout,
    "Tile": _tile,
    "SpaceToDepth": _space_to_depth,
    "LogSoftmax": _log_softmax,
    "NegativeLogLikelihoodLoss": _loss(negative_log_likelihood_loss),
    "SoftmaxCrossEntropyLoss": _loss(softmax_cross_entropy_loss),
    "ReduceLogSumExp": _reduce_log_sum_exp,
    "Max": _extremum("max"),
    "Min": _extremum("min"),
    "Clip": _clip,
    "Pad": _pad,
    "GroupNormalization": _group_norm,
    "InstanceNormalization": lambda g, node: _grouped_norm(g, node, None),
    "HardSigmoid": _hard_sigmoid,
    "GlobalMaxPool": _global_max_pool,
    "Softmax": _along_axis("softmax"),
    "Hardmax": _along_axis("hardmax"),
    "LayerNormalization": _layer_norm,
    "RMSNormalization": _rms_norm,
    "RotaryEmbedding": _rotary_embedding,
    "Attention": _attention,
    "Transpose": _transpose,
    "Reshape": _reshape,
    "Flatten": _flatten,
    "Squeeze": _squeeze,
    "Unsqueeze": _unsqueeze,
    "Concat": _concat,
    "Split": _split,
    "Slice": _slice,
    "Gather": _gather,
    "GatherElements": _gather_elements,
    "ScatterND": lambda g, node: g.stage(
        node, "scatter_nd", node.inputs[:3], node.outputs[:1], reduction=str(_attr(node, "reduction", "none"))
    ),
    "GatherND": _gather_nd,
    "ScatterElements": _scatter_elements,
    "Scatter": _scatter_elements,  # opsets 9-10: ScatterElements without reduction
    "TensorScatter": tensor_scatter,
    "LinearAttention": linear_attention,
    "CausalConvWithState": causal_conv_with_state,
    "OneHot": _one_hot,
    "EyeLike": _eye_like,
    "Where": _one_to_one("where", 3),
    "Equal": _one_to_one("equal", 2),
    "Less": _one_to_one("less", 2),
    "Greater": _one_to_one("greater", 2),
    "LessOrEqual": _one_to_one("less_equal", 2),
    "GreaterOrEqual": _one_to_one("greater_equal", 2),
    "And": _one_to_one("logical_and", 2),
    "Or": _one_to_one("logical_or", 2),
    "Xor": _one_to_one("logical_xor", 2),
    "Not": _one_to_one("logical_not", 1),
    "IsNaN": _one_to_one("is_nan", 1),
    "IsInf": lambda g, node: g.stage(
        node,
        "is_inf",
        node.inputs[:1],
        node.outputs[:1],
        detect_positive=bool(_attr(node, "detect_positive", 1)),
        detect_negative=bool(_attr(node, "detect_negative", 1)),
    ),
    "Expand": _expand,
    "ConstantOfShape": _constant_of_shape,
    "Range": _range,
    "Mod": lambda g, node: g.stage(
        node, "fmod" if _attr(node, "fmod", 0) else "mod", node.inputs[:2], node.outputs[:1]
    ),
    "Trilu": _trilu,
    "ReduceMean": _reduce("reduce_mean", 18),
    "ReduceSum": _reduce("reduce_sum", 13),
    "ReduceMax": _reduce("reduce_max", 18),
    "ReduceMin": _reduce("reduce_min", 18),
    "ReduceProd": _reduce("reduce_prod", 18),
    "ArgMax": _arg_reduce("argmax"),
    "ArgMin": _arg_reduce("argmin"),
    "CumSum": _scan("cumsum"),
    "CumProd": _scan("cumprod"),
    "TopK": _top_k,
    **dict.fromkeys(_COMPOSED_REDUCTIONS, _composed_reduction),
    "Conv": _conv,
    "ConvTranspose": _conv_transpose,
    "DeformConv": _deform_conv,
    "MaxPool": _max_pool,
    "MaxUnpool": max_unpool,
    "AveragePool": _average_pool,
    "GlobalAveragePool": _one_to_one("global_average_pool", 1),
    "Resize": _resize,
    "Upsample": _upsample,
    "GridSample": _grid_sample,
    "AffineGrid": _affine_grid,
    "RoiAlign": _roi_align,
    "Col2Im": _col2im,
    "LRN": _lrn,
    "MeanVarianceNormalization": _mean_variance_normalization,
    "LpNormalization": _lp_normalization,
    "Compress": _compress,
    "ReverseSequence": _reverse_sequence,
    "CenterCropPad": _center_crop_pad,
    "GlobalLpPool": _global_lp_pool,
    "LpPool": _lp_pool,
    "DepthToSpace": _depth_to_space,
    "BatchNormalization": _batch_norm,
    "Identity": _one_to_one("identity", 1),
    # an optional holding a tensor is that tensor (PipeLink's values are never optionals): a copy
    "OptionalGetElement": _one_to_one("identity", 1),
    "Cast": _cast,
    "CastLike": _cast_like,
    "BitCast": _bitcast,
    "QuantizeLinear": _quantize,
    "DynamicQuantizeLinear": dynamic_quantize_linear,
    "DequantizeLinear": _dequantize,
    "MatMulInteger": _matmul_integer,
    "ConvInteger": _conv_integer,
    "QLinearMatMul": _qlinear_matmul,
    "QLinearConv": _qlinear_conv,
}


#: The other domains whose op types PipeLink imports: domain -> (op type -> converter).
_OTHER_DOMAINS: dict[str, dict[str, Converter]] = {
    ML_DOMAIN: ML_CONVERTERS,
    TRAINING_DOMAIN: TRAINING_CONVERTERS,
}


def convert(g: Graph, nodes: list[Node]) -> list[Rejected]:
    """Convert ``nodes`` (in graph order) into ``g.stages``; every node that cannot be, with why."""
    rejected: list[Rejected] = []
    for k, node in enumerate(nodes):
        label = node.name or f"#{k}"
        if node.domain == FUSED_DOMAIN:
            try:
                g.stage(node, node.op_type, node.inputs, node.outputs, **node.attrs)
            except Unsupported as e:
                rejected.append(Rejected(f"fused {node.op_type}", label, str(e)))
            continue
        table = CONVERTERS if node.domain in ONNX_DOMAINS else _OTHER_DOMAINS.get(node.domain)
        if table is None:
            rejected.append(
                Rejected(node.op_type, label, f"operator domain {node.domain!r} is not supported")
            )
            continue
        converter = table.get(node.op_type)
        if converter is None:
            why, needs = "no PipeLink operator for this op type", ()
            if table is not CONVERTERS:
                why = f"{why} of domain {node.domain!r} (PipeLink imports {', '.join(sorted(table))} from it)"
            if node.op_type in FOLD_ONLY:  # evaluated at import when it can be: say why not
                why = f"{why}: {unfolded_reason(g, node)}"
                needs = unfolded_needs(g, node)
            rejected.append(Rejected(node.op_type, label, why, needs=needs))
            continue
        try:
            converter(g, node)
        except Unsupported as e:
            rejected.append(Rejected(node.op_type, label, str(e), e.graph_input, e.needs))
    return rejected
