"""CUDA plans (format 2 and later) on any machine: written with the planfile's own encoders, read by the core.

The plan here is synthetic (a kernel launch, a cuBLASLt product and a passthrough copy over made-up cubin
bytes compiled for compute capability 0.0), so every check is the parser's and gives the same status with
or without a GPU: the driver is only reached by a well-formed plan, which then needs a GPU of its compute
capability. Real CUDA plans compiled from configs run in tests/native_core/test_cuda_gpu.py (GPU host).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import struct
import subprocess
from dataclasses import replace

import pytest

import pipelink as pl
from pipelink.errors import ConfigError, ErrorCode
from pipelink.ops.gemm.lt import NativeMatmul
from pipelink.ops.kernel import NativeKernel
from pipelink.runtime.plan import Step
from pipelink.runtime.planfile import (
    DEVICE_CPU,
    DEVICE_CUDA,
    FORMAT_VERSION,
    STAGE_RELAYOUT,
    STORAGE_ARENA,
    STORAGE_EXTERNAL,
    PlanParts,
    _check_record,
    _check_stage,
    _kernel_stage,
    _launches,
    _matmul_stage,
    _Payload,
    assemble,
)

CUBIN = b"\x7fELF not a real cubin: the parser never looks inside" * 4
M, N, K = 8, 16, 32


class _Cubins:
    """What _kernel_stage asks of the writer's cubin table: an index per cubin (here: the index itself)."""

    def of(self, cubin) -> int:
        return cubin


def _kernel(**change) -> NativeKernel:
    params = (("ptr", ("in", 0), 16), ("ptr", ("out", 0), 16), ("i64", M * K), ("f32", 0.5), ("ptr", None, 1))
    base = NativeKernel(cubin=0, name="pl_relu", dims=(4, 1, 1, 256, 1, 1, 0), params=params)
    return replace(base, **change)


def _matmul(**change) -> NativeMatmul:
    # y[M, N] = h[M, K] @ w[K, N] + bias: cuBLASLt's A is w (N x K, ld N), B is h (K x M, ld K), C = D = y.
    base = NativeMatmul(
        data_type=0,
        compute_type=68,
        scale_type=0,
        trans=(0, 0),
        epilogue=4,
        layouts=((N, K, N, 1, 0), (K, M, K, 1, 0), (N, M, N, 1, 0)),
        alpha=1.0,
        beta=0.0,
        operands=(("in", 1), ("in", 0), ("out", 0), ("out", 0)),
        bias=("in", 2),
        offsets=((0, 0, 0),),
        itemsize=4,
        max_workspace=1 << 20,
        min_alignment=(256, 256, 256, 256),
        algo_asked=4,  # as a bind asks: several candidates (the fake cuBLASLt offers four)
    )
    return replace(base, **change)


def cuda_plan(
    *,
    kernel=None,
    matmul=None,
    device=DEVICE_CUDA,
    cubin=CUBIN,
    digest=None,
    cc=0,
    version=FORMAT_VERSION,
    check: str | None = None,
) -> bytes:
    """x[M, K] -relu-> h (arena) -gemm(w, bias)-> y; x is also returned as the output 'x_out'. ``version`` 3
    writes the product as format 3 did (no algorithm rank and workspace). ``check``: the relu's
    check_finite with that on_error, a check record after its launch (format 5)."""
    tensors = [
        ("x", "float32", (M, K), STORAGE_EXTERNAL, 0),
        ("w", "float32", (K, N), STORAGE_EXTERNAL, 0),
        ("bias", "float32", (N,), STORAGE_EXTERNAL, 0),
        ("y", "float32", (M, N), STORAGE_EXTERNAL, 0),
        ("x_out", "float32", (M, K), STORAGE_EXTERNAL, 0),
        ("h", "float32", (M, K), STORAGE_ARENA, 0),
    ]
    stages = _Payload()

    def ports(ins, outs):
        return lambda: (stages.refs(ins), stages.refs(outs))

    _kernel_stage(stages, "relu", kernel or _kernel(), _Cubins(), ports([0], [5]))
    if check is not None:
        _check_record(stages, "relu", check, ports([0], [5]))
    _matmul_stage(stages, "gemm", matmul or _matmul(), ports([5, 1, 2], [3]))
    if version < 4:
        del stages.parts[-3:]  # the record's last fields: u32 rank, u32 candidates asked, u64 workspace
    stages.u8(STAGE_RELAYOUT)
    stages.str("output.x")
    stages.u8(0)
    stages.refs([0])
    stages.refs([4])
    parts = PlanParts(
        name="cuda_synthetic",
        arena_bytes=M * K * 4,
        arena_alignment=256,
        compute_capability=cc,
        tensors=tensors,
        inputs=[0, 1, 2],
        outputs=[3, 4],
        libraries=[],
        cubins=[(digest or hashlib.sha256(cubin).digest(), cubin)],
        n_stages=3 if check is None else 4,
        stages=stages.bytes(),
        device=(device, 0),
    )
    plan = assemble(parts)
    return plan if version == FORMAT_VERSION else plan[:8] + struct.pack("<I", version) + plan[12:]


@pytest.fixture(scope="module")
def core(runtime_lib):
    lib = ctypes.CDLL(str(runtime_lib))
    lib.pipeLinkLoadPipeline.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
    lib.pipeLinkDestroyPipeline.argtypes = [ctypes.c_void_p]
    lib.pipeLinkGetLastErrorMessage.restype = ctypes.c_char_p
    assert lib.pipeLinkInitialize() == 0
    yield lib
    assert lib.pipeLinkFinalize() == 0


def load(core, path) -> tuple[int, str]:
    handle = ctypes.c_void_p()
    status = core.pipeLinkLoadPipeline(str(path).encode(), ctypes.byref(handle))
    message = core.pipeLinkGetLastErrorMessage().decode()
    if status == 0:
        core.pipeLinkDestroyPipeline(handle)
    return status, message


def test_a_well_formed_cuda_plan_needs_a_gpu_of_its_compute_capability(core, tmp_path):
    path = tmp_path / "synthetic.plk"
    path.write_bytes(cuda_plan())
    status, message = load(core, path)
    assert status == ErrorCode.PIPELINK_ERR_HARDWARE_UNSUPPORTED, message
    # Without a driver: says so; on a GPU: the plan's compute capability (0.0) is not the device's.
    assert "libcuda.so.1" in message or "compute capability 0.0" in message, message


BAD = {
    "kernel stages in a CPU plan": dict(device=DEVICE_CPU),
    "a cubin whose sha256 differs": dict(digest=b"\0" * 32),
    "a cubin index out of range": dict(kernel=_kernel(cubin=1)),
    "a port position out of range": dict(kernel=_kernel(params=(("ptr", ("in", 3), 16),))),
    "a grid dimension of 0": dict(kernel=_kernel(dims=(0, 1, 1, 256, 1, 1, 0))),
    "a pointer alignment not a power of two": dict(kernel=_kernel(params=(("ptr", ("in", 0), 3),))),
    "a matmul reading past its operand": dict(
        matmul=_matmul(layouts=((N, K, N + 1, 1, 0),) + _matmul().layouts[1:])
    ),
    "a matmul call at an offset past its operand": dict(matmul=_matmul(offsets=((0, 1, 0),))),
    "a matmul of an unknown data type": dict(matmul=_matmul(data_type=99)),
    "a matmul whose item size is not its operands'": dict(matmul=_matmul(data_type=14, itemsize=2)),
    "a matmul writing an input": dict(matmul=_matmul(operands=(("in", 1), ("in", 0), ("out", 0), ("in", 1)))),
    "a matmul algorithm rank past the candidates asked": dict(matmul=_matmul(algo_rank=4)),
    "a matmul asking for no candidate": dict(matmul=_matmul(algo_asked=0)),
    "a matmul asking for more candidates than the core takes": dict(matmul=_matmul(algo_asked=33)),
    "a matmul algorithm needing more than the workspace limit": dict(
        matmul=_matmul(algo_rank=1, algo_workspace=(1 << 20) + 1)
    ),
}


@pytest.mark.parametrize("why", sorted(BAD))
def test_a_malformed_cuda_plan_is_an_integrity_status(core, tmp_path, why):
    path = tmp_path / "bad.plk"
    path.write_bytes(cuda_plan(**BAD[why]))
    status, message = load(core, path)
    assert status == ErrorCode.PIPELINK_ERR_INTEGRITY, f"{why}: {message}"
    assert "recompile" in message or "malformed" in message, message


def test_the_product_record_ends_with_the_algorithm_rank_and_its_workspace():
    # docs/plan-format.md, kind 3: ... 4 x u32 minimum alignments, then [v4] u32 rank, u32 candidates asked,
    # u64 workspace.
    mm = _matmul(algo_rank=5, algo_asked=8, algo_workspace=12288)
    p = _Payload()
    _matmul_stage(p, "gemm", mm, lambda: None)
    record = p.bytes()
    assert struct.unpack_from("<4IIIQ", record, len(record) - 32) == (256, 256, 256, 256, 5, 8, 12288)
    p3 = _Payload()
    _matmul_stage(p3, "gemm", _matmul(), lambda: None)
    assert len(p3.bytes()) == len(record)  # the same record shape whatever the rank


@pytest.mark.parametrize("version", [3, FORMAT_VERSION])
def test_a_well_formed_product_of_format_3_or_4_parses(core, tmp_path, version):
    # Format 3 products carry no rank (the core takes the heuristic's first); both parse, and a
    # well-formed plan then needs a GPU of its compute capability, like any other.
    path = tmp_path / f"v{version}.plk"
    path.write_bytes(cuda_plan(version=version, matmul=_matmul(algo_rank=3, algo_workspace=4096)))
    assert struct.unpack_from("<I", path.read_bytes(), 8)[0] == version
    status, message = load(core, path)
    assert status == ErrorCode.PIPELINK_ERR_HARDWARE_UNSUPPORTED, message


@pytest.mark.parametrize("version", [3, FORMAT_VERSION])
def test_fuzzed_cuda_plans_are_statuses_never_crashes(c_api_test, tmp_path, version):
    path = tmp_path / "synthetic.plk"
    check = "identity" if version == FORMAT_VERSION else None  # format 5's check record fuzzed too
    product = _matmul(algo_rank=2, algo_workspace=8192)
    path.write_bytes(cuda_plan(version=version, matmul=product, check=check))
    proc = subprocess.run([c_api_test, "fuzz", path, "300", "7"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"rc {proc.returncode}\n{proc.stdout}{proc.stderr}"
    assert "integrity" in proc.stdout


def _as_version(plan: bytes, version: int) -> bytes:
    """A CPU plan without constants rewritten as format 3 (the same bytes: formats 3 and 4 differ in CUDA
    products only), 2 (no constant section) or 1 (no compute capability and no cubin section either)."""
    if version == 3:
        return plan[:8] + struct.pack("<I", 3) + plan[12:]
    payload = bytearray(plan[64:])
    pos = 4 + struct.unpack_from("<I", payload, 0)[0] + 8 + 4
    assert struct.unpack_from("<I", payload, pos)[0] == 0
    if version == 1:
        del payload[pos : pos + 4]
    else:
        pos += 4

    def skip(n: int) -> None:
        nonlocal pos
        pos += n

    def count() -> int:
        skip(4)
        return struct.unpack_from("<I", payload, pos - 4)[0]

    for _ in range(count()):  # tensors: name, dtype, rank, dims, storage, offset
        skip(count())
        skip(4)
        skip(8 * count() + 1 + 8)
    for _ in range(2):  # inputs, outputs
        skip(4 * count())
    for _ in range(count()):  # libraries: path, sha256
        skip(count() + 32)
    assert struct.unpack_from("<I", payload, pos)[0] == 0  # no cubins
    if version == 1:
        del payload[pos : pos + 4]
    else:
        pos += 4
    assert struct.unpack_from("<I", payload, pos)[0] == 0  # no constants
    del payload[pos : pos + 4]
    header = bytearray(plan[:64])
    struct.pack_into("<IIiiQ", header, 8, version, 64, 1, 0, len(payload))
    header[32:64] = hashlib.sha256(payload).digest()
    return bytes(header + payload)


@pytest.mark.parametrize("version", [1, 2, 3])
def test_older_cpu_plans_still_load(core, plans, version):
    old = plans / f"ln_v{version}.plk"  # beside ln.plk: the plan names its module relative to its folder
    old.write_bytes(_as_version((plans / "ln.plk").read_bytes(), version))
    assert struct.unpack_from("<I", old.read_bytes(), 8)[0] == version
    status, message = load(core, old)
    assert status == 0, message


# -- what a CUDA plan refuses, checked on the linked stages (compiling one needs a GPU) ------------------
def _stage(doc: dict, sid: str):
    pipe = pl.load(doc, device="cpu")
    return pipe, next(st for st in pipe.graph.stages if st.id == sid)


@pytest.mark.parametrize(
    "extra, why",
    [
        ({"on_error": "identity"}, "only with check_finite"),
        (
            {"on_error": {"fallback": "gelu"}, "constraints": {"check_finite": True}},
            "a built-in kernel's fallback",
        ),
        ({"constraints": {"timeout_ms": 5}}, "timeout_ms is not applied"),
        ({"isolation": "process"}, "isolation 'process'"),
    ],
)
def test_cuda_plans_refuse_what_the_core_does_not_apply(extra, why):
    doc = {
        "inputs": {"x": {"shape": [4], "dtype": "float32"}},
        "pipeline": [{"name": "relu", "id": "act", "inputs": ["x"], "outputs": ["y"], **extra}],
    }
    pipe, st = _stage(doc, "act")
    with pipe, pytest.raises(ConfigError) as e:
        _check_stage(st, pipe._registry, cuda=True)
    assert e.value.errors[0].path == "/pipeline/0" and why in e.value.message


@pytest.mark.parametrize("on_error", ["fail", "identity", "skip"])
def test_a_builtin_stage_keeps_check_finite_in_cuda_plans(on_error):
    doc = {
        "inputs": {"x": {"shape": [4], "dtype": "float32"}},
        "pipeline": [
            {
                "name": "relu",
                "id": "act",
                "inputs": ["x"],
                "outputs": ["y"],
                "on_error": on_error,
                "constraints": {"check_finite": True},
            }
        ],
    }
    pipe, st = _stage(doc, "act")
    with pipe:
        _check_stage(st, pipe._registry, cuda=True)  # a check record after its launches (format 5)


def test_cuda_graph_plans_refuse_policies_decided_on_the_host():
    doc = {
        "inputs": {"x": {"shape": [4], "dtype": "float32"}},
        "pipeline": [{"name": "relu", "id": "act", "inputs": ["x"], "outputs": ["y"], "on_error": "skip"}],
    }
    pipe, st = _stage(doc, "act")
    with pipe, pytest.raises(ConfigError, match="a CUDA graph cannot replay"):
        _check_stage(st, pipe._registry, cuda=True, cuda_graph=True)


def test_cuda_plans_refuse_native_modules_without_a_cuda_entry_point(plans):
    cfg = json.loads((plans / "fail.json").read_text())
    cfg["pipeline"][0]["library"] = str(plans / "lib" / "libcore_ops.so")
    pipe, st = _stage(cfg, cfg["pipeline"][0]["id"])
    with pipe, pytest.raises(ConfigError, match="has no cuda entry point"):
        _check_stage(st, pipe._registry, cuda=True)


def test_a_kernel_that_cannot_describe_its_launches_is_refused_naming_the_stage():
    doc = {
        "inputs": {"x": {"shape": [4], "dtype": "float32"}},
        "pipeline": [{"name": "relu", "id": "act", "inputs": ["x"], "outputs": ["y"]}],
    }
    pipe, st = _stage(doc, "act")
    step = Step(
        st, kernel=lambda ins, outs, stream: None, variant="cuda:nvrtc", in_names=("x",), out_names=("y",)
    )
    with pipe, pytest.raises(ConfigError, match="'act'.*not a prebuilt launch"):
        _launches(step)
