"""The CUDA backend's contract on a GPU: host variants run on staged copies, a custom registry resolves
the built-in CUDA kernels, one workspace per stream."""

from __future__ import annotations

import numpy as np
import pytest

import pipelink as pl
from pipelink.backends import get_backend
from pipelink.modules.registry import OperatorRegistry
from pipelink.tensor import Tensor

pytestmark = pytest.mark.gpu


@pl.operator("host_affine_v1", inputs=["x"], outputs=["y"], device="cpu", attrs={"a": 2.0, "b": -1.0})
def host_affine(x, y, *, a, b):
    # Host code: must only ever see NumPy arrays, never device tensors.
    assert isinstance(x, np.ndarray) and isinstance(y, np.ndarray), (type(x), type(y))
    np.multiply(x, a, out=y)
    y += b


def _doc() -> dict:
    return {
        "outputs": ["z"],
        "pipeline": [
            {"name": "relu", "id": "r", "inputs": ["x"], "outputs": ["h"]},
            {"name": "host_affine_v1", "id": "host", "inputs": ["h"], "outputs": ["y"]},
            {"name": "scale", "id": "s", "inputs": ["y"], "outputs": ["z"], "attrs": {"factor": 0.5}},
        ],
    }


@pytest.mark.parametrize("cuda_graph", [False, True], ids=["eager", "cuda_graph"])
def test_a_host_operator_between_device_stages_runs_on_staged_copies(cuda_graph):
    # Wrong if the host function got device tensors, if its inputs were read before the device stage
    # before it had written them, or if its outputs never reached the device stage after it.
    rng = np.random.default_rng(21)
    with pl.load(_doc(), device="cuda", cuda_graph=cuda_graph) as pipe:
        for rows in (3, 3, 129):  # a repeated signature reuses the plan's host buffers
            x = rng.standard_normal((rows, 1031)).astype(np.float32)
            z = np.asarray(pipe.run(x=x)["z"].cpu())
            # undeclared inputs: variants are chosen (and reported) with the first run's plan
            assert pipe.load_report.staged == ["host"]
            assert pipe.load_report.variants["r"].startswith("cuda")
            np.testing.assert_allclose(z, (np.maximum(x, 0) * 2.0 - 1.0) * 0.5, rtol=1e-6, atol=1e-6)
            assert pipe.last_report.graph_replay is False  # a host stage keeps the plan eager


def test_an_isolated_host_operator_on_cuda_stages_its_tensors_in_the_worker():
    # Wrong if the worker handed the host function the IPC block's device tensors.
    doc = _doc()
    doc["pipeline"][1]["isolation"] = "process"
    x = np.random.default_rng(24).standard_normal((17, 33)).astype(np.float32)
    with pl.load(doc, device="cuda") as pipe:
        z = np.asarray(pipe.run(x=x)["z"].cpu())
        assert pipe.last_report.stages["host"].status == "ok"
    np.testing.assert_allclose(z, (np.maximum(x, 0) * 2.0 - 1.0) * 0.5, rtol=1e-6, atol=1e-6)


def test_a_strided_device_input_reaches_a_host_operator_dense():
    torch = pytest.importorskip("torch")
    doc = {"pipeline": [{"name": "host_affine_v1", "id": "host", "inputs": ["x"], "outputs": ["y"]}]}
    base = torch.randn(64, 48, device="cuda")
    with pl.load(doc, device="cuda") as pipe:
        y = pipe.run(x=base.t())["y"]
        expected = (base.t() * 2.0 - 1.0).cpu().numpy()
        np.testing.assert_allclose(np.asarray(y.cpu()), expected, rtol=1e-6, atol=1e-6)


def test_a_custom_registry_on_cuda_runs_the_built_in_cuda_kernels():
    doc = {"pipeline": [{"name": "gelu", "id": "g", "inputs": ["x"], "outputs": ["y"]}]}
    with pl.load(doc, device="cuda", registry=OperatorRegistry()) as pipe:
        x = np.random.default_rng(22).standard_normal(4099).astype(np.float32)
        pipe.run(x=x)
        assert pipe.load_report.variants["g"].startswith("cuda"), pipe.load_report.variants
        assert pipe.load_report.staged == []


def test_one_workspace_per_stream():
    backend = get_backend("cuda")
    main, other = backend.default_stream(), backend.new_stream()
    a = backend.workspace(4 << 20, stream=main)
    assert backend.workspace(1 << 20, stream=main) is a  # shared by every kernel of the stream
    b = backend.workspace(4 << 20, stream=other)
    assert b is not a and b.ptr != a.ptr
    assert a.ptr % 256 == 0 and b.ptr % 256 == 0
    # The memory is real device memory: a copy through it round-trips.
    x = np.random.default_rng(23).standard_normal(1 << 18).astype(np.float32)
    src = backend.import_input(x)
    through = Tensor(a.ptr, x.shape, src.dtype, backend.device)
    backend.copy(through, src, stream=main)
    np.testing.assert_array_equal(np.asarray(through.cpu()), x)
