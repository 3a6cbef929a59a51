"""Small ONNX models built with ``onnx.helper`` for the importer's tests (not a test module).

Each builder returns ``(model, feeds)``: random weights from a fixed seed and inputs to run it on. The
reference for a model's outputs is ``run_reference``: onnxruntime (CPU) when it is installed and loads
the model, otherwise ONNX's own ``ReferenceEvaluator``. Tests call ``pytest.importorskip("onnx")`` before
importing this.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import pipelink as pl
from pipelink.onnx import import_model

__all__ = [
    "mlp_block",
    "resnet_block",
    "espcn",
    "causal_attention",
    "gpt2_block",
    "make_model",
    "one_node_model",
    "stage_names",
    "refused",
    "run_reference",
    "reference_evaluator",
]

F32 = TensorProto.FLOAT
ORT_IR_VERSION = 10  # an IR version every onnxruntime the tests meet reads


def _copy(model):
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


def make_model(nodes, inputs, outputs, initializers, name: str, opset: int = 21):
    """A model of ``nodes``; ``inputs``/``outputs`` are (name, shape) pairs of float32 tensors."""
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info(n, F32, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, F32, s) for n, s in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in initializers.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ORT_IR_VERSION
    return model


def one_node_model(op, inputs, feeds, inits, attrs, outputs, *, opset: int, name: str = "one_node"):
    """A model of one ``op`` node reading ``inputs`` ("" for an absent one) and making ``outputs``
    (untyped): graph inputs typed from ``feeds`` (name -> array, or name -> (dtype, shape) with symbols
    allowed), initializers ``inits`` (name -> array), the node's attributes ``attrs``; IR 10."""
    node = helper.make_node(op, inputs, list(outputs), name="the_node", **attrs)
    declared = []
    for tensor, value in feeds.items():
        dtype, shape = value if isinstance(value, tuple) else (value.dtype, value.shape)
        declared.append(
            helper.make_tensor_value_info(tensor, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), shape)
        )
    graph = helper.make_graph(
        [node],
        name,
        declared,
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ORT_IR_VERSION
    return model


def stage_names(model) -> list[str]:
    """The operators of the stages ``model`` imports as, in order."""
    config, _ = import_model(model)
    return [s["name"] for s in config["pipeline"]]


def refused(model, why: str) -> list[dict]:
    """Check that the import refuses ``model`` with a message matching ``why`` (a regex), as
    ``PIPELINK_ERR_INVALID_ARGUMENT``; returns the refusal's ``unsupported`` entries."""
    with pytest.raises(pl.PipeLinkError, match=why) as info:
        import_model(model)
    assert info.value.code.name == "PIPELINK_ERR_INVALID_ARGUMENT"
    return info.value.unsupported


def run_pipeline(model, feeds: dict, device: str) -> list[np.ndarray]:
    """The model's outputs from PipeLink (``pl.from_onnx`` on ``device``), in graph-output order."""
    with pl.from_onnx(model, device=device) as pipe:
        got = pipe.run(feeds)
        return [np.asarray(got[o.name].numpy()) for o in model.graph.output]


def run_reference(model, feeds: dict) -> list[np.ndarray]:
    """The model's outputs from onnxruntime (CPU) when installed, else from ``ReferenceEvaluator``."""
    try:
        import onnxruntime as ort
    except ImportError:
        return reference_evaluator(model, feeds)
    typed = _typed(model, feeds)
    if typed.ir_version > ORT_IR_VERSION:  # onnx.helper writes its newest; onnxruntime may lag behind
        typed = _copy(typed)
        typed.ir_version = ORT_IR_VERSION
    try:
        session = ort.InferenceSession(typed.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - an opset or op this onnxruntime lacks (SwiGLU-28, Swish-24)
        return reference_evaluator(model, feeds)
    return [np.asarray(r) for r in session.run(None, feeds)]


def reference_evaluator(model, feeds: dict) -> list[np.ndarray]:
    """The model's outputs from ONNX's ``ReferenceEvaluator`` (where the spec leaves a case open and a
    lowering follows the reference, or onnxruntime refuses what the spec allows)."""
    from onnx.reference import ReferenceEvaluator

    return [np.asarray(r) for r in ReferenceEvaluator(model).run(None, feeds)]


def _typed(model, feeds: dict):
    """``model`` with every graph output typed (onnxruntime refuses an output of UNDEFINED type, which a
    one-node test model declares): the types come from ONNX's shape inference, and where it has none (an
    op defined by a function, such as GroupNormalization-21) the element type of ``ReferenceEvaluator``'s
    result on ``feeds``."""
    if all(o.type.tensor_type.elem_type for o in model.graph.output):
        return model
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type for v in [*inferred.graph.value_info, *inferred.graph.output]}
    typed = _copy(model)
    for out in typed.graph.output:
        found = types.get(out.name)
        if not out.type.tensor_type.elem_type and found is not None and found.tensor_type.elem_type:
            out.type.CopyFrom(found)
    untyped = [o for o in typed.graph.output if not o.type.tensor_type.elem_type]
    if untyped:
        from onnx.reference import ReferenceEvaluator

        results = ReferenceEvaluator(model).run([o.name for o in untyped], feeds)
        for out, value in zip(untyped, results, strict=True):
            out.type.tensor_type.elem_type = onnx.helper.np_dtype_to_tensor_dtype(np.asarray(value).dtype)
    return typed


def _rand(rng, *shape, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def mlp_block(batch: int = 5, d: int = 16, hidden: int = 64):
    """x -> MatMul/Add -> Gelu -> MatMul/Add -> + x -> LayerNormalization (a transformer's MLP half)."""
    rng = np.random.default_rng(1)
    init = {
        "fc1.weight": _rand(rng, d, hidden, scale=0.2),
        "fc1.bias": _rand(rng, hidden, scale=0.1),
        "fc2.weight": _rand(rng, hidden, d, scale=0.2),
        "fc2.bias": _rand(rng, d, scale=0.1),
        "ln.weight": 1 + _rand(rng, d, scale=0.1),
        "ln.bias": _rand(rng, d, scale=0.1),
    }
    nodes = [
        helper.make_node("MatMul", ["x", "fc1.weight"], ["/fc1/MatMul_output_0"], name="/fc1/MatMul"),
        helper.make_node("Add", ["/fc1/MatMul_output_0", "fc1.bias"], ["/fc1/Add_output_0"], name="/fc1/Add"),
        helper.make_node("Gelu", ["/fc1/Add_output_0"], ["/act/Gelu_output_0"], name="/act/Gelu"),
        helper.make_node(
            "MatMul", ["/act/Gelu_output_0", "fc2.weight"], ["/fc2/MatMul_output_0"], name="/fc2/MatMul"
        ),
        helper.make_node("Add", ["/fc2/MatMul_output_0", "fc2.bias"], ["/fc2/Add_output_0"], name="/fc2/Add"),
        helper.make_node("Add", ["/fc2/Add_output_0", "x"], ["/res/Add_output_0"], name="/res/Add"),
        helper.make_node(
            "LayerNormalization",
            ["/res/Add_output_0", "ln.weight", "ln.bias"],
            ["y"],
            name="/ln/LayerNormalization",
            axis=-1,
            epsilon=1e-5,
        ),
    ]
    model = make_model(nodes, [("x", ["batch", d])], [("y", ["batch", d])], init, "mlp_block")
    return model, {"x": _rand(rng, batch, d)}


def _conv_bn(prefix: str, src: str, dst: str, cin: int, cout: int, rng, init: dict, relu: bool) -> list:
    init[f"{prefix}.weight"] = _rand(rng, cout, cin, 3, 3, scale=(2.0 / (cin * 9)) ** 0.5)
    init[f"{prefix}.bn.scale"] = 1 + _rand(rng, cout, scale=0.1)
    init[f"{prefix}.bn.bias"] = _rand(rng, cout, scale=0.1)
    init[f"{prefix}.bn.mean"] = _rand(rng, cout, scale=0.1)
    init[f"{prefix}.bn.var"] = (1 + np.abs(_rand(rng, cout, scale=0.2))).astype(np.float32)
    conv, bn = f"/{prefix}/Conv_output_0", f"/{prefix}/bn/BatchNormalization_output_0"
    nodes = [
        helper.make_node(
            "Conv",
            [src, f"{prefix}.weight"],
            [conv],
            name=f"/{prefix}/Conv",
            kernel_shape=[3, 3],
            pads=[1, 1, 1, 1],
            strides=[1, 1],
        ),
        helper.make_node(
            "BatchNormalization",
            [conv] + [f"{prefix}.bn.{k}" for k in ("scale", "bias", "mean", "var")],
            [bn if relu else dst],
            name=f"/{prefix}/bn/BatchNormalization",
            epsilon=1e-5,
        ),
    ]
    if relu:
        nodes.append(helper.make_node("Relu", [bn], [dst], name=f"/{prefix}/Relu"))
    return nodes


def resnet_block(batch: int = 2, classes: int = 10):
    """A ResNet stem and basic block: Conv/BN/Relu, MaxPool, two Conv/BN with a residual Add, Relu,
    GlobalAveragePool, Flatten and a Gemm classifier."""
    rng = np.random.default_rng(2)
    init: dict = {}
    c = 8
    nodes = _conv_bn("stem", "input", "/stem/Relu_output_0", 3, c, rng, init, relu=True)
    nodes.append(
        helper.make_node(
            "MaxPool",
            ["/stem/Relu_output_0"],
            ["/pool/MaxPool_output_0"],
            name="/pool/MaxPool",
            kernel_shape=[3, 3],
            strides=[2, 2],
            pads=[1, 1, 1, 1],
        )
    )
    nodes += _conv_bn("layer1.conv1", "/pool/MaxPool_output_0", "/layer1/relu1", c, c, rng, init, relu=True)
    nodes += _conv_bn("layer1.conv2", "/layer1/relu1", "/layer1/bn2", c, c, rng, init, relu=False)
    init["fc.weight"] = _rand(rng, classes, c, scale=0.3)
    init["fc.bias"] = _rand(rng, classes, scale=0.1)
    nodes += [
        helper.make_node(
            "Add", ["/layer1/bn2", "/pool/MaxPool_output_0"], ["/layer1/Add_output_0"], name="/layer1/Add"
        ),
        helper.make_node("Relu", ["/layer1/Add_output_0"], ["/layer1/Relu_output_0"], name="/layer1/Relu"),
        helper.make_node(
            "GlobalAveragePool",
            ["/layer1/Relu_output_0"],
            ["/avgpool/GlobalAveragePool_output_0"],
            name="/avgpool/GlobalAveragePool",
        ),
        helper.make_node(
            "Flatten", ["/avgpool/GlobalAveragePool_output_0"], ["/Flatten_output_0"], name="/Flatten", axis=1
        ),
        helper.make_node(
            "Gemm",
            ["/Flatten_output_0", "fc.weight", "fc.bias"],
            ["logits"],
            name="/fc/Gemm",
            alpha=1.0,
            beta=1.0,
            transB=1,
        ),
    ]
    model = make_model(
        nodes,
        [("input", ["batch_size", 3, 16, 16])],
        [("logits", ["batch_size", classes])],
        init,
        "resnet_block",
    )
    return model, {"input": _rand(rng, batch, 3, 16, 16)}


def espcn(batch: int = 1, upscale: int = 3, height: int = 12, width: int = 10):
    """ESPCN super-resolution: Conv 5x5/Tanh, Conv 3x3/Tanh, Conv 3x3 to upscale^2 channels, then
    DepthToSpace (CRD, as PyTorch's PixelShuffle exports)."""
    rng = np.random.default_rng(3)
    init = {
        "conv1.weight": _rand(rng, 16, 1, 5, 5, scale=0.2),
        "conv1.bias": _rand(rng, 16, scale=0.1),
        "conv2.weight": _rand(rng, 8, 16, 3, 3, scale=0.1),
        "conv2.bias": _rand(rng, 8, scale=0.1),
        "conv3.weight": _rand(rng, upscale**2, 8, 3, 3, scale=0.1),
        "conv3.bias": _rand(rng, upscale**2, scale=0.1),
    }
    nodes = [
        helper.make_node(
            "Conv",
            ["lr", "conv1.weight", "conv1.bias"],
            ["c1"],
            name="/conv1/Conv",
            kernel_shape=[5, 5],
            pads=[2, 2, 2, 2],
        ),
        helper.make_node("Tanh", ["c1"], ["t1"], name="/Tanh"),
        helper.make_node(
            "Conv",
            ["t1", "conv2.weight", "conv2.bias"],
            ["c2"],
            name="/conv2/Conv",
            kernel_shape=[3, 3],
            pads=[1, 1, 1, 1],
        ),
        helper.make_node("Tanh", ["c2"], ["t2"], name="/Tanh_1"),
        helper.make_node(
            "Conv",
            ["t2", "conv3.weight", "conv3.bias"],
            ["c3"],
            name="/conv3/Conv",
            kernel_shape=[3, 3],
            pads=[1, 1, 1, 1],
        ),
        helper.make_node(
            "DepthToSpace", ["c3"], ["sr"], name="/pixel_shuffle/DepthToSpace", blocksize=upscale, mode="CRD"
        ),
    ]
    model = make_model(nodes, [("lr", ["N", 1, "H", "W"])], [("sr", ["N", 1, None, None])], init, "espcn")
    return model, {"lr": _rand(rng, batch, 1, height, width)}


def video_block(batch: int = 2, channels: int = 4, frames: int = 4, size: int = 6):
    """R3D-18's basic block (torchvision's video ResNet): Conv 3x3x3 -> BatchNormalization -> Relu ->
    Conv 3x3x3 -> BatchNormalization, plus the block's input, -> Relu, over NCDHW clips."""
    rng = np.random.default_rng(5)
    init = {}
    nodes = []
    h = "x"
    for k in range(2):
        init[f"w{k}"] = _rand(rng, channels, channels, 3, 3, 3, scale=0.2)
        init[f"b{k}"] = _rand(rng, channels, scale=0.1)
        for name in ("scale", "shift", "mean"):
            init[f"{name}{k}"] = _rand(rng, channels)
        init[f"var{k}"] = rng.uniform(0.5, 1.5, channels).astype(np.float32)
        nodes.append(
            helper.make_node("Conv", [h, f"w{k}", f"b{k}"], [f"c{k}"], name=f"conv{k}", pads=[1] * 6)
        )
        bn = [f"c{k}", f"scale{k}", f"shift{k}", f"mean{k}", f"var{k}"]
        nodes.append(helper.make_node("BatchNormalization", bn, [f"n{k}"], name=f"bn{k}"))
        if k == 0:
            nodes.append(helper.make_node("Relu", ["n0"], ["r0"], name="relu0"))
            h = "r0"
    nodes.append(helper.make_node("Add", ["n1", "x"], ["sum"], name="shortcut"))
    nodes.append(helper.make_node("Relu", ["sum"], ["y"], name="relu1"))
    shape = ["N", channels, frames, size, size]
    model = make_model(nodes, [("x", shape)], [("y", None)], init, "video_block", opset=17)
    return model, {"x": _rand(rng, batch, channels, frames, size, size)}


def _attention_nodes(
    rng, init: dict, src: str, dst: str, t: int, d: int, heads: int, masking: str, qkv: str = "separate"
) -> list:
    """Causal self-attention from ``src`` to ``dst`` (its weights and constants go into ``init``).

    ``qkv`` "separate": three MatMuls, one per projection; "split": GPT-2's c_attn, one MatMul and bias to
    3d split into q, k and v (``Split`` along the last axis), then GPT-2's float32 Cast of the
    probabilities and c_proj with its bias. ``masking`` "where" (``Where`` with -inf), "add" (``Add`` of a
    0 / -inf mask [1, 1, T, T]) or "lowest" (the same with float32's lowest value for -inf, GPT-2's)."""
    dh = d // heads
    if qkv == "split":
        init["w_qkv"] = _rand(rng, d, 3 * d, scale=d**-0.5)
        init["b_qkv"] = _rand(rng, 3 * d, scale=0.1)
        init["wo"] = _rand(rng, d, d, scale=d**-0.5)
        init["bo"] = _rand(rng, d, scale=0.1)
        init["qkv_sizes"] = np.array([d, d, d], dtype=np.int64)
    else:
        init.update({f"w{k}": _rand(rng, d, d, scale=d**-0.5) for k in "qkvo"})
    init["heads_shape"] = np.array([0, 0, heads, dh], dtype=np.int64)
    init["merge_shape"] = np.array([0, 0, d], dtype=np.int64)
    init["scale"] = np.array(dh**-0.5, dtype=np.float32)
    causal = np.tril(np.ones((t, t), dtype=bool))
    nodes = []
    if qkv == "split":
        nodes += [
            helper.make_node("MatMul", [src, "w_qkv"], ["qkv_mm"], name="/attn/c_attn/MatMul"),
            helper.make_node("Add", ["qkv_mm", "b_qkv"], ["qkv"], name="/attn/c_attn/Add"),
            helper.make_node(
                "Split", ["qkv", "qkv_sizes"], ["q_proj", "k_proj", "v_proj"], name="/attn/Split", axis=2
            ),
        ]
    for k in "qkv":
        if qkv != "split":
            nodes.append(
                helper.make_node("MatMul", [src, f"w{k}"], [f"{k}_proj"], name=f"/attn/{k}_proj/MatMul")
            )
        nodes.append(
            helper.make_node(
                "Reshape", [f"{k}_proj", "heads_shape"], [f"{k}_heads"], name=f"/attn/Reshape_{k}"
            )
        )
    nodes += [
        helper.make_node("Transpose", ["q_heads"], ["q"], name="/attn/Transpose_q", perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["k_heads"], ["kT"], name="/attn/Transpose_k", perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", ["v_heads"], ["v"], name="/attn/Transpose_v", perm=[0, 2, 1, 3]),
        helper.make_node("MatMul", ["q", "kT"], ["scores_raw"], name="/attn/MatMul_qk"),
        helper.make_node("Mul", ["scores_raw", "scale"], ["scores"], name="/attn/Mul_scale"),
    ]
    if masking == "where":
        init["causal"] = causal
        init["neg_inf"] = np.array(-np.inf, dtype=np.float32)
        nodes.append(
            helper.make_node("Where", ["causal", "scores", "neg_inf"], ["masked"], name="/attn/Where")
        )
    else:
        fill = -np.inf if masking == "add" else np.finfo(np.float32).min
        init["mask"] = np.where(causal, 0.0, fill).astype(np.float32).reshape(1, 1, t, t)
        nodes.append(helper.make_node("Add", ["scores", "mask"], ["masked"], name="/attn/Add_mask"))
    probs = "probs"
    nodes.append(helper.make_node("Softmax", ["masked"], ["probs"], name="/attn/Softmax", axis=-1))
    if qkv == "split":
        nodes.append(helper.make_node("Cast", ["probs"], ["probs_f32"], name="/attn/Cast", to=F32))
        probs = "probs_f32"
    nodes += [
        helper.make_node("MatMul", [probs, "v"], ["ctx_heads"], name="/attn/MatMul_pv"),
        helper.make_node(
            "Transpose", ["ctx_heads"], ["ctx_t"], name="/attn/Transpose_ctx", perm=[0, 2, 1, 3]
        ),
        helper.make_node("Reshape", ["ctx_t", "merge_shape"], ["ctx"], name="/attn/Reshape_merge"),
    ]
    if qkv == "split":
        nodes += [
            helper.make_node("MatMul", ["ctx", "wo"], ["o_mm"], name="/attn/c_proj/MatMul"),
            helper.make_node("Add", ["o_mm", "bo"], [dst], name="/attn/c_proj/Add"),
        ]
    else:
        nodes.append(helper.make_node("MatMul", ["ctx", "wo"], [dst], name="/attn/o_proj/MatMul"))
    return nodes


def causal_attention(
    batch: int = 2,
    t: int = 8,
    d: int = 16,
    heads: int = 2,
    masking: str = "where",
    qkv: str = "separate",
    symbolic_batch: bool = True,
):
    """Single-block causal self-attention: Q/K/V projections (or one projection split in three, ``qkv``),
    Reshape/Transpose into heads, scaled scores, a causal mask (``masking``: ``Where`` with -inf, or
    ``Add`` of a -inf mask), Softmax, the weighted sum, heads merged back and an output projection.
    ``symbolic_batch`` False declares the batch as ``batch`` itself (a fixed-shape export)."""
    rng = np.random.default_rng(4)
    init: dict = {}
    nodes = _attention_nodes(rng, init, "x", "y", t, d, heads, masking, qkv)
    b = "batch" if symbolic_batch else batch
    model = make_model(nodes, [("x", [b, t, d])], [("y", [b, t, d])], init, "causal_attention")
    return model, {"x": _rand(rng, batch, t, d)}


def _layer_norm(rng, init: dict, name: str, src: str, dst: str, d: int):
    init[f"{name}.weight"] = 1 + _rand(rng, d, scale=0.1)
    init[f"{name}.bias"] = _rand(rng, d, scale=0.1)
    return helper.make_node(
        "LayerNormalization",
        [src, f"{name}.weight", f"{name}.bias"],
        [dst],
        name=f"/{name}/LayerNormalization",
        axis=-1,
        epsilon=1e-5,
    )


def gpt2_block(batch: int = 2, t: int = 8, d: int = 16, heads: int = 2, symbolic_batch: bool = True):
    """A GPT-2 decoder block (pre-norm): LayerNormalization, causal self-attention as GPT-2 exports it
    (c_attn split into q, k and v, heads by Reshape and Transpose, scaled scores plus GPT-2's additive causal
    mask, Softmax, a float32 Cast, c_proj with its bias), residual Add, LayerNormalization, MatMul/Add, Gelu
    (tanh approximation, as GPT-2's ``gelu_new``), MatMul/Add, residual Add: the onnx.helper twin of the
    block ``benchmarks/model_zoo.py`` exports from PyTorch. ``symbolic_batch`` False declares the batch as
    ``batch`` itself (the race's fixed-shape exports)."""
    rng = np.random.default_rng(5)
    hidden = 4 * d
    init: dict = {
        "mlp.fc.weight": _rand(rng, d, hidden, scale=d**-0.5),
        "mlp.fc.bias": _rand(rng, hidden, scale=0.1),
        "mlp.proj.weight": _rand(rng, hidden, d, scale=hidden**-0.5),
        "mlp.proj.bias": _rand(rng, d, scale=0.1),
    }
    nodes = [_layer_norm(rng, init, "ln_1", "x", "h1", d)]
    nodes += _attention_nodes(rng, init, "h1", "attn_out", t, d, heads, "lowest", qkv="split")
    nodes += [
        helper.make_node("Add", ["x", "attn_out"], ["res1"], name="/Add_attn"),
        _layer_norm(rng, init, "ln_2", "res1", "h2", d),
        helper.make_node("MatMul", ["h2", "mlp.fc.weight"], ["fc"], name="/mlp/c_fc/MatMul"),
        helper.make_node("Add", ["fc", "mlp.fc.bias"], ["fc_b"], name="/mlp/c_fc/Add"),
        helper.make_node("Gelu", ["fc_b"], ["act"], name="/mlp/act/Gelu", approximate="tanh"),
        helper.make_node("MatMul", ["act", "mlp.proj.weight"], ["proj"], name="/mlp/c_proj/MatMul"),
        helper.make_node("Add", ["proj", "mlp.proj.bias"], ["proj_b"], name="/mlp/c_proj/Add"),
        helper.make_node("Add", ["res1", "proj_b"], ["y"], name="/Add_mlp"),
    ]
    b = "batch" if symbolic_batch else batch
    model = make_model(nodes, [("x", [b, t, d])], [("y", [b, t, d])], init, "gpt2_block")
    return model, {"x": _rand(rng, batch, t, d)}
