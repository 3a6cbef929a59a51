"""ONNX import fusions on the GPU: the fused gemm stages (bias, gelu_tanh, residual as cuBLASLt
epilogues and C matrix, a 3-d a folded into M), the attention's scaled, masked softmax and its heads as
strided views run their CUDA variant, nothing is staged on host copies, and the outputs match the same
pipeline on the CPU, eagerly and replayed from a captured CUDA graph (new inputs each run)."""

from __future__ import annotations

import numpy as np
import pytest

import pipelink as pl
from tests.conftest import assert_close

pytestmark = pytest.mark.gpu

onnx = pytest.importorskip("onnx")

from pipelink.onnx import import_model  # noqa: E402
from tests.backend import onnx_models as om  # noqa: E402


def _real_gpt2(batch: int):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from benchmarks.model_zoo import MODELS, export_onnx

    torch.manual_seed(0)
    spec = MODELS["gpt2_block"]
    x = torch.randn(spec.input_shape(batch))
    return onnx.load_from_string(export_onnx(spec.build(torch).eval(), x)), {"x": x.numpy()}


BUILDERS = {
    "mlp_block": lambda: om.mlp_block(batch=7),
    "gpt2_twin": lambda: om.gpt2_block(batch=3),
    "gpt2_twin_fixed": lambda: om.gpt2_block(batch=3, symbolic_batch=False),  # heads as as_strided views
    "gpt2_real": lambda: _real_gpt2(batch=4),
}


@pytest.mark.parametrize("cuda_graph", [False, True], ids=["eager", "graph"])
@pytest.mark.parametrize("name", list(BUILDERS))
def test_fused_gemms_run_on_the_gpu_and_match_the_cpu(name, cuda_graph):
    if cuda_graph:
        pytest.importorskip("nvmath", reason="graph capture of gemm needs cuBLASLt through nvmath-python")
    model, feeds = BUILDERS[name]()
    config, weights = import_model(model)
    gemms = {s["id"]: s.get("attrs", {}) for s in config["pipeline"] if s["name"] == "gemm"}
    fused = {s["id"] for s in config["pipeline"] if s["name"] in ("softmax", "as_strided")}
    if name.startswith("gpt2"):
        softmax = [s for s in config["pipeline"] if s["name"] == "softmax"]
        assert len(softmax) == 1 and len(softmax[0]["inputs"]) == 2, f"{name}: the mask was not fused"
    assert any(a.get("activation", "").startswith("gelu") for a in gemms.values()), f"{name}: no GELU fused"
    assert any(len(s["inputs"]) == 4 for s in config["pipeline"] if s["name"] == "gemm"), "no residual"
    rng = np.random.default_rng(7)
    runs = [feeds] + [
        {k: rng.standard_normal(v.shape).astype(v.dtype) for k, v in feeds.items()} for _ in range(2)
    ]
    with (
        pl.load(config, device="cpu", weights=weights) as cpu,
        pl.load(config, device="cuda", weights=weights, cuda_graph=cuda_graph) as gpu,
    ):
        for k, run in enumerate(runs):
            expected = cpu.run(run)
            got = gpu.run(run)
            for out in cpu.outputs:
                assert_close(np.asarray(got[out].numpy()), np.asarray(expected[out].numpy()), "float32", out)
            if cuda_graph and k > 0 and not gpu.load_report.staged:  # a staged stage may keep it eager
                assert gpu.last_report.graph_replay, f"{name}: run {k} did not replay the captured graph"
        report = gpu.load_report
        assert not set(report.staged) & (set(gemms) | fused), (
            f"{name}: stages on host copies: {report.staged}"
        )
        for sid in [*gemms, *fused]:
            assert report.variants[sid].startswith("cuda"), f"{name}: {sid} runs {report.variants[sid]}"
