"""Real models through the ONNX importer on a GPU host: export a GPT-2-style decoder block (transformers),
a ResNet-18 (torchvision, random weights) and an ESPCN-style super-resolution net from PyTorch to ONNX, import
each with ``pl.from_onnx``, run it on the CPU and on CUDA, and compare with onnxruntime (CPU). Prints one line
per model and device: the import result (or the unsupported nodes), the largest relative error, and the
stages that ran on staged host copies. A check, not a benchmark: no timings.

python scripts/onnx_models_check.py [--out DIR]
"""

from __future__ import annotations

import argparse
import io
import traceback
from pathlib import Path

import numpy as np

import pipelink as pl


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


def _gpt2_block(torch):
    from transformers import GPT2Config
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block

    block = GPT2Block(GPT2Config(n_embd=256, n_head=4, n_positions=128), layer_idx=0)

    class Wrapper(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.block = block

        def forward(self, x):
            return self.block(x)[0]

    return Wrapper()


def _models(torch):
    import torchvision

    return {
        "espcn": (_espcn(torch), (1, 1, 64, 64)),
        "resnet18": (torchvision.models.resnet18(weights=None), (1, 3, 64, 64)),
        "gpt2_block": (_gpt2_block(torch), (1, 32, 256)),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=None, help="keep the exported .onnx files here")
    args = parser.parse_args()
    import onnx
    import onnxruntime as ort
    import torch

    torch.manual_seed(0)
    failures = 0
    for name, (module, shape) in _models(torch).items():
        module.eval()
        x = torch.randn(*shape)
        buf = io.BytesIO()
        try:
            torch.onnx.export(
                module, (x,), buf, input_names=["x"], output_names=["y"], opset_version=18, dynamo=False
            )
            model = onnx.load_from_string(buf.getvalue())
        except Exception as e:  # noqa: BLE001 - report and go on with the next model
            print(f"{name}: export failed: {type(e).__name__}: {e}")
            failures += 1
            continue
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"{name}.onnx").write_bytes(buf.getvalue())
        ops = sorted({n.op_type for n in model.graph.node})
        ref = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"]).run(
            None, {"x": x.numpy()}
        )[0]
        for device in ("cpu", "cuda"):
            try:
                with pl.from_onnx(model, device=device) as pipe:
                    out = np.asarray(pipe.run(x=x.numpy())["y"].numpy())
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
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
