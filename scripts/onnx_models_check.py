"""Real models through the ONNX importer on a GPU host: the three models of ``benchmarks/model_zoo.py``
(a GPT-2 decoder block from transformers, a ResNet-18 from torchvision with random weights, an ESPCN-style
super-resolution net) exported from PyTorch at batch 1, imported with ``pl.from_onnx``, run on the CPU and
on CUDA and compared with onnxruntime (CPU). Prints one line per model and device: the import result (or
the unsupported nodes), the largest relative error, and the stages that ran on staged host copies. A
check, not a benchmark: ``python -m benchmarks.models`` races them. ``--zoo wide`` checks the wider zoo
instead (``model_zoo.ZOO``: MobileNetV2, EfficientNet, SqueezeNet, DenseNet; ViT, BERT, RoBERTa, T5,
Whisper, BEiT and wav2vec2 encoders; BART; GPT-2, Llama, GPT-NeoX, Falcon, BLOOM and Mixtral decoders;
Mamba; Swin, Swin V2, LeViT, YOLOS, DINOv2, DETR and HF's MobileNetV2; ConvNeXt, ShuffleNetV2, RegNetY;
the video nets R3D-18, R(2+1)D-18 and S3D; and 56 more: torchvision's MobileNetV3, MNASNet, GoogLeNet,
Inception v3, EfficientNetV2, ViT-B/16, MaxViT, two segmentation nets and RAFT; transformers' DistilBERT,
ALBERT, DeBERTa-v2, ELECTRA, MPNet, SqueezeBERT, RoFormer, ESM, ModernBERT, Funnel, XLNet, Longformer, T5,
Whisper, WavLM, CLIP, SigLIP, DINOv3, SAM, SegFormer, PVTv2, MobileViT, ConvNeXt V2, PoolFormer, BiT,
FocalNet, CvT, Swin2SR, DPT, OPT, GPT-J, CodeGen, GPT-BigCode, MPT, Phi, StarCoder2, StableLM, OLMo 2,
Granite, Gemma 3, Qwen2-MoE, DeepSeek-V3, gpt-oss, Mamba-2 and RWKV; and 9 more: ResNeXt-50, HuBERT,
FNet, ConvBERT, BigBird, DeiT, CANINE, Perceiver and PatchTST; small, random weights).

``--exporter dynamo`` exports as ``torch.onnx.export`` does by default (torch.export, with onnxscript), and
``--dynamic-batch`` exports with a symbolic batch (at batch 2) and runs the import at batch 3, and
``--dynamic-seq`` with a symbolic dim 1 of the 2-d inputs (token ids, audio samples), run at 3/4 of it.
``--fix-shapes`` imports such an export with its inputs' dims fixed to the run's (``from_onnx(shapes=)``).

python scripts/onnx_models_check.py [--zoo race|wide] [--only NAME,...] [--devices cpu,cuda] [--out DIR]
                                    [--exporter auto|torchscript|dynamo] [--dynamic-batch] [--dynamic-seq]
                                    [--fix-shapes]
"""

from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path

import numpy as np

import pipelink as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for benchmarks/

from benchmarks.model_zoo import EXPORTERS, MODELS, ZOO, export_onnx_inputs, onnx_op_counts  # noqa: E402


def _cases(zoo: str, torch, only: set[str]) -> list[tuple[str, object, tuple]]:
    """(name, module, inputs) of every model of ``zoo`` (of those named in ``only``, when not empty)."""
    specs = MODELS if zoo == "race" else ZOO  # main() checked ``only`` against them
    chosen = [(name, spec) for name, spec in specs.items() if not only or name in only]
    if zoo == "race":
        return [(n, spec.build(torch).eval(), (torch.randn(spec.input_shape(1)),)) for n, spec in chosen]
    return [(name, spec.build(torch).eval(), spec.inputs(torch)) for name, spec in chosen]


def _reshaped(torch, t, batch: int | None, seq: int | None):
    """A fresh tensor like ``t`` with ``batch`` rows and, if it is 2-d, ``seq`` columns (None: as ``t``):
    floats drawn with its mean and spread, integers (token ids, masks) within its range."""
    shape = [*t.shape]
    shape[0] = batch or shape[0]
    if t.dim() == 2 and seq:
        shape[1] = seq
    if t.is_floating_point():
        return torch.randn(shape, dtype=t.dtype) * t.std() + t.mean()
    return torch.randint(int(t.min()), int(t.max()) + 1, shape, dtype=t.dtype)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--zoo", choices=("race", "wide"), default="race", help="which models (default race)")
    parser.add_argument("--devices", default="cpu,cuda", help="comma-separated devices (default cpu,cuda)")
    parser.add_argument("--out", type=Path, default=None, help="keep the exports and feeds here")
    parser.add_argument("--only", default="", help="comma-separated model names of the zoo (default: all)")
    parser.add_argument("--exporter", choices=EXPORTERS, default="auto", help="which exporter (default auto)")
    parser.add_argument("--dynamic-batch", action="store_true", help="export a symbolic batch, run batch 3")
    parser.add_argument("--dynamic-seq", action="store_true", help="export a symbolic dim 1 of 2-d inputs")
    parser.add_argument(
        "--fix-shapes",
        action="store_true",
        help="import with the dims fixed to the run's inputs' (from_onnx shapes=): a dynamic export as one "
        "with fixed shapes",
    )
    args = parser.parse_args()
    only = {n for n in args.only.split(",") if n}
    unknown = only - set(MODELS if args.zoo == "race" else ZOO)
    if unknown:
        parser.error(f"--only: no model {', '.join(sorted(unknown))} in the {args.zoo} zoo")
    try:
        import onnx
        import onnxruntime as ort
        import torch
    except ImportError as e:
        parser.error(f"needs torch, onnx and onnxruntime (and transformers for the wide zoo): {e}")

    torch.manual_seed(0)
    failures = 0
    for name, module, inputs in _cases(args.zoo, torch, only):
        names = ["x"] if args.zoo == "race" else None
        run_inputs = inputs
        if args.dynamic_batch or args.dynamic_seq:
            batches = (2, 3) if args.dynamic_batch else (None, None)
            seqs = [
                (None, t.shape[1] * 3 // 4) if args.dynamic_seq and t.dim() == 2 else (None, None)
                for t in inputs
            ]
            inputs, run_inputs = (
                tuple(_reshaped(torch, t, batches[k], seq[k]) for t, seq in zip(inputs, seqs, strict=True))
                for k in (0, 1)
            )
        try:
            data = export_onnx_inputs(
                module, inputs, names, args.exporter, args.dynamic_batch, args.dynamic_seq
            )
            model = onnx.load_from_string(data)
        except Exception as e:  # noqa: BLE001 - report and go on with the next model
            print(f"{name}: export failed: {type(e).__name__}: {e}")
            failures += 1
            continue
        ops = list(onnx_op_counts(model))
        declared = {i.name for i in model.graph.input}
        given = names or [f"in{k}" for k in range(len(inputs))]
        feeds = {n: t.numpy() for n, t in zip(given, run_inputs, strict=True) if n in declared}
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"{name}.onnx").write_bytes(data)
            np.savez(args.out / f"{name}.npz", **feeds)
        try:
            ref = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
        except Exception as e:  # noqa: BLE001 - the export, not PipeLink: report it and go on
            print(f"{name}: onnxruntime failed on the export: {type(e).__name__}: {str(e)[:500]}")
            failures += 1
            continue
        for device in args.devices.split(","):
            try:
                shapes = {n: list(v.shape) for n, v in feeds.items()} if args.fix_shapes else None
                with pl.from_onnx(model, device=device, shapes=shapes) as pipe:
                    out = np.asarray(pipe.run(feeds)["y"].numpy())
                    if out.shape != ref.shape:
                        raise AssertionError(f"output shape {out.shape}, onnxruntime's {ref.shape}")
                    err = float(np.max(np.abs(out - ref)) / max(1e-6, float(np.max(np.abs(ref)))))
                    staged = list(pipe.load_report.staged)
                print(
                    f"{name} [{device}]: ops {ops}; max rel err {err:.2e}; staged on host: {staged or 'none'}"
                )
                failures += err > 1e-3
            except pl.PipeLinkError as e:
                print(f"{name} [{device}]: {e.code.name}: {e.message[:2000]}")
                failures += 1
            except Exception:  # noqa: BLE001
                print(f"{name} [{device}]: crashed:\n{traceback.format_exc()[-2000:]}")
                failures += 1
    print(f"SUMMARY {args.zoo} zoo: {failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
