"""The three real models of issue 14 in one place: their PyTorch definitions, input shapes and ONNX export
(used by the model race, ``benchmarks/models.py``, and by ``scripts/onnx_models_check.py``), and their tiny
``onnx.helper`` twins for a host without torch (the CPU smoke run in CI).

Never imports torch, torchvision or transformers at module level: they exist only on the GPU host.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["MODELS", "ModelSpec", "export_onnx", "onnx_op_counts", "tiny_model"]

# GPT-2 small's width and heads, on a 128-token sequence (a prompt of typical length; the attention
# matrix is then 128x128 per head, so the block is dominated by its four projections, as in GPT-2).
GPT2_EMBED, GPT2_HEADS, GPT2_TOKENS = 768, 12, 128
IMAGE = 224  # ResNet-18's ImageNet resolution; ESPCN's input (a 224x224 luminance image, upscaled 3x)
OPSET = 18


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
    )
}


def export_onnx(module: Any, x: Any) -> bytes:
    """``module`` (eval mode, on the CPU) exported on input ``x`` with fixed shapes: the model's one input
    is ``x`` and its one output ``y``. Fixed shapes keep every Reshape's shape a constant (a dynamic batch
    makes the exporter compute shapes, which the importer refuses)."""
    import torch

    buf = io.BytesIO()
    torch.onnx.export(
        module, (x,), buf, input_names=["x"], output_names=["y"], opset_version=OPSET, dynamo=False
    )
    return buf.getvalue()


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
