"""The backend contract: every method the runtime calls on a backend is declared in ``Backend``, every
backend answers the capability questions, and the runtime never asks a backend for its kind."""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import numpy as np
import pytest

import pipelink as pl
from pipelink.backends import get_backend
from pipelink.backends.base import Backend, Capabilities
from pipelink.backends.cpu import CPUBackend
from pipelink.backends.cuda import CUDABackend
from pipelink.errors import HardwareUnsupportedError, InvalidArgumentError

SRC = Path(pl.__file__).parent
# Where the runtime lives: everything that drives a backend without being one.
CALLERS = ["runtime", "graph", "modules", "tune", "pipeline.py", "memory.py", "tensor.py", "__init__.py"]
BACKEND_NAMES = {"backend", "_backend", "be"}


def _caller_files() -> list[Path]:
    files: list[Path] = []
    for entry in CALLERS:
        path = SRC / entry
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return files


def _is_backend(owner: ast.expr) -> bool:
    """``backend`` / ``self._backend`` / ``get_backend(...)``."""
    if isinstance(owner, ast.Name):
        return owner.id in BACKEND_NAMES
    if isinstance(owner, ast.Attribute):
        return owner.attr in BACKEND_NAMES
    return isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "get_backend"


def _backend_attributes(path: Path) -> set[tuple[str, int]]:
    """``(attribute, line)`` of every attribute read on a backend."""
    tree = ast.parse(path.read_text())
    return {
        (node.attr, node.lineno)
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and _is_backend(node.value)
    }


def _kind_decisions(path: Path) -> list[int]:
    """Lines that compare a backend's ``kind`` (naming it in a message is fine) or read
    ``supports_graphs`` of a backend."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare):
            for side in [node.left, *node.comparators]:
                if isinstance(side, ast.Attribute) and side.attr == "kind" and _is_backend(side.value):
                    lines.append(node.lineno)
        elif isinstance(node, ast.Attribute) and node.attr == "supports_graphs" and _is_backend(node.value):
            lines.append(node.lineno)
    return lines


def test_every_backend_method_the_runtime_uses_is_declared_in_the_base_class():
    # Wrong if a call site relied on a method only one backend happens to have.
    missing = []
    for path in _caller_files():
        for attr, line in _backend_attributes(path):
            if not hasattr(Backend, attr) and attr not in ("device", "info"):
                missing.append(f"{path.relative_to(SRC)}:{line}: backend.{attr}")
    assert missing == [], "declare these in backends/base.py:\n" + "\n".join(sorted(missing))


def test_the_runtime_asks_capabilities_not_kinds():
    uses = [f"{path.relative_to(SRC)}:{line}" for path in _caller_files() for line in _kind_decisions(path)]
    assert uses == []


def test_the_contract_check_sees_a_call_it_must_flag(tmp_path):
    # The scanner above must catch an undeclared method (else the first test could never fail).
    probe = tmp_path / "probe.py"
    probe.write_text("def f(backend):\n    backend.teleport()\n    return backend.kind == 'cpu'\n")
    assert _backend_attributes(probe) == {("teleport", 2), ("kind", 3)}
    assert _kind_decisions(probe) == [3]
    assert not hasattr(Backend, "teleport")


@pytest.mark.parametrize("cls", [CPUBackend, CUDABackend])
def test_each_backend_declares_its_capabilities(cls):
    caps = cls.capabilities
    assert isinstance(caps, Capabilities) and caps is not Backend.capabilities
    assert caps.isolation in ("shared_memory", "ipc", "none")


def test_capabilities_of_the_two_backends():
    assert CPUBackend.capabilities == Capabilities(
        host_access=True, asynchronous=False, cuda_graphs=False, isolation="shared_memory"
    )
    assert CUDABackend.capabilities == Capabilities(
        host_access=False, asynchronous=True, cuda_graphs=True, isolation="ipc"
    )


def test_the_hooks_share_one_signature():
    import inspect

    base = inspect.signature(Backend._allocate)
    for cls in (CPUBackend, CUDABackend):
        assert inspect.signature(cls._allocate) == base, cls


def test_shared_memory_is_refused_where_workers_do_not_map_host_memory():
    class NoIsolation(CPUBackend):
        capabilities = Capabilities(host_access=True, asynchronous=False, cuda_graphs=False, isolation="none")

    with pytest.raises(InvalidArgumentError, match="cannot share memory with worker processes"):
        NoIsolation().allocate(64, shared=True)


def test_the_cpu_backend_compiles_and_launches_nothing():
    cpu = get_backend("cpu")
    with pytest.raises(HardwareUnsupportedError, match="compiles no device kernels"):
        cpu.compile_kernel("__global__ void k() {}", "k")
    with pytest.raises(HardwareUnsupportedError, match="launches no device kernels"):
        cpu.launch(None, None, None)
    with pytest.raises(InvalidArgumentError, match="runs synchronously"):
        cpu.elapsed(None, None)


def test_memcpy_copies_raw_bytes_and_refuses_a_negative_size():
    cpu = get_backend("cpu")
    src = np.random.default_rng(4).standard_normal(33).astype(np.float32)
    dst = np.full(33, np.nan, np.float32)
    cpu.memcpy(dst.ctypes.data, src.ctypes.data, src.nbytes)
    np.testing.assert_array_equal(dst, src)
    with pytest.raises(InvalidArgumentError, match=">= 0"):
        cpu.memcpy(dst.ctypes.data, src.ctypes.data, -1)


def test_one_workspace_per_stream_grows_and_keeps_what_it_outgrew():
    # Wrong if two kernels of one stream got two buffers (peak memory), or a grown workspace freed the
    # buffer a captured graph may still point at.
    backend = CPUBackend()
    assert backend.workspace(0, stream=None).nbytes == 256  # the smallest: small GEMMs often need none
    first = backend.workspace(1000, stream=None)
    assert first.nbytes == 1024 and first.tag == "workspace"
    assert backend.workspace(700, stream=None) is first
    grown = backend.workspace(1025, stream=None)
    assert grown.nbytes == 2048 and grown is not first
    assert not first.freed
    assert backend.memory_stats().allocated_bytes == 256 + 1024 + 2048
    backend.close()
    assert first.freed and grown.freed and backend.memory_stats().allocated_bytes == 0
    with pytest.raises(InvalidArgumentError):
        backend.workspace(-1, stream=None)


def test_cuda_graph_on_a_backend_without_capture_runs_eagerly_and_says_why():
    doc = {"pipeline": [{"name": "relu", "inputs": ["x"], "outputs": ["y"]}]}
    with pl.load(doc, device="cpu", cuda_graph=True) as pipe:
        assert pipe.cuda_graph is False
        assert any("cuda_graph requested" in w for w in pipe.load_report.warnings)
        x = np.random.default_rng(5).standard_normal(8).astype(np.float32)
        np.testing.assert_array_equal(np.asarray(pipe.run(x=x)["y"]), np.maximum(x, 0))


def test_the_old_graph_keyword_still_works_with_a_deprecation_warning():
    doc = {"pipeline": [{"name": "relu", "inputs": ["x"], "outputs": ["y"]}]}
    with pytest.warns(DeprecationWarning, match="use cuda_graph"):
        pipe = pl.load(doc, device="cpu", graph=True)
    with pipe:
        assert any("cuda_graph requested" in w for w in pipe.load_report.warnings)
        assert pipe.graph.stages[0].id == "relu"  # Pipeline.graph stays the DAG
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pl.load(doc, device="cpu", cuda_graph=False).close()  # the new keyword never warns
