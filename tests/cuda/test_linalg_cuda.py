"""gemm and matmul on cuBLASLt, and the axis-aware norms, on the GPU: every cuBLASLt mapping the binds
choose (bias epilogue, C matrix read in place, bias expanded into D then C = D, residual as C, a batch
folded into M, strided batched with stride 0, one call per leading batch index) against the CPU
reference, eagerly and replayed from a captured CUDA graph (new inputs each run). Each stage reads
pipeline inputs (the norms read matmul's output), so 16-bit rounding does not compound along a chain."""

from __future__ import annotations

import numpy as np
import pytest

import pipelink as pl
from tests.backend.ops_helpers import check_close, rand

pytestmark = pytest.mark.gpu

pytest.importorskip("nvmath", reason="graph capture of gemm/matmul needs cuBLASLt through nvmath-python")

LINALG = {
    "name": "linalg_chain",
    "inputs": {
        name: {"shape": shape, "dtype": "float32"}
        for name, shape in {
            "x": [2, 1, 24, 40],
            "w": [1, 3, 40, 32],
            "wt": [40, 24],
            "wb": [40, 32],
            "cm": [24, 1],
            "cfull": [24, 32],
            "sq": [32, 32],
            "v": [32],
            "g": [24, 32],
            "p": [2, 1, 3, 7],
            "q": [1, 4, 7, 5],
        }.items()
    },
    "outputs": ["mm", "odd", "fold", "bg", "col", "full", "vec", "ln", "rms"],
    "pipeline": [
        # [2, 1] x [1, 3] batches: two strided-batched calls of 3 (a stride 0)
        {"name": "matmul", "id": "bmm", "inputs": ["x", "w"], "outputs": ["mm"]},
        # the same with odd sizes: the second call starts 21 elements into p (alignment 2 bytes in 16-bit)
        {"name": "matmul", "id": "odd", "inputs": ["p", "q"], "outputs": ["odd"]},
        # b shared by both batches: folded into M = 48
        {"name": "matmul", "id": "fold", "inputs": ["x", "wb"], "outputs": ["fold"]},
        # batched a [2, 1, 24, K] (M = 48), the bias vector and the tanh GELU fused in the epilogue
        {
            "name": "gemm",
            "id": "bg",
            "inputs": ["x", "wb", "v"],
            "outputs": ["bg"],
            "attrs": {"activation": "gelu_tanh", "alpha": 0.5},
        },
        # trans_a, C [M, 1] with beta: expanded into D, then C = D
        {
            "name": "gemm",
            "id": "col",
            "inputs": ["wt", "wb", "cm"],
            "outputs": ["col"],
            "attrs": {"trans_a": True, "alpha": 0.5, "beta": -2.0, "activation": "relu"},
        },
        # C [M, N] read in place, beta; the erf GELU as a kernel after
        {
            "name": "gemm",
            "id": "full",
            "inputs": ["wt", "wb", "cfull"],
            "outputs": ["full"],
            "attrs": {"trans_a": True, "beta": 0.25, "activation": "gelu"},
        },
        # bias vector (epilogue) and residual [M, N] as C
        {
            "name": "gemm",
            "id": "vec",
            "inputs": ["cfull", "sq", "v", "cfull"],
            "outputs": ["vec"],
            "attrs": {"trans_b": True},
        },
        {
            "name": "layer_norm",
            "id": "ln",
            "inputs": ["mm", "g"],
            "outputs": ["ln", "mean", "rstd"],
            "attrs": {"axis": -2},
        },
        {"name": "rms_norm", "id": "rms", "inputs": ["mm", "g"], "outputs": ["rms"], "attrs": {"axis": 2}},
    ],
}
SHAPES = {name: tuple(spec["shape"]) for name, spec in LINALG["inputs"].items()}


def _config(dtype: str) -> dict:
    inputs = {n: {"shape": list(s), "dtype": dtype} for n, s in SHAPES.items()}
    return dict(LINALG, inputs=inputs)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "float64"])
@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
def test_linalg_chain_matches_the_cpu(dtype, graph, caplog):
    config = _config(dtype)
    rng = np.random.default_rng(13)
    feeds = [{n: rand(rng, s, dtype, -1.0, 1.0) for n, s in SHAPES.items()} for _ in range(3)]
    with pl.load(config, device="cpu") as cpu:
        refs = [{k: np.asarray(v) for k, v in cpu.run(f).items()} for f in feeds]
    with pl.load(config, device="cuda", cuda_graph=graph) as gpu:
        assert all(v.startswith("cuda") for v in dict(gpu.load_report.variants).values())
        for i, (f, ref) in enumerate(zip(feeds, refs, strict=True)):
            out = {k: v.numpy() for k, v in gpu.run(f).items()}
            if graph and i > 0:  # the first run of a signature is eager; it is captured after it
                assert gpu.last_report.graph_replay, gpu.load_report.warnings
            for key, want in ref.items():
                check_close(out[key], want.astype(np.float64), dtype)
    assert "cuBLASLt via nvmath-python unavailable" not in caplog.text, "every product ran on cuBLASLt"
