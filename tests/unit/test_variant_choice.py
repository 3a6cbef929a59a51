"""Variant choice on a device (no silent cross-device variant) and host staging, without a GPU.

A fake device backend stands in for CUDA: its kernel arguments are ``pl.Tensor`` objects (never NumPy
arrays), its capabilities say it is asynchronous and not host-accessible, and it records every copy and
synchronisation, so the test sees that host code only ever gets host copies, in stream order.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

import pipelink as pl
from pipelink.backends.base import Capabilities
from pipelink.backends.cpu import CPUBackend
from pipelink.config import build_config
from pipelink.descriptor import KernelContext, OperatorDescriptor, Port, Variant, VariantDeclined
from pipelink.dtypes import get_dtype
from pipelink.errors import HardwareUnsupportedError
from pipelink.graph.linker import link
from pipelink.hardware import HardwareInfo, Requirement
from pipelink.modules.registry import OperatorRegistry
from pipelink.pipeline import Pipeline, _registry
from pipelink.runtime.staging import HostStaged
from pipelink.tensor import Tensor

GPU = HardwareInfo(kind="cuda", name="FakeGPU", compute_capability=(9, 0), features={"fp32": 1, "bf16": 1})


class FakeDevice(CPUBackend):
    """Host memory dressed as a device: arguments are Tensors; copies and syncs are logged."""

    kind = "fake"
    capabilities = Capabilities(host_access=False, asynchronous=True, cuda_graphs=False, isolation="none")

    def __init__(self):
        super().__init__()
        self.info = GPU
        self.device = "cpu"  # Tensors on host memory, so the test can read them
        self.log: list[str] = []

    def view(self, alloc, offset, shape, dtype, strides=None):
        return Tensor.from_numpy(super().view(alloc, offset, shape, dtype))

    def empty(self, shape, dtype):
        return Tensor.from_numpy(np.empty(shape, dtype=get_dtype(dtype).numpy))

    def wrap(self, arg):
        return arg

    def import_input(self, value, **kwargs):
        return Tensor.from_numpy(np.ascontiguousarray(super().import_input(value, **kwargs)))

    def match_inputs(self, signature, given, stream):
        return None  # every input goes through import_input (NumPy arrays are not device arguments)

    def signature_of(self, arg):
        return arg.shape, arg.dtype.name, arg.is_contiguous

    def copy(self, dst, src, *, stream=None):
        self.log.append("copy")
        np.copyto(dst.numpy(), src.numpy())

    def memcpy(self, dst, src, nbytes, *, stream=None):
        self.log.append("memcpy")
        super().memcpy(dst, src, nbytes, stream=stream)

    def synchronize(self, stream=None):
        self.log.append("sync")


def _host_only_desc(**variant) -> OperatorDescriptor:
    return OperatorDescriptor(
        name="host_only",
        version="1.0.0",
        inputs=(Port("x"),),
        outputs=(Port("y", shape="x"),),
        variants=[Variant(device="cpu", bind=lambda ctx: None, name="cpu:numpy", **variant)],
    )


def test_a_device_refuses_a_host_variant_that_does_not_allow_host_execution():
    # Wrong if a device stage silently got a CPU kernel that would be handed device pointers.
    desc = _host_only_desc()
    with pytest.raises(HardwareUnsupportedError) as info:
        OperatorRegistry().select_variant(desc, GPU, ("float32",), stage="s")
    assert "cpu:numpy: a host (cpu) variant" in info.value.message
    assert "host_ok=True" in info.value.message
    assert info.value.context["skipped"] == [info.value.context["skipped"][0]]
    assert info.value.code.name == "PIPELINK_ERR_HARDWARE_UNSUPPORTED"


def test_the_refusal_names_every_variant_skipped_and_why():
    desc = _host_only_desc()
    desc.variants.append(
        Variant(
            device="cuda", bind=lambda ctx: None, name="cuda:fp8", required_features=(Requirement("fp8"),)
        )
    )
    desc.variants.append(
        Variant(device="cuda", bind=lambda ctx: None, name="cuda:half", dtypes=frozenset({"float16"}))
    )
    with pytest.raises(HardwareUnsupportedError) as info:
        OperatorRegistry().select_variant(desc, GPU, ("float32",), stage="s")
    skipped = info.value.context["skipped"]
    assert [s.split(":")[0] + ":" + s.split(":")[1] for s in skipped] == [
        "cuda:fp8",
        "cuda:half",
        "cpu:numpy",
    ]
    assert "fp8" in skipped[0] and "float32 not supported" in skipped[1]
    assert info.value.context["feature"] == "fp8"


def test_a_host_ok_variant_is_chosen_staged_after_the_device_variants():
    desc = _host_only_desc(host_ok=True)
    desc.variants.append(
        Variant(device="cuda", bind=lambda ctx: None, name="cuda:half", dtypes=frozenset({"float16"}))
    )
    choice = OperatorRegistry().select_variant(desc, GPU, ("float32",), stage="s")
    assert choice.staged and choice.variant.name == "cpu:numpy"
    assert len(choice.skipped) == 1 and choice.skipped[0].startswith("cuda:half: dtype float32")
    # On the host the same variant is native, not staged.
    host = OperatorRegistry().select_variant(desc, pl.hardware.cpu_info(), ("float32",), stage="s")
    assert not host.staged and host.variant.name == "cpu:numpy"


def test_host_staged_copies_in_synchronises_runs_on_host_arrays_and_copies_out():
    # Wrong if host code saw a device argument, ran before the inputs had arrived, or its outputs
    # never reached the device tensors.
    backend = FakeDevice()
    seen = []

    def kernel(ins, outs, stream):
        seen.append([type(a) for a in ins + outs])
        backend.log.append("kernel")
        np.multiply(ins[0], 3.0, out=outs[0])

    ctx = KernelContext(
        stage="s",
        attrs={},
        in_shapes=((4, 6),),
        in_dtypes=("float32",),
        out_shapes=((4, 6),),
        out_dtypes=("float32",),
        backend=backend,
    )
    staged = HostStaged(kernel, ctx, backend)
    assert staged.graph_safe is False
    rng = np.random.default_rng(11)
    base = rng.standard_normal((6, 4)).astype(np.float32)
    strided = Tensor.from_numpy(base.T)  # a non-contiguous device input goes through a dense copy
    assert not strided.is_contiguous
    out = Tensor.from_numpy(np.full((4, 6), np.nan, np.float32))
    staged([strided], [out], stream=None)
    assert seen == [[np.ndarray, np.ndarray]]
    assert backend.log == ["copy", "memcpy", "sync", "kernel", "memcpy"]
    np.testing.assert_array_equal(out.numpy(), base.T * 3.0)


def test_a_custom_registry_resolves_the_built_in_cuda_variants():
    # Wrong if pl.load(registry=...) on a GPU fell back to the CPU reference of a built-in operator.
    reg = _registry(OperatorRegistry())
    choice = reg.select_variant(reg.get("relu"), GPU, ("float32",), stage="r")
    assert choice.variant.device == "cuda" and not choice.staged


def test_a_built_in_cpu_reference_is_never_bound_to_device_tensors():
    reg = OperatorRegistry()
    pl.ops.register_builtins(reg)
    desc = reg.get("relu")
    desc.variants = [v for v in desc.variants if v.device == "cpu"]  # its CUDA kernel taken away
    with pytest.raises(HardwareUnsupportedError) as info:
        reg.select_variant(reg.get("relu"), GPU, ("float32",), stage="r")
    assert "stage 'r'" in info.value.message and "does not allow host execution" in info.value.message


def test_a_python_cpu_operator_on_a_device_runs_staged_and_the_load_report_says_so():
    # Wrong if the function got device tensors, or the load report hid the staging.
    reg = _registry(OperatorRegistry())

    @pl.operator("triple_host_v1", inputs=["x"], outputs=["y"], device="cpu", registry_=reg)
    def triple(x, y):
        assert isinstance(x, np.ndarray) and isinstance(y, np.ndarray)
        np.multiply(x, 3, out=y)

    doc = {
        "inputs": {"x": {"shape": [5, 7], "dtype": "float32"}},
        "outputs": ["y"],
        "pipeline": [{"name": "triple_host_v1", "id": "t", "inputs": ["x"], "outputs": ["y"]}],
    }
    backend = FakeDevice()
    graph, problems = link(build_config(doc, ".", None), reg, backend.info)
    assert problems == []
    with Pipeline(graph, backend, reg) as pipe:
        assert pipe.load_report.staged == ["t"]
        assert pipe.load_report.variants == {"t": "python:triple"}
        assert any("host variant" in w for w in pipe.load_report.warnings)
        x = np.random.default_rng(2).standard_normal((5, 7)).astype(np.float32)
        out = pipe.run(x=x)["y"]
        np.testing.assert_array_equal(out.numpy(), x * 3)
        assert "sync" in backend.log


def test_skipped_variants_are_in_the_load_report():
    reg = OperatorRegistry()
    desc = _host_only_desc(host_ok=True)
    desc.variants[0] = Variant(
        device="cpu", bind=lambda ctx: lambda i, o, s: np.copyto(o[0], i[0]), name="cpu:numpy", host_ok=True
    )
    desc.variants.append(
        Variant(device="cuda", bind=lambda ctx: None, name="cuda:half", dtypes=frozenset({"float16"}))
    )
    reg.register(desc)
    doc = {
        "inputs": {"x": {"shape": [3], "dtype": "float32"}},
        "pipeline": [{"name": "host_only", "id": "h", "inputs": ["x"], "outputs": ["y"]}],
    }
    backend = FakeDevice()
    graph, problems = link(build_config(doc, ".", None), reg, backend.info)
    assert problems == []
    with Pipeline(graph, backend, reg) as pipe:
        (reason,) = pipe.load_report.skipped_variants["h"]
        assert reason.startswith("cuda:half: dtype float32 not supported")


def _declining_desc(*, host_ok: bool) -> OperatorDescriptor:
    def decline(ctx):
        raise VariantDeclined("the library has no plan for [3]")

    return OperatorDescriptor(
        name="declines",
        version="1.0.0",
        inputs=(Port("x"),),
        outputs=(Port("y", shape="x"),),
        variants=[
            Variant(
                device="cpu",
                bind=lambda ctx: lambda i, o, s: np.multiply(i[0], 2, out=o[0]),
                name="cpu:numpy",
                host_ok=host_ok,
            ),
            Variant(device="cuda", bind=decline, name="cuda:lib"),
        ],
    )


def _load_on_fake(reg, name, x_shape=(3,)):
    doc = {
        "inputs": {"x": {"shape": list(x_shape), "dtype": "float32"}},
        "pipeline": [{"name": name, "id": "h", "inputs": ["x"], "outputs": ["y"]}],
    }
    backend = FakeDevice()
    graph, problems = link(build_config(doc, ".", None), reg, backend.info)
    assert problems == []
    return Pipeline(graph, backend, reg)


def test_a_declining_device_variant_gives_way_to_the_staged_reference_and_the_report_says_why():
    # Wrong if a decline surfaced as a crash, ran nothing, or hid from the load report.
    reg = OperatorRegistry()
    reg.register(_declining_desc(host_ok=True))
    with _load_on_fake(reg, "declines") as pipe:
        assert pipe.load_report.staged == ["h"]
        assert pipe.load_report.skipped_variants["h"] == ["cuda:lib: the library has no plan for [3]"]
        x = np.random.default_rng(5).standard_normal(3).astype(np.float32)
        np.testing.assert_array_equal(pipe.run(x=x)["y"].numpy(), x * 2)


def test_when_every_variant_declines_or_refuses_the_load_fails_with_each_reason():
    reg = OperatorRegistry()
    reg.register(_declining_desc(host_ok=False))
    with pytest.raises(HardwareUnsupportedError) as info:
        _load_on_fake(reg, "declines")
    assert "cuda:lib: the library has no plan for [3]" in info.value.message
    assert "does not allow host execution" in info.value.message


@pytest.mark.parametrize("op", ["conv2d", "conv_transpose2d"])
def test_cudnn_operators_without_the_frontend_run_their_reference_staged(monkeypatch, op):
    # Wrong if a missing nvidia-cudnn-frontend broke the load, or the report did not say how to get it.
    monkeypatch.setitem(sys.modules, "cudnn", None)  # import cudnn raises ImportError
    rng = np.random.default_rng(6)
    x, w = rng.standard_normal((2, 4, 5, 5)).astype(np.float32), rng.standard_normal((4, 4, 3, 3))
    doc = {
        "inputs": {"x": {"shape": [2, 4, 5, 5], "dtype": "float32"}, "w": {"shape": [4, 4, 3, 3]}},
        "pipeline": [{"name": op, "id": "c", "inputs": ["x", "w"], "outputs": ["y"]}],
    }
    doc["inputs"]["w"]["dtype"] = "float32"
    reg = _registry(OperatorRegistry())
    backend = FakeDevice()
    graph, problems = link(build_config(doc, ".", None), reg, backend.info)
    assert problems == []
    feed = {"x": x, "w": w.astype(np.float32)}
    with Pipeline(graph, backend, reg) as pipe:
        assert pipe.load_report.staged == ["c"]
        *first, reason = pipe.load_report.skipped_variants["c"]
        assert "nvidia-cudnn-frontend is not installed" in reason and "pipelink[cudnn]" in reason
        # conv2d tries its pointwise GEMM first: a 3x3 kernel is declined, with why
        assert first == (
            [
                "cuda:cublaslt: not a pointwise convolution (kernel 3x3); the GEMM form needs kernel "
                "1x1, strides 1, no pads, group 1"
            ]
            if op == "conv2d"
            else []
        )
        got = pipe.run(**feed)["y"].numpy()
    with pl.load(doc, device="cpu") as cpu:
        np.testing.assert_array_equal(got, np.asarray(cpu.run(**feed)["y"]))
