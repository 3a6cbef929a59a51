"""The three real models of ``benchmarks/model_zoo.py`` exported from PyTorch, imported and run on each
device against PyTorch in float32 (skipped where torch, torchvision or transformers is missing: they are
on the GPU host), and the model race run end to end on CUDA with the tiny onnx.helper twins."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import pipelink as pl  # noqa: E402
from benchmarks.model_zoo import MODELS, export_onnx  # noqa: E402
from tests.conftest import assert_close  # noqa: E402


@pytest.mark.parametrize("name", list(MODELS))
def test_real_model_matches_pytorch(name, device):
    torch = pytest.importorskip("torch")
    pytest.importorskip(MODELS[name].needs)
    torch.manual_seed(0)
    spec = MODELS[name]
    module = spec.build(torch).eval()
    x = torch.randn(spec.input_shape(2))
    model = onnx.load_from_string(export_onnx(module, x))
    with torch.no_grad():
        ref = module.double()(x.double()).numpy()  # float64: the float32 results are judged against it
    with pl.from_onnx(model, device=device) as pipe:
        out = pipe.run(x=x.numpy())["y"]
        got = np.asarray(out.numpy())
    assert got.shape == ref.shape, f"{name}: output shape {got.shape}, PyTorch's {ref.shape}"
    assert_close(got, ref, "float32", f"{name} on {device}")


@pytest.mark.gpu
def test_model_race_runs_the_twins_on_cuda(tmp_path):
    pytest.importorskip("torch")
    from benchmarks import models

    argv = ["--device", "cuda", "--tiny", "--no-compile", "--out", str(tmp_path), "--batches", "1,2"]
    assert models.main(argv) == 0, "a record errored or a PipeLink output was wrong; see models.json"
    records = json.loads((tmp_path / "models.json").read_text())["records"]
    assert len(records) == 2 * len(MODELS)
    for rec in records:
        what = f"{rec['model']} batch {rec['batch']}"
        for mode in ("pipelink_eager", "pipelink_graph"):
            assert rec["correctness"][mode]["ok"], f"{what} {mode}: {rec['correctness'][mode]}"
            assert rec["times_s"][mode] > 0, f"{what}: {mode} was not timed"
        if not rec["staged"]:  # a stage on staged host copies may keep the pipeline from capturing
            assert rec["graph_replay"], f"{what}: the graph pipeline did not replay"
        prof = rec["profile"]
        assert prof["basis"].startswith("device"), f"{what}: stages were not timed on the device"
        assert len(prof["stages"]) == rec["stages"]["pipeline"]
        assert prof["total_s"] > 0 and all(s["time_s"] >= 0 for s in prof["stages"])  # views take ~0
        variants = {s["stage"]: s["variant"] for s in prof["stages"]}
        for sid in rec["staged"]:  # a staged stage runs a host variant: the report must say which
            assert variants[sid].startswith("cpu"), f"{what}: staged stage {sid} runs {variants[sid]}"
