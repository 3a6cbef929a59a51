"""Real models through the ONNX importer on a GPU host: the three models of ``benchmarks/model_zoo.py``
(a GPT-2 decoder block from transformers, a ResNet-18 from torchvision with random weights, an ESPCN-style
super-resolution net) exported from PyTorch at batch 1, imported with ``pl.from_onnx``, run on the CPU and
on CUDA and compared with onnxruntime (CPU). Prints one line per model and device: the import result (or
the unsupported nodes), the largest relative error, and the stages that ran on staged host copies. A
check, not a benchmark: ``python -m benchmarks.models`` races them.

python scripts/onnx_models_check.py [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path

import numpy as np

import pipelink as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for benchmarks/

from benchmarks.model_zoo import MODELS, export_onnx, onnx_op_counts  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=None, help="keep the exported .onnx files here")
    args = parser.parse_args()
    import onnx
    import onnxruntime as ort
    import torch

    torch.manual_seed(0)
    failures = 0
    for name, spec in MODELS.items():
        module = spec.build(torch).eval()
        x = torch.randn(spec.input_shape(1))
        try:
            data = export_onnx(module, x)
            model = onnx.load_from_string(data)
        except Exception as e:  # noqa: BLE001 - report and go on with the next model
            print(f"{name}: export failed: {type(e).__name__}: {e}")
            failures += 1
            continue
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"{name}.onnx").write_bytes(data)
        ops = list(onnx_op_counts(model))
        ref = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x.numpy()})[0]
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
