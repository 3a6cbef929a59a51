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
    needs: str  # the package beside torch that ``build`` imports ("torch" where none)

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


def _torchvision(
    name: str,
    family: str = "",
    pick: Callable[[Any], Any] | None = None,
    forward: dict[str, Any] | None = None,
    **kwargs: Any,
):
    """torchvision's ``models.{family}.{name}`` (``family`` "" for classification, "video"...) with random
    weights and ``kwargs``; ``pick`` chooses the tensor to return from its output (a segmentation net's
    ``out``, an optical-flow net's last refinement), ``forward`` adds keyword arguments to its calls."""

    def build(torch):
        import torchvision

        models = getattr(torchvision.models, family) if family else torchvision.models
        if family in ("segmentation", "detection"):
            kwargs.setdefault("weights_backbone", None)
        module = getattr(models, name)(weights=None, **kwargs)
        return module if pick is None else _picked(torch, module, pick, forward or {})

    return build


def _picked(torch, module, pick: Callable[[Any], Any], forward: dict[str, Any]):
    """``module`` called with ``forward`` as keyword arguments, returning ``pick(output)``."""

    class Picked(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = module

        def forward(self, *args):
            return pick(self.inner(*args, **forward))

    return Picked()


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            "gpt2_block",
            f"GPT-2 decoder block (transformers, d={GPT2_EMBED}, {GPT2_HEADS} heads, {GPT2_TOKENS} tokens)",
            (GPT2_TOKENS, GPT2_EMBED),
            _gpt2_block,
            "gpt2_block",
            "transformers",
        ),
        ModelSpec(
            "resnet18",
            f"ResNet-18 (torchvision, random weights, 3x{IMAGE}x{IMAGE})",
            (3, IMAGE, IMAGE),
            _resnet18,
            "resnet_block",
            "torchvision",
        ),
        ModelSpec(
            "espcn",
            f"ESPCN super-resolution (3 conv, tanh, pixel shuffle x3, 1x{IMAGE}x{IMAGE})",
            (1, IMAGE, IMAGE),
            _espcn,
            "espcn",
            "torch",
        ),
        ModelSpec(
            "r3d_18",
            f"R3D-18 video ResNet (torchvision, random weights, 3x{CLIP_FRAMES}x{CLIP_SIZE}x{CLIP_SIZE})",
            (3, CLIP_FRAMES, CLIP_SIZE, CLIP_SIZE),
            _torchvision("r3d_18", "video"),
            "video_block",
            "torchvision",
        ),
    )
}


# -- the wider zoo: architectures users bring, small and with random weights (the importer's coverage) --
_SMALL = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128}
# wav2vec2's and WavLM's convolutional front end at the zoo's size: 1,600 samples make 79 frames
_AUDIO_FRONT = {
    "conv_dim": (32, 32, 32),
    "conv_stride": (5, 2, 2),
    "conv_kernel": (10, 3, 3),
    "num_conv_pos_embeddings": 16,
    "num_conv_pos_embedding_groups": 4,
}


@dataclass(frozen=True)
class ZooSpec:
    """One model of the wider zoo: its builder and its example inputs (tensors; token ids are int64)."""

    name: str
    title: str
    build: Callable[[Any], Any]  # torch -> torch.nn.Module
    inputs: Callable[[Any], tuple]  # torch -> the forward's positional inputs


def _hidden_states(torch, module, keywords: tuple[str, ...] = ()):
    """``module`` returning its tensor output: a transformers model's ``last_hidden_state`` (else its
    output's first field: a depth map); ``keywords`` name the forward's inputs where they are not its first
    positional parameters (Whisper's ``decoder_input_ids``)."""

    class LastHidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = module

        def forward(self, *args):
            out = self.inner(**dict(zip(keywords, args, strict=True))) if keywords else self.inner(*args)
            if getattr(out, "last_hidden_state", None) is not None:
                return out.last_hidden_state
            if isinstance(out, dict):  # a ModelOutput: its first field that is set
                return next(v for v in out.values() if v is not None)
            return out[0] if isinstance(out, tuple) else out

    return LastHidden()


def _transformers(make: Callable[[Any], Any], keywords: tuple[str, ...] = ()) -> Callable[[Any], Any]:
    def build(torch):
        import transformers

        return _hidden_states(torch, make(transformers), keywords)

    return build


def _hf(model: str, config: str, **kwargs: Any) -> Callable[[Any], Any]:
    """transformers' ``model`` class built from its ``config`` class with ``kwargs``."""
    return _transformers(lambda tf: getattr(tf, model)(getattr(tf, config)(**kwargs)))


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
            _hf("ViTModel", "ViTConfig", image_size=32, patch_size=8, attn_implementation="eager", **_SMALL),
            lambda t: (t.randn(2, 3, 32, 32),),
        ),
        ZooSpec(
            "bert",
            "BERT encoder (transformers, d=64, 2 layers, 16 tokens, with its attention mask)",
            _hf("BertModel", "BertConfig", vocab_size=100, attn_implementation="eager", **_SMALL),
            lambda t: (_ids(t), t.ones(2, 16, dtype=t.long)),
        ),
        ZooSpec(
            "t5_encoder",
            "T5 encoder (transformers, d=64, 2 layers; relative position buckets in int64)",
            _hf(
                "T5EncoderModel",
                "T5Config",
                vocab_size=100,
                d_model=64,
                d_kv=16,
                d_ff=128,
                num_layers=2,
                num_heads=4,
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
            _hf("RobertaModel", "RobertaConfig", vocab_size=100, **_SMALL),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "bart",
            "BART (transformers, d=64, 1+1 layers; the decoder ids shifted by ScatterND, a causal mask)",
            _hf(
                "BartModel",
                "BartConfig",
                vocab_size=100,
                d_model=64,
                encoder_layers=1,
                decoder_layers=1,
                encoder_attention_heads=4,
                decoder_attention_heads=4,
                encoder_ffn_dim=128,
                decoder_ffn_dim=128,
            ),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "gpt2",
            "GPT-2 decoder (transformers, d=64, 2 layers, 16 tokens)",
            _hf("GPT2Model", "GPT2Config", vocab_size=100, n_embd=64, n_layer=2, n_head=4),
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
            _hf("GPTNeoXModel", "GPTNeoXConfig", vocab_size=100, **_SMALL),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "falcon",
            "Falcon decoder (transformers, d=64, 2 layers; IsNaN in its attention)",
            _hf(
                "FalconModel",
                "FalconConfig",
                vocab_size=100,
                hidden_size=64,
                num_hidden_layers=2,
                num_attention_heads=4,
            ),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "bloom",
            "BLOOM decoder (transformers, d=64, 2 layers; ALiBi position biases)",
            _hf("BloomModel", "BloomConfig", vocab_size=100, hidden_size=64, n_layer=2, n_head=4),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "beit",
            "BEiT encoder (transformers, d=64, 2 layers; relative position bias tables)",
            _hf(
                "BeitModel",
                "BeitConfig",
                image_size=32,
                patch_size=8,
                use_relative_position_bias=True,
                **_SMALL,
            ),
            lambda t: (t.randn(2, 3, 32, 32),),
        ),
        ZooSpec(
            "swin",
            "Swin encoder (transformers, 32x32 image, windows of 4; shifted windows, pads computed by Mod)",
            _hf(
                "SwinModel",
                "SwinConfig",
                image_size=32,
                patch_size=4,
                embed_dim=16,
                depths=[1, 1],
                num_heads=[2, 4],
                window_size=4,
            ),
            lambda t: (t.randn(2, 3, 32, 32),),
        ),
        ZooSpec(
            "levit",
            "LeViT (transformers, 64x64 image; Reshape targets known after shape inference is re-run)",
            _hf(
                "LevitModel",
                "LevitConfig",
                image_size=64,
                hidden_sizes=[32, 48, 64],
                num_attention_heads=[1, 2, 4],
                depths=[1, 1, 1],
                key_dim=[8, 8, 8],
            ),
            lambda t: (t.randn(2, 3, 64, 64),),
        ),
        ZooSpec(
            "yolos",
            "YOLOS detector backbone (transformers, d=64, 2 layers; position embeddings resized by cubic)",
            _hf(
                "YolosModel",
                "YolosConfig",
                image_size=[32, 32],
                patch_size=8,
                num_detection_tokens=5,
                **_SMALL,
            ),
            lambda t: (t.randn(2, 3, 32, 32),),
        ),
        ZooSpec(
            "dinov2",
            "DINOv2 encoder (transformers, d=64, 2 layers; position embeddings resized by cubic from a "
            "folded grid)",
            _hf("Dinov2Model", "Dinov2Config", image_size=32, patch_size=8, **_SMALL),
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
            _hf("Wav2Vec2Model", "Wav2Vec2Config", **_AUDIO_FRONT, **_SMALL),
            lambda t: (t.randn(2, 1600),),
        ),
        ZooSpec(
            "mamba",
            "Mamba (transformers, d=64, 2 layers, state 8; the selective scan unrolled over 16 tokens)",
            _hf(
                "MambaModel",
                "MambaConfig",
                vocab_size=100,
                hidden_size=64,
                state_size=8,
                num_hidden_layers=2,
                expand=2,
                conv_kernel=4,
                use_mambapy=False,
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
            _hf("MobileNetV2Model", "MobileNetV2Config", image_size=64, depth_multiplier=0.35),
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
        # -- torchvision's other families
        ZooSpec(
            "mobilenet_v3_small",
            "MobileNetV3-Small (torchvision, 64x64: hardswish, hardsigmoid squeeze-excitation)",
            _torchvision("mobilenet_v3_small"),
            lambda t: (t.randn(2, 3, 64, 64),),
        ),
        ZooSpec(
            "mnasnet0_5",
            "MNASNet 0.5 (torchvision, 64x64)",
            _torchvision("mnasnet0_5"),
            lambda t: (t.randn(2, 3, 64, 64),),
        ),
        ZooSpec(
            "googlenet",
            "GoogLeNet (torchvision, 64x64: inception branches concatenated, ceil-mode max pools)",
            _torchvision("googlenet", init_weights=True),
            lambda t: (t.randn(2, 3, 64, 64),),
        ),
        ZooSpec(
            "inception_v3",
            "Inception v3 (torchvision, 96x96: 1x7 and 7x1 convolutions, average pools without pads)",
            _torchvision("inception_v3", init_weights=True),
            lambda t: (t.randn(2, 3, 96, 96),),
        ),
        ZooSpec(
            "efficientnet_v2_s",
            "EfficientNetV2-S (torchvision, 64x64: fused MBConv, SiLU, squeeze-excitation)",
            _torchvision("efficientnet_v2_s"),
            lambda t: (t.randn(2, 3, 64, 64),),
        ),
        ZooSpec(
            "vit_b_16",
            "ViT-B/16 (torchvision, 64x64: a class token concatenated, nn.MultiheadAttention)",
            _torchvision("vit_b_16", image_size=64),
            lambda t: (t.randn(2, 3, 64, 64),),
        ),
        ZooSpec(
            "maxvit_t",
            "MaxViT-T (torchvision, 224x224: block and grid attention, relative position bias, MBConv)",
            _torchvision("maxvit_t"),
            lambda t: (t.randn(1, 3, 224, 224),),
        ),
        ZooSpec(
            "lraspp_mobilenet_v3",
            "LR-ASPP MobileNetV3-Large (torchvision segmentation, 128x128: bilinear upsampling to the "
            "input's size)",
            _torchvision("lraspp_mobilenet_v3_large", "segmentation", pick=lambda out: out["out"]),
            lambda t: (t.randn(2, 3, 128, 128),),
        ),
        ZooSpec(
            "deeplabv3_mobilenet_v3",
            "DeepLabV3 MobileNetV3-Large (torchvision segmentation, 128x128: ASPP, dilated convolutions, "
            "a global pool upsampled)",
            _torchvision("deeplabv3_mobilenet_v3_large", "segmentation", pick=lambda out: out["out"]),
            lambda t: (t.randn(2, 3, 128, 128),),
        ),
        ZooSpec(
            "raft_small",
            "RAFT-Small (torchvision optical flow, two 128x128 frames, 4 refinements: a correlation "
            "pyramid sampled by grid_sample, a ConvGRU)",
            _torchvision(
                "raft_small", "optical_flow", pick=lambda flows: flows[-1], forward={"num_flow_updates": 4}
            ),
            lambda t: (t.randn(1, 3, 128, 128), t.randn(1, 3, 128, 128)),
        ),
        # -- transformers' encoders
        ZooSpec(
            "distilbert",
            "DistilBERT encoder (transformers, d=64, 2 layers, with its attention mask)",
            _hf(
                "DistilBertModel",
                "DistilBertConfig",
                vocab_size=100,
                dim=64,
                n_layers=2,
                n_heads=4,
                hidden_dim=128,
            ),
            lambda t: (_ids(t), t.ones(2, 16, dtype=t.long)),
        ),
        ZooSpec(
            "albert",
            "ALBERT encoder (transformers, d=64, 2 layers sharing weights, embeddings of 32 projected)",
            _hf("AlbertModel", "AlbertConfig", vocab_size=100, embedding_size=32, **_SMALL),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "deberta_v2",
            "DeBERTa-v2 encoder (transformers, d=64, 2 layers; disentangled attention, log-bucketed "
            "relative positions gathered both ways)",
            _hf(
                "DebertaV2Model",
                "DebertaV2Config",
                vocab_size=100,
                relative_attention=True,
                position_buckets=8,
                max_relative_positions=16,
                pos_att_type=["p2c", "c2p"],
                **_SMALL,
            ),
            lambda t: (_ids(t), t.ones(2, 16, dtype=t.long)),
        ),
        ZooSpec(
            "electra",
            "ELECTRA discriminator (transformers, d=64, 2 layers, embeddings of 32 projected)",
            _hf("ElectraModel", "ElectraConfig", vocab_size=100, embedding_size=32, **_SMALL),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "mpnet",
            "MPNet encoder (transformers, d=64, 2 layers; relative position buckets)",
            _hf("MPNetModel", "MPNetConfig", vocab_size=100, **_SMALL),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "squeezebert",
            "SqueezeBERT encoder (transformers, d=64, 2 layers; grouped 1x1 Conv1d projections)",
            _hf("SqueezeBertModel", "SqueezeBertConfig", vocab_size=100, embedding_size=64, **_SMALL),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "roformer",
            "RoFormer encoder (transformers, d=64, 2 layers; sinusoidal rotary embeddings)",
            _hf("RoFormerModel", "RoFormerConfig", vocab_size=100, embedding_size=64, **_SMALL),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "esm",
            "ESM protein encoder (transformers, d=64, 2 layers; rotary embeddings, token dropout rescale)",
            _hf(
                "EsmModel",
                "EsmConfig",
                vocab_size=100,
                position_embedding_type="rotary",
                pad_token_id=1,
                mask_token_id=99,
                **_SMALL,
            ),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "modernbert",
            "ModernBERT encoder (transformers, d=64, 2 layers; global and sliding-window (8) attention, "
            "rotary embeddings, GeGLU)",
            _hf(
                "ModernBertModel",
                "ModernBertConfig",
                vocab_size=100,
                hidden_size=64,
                intermediate_size=128,
                num_hidden_layers=2,
                num_attention_heads=4,
                local_attention=8,
                pad_token_id=0,
                eos_token_id=1,
                bos_token_id=2,
                cls_token_id=2,
                sep_token_id=1,
            ),
            lambda t: (_ids(t), t.ones(2, 16, dtype=t.long)),
        ),
        ZooSpec(
            "funnel",
            "Funnel Transformer (transformers, d=64, blocks of 1 and 1; mean pooling of the sequence, "
            "relative-shift attention, upsampled back)",
            _hf(
                "FunnelModel",
                "FunnelConfig",
                vocab_size=100,
                block_sizes=[1, 1],
                d_model=64,
                n_head=4,
                d_head=16,
                d_inner=128,
            ),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "xlnet",
            "XLNet (transformers, d=64, 2 layers; two-stream relative attention by einsum)",
            _hf("XLNetModel", "XLNetConfig", vocab_size=100, d_model=64, n_layer=2, n_head=4, d_inner=128),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "longformer",
            "Longformer encoder (transformers, d=64, 2 layers; sliding-window attention of 4 by chunked "
            "strided views)",
            _hf(
                "LongformerModel",
                "LongformerConfig",
                vocab_size=100,
                attention_window=4,
                pad_token_id=1,
                **_SMALL,
            ),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "t5",
            "T5 encoder-decoder (transformers, d=64, 1+1 layers; cross attention, the decoder's causal "
            "relative position buckets)",
            _transformers(
                lambda tf: tf.T5Model(
                    tf.T5Config(
                        vocab_size=100,
                        d_model=64,
                        d_kv=16,
                        d_ff=128,
                        num_layers=1,
                        num_decoder_layers=1,
                        num_heads=4,
                    )
                ),
                keywords=("input_ids", "decoder_input_ids"),
            ),
            lambda t: (_ids(t), _ids(t, tokens=8)),
        ),
        ZooSpec(
            "whisper",
            "Whisper encoder-decoder (transformers, d=64, 1+1 layers; 16 mel bins, 8 decoder tokens)",
            _transformers(
                lambda tf: tf.WhisperModel(
                    tf.WhisperConfig(
                        vocab_size=100,
                        d_model=64,
                        encoder_layers=1,
                        decoder_layers=1,
                        encoder_attention_heads=4,
                        decoder_attention_heads=4,
                        encoder_ffn_dim=128,
                        decoder_ffn_dim=128,
                        num_mel_bins=16,
                        max_source_positions=50,
                        max_target_positions=32,
                        pad_token_id=0,
                        bos_token_id=1,
                        eos_token_id=2,
                        decoder_start_token_id=1,
                    )
                ),
                keywords=("input_features", "decoder_input_ids"),
            ),
            lambda t: (t.randn(2, 16, 100), _ids(t, tokens=8)),
        ),
        ZooSpec(
            "wavlm",
            "WavLM encoder (transformers, d=64, 2 layers; gated relative position bias, conv front end)",
            _hf(
                "WavLMModel", "WavLMConfig", **_AUDIO_FRONT, num_buckets=32, max_bucket_distance=64, **_SMALL
            ),
            lambda t: (t.randn(2, 1600),),
        ),
        # -- transformers' vision models
        ZooSpec(
            "clip_vision",
            "CLIP vision tower (transformers, d=64, 2 layers, 32x32 image, 8x8 patches; quick GELU)",
            _hf("CLIPVisionModel", "CLIPVisionConfig", image_size=32, patch_size=8, **_SMALL),
            lambda t: (t.randn(2, 3, 32, 32),),
        ),
        ZooSpec(
            "clip_text",
            "CLIP text tower (transformers, d=64, 2 layers; causal mask, 32 positions)",
            _hf("CLIPTextModel", "CLIPTextConfig", vocab_size=100, max_position_embeddings=32, **_SMALL),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "siglip_vision",
            "SigLIP vision tower (transformers, d=64, 2 layers, 32x32 image; attention-pooling head)",
            _hf("SiglipVisionModel", "SiglipVisionConfig", image_size=32, patch_size=8, **_SMALL),
            lambda t: (t.randn(2, 3, 32, 32),),
        ),
        ZooSpec(
            "dinov3",
            "DINOv3 ViT (transformers, d=64, 2 layers, 32x32 image, 4 register tokens; 2-d rotary "
            "embeddings of patch coordinates)",
            _hf(
                "DINOv3ViTModel",
                "DINOv3ViTConfig",
                image_size=32,
                patch_size=8,
                num_register_tokens=4,
                **_SMALL,
            ),
            lambda t: (t.randn(2, 3, 32, 32),),
        ),
        ZooSpec(
            "sam_vision",
            "SAM image encoder (transformers, d=64, 2 layers, 64x64 image; windowed attention with pads, "
            "decomposed relative positions, a global layer)",
            _hf(
                "SamVisionModel",
                "SamVisionConfig",
                hidden_size=64,
                num_hidden_layers=2,
                num_attention_heads=4,
                image_size=64,
                patch_size=8,
                window_size=3,
                global_attn_indexes=[1],
                output_channels=32,
                mlp_dim=128,
            ),
            lambda t: (t.randn(2, 3, 64, 64),),
        ),
        ZooSpec(
            "segformer",
            "SegFormer encoder (transformers, 64x64; overlapping patch merges, spatial-reduction attention, "
            "Mix-FFN depthwise convs)",
            _hf(
                "SegformerModel",
                "SegformerConfig",
                hidden_sizes=[16, 32, 48, 64],
                num_attention_heads=[1, 2, 2, 4],
                depths=[1, 1, 1, 1],
            ),
            lambda t: (t.randn(2, 3, 64, 64),),
        ),
        ZooSpec(
            "pvt_v2",
            "PVTv2 encoder (transformers, 64x64; spatial-reduction attention, overlapping patch embeds)",
            _hf(
                "PvtV2Model",
                "PvtV2Config",
                image_size=64,
                hidden_sizes=[16, 32, 48, 64],
                num_attention_heads=[1, 2, 2, 4],
                depths=[1, 1, 1, 1],
            ),
            lambda t: (t.randn(2, 3, 64, 64),),
        ),
        ZooSpec(
            "mobilevit",
            "MobileViT (transformers, 64x64; patches unfolded for attention and folded back)",
            _hf(
                "MobileViTModel",
                "MobileViTConfig",
                image_size=64,
                hidden_sizes=[32, 48, 64],
                neck_hidden_sizes=[8, 16, 24, 32, 48, 64, 96],
            ),
            lambda t: (t.randn(2, 3, 64, 64),),
        ),
        ZooSpec(
            "convnextv2",
            "ConvNeXt V2 (transformers, 64x64; global response normalization)",
            _hf("ConvNextV2Model", "ConvNextV2Config", hidden_sizes=[16, 32, 48, 64], depths=[1, 1, 1, 1]),
            lambda t: (t.randn(2, 3, 64, 64),),
        ),
        ZooSpec(
            "poolformer",
            "PoolFormer (transformers, 64x64; average-pool token mixing without pads counted, GroupNorm)",
            _hf("PoolFormerModel", "PoolFormerConfig", hidden_sizes=[16, 32, 48, 64], depths=[1, 1, 1, 1]),
            lambda t: (t.randn(2, 3, 64, 64),),
        ),
        ZooSpec(
            "bit",
            "BiT (transformers, 64x64; weight-standardized convolutions, GroupNorm, pre-activation)",
            _hf(
                "BitModel",
                "BitConfig",
                embedding_size=16,
                hidden_sizes=[16, 32, 48, 64],
                depths=[1, 1, 1, 1],
                num_groups=8,
            ),
            lambda t: (t.randn(2, 3, 64, 64),),
        ),
        ZooSpec(
            "focalnet",
            "FocalNet (transformers, 64x64; focal modulation: depthwise convs gated and summed by level)",
            _hf(
                "FocalNetModel",
                "FocalNetConfig",
                image_size=64,
                embed_dim=16,
                hidden_sizes=[32, 48, 64, 64],
                depths=[1, 1, 1, 1],
            ),
            lambda t: (t.randn(2, 3, 64, 64),),
        ),
        ZooSpec(
            "cvt",
            "CvT (transformers, 64x64; convolutional projections of queries, keys and values, a class token "
            "in the last stage)",
            _hf("CvtModel", "CvtConfig", embed_dim=[16, 32, 64], num_heads=[1, 2, 4], depth=[1, 2, 3]),
            lambda t: (t.randn(2, 3, 64, 64),),
        ),
        ZooSpec(
            "swin2sr",
            "Swin2SR super-resolution (transformers, 32x32 image, x2; windows of 8, pixel shuffle)",
            _hf(
                "Swin2SRModel",
                "Swin2SRConfig",
                image_size=32,
                embed_dim=32,
                depths=[2],
                num_heads=[2],
                window_size=8,
            ),
            lambda t: (t.randn(1, 3, 32, 32),),
        ),
        ZooSpec(
            "dpt",
            "DPT depth estimation (transformers, ViT d=64, 4 layers, 32x32 image; reassembled features "
            "fused and upsampled to a depth map)",
            _hf(
                "DPTForDepthEstimation",
                "DPTConfig",
                image_size=32,
                patch_size=8,
                hidden_size=64,
                num_hidden_layers=4,
                num_attention_heads=4,
                intermediate_size=128,
                backbone_out_indices=[0, 1, 2, 3],
                neck_hidden_sizes=[16, 32, 48, 64],
                fusion_hidden_size=32,
                head_in_index=-1,
            ),
            lambda t: (t.randn(2, 3, 32, 32),),
        ),
        # -- transformers' decoders
        ZooSpec(
            "opt",
            "OPT decoder (transformers, d=64, 2 layers; learned positions offset by 2 from a CumSum)",
            _hf(
                "OPTModel",
                "OPTConfig",
                vocab_size=100,
                hidden_size=64,
                num_hidden_layers=2,
                ffn_dim=128,
                num_attention_heads=4,
            ),
            lambda t: (_ids(t), t.ones(2, 16, dtype=t.long)),
        ),
        ZooSpec(
            "gptj",
            "GPT-J decoder (transformers, d=64, 2 layers; interleaved rotary on 8 of 16 head dims, "
            "parallel attention and MLP)",
            _hf("GPTJModel", "GPTJConfig", vocab_size=100, n_embd=64, n_layer=2, n_head=4, rotary_dim=8),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "codegen",
            "CodeGen decoder (transformers, d=64, 2 layers; fused QKV split by a mesh reshape, rotary)",
            _hf(
                "CodeGenModel", "CodeGenConfig", vocab_size=100, n_embd=64, n_layer=2, n_head=4, rotary_dim=8
            ),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "gpt_bigcode",
            "GPT-BigCode / StarCoder decoder (transformers, d=64, 2 layers; multi-query attention)",
            _hf(
                "GPTBigCodeModel",
                "GPTBigCodeConfig",
                vocab_size=100,
                n_embd=64,
                n_layer=2,
                n_head=4,
                multi_query=True,
            ),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "mpt",
            "MPT decoder (transformers, d=64, 2 layers; ALiBi, no biases)",
            _hf(
                "MptModel", "MptConfig", vocab_size=100, d_model=64, n_layers=2, n_heads=4, expansion_ratio=2
            ),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "phi",
            "Phi decoder (transformers, d=64, 2 layers; partial rotary, parallel attention and MLP)",
            _hf("PhiModel", "PhiConfig", vocab_size=100, partial_rotary_factor=0.5, **_SMALL),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "starcoder2",
            "StarCoder2 decoder (transformers, d=64, 2 layers, grouped KV heads; biased projections)",
            _gqa_decoder("Starcoder2"),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "stablelm",
            "StableLM decoder (transformers, d=64, 2 layers, grouped KV heads; partial rotary, LayerNorm)",
            _gqa_decoder("StableLm"),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "olmo2",
            "OLMo 2 decoder (transformers, d=64, 2 layers, grouped KV heads; RMSNorm of queries and keys)",
            _gqa_decoder("Olmo2"),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "granite",
            "Granite decoder (transformers, d=64, 2 layers, grouped KV heads; scaled embeddings, residuals "
            "and logits)",
            _gqa_decoder(
                "Granite", embedding_multiplier=12.0, residual_multiplier=0.22, attention_multiplier=0.0078125
            ),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "gemma3",
            "Gemma 3 text decoder (transformers, d=64, 2 layers; local and global layers with their own "
            "rotary bases, RMSNorm of queries and keys)",
            _hf(
                "Gemma3TextModel",
                "Gemma3TextConfig",
                vocab_size=100,
                num_key_value_heads=2,
                head_dim=16,
                sliding_window=8,
                **_SMALL,
            ),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "qwen2_moe",
            "Qwen2-MoE decoder (transformers, d=64, 2 layers, 4 experts, top 2, a gated shared expert)",
            _gqa_decoder(
                "Qwen2Moe",
                num_experts=4,
                num_experts_per_tok=2,
                moe_intermediate_size=64,
                shared_expert_intermediate_size=64,
                experts_implementation="batched_mm",
            ),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "deepseek_v3",
            "DeepSeek-V3 decoder (transformers, d=64, 2 layers; multi-head latent attention, 4 routed "
            "experts by grouped top-k, a shared expert)",
            _hf(
                "DeepseekV3Model",
                "DeepseekV3Config",
                vocab_size=100,
                hidden_size=64,
                intermediate_size=128,
                moe_intermediate_size=32,
                num_hidden_layers=2,
                num_attention_heads=4,
                num_key_value_heads=4,
                n_routed_experts=4,
                num_experts_per_tok=2,
                n_group=1,
                topk_group=1,
                kv_lora_rank=16,
                q_lora_rank=32,
                qk_rope_head_dim=8,
                qk_nope_head_dim=8,
                v_head_dim=16,
                first_k_dense_replace=1,
                experts_implementation="batched_mm",
            ),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "gpt_oss",
            "gpt-oss decoder (transformers, d=64, 2 layers, 4 experts, top 2; attention sinks, sliding and "
            "full layers, clamped SwiGLU)",
            _hf(
                "GptOssModel",
                "GptOssConfig",
                vocab_size=100,
                hidden_size=64,
                intermediate_size=64,
                num_hidden_layers=2,
                num_attention_heads=4,
                num_key_value_heads=2,
                head_dim=16,
                num_local_experts=4,
                num_experts_per_tok=2,
                sliding_window=8,
                attn_implementation="eager",
                experts_implementation="batched_mm",
            ),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "mamba2",
            "Mamba-2 (transformers, d=64, 2 layers, 8 heads of 16; the chunked state-space scan, chunks of 8 "
            "tokens)",
            _hf(
                "Mamba2Model",
                "Mamba2Config",
                vocab_size=100,
                hidden_size=64,
                num_hidden_layers=2,
                num_heads=8,
                head_dim=16,
                state_size=16,
                expand=2,
                n_groups=1,
                chunk_size=8,
            ),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "rwkv",
            "RWKV-4 (transformers, d=64, 2 layers; the WKV recurrence unrolled over 16 tokens, token shift)",
            _hf(
                "RwkvModel",
                "RwkvConfig",
                vocab_size=100,
                hidden_size=64,
                num_hidden_layers=2,
                context_length=16,
            ),
            lambda t: (_ids(t),),
        ),
        # -- the nineteenth session's: more families of ops
        ZooSpec(
            "resnext50_32x4d",
            "ResNeXt-50 32x4d (torchvision, 64x64; grouped 3x3 convolutions of 32 groups)",
            _torchvision("resnext50_32x4d"),
            lambda t: (t.randn(1, 3, 64, 64),),
        ),
        ZooSpec(
            "hubert",
            "HuBERT (transformers, d=64, 2 layers; wav2vec2's conv front end, grouped conv positions)",
            _hf("HubertModel", "HubertConfig", **_AUDIO_FRONT, **_SMALL),
            lambda t: (t.randn(2, 1600),),
        ),
        ZooSpec(
            "fnet",
            "FNet encoder (transformers, d=64, 2 layers; token mixing by a 2-d Fourier transform, real part)",
            _hf("FNetModel", "FNetConfig", vocab_size=100, **_SMALL),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "convbert",
            "ConvBERT encoder (transformers, d=64, 2 layers; span-based dynamic convolution heads, unfold)",
            _hf("ConvBertModel", "ConvBertConfig", vocab_size=100, embedding_size=64, **_SMALL),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "big_bird",
            "BigBird encoder (transformers, d=64, 2 layers; full attention, as BigBird runs at 16 tokens)",
            _hf("BigBirdModel", "BigBirdConfig", vocab_size=100, attention_type="original_full", **_SMALL),
            lambda t: (_ids(t),),
        ),
        ZooSpec(
            "deit",
            "DeiT (transformers, d=64, 2 layers, 32x32 image, 8x8 patches; class and distillation tokens)",
            _hf("DeiTModel", "DeiTConfig", image_size=32, patch_size=8, **_SMALL),
            lambda t: (t.randn(2, 3, 32, 32),),
        ),
        ZooSpec(
            "canine",
            "CANINE (transformers, d=64, 2 layers; hashed character embeddings, strided downsampling conv)",
            _hf(
                "CanineModel",
                "CanineConfig",
                **_SMALL,
                downsampling_rate=4,
                num_hash_functions=4,
                num_hash_buckets=64,
                local_transformer_stride=4,
            ),
            lambda t: (t.randint(0, 5000, (2, 16)),),
        ),
        ZooSpec(
            "perceiver",
            "Perceiver (transformers; 16 inputs of 32 cross-attended by 8 latents of 64, 2 self-attentions)",
            _transformers(
                lambda tf: tf.PerceiverModel(
                    tf.PerceiverConfig(
                        num_latents=8,
                        d_latents=64,
                        d_model=32,
                        num_blocks=1,
                        num_self_attends_per_block=2,
                        num_self_attention_heads=4,
                        num_cross_attention_heads=1,
                    )
                ),
                keywords=("inputs",),
            ),
            lambda t: (t.randn(2, 16, 32),),
        ),
        ZooSpec(
            "patchtst",
            "PatchTST (transformers, time series: 3 channels of 32 steps in patches of 8, d=64, 2 layers)",
            _transformers(
                lambda tf: tf.PatchTSTModel(
                    tf.PatchTSTConfig(
                        num_input_channels=3,
                        context_length=32,
                        patch_length=8,
                        patch_stride=8,
                        d_model=64,
                        num_attention_heads=4,
                        num_hidden_layers=2,
                        ffn_dim=128,
                    )
                ),
                keywords=("past_values",),
            ),
            lambda t: (t.randn(2, 32, 3),),
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
