"""conv2d's pointwise GEMM variant (cuBLASLt) and concat's one-launch kernel on the GPU, against the CPU
reference with outputs poisoned (NaN, 0xCD) first: batch 1, odd H*W, channels that are not a multiple of
8, every float dtype; the variant a pipeline reports (cuBLASLt for 1x1, cuDNN for the rest); the native
core's plan of both stages equal to Python's run().

Run on the H200: ``python -m pytest -q -p no:cacheprovider tests/cuda/test_conv_gemm_cuda.py``.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import pipelink as pl
from pipelink.ops.conv.cuda import CUBLASLT_VARIANT
from pipelink.ops.shape.rules import MAX_PARTS
from tests.backend.ops_helpers import check_close, make_registry, rand, run_op
from tests.conftest import assert_close
from tests.native_core.conftest import _library

pytestmark = pytest.mark.gpu
HAS_CUDNN = importlib.util.find_spec("cudnn") is not None
needs_cublaslt = pytest.mark.skipif(
    importlib.util.find_spec("nvmath") is None,
    reason="cuBLASLt runs through nvmath-python ('pipelink[cuda]')",
)
FLOATS = ("float16", "bfloat16", "float32", "float64")


@pytest.fixture(scope="module")
def reg():
    return make_registry()


def _pointwise_ref(x, w, b):
    y = np.einsum("mc,nchw->nmhw", w[:, :, 0, 0].astype(np.float64), x.astype(np.float64))
    return y if b is None else y + b.astype(np.float64)[None, :, None, None]


POINTWISE = [
    # x shape, output channels, attrs
    ((1, 3, 7, 5), 2, {}),  # batch 1, odd H*W, C = 3
    ((3, 13, 9, 11), 21, {}),  # C and M not multiples of 8
    ((2, 256, 14, 14), 64, {}),  # the ResNet bottleneck's reduction
    ((4, 64, 1, 1), 17, {}),  # one pixel
    ((2, 24, 6, 6), 40, {"auto_pad": "SAME_UPPER", "dilations": [2, 2]}),  # still one tap, no pads
]


@needs_cublaslt
@pytest.mark.parametrize(("xs", "m", "attrs"), POINTWISE)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("with_bias", [True, False])
def test_pointwise_conv_matches_the_reference(reg, xs, m, attrs, dtype, with_bias):
    rng = np.random.default_rng(7)
    x, w = rand(rng, xs, dtype, -1, 1), rand(rng, (m, xs[1], 1, 1), dtype, -1, 1)
    b = rand(rng, (m,), dtype) if with_bias else None
    (y,) = run_op(reg, "conv2d", [x, w, b], attrs, device="cuda", variant_name=CUBLASLT_VARIANT)
    check_close(y, _pointwise_ref(x, w, b), dtype)


def _two_convs(dtype: str, n: int = 2, c: int = 24, hw: int = 9, m: int = 20) -> dict:
    return {
        "name": "pw_then_3x3",
        "inputs": {
            "x": {"shape": [n, c, hw, hw], "dtype": dtype},
            "w1": {"shape": [m, c, 1, 1], "dtype": dtype},
            "b1": {"shape": [m], "dtype": dtype},
            "w3": {"shape": [m, m, 3, 3], "dtype": dtype},
        },
        "outputs": ["y"],
        "pipeline": [
            {"name": "conv2d", "id": "pw", "inputs": ["x", "w1", "b1"], "outputs": ["h"]},
            {
                "name": "conv2d",
                "id": "k3",
                "inputs": ["h", "w3"],
                "outputs": ["y"],
                "attrs": {"pads": [1] * 4},
            },
        ],
    }


def _feed(doc: dict, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {k: rand(rng, v["shape"], v["dtype"], -1, 1) for k, v in doc["inputs"].items()}


@needs_cublaslt
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_pipelines_report_cublaslt_for_1x1_and_cudnn_for_the_rest(dtype):
    torch = pytest.importorskip("torch")
    doc = _two_convs(dtype)
    feed = _feed(doc, 3)
    with pl.load(doc, device="cpu") as cpu:
        ref = np.asarray(cpu.run(feed)["y"])
    with pl.load(doc, device="cuda") as gpu:
        y = torch.full(ref.shape, float("nan"), dtype=getattr(torch, dtype), device="cuda")
        gpu.run(feed, out={"y": y})
        torch.cuda.synchronize()
        report = gpu.load_report
    assert report.variants["pw"] == CUBLASLT_VARIANT, report
    assert report.variants["k3"] == ("cuda:cudnn" if HAS_CUDNN else "cpu:numpy"), report
    assert any(
        s.startswith(f"{CUBLASLT_VARIANT}: not a pointwise convolution (kernel 3x3")
        for s in report.skipped_variants["k3"]
    ), report.skipped_variants
    # two convolutions: the intermediate's rounding may differ by an ulp, so the norm-relative check
    assert_close(y.float().cpu().numpy(), ref.astype(np.float64), dtype, "pw then 3x3")


def _pw_concat(dtype: str) -> dict:
    """A pointwise conv with bias, then a concat of its output with an input and with itself: both stages
    are launches the native core replays (a cuBLASLt matmul after the bias copy; one pl_concat)."""
    return {
        "name": "pw_concat",
        "inputs": {
            "x": {"shape": [3, 13, 7, 9], "dtype": dtype},
            "w": {"shape": [11, 13, 1, 1], "dtype": dtype},
            "b": {"shape": [11], "dtype": dtype},
            "z": {"shape": [3, 5, 7, 9], "dtype": dtype},
        },
        "outputs": ["y"],
        "pipeline": [
            {"name": "conv2d", "id": "pw", "inputs": ["x", "w", "b"], "outputs": ["h"]},
            {
                "name": "concat",
                "id": "cat",
                "inputs": ["h", "z", "h"],
                "outputs": ["y"],
                "attrs": {"axis": 1},
            },
        ],
    }


@needs_cublaslt
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_native_plan_of_a_pointwise_conv_equals_python_run(tmp_path, dtype):
    torch = pytest.importorskip("torch")
    _library()  # built here when the checkout has no build of it yet
    doc = _pw_concat(dtype)
    with (
        pl.load(doc, device="cpu") as cpu,
        pl.load(doc, device="cuda") as ref,
        pl.load(doc, device="cuda", native=True) as nat,
    ):
        ref.save(tmp_path / "pw_concat.plk")  # `pipelink compile` takes both stages
        for seed in (1, 2):
            host = _feed(doc, seed)
            feed = {
                k: torch.from_numpy(v.astype(np.float32)).cuda().to(getattr(torch, dtype))
                for k, v in host.items()
            }
            want = torch.from_dlpack(ref.run(feed)["y"]).float().cpu().numpy()
            assert ref.load_report.variants["pw"] == CUBLASLT_VARIANT
            check_close(want, np.asarray(cpu.run(host)["y"]).astype(np.float64), dtype)
            y = torch.full(want.shape, float("nan"), dtype=getattr(torch, dtype), device="cuda")
            nat.run(feed, out={"y": y})  # the core takes device tensors
            torch.cuda.current_stream().synchronize()
            check_close(y.float().cpu().numpy(), want.astype(np.float64), dtype)


@needs_cublaslt
def test_pointwise_conv_and_concat_replay_in_a_cuda_graph():
    torch = pytest.importorskip("torch")
    doc = _pw_concat("bfloat16")
    with pl.load(doc, device="cuda") as eager, pl.load(doc, device="cuda", cuda_graph=True) as graph:
        for seed in (4, 5):  # the second run replays the captured graph with new input values
            feed = _feed(doc, seed)
            want = torch.from_dlpack(eager.run(feed)["y"]).float().cpu().numpy()
            got = torch.from_dlpack(graph.run(feed)["y"]).float().cpu().numpy()
            check_close(got, want.astype(np.float64), "bfloat16")
        assert graph.load_report.variants["pw"] == CUBLASLT_VARIANT


CONCAT = [
    # part shapes, axis
    ([(8, 3, 5), (8, 2, 5), (8, 1, 5)], 1),
    ([(64, 768)] * 3, -1),  # 16-byte words (the qkv merge, smaller)
    ([(64, 767), (64, 1), (64, 768)], 1),  # odd rows: element words
    ([(2, 3, 4)] * 5, 0),  # one row
    ([(1, 2, 1, 3)] * MAX_PARTS, 2),  # every slot
    ([(4, 0, 3), (4, 2, 3), (4, 0, 3), (4, 1, 3)], 1),  # empty parts left out of the launch
    ([(5, 7)], 0),  # one part
    ([(3, 70001), (3, 5)], 1),  # unequal parts: blocks in proportion
]


@pytest.mark.parametrize(("shapes", "axis"), CONCAT)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "int8", "bool", "int64"])
def test_concat_is_numpy_concatenate(reg, shapes, axis, dtype):
    rng = np.random.default_rng(13)
    parts = [rand(rng, s, dtype) for s in shapes]
    (y,) = run_op(reg, "concat", parts, {"axis": axis}, device="cuda")
    want = np.concatenate(parts, axis=axis)
    assert y.dtype == want.dtype and y.shape == want.shape
    # bit for bit: a word not written still holds the poison (NaN, 0xCD)
    np.testing.assert_array_equal(y.reshape(-1).view(np.uint8), want.reshape(-1).view(np.uint8))


def test_concat_of_a_misaligned_input_is_still_exact():
    # A pointer 2 bytes off 16: PlanLaunch switches to the element-word plan (16-byte words would fault).
    torch = pytest.importorskip("torch")
    doc = {
        "name": "cat",
        "outputs": ["y"],
        "pipeline": [
            {"name": "concat", "id": "cat", "inputs": ["a", "b"], "outputs": ["y"], "attrs": {"axis": 1}}
        ],
    }
    base = torch.randn(4 * 16 + 1, dtype=torch.float16, device="cuda")
    a = base[1:].view(4, 16)  # 2 bytes past a 256-byte boundary: no 16-byte words
    b = torch.randn(4, 8, dtype=torch.float16, device="cuda")
    with pl.load(doc, device="cuda") as pipe:
        y = torch.from_dlpack(pipe.run({"a": a, "b": b})["y"])
        torch.cuda.synchronize()
    assert torch.equal(y, torch.cat([a, b], dim=1))
