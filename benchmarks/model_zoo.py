"""The race's real models (issue 14's three, and R3D-18 for 3-d convolutions) in one place: their PyTorch
definitions, input shapes and ONNX export (used by the model race, ``benchmarks/models.py``, and by
``scripts/onnx_models_check.py``), and their tiny ``onnx.helper`` twins for a host without torch (the CPU
smoke run in CI).

Never imports torch, torchvision or transformers at module level: they exist only on the GPU host.
"""

from __future__ import annotations

import inspect
import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "EXPORTERS",
    "MODELS",
    "ModelSpec",
    "ZOO",
    "ZooSpec",
    "export_onnx",
    "export_onnx_inputs",
    "onnx_op_counts",
    "tiny_model",
]

# GPT-2 small's width and heads, on a 128-token sequence (a prompt of typical length; the attention
# matrix is then 128x128 per head, so the block is dominated by its four projections, as in GPT-2).
GPT2_EMBED, GPT2_HEADS, GPT2_TOKENS = 768, 12, 128
IMAGE = 224  # ResNet-18's ImageNet resolution; ESPCN's input (a 224x224 luminance image, upscaled 3x)
OPSET = 18
CLIP_FRAMES, CLIP_SIZE = 16, 112  # R3D-18's training clips (Kinetics-400): 16 frames of 112x112


@dataclass(frozen=True)
class ModelSpec:
    """One model of the race: how to build it in PyTorch and what one input of batch ``b`` looks like."""

    name: str
    title: str
    sample_shape: tuple[int, ...]  # one input without the batch dimension
    build: Callable[[Any], Any]  # torch -> torch.nn.Module (random weights, nothing downloaded)
    tiny: str  # the onnx.helper twin in tests/backend/onnx_models.py

    def input_shape(self, batch: int) -> tuple[int, ...]:
        return (batch, *self.sample_shape)


def _espcn(torch):
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(1, 64, 5, padding=2),
        nn.Tanh(),
        nn.Conv2d(64, 32, 3, padding=1),
        nn.Tanh(),
        nn.Conv2d(32, 9, 3, padding=1),
        nn.PixelShuffle(3),
    )


def _resnet18(torch):
    import torchvision

    return torchvision.models.resnet18(weights=None)


def _gpt2_block(torch):
    from transformers import GPT2Config
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block

    config = GPT2Config(
        n_embd=GPT2_EMBED, n_head=GPT2_HEADS, n_positions=max(1024, GPT2_TOKENS), attn_implementation="eager"
    )
    block = GPT2Block(config, layer_idx=0)
    # GPT2Model builds the causal mask and hands it to every block as an additive mask (0 where a token may
    # attend, the dtype's lowest value above the diagonal); a block called alone gets it from here.
    allowed = torch.ones(GPT2_TOKENS, GPT2_TOKENS, dtype=torch.bool).tril()
    mask = torch.zeros(1, 1, GPT2_TOKENS, GPT2_TOKENS).masked_fill(~allowed, torch.finfo(torch.float32).min)

    class CausalBlock(torch.nn.Module):
        """The block on hidden states with GPT-2's causal mask; its first output (older transformers
        return a tuple)."""

        def __init__(self):
            super().__init__()
            self.block = block
            self.register_buffer("mask", mask)

        def forward(self, x):
            out = self.block(x, attention_mask=self.mask)
            return out[0] if isinstance(out, tuple) else out

    return CausalBlock()


def _torchvision(name: str, family: str = "") -> Callable[[Any], Any]:
    """torchvision's ``models.{family}.{name}`` (``family`` "" for classification, "video"...)."""

    def build(torch):
        import torchvision

        models = getattr(torchvision.models, family) if family else torchvision.models
        return getattr(models, name)(weights=None)

    return build


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            "gpt2_block",
            f"GPT-2 decoder block (transformers, d={GPT2_EMBED}, {GPT2_HEADS} heads, {GPT2_TOKENS} tokens)",
            (GPT2_TOKENS, GPT2_EMBED),
            _gpt2_block,
            "gpt2_block",
        ),
        ModelSpec(
            "resnet18",
            f"ResNet-18 (torchvision, random weights, 3x{IMAGE}x{IMAGE})",
            (3, IMAGE, IMAGE),
            _resnet18,
            "resnet_block",
        ),
        ModelSpec(
            "espcn",
            f"ESPCN super-resolution (3 conv, tanh, pixel shuffle x3, 1x{IMAGE}x{IMAGE})",
            (1, IMAGE, IMAGE),
            _espcn,
            "espcn",
        ),
        ModelSpec(
            "r3d_18",
            f"R3D-18 video ResNet (torchvision, random weights, 3x{CLIP_FRAMES}x{CLIP_SIZE}x{CLIP_SIZE})",
            (3, CLIP_FRAMES, CLIP_SIZE, CLIP_SIZE),
            _torchvision("r3d_18", "video"),
            "video_block",
        ),
    )
}


# -- the wider zoo: architectures users bring, small and with random weights (the importer's coverage) --
_SMALL = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128}


@dataclass(frozen=True)
class ZooSpec:
    """One model of the wider zoo: its builder and its example inputs (tensors; token ids are int64)."""

    name: str
    title: str
    build: Callable[[Any], Any]  # torch -> torch.nn.Module
    inputs: Callable[[Any], tuple]  # torch -> the forward's positional inputs


def _hidden_states(torch, module):
    """``module`` returning its tensor output: a transformers model's ``last_hidden_state``."""

    class LastHidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = module

        def forward(self, *args):
            out = self.inner(*args)
            return getattr(out, "last_hidden_state", out[0] if isinstance(out, tuple) else out)

    return LastHidden()


def _transformers(make: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def build(torch):
        import transformers

        return _hidden_states(torch, make(transformers))

    return build


def _gqa_decoder(family: str, **config: Any) -> Callable[[Any], Any]:
    """transformers' ``{family}Model`` at the zoo's small size with a vocabulary of 100 and 2 key/value
    heads for 4 query heads (grouped-query attention), plus ``config``."""
    return _transformers(
        lambda tf: getattr(tf, f"{family}Model")(
            getattr(tf, f"{family}Config")(vocab_size=100, num_key_value_heads=2, **_SMALL, **config)
        )
    )


def _ids(torch, batch: int = 2, tokens: int = 16):
    return torch.randint(0, 100, (batch, tokens))


ZOO: dict[str, ZooSpec] = {
    spec.name: spec
    for spec in (
        ZooSpec(
            "mobilenet_v2",
            "MobileNetV2 (torchvision)",
            _torchvision("mobilenet_v2"),
            lambda t: (t.randn(1, 3, IMAGE, IMAGE),),
        ),
        ZooSpec(
            "efficientnet_b0",
            "EfficientNet-B0 (torchvision)",
            _torchvision("efficientnet_b0"),
            lambda t: (t.randn(1, 3, IMAGE, IMAGE),),
        ),
        ZooSpec(
            "squeezenet1_0",
            "SqueezeNet 1.0 (torchvision)",
            _torchvision("squeezenet1_0"),
            lambda t: (t.randn(1, 3, IMAGE, IMAGE),),
        ),
        ZooSpec(
            "densenet121",
            "DenseNet-121 (torchvision, 64x64)",
            _torchvision("densenet121"),
            lambda t: (t.randn(1, 3, 64, 64),),
        ),
        ZooSpec(
            "vit",
            "ViT encoder (transformers, d=64, 2 layers, 32x32 image, 8x8 patches)",
            _transformers(
                lambda tf: tf.ViTModel(
                    tf.ViTConfig(image_size=32, patch_size=8, attn_implementation="eager", **_SMALL)
                )
            ),
            lambda t: (t.randn(2, 3, 32, 32),),
        ),
        ZooSpec(
            "bert",
            "BERT encoder (transformers, d=64, 2 layers, 16 tokens, with its attention mask)",
            _transformers(
                lambda tf: tf.BertModel(tf.BertConfig(vocab_size=100, attn_implementation="eager", **_SMALL))
            ),
            lambda t: (_ids(t), t.ones(2, 16, dtype=t.long)),
        ),
        ZooSpec(
            "t5_encoder",
            "T5 encoder (transformers, d=64, 2 layers; relative position buckets in int64)",
            _transformers(
                lambda tf: tf.T5EncoderModel(
                    tf.T5Config(vocab_size=100, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4)
                )
            ),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "whisper_encoder",
            "Whisper encoder (transformers, d=64, 2 layers; Conv1d front end on 16 mel bins)",
            _transformers(
                lambda tf: (
                    tf.WhisperModel(
                        tf.WhisperConfig(
                            d_model=64,
                            encoder_layers=2,
                            decoder_layers=1,
                            encoder_attention_heads=4,
                            decoder_attention_heads=4,
                            encoder_ffn_dim=128,
                            decoder_ffn_dim=128,
                            num_mel_bins=16,
                            max_source_positions=50,
                        )
                    ).encoder
                )
            ),
            lambda t: (t.randn(1, 16, 100),),
        ),
        ZooSpec(
            "roberta",
            "RoBERTa encoder (transformers, d=64, 2 layers; position ids from a CumSum of the mask)",
            _transformers(lambda tf: tf.RobertaModel(tf.RobertaConfig(vocab_size=100, **_SMALL))),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "bart",
            "BART (transformers, d=64, 1+1 layers; the decoder ids shifted by ScatterND, a causal mask)",
            _transformers(
                lambda tf: tf.BartModel(
                    tf.BartConfig(
                        vocab_size=100,
                        d_model=64,
                        encoder_layers=1,
                        decoder_layers=1,
                        encoder_attention_heads=4,
                        decoder_attention_heads=4,
                        encoder_ffn_dim=128,
                        decoder_ffn_dim=128,
                    )
                )
            ),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "gpt2",
            "GPT-2 decoder (transformers, d=64, 2 layers, 16 tokens)",
            _transformers(
                lambda tf: tf.GPT2Model(tf.GPT2Config(vocab_size=100, n_embd=64, n_layer=2, n_head=4))
            ),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "llama",
            "Llama decoder (transformers, d=64, 2 layers, grouped KV heads, rotary embeddings, RMSNorm)",
            _gqa_decoder("Llama", attn_implementation="eager"),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "mistral",
            "Mistral decoder (transformers, d=64, 2 layers, grouped KV heads; PyTorch's SDPA attention, as "
            "transformers loads it by default)",
            _gqa_decoder("Mistral"),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "qwen3",
            "Qwen3 decoder (transformers, d=64, 2 layers; RMSNorm of queries and keys per head)",
            _gqa_decoder("Qwen3", head_dim=16, attn_implementation="eager"),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "gemma2",
            "Gemma 2 decoder (transformers, d=64, 2 layers; soft-capped logits, sliding-window mask)",
            _gqa_decoder("Gemma2", head_dim=16, attn_implementation="eager"),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "phi3",
            "Phi-3 decoder (transformers, d=64, 2 layers; fused QKV and gate-up projections)",
            _gqa_decoder("Phi3", pad_token_id=0, attn_implementation="eager"),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "gpt_neox",
            "GPT-NeoX decoder (transformers, d=64, 2 layers; its causal mask from Trilu)",
            _transformers(lambda tf: tf.GPTNeoXModel(tf.GPTNeoXConfig(vocab_size=100, **_SMALL))),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "falcon",
            "Falcon decoder (transformers, d=64, 2 layers; IsNaN in its attention)",
            _transformers(
                lambda tf: tf.FalconModel(
                    tf.FalconConfig(
                        vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4
                    )
                )
            ),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "bloom",
            "BLOOM decoder (transformers, d=64, 2 layers; ALiBi position biases)",
            _transformers(
                lambda tf: tf.BloomModel(tf.BloomConfig(vocab_size=100, hidden_size=64, n_layer=2, n_head=4))
            ),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "beit",
            "BEiT encoder (transformers, d=64, 2 layers; relative position bias tables)",
            _transformers(
                lambda tf: tf.BeitModel(
                    tf.BeitConfig(image_size=32, patch_size=8, use_relative_position_bias=True, **_SMALL)
                )
            ),
            lambda t: (t.randn(2, 3, 32, 32),),
        ),
        ZooSpec(
            "swin",
            "Swin encoder (transformers, 32x32 image, windows of 4; shifted windows, pads computed by Mod)",
            _transformers(
                lambda tf: tf.SwinModel(
                    tf.SwinConfig(
                        image_size=32,
                        patch_size=4,
                        embed_dim=16,
                        depths=[1, 1],
                        num_heads=[2, 4],
                        window_size=4,
                    )
                )
            ),
            lambda t: (t.randn(2, 3, 32, 32),),
        ),
        ZooSpec(
            "levit",
            "LeViT (transformers, 64x64 image; Reshape targets known after shape inference is re-run)",
            _transformers(
                lambda tf: tf.LevitModel(
                    tf.LevitConfig(
                        image_size=64,
                        hidden_sizes=[32, 48, 64],
                        num_attention_heads=[1, 2, 4],
                        depths=[1, 1, 1],
                        key_dim=[8, 8, 8],
                    )
                )
            ),
            lambda t: (t.randn(2, 3, 64, 64),),
        ),
        ZooSpec(
            "yolos",
            "YOLOS detector backbone (transformers, d=64, 2 layers; position embeddings resized by cubic)",
            _transformers(
                lambda tf: tf.YolosModel(
                    tf.YolosConfig(image_size=[32, 32], patch_size=8, num_detection_tokens=5, **_SMALL)
                )
            ),
            lambda t: (t.randn(2, 3, 32, 32),),
        ),
        ZooSpec(
            "dinov2",
            "DINOv2 encoder (transformers, d=64, 2 layers; position embeddings resized by cubic from a "
            "folded grid)",
            _transformers(lambda tf: tf.Dinov2Model(tf.Dinov2Config(image_size=32, patch_size=8, **_SMALL))),
            lambda t: (t.randn(2, 3, 32, 32),),
        ),
        ZooSpec(
            "mixtral",
            "Mixtral decoder (transformers, d=64, 2 layers, 4 experts, top 2; the experts as batched "
            "products, a routing TopK and Softmax)",
            _gqa_decoder(
                "Mixtral",
                num_local_experts=4,
                num_experts_per_tok=2,
                attn_implementation="eager",
                # the default (grouped_mm) has no ONNX export; eager's loop over experts is data-dependent
                experts_implementation="batched_mm",
            ),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "wav2vec2",
            "wav2vec2 encoder (transformers, d=64, 2 layers; strided Conv1d front end with GroupNorm, a "
            "grouped positional Conv1d)",
            _transformers(
                lambda tf: tf.Wav2Vec2Model(
                    tf.Wav2Vec2Config(
                        conv_dim=(32, 32, 32),
                        conv_stride=(5, 2, 2),
                        conv_kernel=(10, 3, 3),
                        num_conv_pos_embeddings=16,
                        num_conv_pos_embedding_groups=4,
                        **_SMALL,
                    )
                )
            ),
            lambda t: (t.randn(2, 1600),),
        ),
        ZooSpec(
            "mamba",
            "Mamba (transformers, d=64, 2 layers, state 8; the selective scan unrolled over 16 tokens)",
            _transformers(
                lambda tf: tf.MambaModel(
                    tf.MambaConfig(
                        vocab_size=100,
                        hidden_size=64,
                        state_size=8,
                        num_hidden_layers=2,
                        expand=2,
                        conv_kernel=4,
                        use_mambapy=False,
                    )
                )
            ),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "detr",
            "DETR (transformers, ResNet backbone, d=32, 1+1 layers, 10 queries; sine position embeddings, "
            "the backbone's frozen batch norms)",
            _transformers(
                lambda tf: tf.DetrModel(
                    tf.DetrConfig(
                        use_timm_backbone=False,
                        use_pretrained_backbone=False,
                        backbone_config=tf.ResNetConfig(
                            hidden_sizes=[16, 32, 48, 64],
                            depths=[1, 1, 1, 1],
                            embedding_size=16,
                            out_features=["stage4"],
                        ),
                        d_model=32,
                        encoder_layers=1,
                        decoder_layers=1,
                        encoder_attention_heads=2,
                        decoder_attention_heads=2,
                        encoder_ffn_dim=64,
                        decoder_ffn_dim=64,
                        num_queries=10,
                    )
                )
            ),
            lambda t: (t.randn(1, 3, 64, 64),),
        ),
        ZooSpec(
            "swin_v2_t",
            "Swin V2-T (torchvision, 64x64; cosine attention, log-spaced position bias MLP, padded windows)",
            _torchvision("swin_v2_t"),
            lambda t: (t.randn(1, 3, 64, 64),),
        ),
        ZooSpec(
            "mobilenet_v2_hf",
            "MobileNetV2 (transformers, 64x64 image; TensorFlow-style 'same' pads computed from shapes)",
            _transformers(
                lambda tf: tf.MobileNetV2Model(tf.MobileNetV2Config(image_size=64, depth_multiplier=0.35))
            ),
            lambda t: (t.randn(2, 3, 64, 64),),
        ),
        ZooSpec(
            "convnext_tiny",
            "ConvNeXt-T (torchvision, 64x64: 7x7 depthwise convs, LayerNorm over channels last, GELU)",
            _torchvision("convnext_tiny"),
            lambda t: (t.randn(1, 3, 64, 64),),
        ),
        ZooSpec(
            "shufflenet_v2",
            "ShuffleNetV2 x1.0 (torchvision, 64x64: channel shuffles as reshape/transpose)",
            _torchvision("shufflenet_v2_x1_0"),
            lambda t: (t.randn(2, 3, 64, 64),),
        ),
        ZooSpec(
            "regnet_y_400mf",
            "RegNetY-400MF (torchvision, 64x64: grouped convs, squeeze-excitation)",
            _torchvision("regnet_y_400mf"),
            lambda t: (t.randn(2, 3, 64, 64),),
        ),
        ZooSpec(
            "r3d_18",
            "R3D-18 (torchvision video, 8 frames of 56x56: 3-d convolutions, BatchNorm3d)",
            _torchvision("r3d_18", "video"),
            lambda t: (t.randn(1, 3, 8, 56, 56),),
        ),
        ZooSpec(
            "r2plus1d_18",
            "R(2+1)D-18 (torchvision video, 8 frames of 56x56: 1x3x3 and 3x1x1 convolutions)",
            _torchvision("r2plus1d_18", "video"),
            lambda t: (t.randn(1, 3, 8, 56, 56),),
        ),
        ZooSpec(
            "s3d",
            "S3D (torchvision video, 16 frames of 224x224, its head's 2x7x7 average pool needs them: "
            "separable 3-d convs, 3-d max pools)",
            _torchvision("s3d", "video"),
            lambda t: (t.randn(1, 3, 16, 224, 224),),
        ),
    )
}
"""Architectures beyond the race's three, for ``scripts/onnx_models_check.py --zoo wide``."""


EXPORTERS = ("auto", "torchscript", "dynamo")
"""``auto``: the TorchScript exporter, ``torch.export`` where it fails; or either one alone (``dynamo`` is
``torch.onnx.export``'s default from torch 2.9, so it is what a user exporting with defaults gets)."""


def export_onnx_inputs(
    module: Any,
    inputs: tuple,
    names: list[str] | None = None,
    exporter: str = "auto",
    dynamic_batch: bool = False,
    dynamic_seq: bool = False,
) -> bytes:
    """``module`` (eval mode, on the CPU) exported on ``inputs``: its inputs named ``names`` (default ``in0``,
    ``in1``...), its one output ``y``; by ``exporter`` (:data:`EXPORTERS`; ``dynamo`` needs onnxscript).
    Fixed shapes keep every Reshape's shape a constant; ``dynamic_batch`` makes dim 0 of every input and of
    ``y`` the symbol ``batch``, and ``dynamic_seq`` dim 1 of every 2-d input (token ids, masks, audio
    samples) the symbol ``seq`` (``dynamic_axes``, or ``torch.export``'s ``dynamic_shapes``), so the
    exporter computes shapes from them and the import folds what it can. ``inputs`` should then have a
    batch of 2 or more (``torch.export`` specializes a dim of size 1)."""
    import torch

    if exporter not in EXPORTERS:
        raise ValueError(f"exporter {exporter!r}: one of {', '.join(EXPORTERS)}")
    names = names or [f"in{k}" for k in range(len(inputs))]
    common = {"input_names": names, "output_names": ["y"], "opset_version": OPSET}

    def dims(t: Any, batch: Any, seq: Any) -> dict:
        return ({0: batch} if dynamic_batch else {}) | ({1: seq} if dynamic_seq and t.dim() == 2 else {})

    def torchscript() -> bytes:
        buf = io.BytesIO()
        axes = {n: dims(t, "batch", "seq") for n, t in zip(names, inputs, strict=True)}
        if dynamic_batch:
            axes["y"] = {0: "batch"}
        axes = {n: a for n, a in axes.items() if a} or None
        torch.onnx.export(module, inputs, buf, dynamic_axes=axes, dynamo=False, **common)
        return buf.getvalue()

    def dynamo() -> bytes:
        batch, seq = torch.export.Dim("batch"), torch.export.Dim.AUTO
        shapes: Any = tuple(dims(t, batch, seq) or None for t in inputs)
        shapes = shapes if dynamic_batch or dynamic_seq else None
        params = inspect.signature(module.forward).parameters.values()
        star = [p.name for p in params if p.kind == p.VAR_POSITIONAL]
        if shapes is not None and star:  # forward(*args): one entry, the tuple of its inputs' specs
            shapes = {star[0]: shapes}
        program = torch.onnx.export(module, inputs, dynamic_shapes=shapes, dynamo=True, **common)
        return program.model_proto.SerializeToString()

    with torch.no_grad():
        if exporter != "auto":
            return torchscript() if exporter == "torchscript" else dynamo()
        try:
            return torchscript()
        except Exception:  # the TorchScript exporter lacks an op (aten::diff of newer transformers' masks)
            import importlib.util

            if importlib.util.find_spec("onnxscript") is None:
                raise
            return dynamo()


def export_onnx(module: Any, x: Any) -> bytes:
    """``module`` exported on its one input ``x`` (named ``x``; :func:`export_onnx_inputs`)."""
    return export_onnx_inputs(module, (x,), ["x"])


def onnx_op_counts(model: Any) -> dict[str, int]:
    """How many nodes of each op type ``model`` (an ``onnx.ModelProto``) has, by op type."""
    counts: dict[str, int] = {}
    for node in model.graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return dict(sorted(counts.items()))


def tiny_model(name: str, batch: int) -> tuple[Any, dict[str, Any]]:
    """The tiny ``onnx.helper`` twin of model ``name`` at ``batch``: ``(ModelProto, feeds)``."""
    from tests.backend import onnx_models

    return getattr(onnx_models, MODELS[name].tiny)(batch=batch)
