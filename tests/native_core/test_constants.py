"""Bound weights inside plans (format 3's constants section): a pipeline whose config has a weights file is
saved with its weights as constants, loaded once by the core, and run with only its real inputs, giving what
Python's run() gives. Corrupt constants are an integrity status; CUDA plans upload them once (checked on the
stand-in driver of test_cuda_fake.py here, on a GPU in the test marked gpu).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import struct
import subprocess
import sys

import numpy as np
import pytest

import pipelink as pl
from pipelink.cli import main
from pipelink.dtypes import get_dtype
from pipelink.errors import ConfigError, ErrorCode, InvalidArgumentError
from pipelink.modules.services import PipeLinkTensor
from pipelink.native import open_runtime
from pipelink.runtime.planfile import (
    DEVICE_CUDA,
    HEADER_SIZE,
    STAGE_RELAYOUT,
    STORAGE_ARENA,
    STORAGE_CONSTANT,
    STORAGE_EXTERNAL,
    PlanParts,
    _kernel_stage,
    _matmul_stage,
    _Payload,
    assemble,
)
from tests.conftest import assert_close, rel_error

from .conftest import bound_weights, host_env
from .test_cuda_fake import FAKE_CUBIN, fake_dir  # noqa: F401 (a fixture)
from .test_cuda_plans import K, M, N, _Cubins, _kernel, _matmul, load
from .test_python_agrees import Core


def _walkthrough_inputs(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "input_tensor": rng.standard_normal((8, 1024)).astype(np.float32),
        "eps_scalar": np.array(1e-5, np.float32),
    }


@pytest.fixture(scope="module")
def core(runtime_lib):
    lib = ctypes.CDLL(str(runtime_lib))
    lib.pipeLinkLoadPipeline.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
    lib.pipeLinkDestroyPipeline.argtypes = [ctypes.c_void_p]
    lib.pipeLinkGetLastErrorMessage.restype = ctypes.c_char_p
    assert lib.pipeLinkInitialize() == 0
    yield lib
    assert lib.pipeLinkFinalize() == 0


# -- the walkthrough with gamma and beta (and eps) bound ----------------------------------------------
@pytest.mark.parametrize(
    "bound", [("gamma_tensor", "beta_tensor"), ("gamma_tensor", "beta_tensor", "eps_scalar")]
)
def test_a_plan_with_constants_runs_with_only_the_real_inputs(runtime_lib, plans, tmp_path, bound):
    rng = np.random.default_rng(8)
    weights = {"gamma_tensor": rng.standard_normal(1024), "beta_tensor": rng.standard_normal(1024)}
    weights = {k: v.astype(np.float32) for k, v in weights.items()}
    if "eps_scalar" in bound:
        weights["eps_scalar"] = np.array(1e-3, np.float32)  # a 0-d constant
    np.savez(plans / f"w_{len(bound)}.npz", **weights)
    cfg = json.loads((plans / "lnw.json").read_text())
    cfg["weights"] = f"w_{len(bound)}.npz"
    (plans / f"lnw_{len(bound)}.json").write_text(json.dumps(cfg))
    args = _walkthrough_inputs(9)
    with pl.load(plans / f"lnw_{len(bound)}.json", device="cpu") as pipe:
        assert pipe.weights == list(bound) and "input_tensor" in pipe.inputs
        real = {n: args[n] for n in pipe.inputs}
        expected = [np.asarray(v) for v in pipe.run(real).values()]
        plan = pipe.save(plans / f"lnw_{len(bound)}.plk")
        order = pipe.inputs
    core = Core(runtime_lib)
    handle = core.load(plan)
    outs = [np.full(e.shape, np.nan, np.float32) for e in expected]
    everything = [
        args.get(n, weights.get(n)) for n in ("input_tensor", "gamma_tensor", "beta_tensor", "eps_scalar")
    ]
    # The constants are no inputs: passing them too is a count the plan refuses, saying what it takes.
    assert core.execute(handle, everything, outs) == ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT
    assert f"takes {len(order)} inputs" in core.message()
    for _ in range(2):  # the second run reuses the execution context; the constants stay
        for o in outs:
            o.fill(np.nan)
        assert core.execute(handle, [real[n] for n in order], outs) == 0, core.message()
        for got, want in zip(outs, expected, strict=True):
            np.testing.assert_array_equal(got, want)  # the same module on the same bytes: bit for bit
    core.close(handle)


def test_native_run_of_a_pipeline_with_bound_weights_matches_python(runtime_lib, plans):
    with (
        pl.load(plans / "lnw.json", device="cpu") as ref,
        pl.load(plans / "lnw.json", device="cpu", native=True) as nat,
    ):
        for seed in (1, 2):
            args = _walkthrough_inputs(seed)
            want = {k: np.asarray(v) for k, v in ref.run(args).items()}
            got = {k: np.asarray(v) for k, v in nat.run(args).items()}
            assert got.keys() == want.keys()
            for name in want:
                np.testing.assert_array_equal(got[name], want[name], err_msg=name)
        with pytest.raises(InvalidArgumentError, match="gamma_tensor"):  # bound: not an input
            nat.run(dict(_walkthrough_inputs(3), gamma_tensor=bound_weights()["gamma_tensor"]))


def test_the_plan_holds_the_weights_bytes_and_their_digests(plans):
    data = (plans / "lnw.plk").read_bytes()
    entries = _constants(data)
    weights = bound_weights()
    assert len(entries) == 2
    for ref, digest, size, at in entries:
        name = _tensor_names(data)[ref]
        assert data[at : at + size] == weights[name].tobytes()
        assert digest == hashlib.sha256(weights[name].tobytes()).digest() and size == weights[name].nbytes


def test_save_refuses_weights_over_the_size_limit(plans, tmp_path, capsys):
    with pl.load(plans / "lnw.json", device="cpu") as pipe:
        with pytest.raises(InvalidArgumentError, match="over the plan's limit of 4096 bytes") as e:
            pipe.save(tmp_path / "big.plk", max_constant_bytes=4096)
        assert "8192 bytes" in e.value.message and "max_constant_bytes" in e.value.message
        with pytest.raises(InvalidArgumentError, match="max_constant_bytes must be an int"):
            pipe.save(tmp_path / "big.plk", max_constant_bytes=5 << 30)
        with pytest.raises(InvalidArgumentError, match="bound by the weights file"):
            pipe.save(tmp_path / "big.plk", shapes={"gamma_tensor": ((1024,), "float32")})
        assert pipe.save(tmp_path / "exact.plk", max_constant_bytes=8192).is_file()
    assert not (tmp_path / "big.plk").exists()
    rc = main(
        ["compile", str(plans / "lnw.json"), "-o", str(tmp_path / "cli.plk"), "--max-constant-bytes", "100"]
    )
    assert rc == 1 and "over the plan's limit" in capsys.readouterr().err
    assert main(["compile", str(plans / "lnw.json"), "-o", str(tmp_path / "cli.plk")]) == 0


def test_an_onnx_model_on_the_cpu_is_refused_naming_a_builtin_stage(tmp_path):
    # Its initializers are bound weights, which a plan now holds; a CPU plan still calls native modules only.
    pytest.importorskip("onnx")
    model, _ = _onnx_mlp()
    with pl.from_onnx(model, device="cpu") as pipe:
        assert pipe.weights
        with pytest.raises(ConfigError, match="built-in NumPy operator"):
            pipe.save(tmp_path / "onnx.plk")
    _onnx_cli_compile(model, tmp_path, "cpu", expect=2)  # a usage failure (the config's), saying why
    assert not (tmp_path / "cli.plk").exists()


def _onnx_cli_compile(model, tmp_path, device: str, expect: int = 0):
    """``pipelink import`` then ``pipelink compile``: the plan's path."""
    import onnx

    onnx.save(model, str(tmp_path / "model.onnx"))
    assert main(["import", str(tmp_path / "model.onnx"), "-o", str(tmp_path / "imported")]) == 0
    config = str(tmp_path / "imported" / "pipeline.json")
    assert main(["compile", config, "-o", str(tmp_path / "cli.plk"), "--device", device]) == expect
    return tmp_path / "cli.plk"


# -- corrupt constants ---------------------------------------------------------------------------------
def _reader(data: bytes, pos: int):
    def take(fmt: str):
        nonlocal pos
        values = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return values[0] if len(values) == 1 else values

    def skip(n: int) -> None:
        nonlocal pos
        pos += n

    return take, skip, lambda: pos


def _tensor_names(data: bytes) -> list[str]:
    take, skip, where = _reader(data, HEADER_SIZE)
    skip(take("I") + 16)  # name, arena bytes, alignment, compute capability
    names = []
    for _ in range(take("I")):
        n = take("I")
        names.append(data[where() : where() + n].decode())
        skip(n + 4)
        skip(8 * take("I") + 9)
    return names


def _constants(data: bytes) -> list[tuple[int, bytes, int, int]]:
    """(tensor index, sha256, size, file position of the bytes) of each constant of a format-3 plan."""
    return [(ref, digest, size, at) for ref, digest, size, at, _ in _constant_fields(data)]


def _constant_fields(data: bytes) -> list[tuple[int, bytes, int, int, int]]:
    """As _constants, plus the file position of the entry itself; the count sits 4 bytes before the first."""
    take, skip, where = _reader(data, HEADER_SIZE)
    skip(take("I") + 16)  # name, arena bytes, alignment, compute capability
    for _ in range(take("I")):  # tensors
        skip(take("I") + 4)
        skip(8 * take("I") + 9)
    for _ in range(2):  # inputs, outputs
        skip(4 * take("I"))
    for _ in range(take("I")):  # libraries
        skip(take("I") + 32)
    for _ in range(take("I")):  # cubins
        skip(32)
        skip(take("Q"))
    out = []
    for _ in range(take("I")):
        entry = where()
        ref = take("i")
        digest = data[where() : where() + 32]
        skip(32)
        size = take("Q")
        out.append((ref, digest, size, where(), entry))
        skip(size)
    return out


def _resign(data: bytearray) -> bytes:
    """The header made true again (payload size, sha256): only the parser can see what changed."""
    struct.pack_into("<Q", data, 24, len(data) - HEADER_SIZE)
    data[32:64] = hashlib.sha256(bytes(data[HEADER_SIZE:])).digest()
    return bytes(data)


CORRUPT = (
    "a bit flipped in a constant (re-signed: only its sha256 tells)",
    "a bit flipped in a constant (the plan's checksum tells)",
    "a size that is not its tensor's dtype and shape",
    "a constant naming an input tensor",
    "one tensor given two constants",
    "a constant naming no tensor",
    "a constant tensor without its constant",
    "constants in a version 2 plan",
    "constant bytes cut short",
    "a plan truncated inside its constants",
)


def _mutations(data: bytes) -> dict[str, bytes]:
    fields = _constant_fields(data)
    (ref, _, size, at, entry), (ref2, _, _, _, entry2) = fields[0], fields[1]
    names = _tensor_names(data)
    inputs = [i for i, n in enumerate(names) if n == "input_tensor"]

    def edit(fn, sign: bool = True) -> bytes:
        b = bytearray(data)
        fn(b)
        return _resign(b) if sign else bytes(b)

    def flip(b):
        b[at + size // 2] ^= 0x20

    def size_field(b):
        struct.pack_into("<Q", b, entry + 36, size - 4)

    def to_input(b):
        struct.pack_into("<i", b, entry, inputs[0])

    def twice(b):
        struct.pack_into("<i", b, entry2, ref)

    def out_of_range(b):
        struct.pack_into("<i", b, entry, len(names))

    def drop_last(b):
        count_at = fields[0][4] - 4
        struct.pack_into("<I", b, count_at, len(fields) - 1)
        del b[entry2 : fields[1][3] + fields[1][2]]

    def as_version_2(b):
        struct.pack_into("<I", b, 8, 2)

    def short_bytes(b):  # the constant's bytes cut by 4: its size and what follows no longer fit
        del b[at : at + 4]

    assert ref2 != ref
    edits = (
        edit(flip),
        edit(flip, sign=False),
        edit(size_field),
        edit(to_input),
        edit(twice),
        edit(out_of_range),
        edit(drop_last),
        edit(as_version_2),
        edit(short_bytes),
        data[: at + size // 2],
    )
    return dict(zip(CORRUPT, edits, strict=True))


@pytest.mark.parametrize("why", CORRUPT)
def test_corrupt_constants_are_an_integrity_status(core, plans, why):
    bad = _mutations((plans / "lnw.plk").read_bytes())[why]
    path = plans / "corrupt.plk"  # beside lnw.plk: its module resolves
    path.write_bytes(bad)
    status, message = load(core, path)
    assert status == ErrorCode.PIPELINK_ERR_INTEGRITY, f"{why}: {status} {message}"


def test_the_constant_checks_name_what_is_wrong(core, plans):
    mutations = _mutations((plans / "lnw.plk").read_bytes())
    words = {
        "a bit flipped in a constant (re-signed: only its sha256 tells)": "a constant matching its sha256",
        "a size that is not its tensor's dtype and shape": "a constant of its tensor's size",
        "a constant naming an input tensor": "a constant for a tensor of constant storage",
        "one tensor given two constants": "one constant per constant tensor",
        "a constant tensor without its constant": "a constant for every constant tensor",
        "constants in a version 2 plan": "no constant tensors before format version 3",
    }
    for why, expected in words.items():
        (plans / "corrupt.plk").write_bytes(mutations[why])
        status, message = load(core, plans / "corrupt.plk")
        assert status == ErrorCode.PIPELINK_ERR_INTEGRITY and expected in message, f"{why}: {message}"


# -- CUDA plans with constants, on the stand-in driver --------------------------------------------------
def cuda_plan_with_constants(*, w: np.ndarray, bias: np.ndarray, write_constant: bool = False) -> bytes:
    """test_cuda_plans.cuda_plan with w and bias bound: x[M, K] -scale-> h -gemm(w, bias)-> y, x -> x_out."""
    tensors = [
        ("x", "float32", (M, K), STORAGE_EXTERNAL, 0),
        ("w", "float32", (K, N), STORAGE_CONSTANT, 0),
        ("bias", "float32", (N,), STORAGE_CONSTANT, 0),
        ("y", "float32", (M, N), STORAGE_EXTERNAL, 0),
        ("x_out", "float32", (M, K), STORAGE_EXTERNAL, 0),
        ("h", "float32", (M, K), STORAGE_ARENA, 0),
    ]
    stages = _Payload()

    def ports(ins, outs):
        return lambda: (stages.refs(ins), stages.refs(outs))

    _kernel_stage(
        stages, "scale", _kernel(name="fake_scale"), _Cubins(), ports([0], [1 if write_constant else 5])
    )
    _matmul_stage(stages, "gemm", _matmul(), ports([5, 1, 2], [3]))
    stages.u8(STAGE_RELAYOUT)
    stages.str("output.x")
    stages.u8(0)
    stages.refs([0])
    stages.refs([4])
    return assemble(
        PlanParts(
            name="cuda_constants",
            arena_bytes=M * K * 4,
            arena_alignment=256,
            compute_capability=90,
            tensors=tensors,
            inputs=[0],
            outputs=[3, 4],
            libraries=[],
            cubins=[(hashlib.sha256(FAKE_CUBIN).digest(), FAKE_CUBIN)],
            n_stages=3,
            stages=stages.bytes(),
            device=(DEVICE_CUDA, 0),
            constants=[(1, w.tobytes()), (2, bias.tobytes())],
        )
    )


FAKE_CHILD = r"""
import ctypes, sys
import numpy as np
from pipelink.modules.services import PipeLinkTensor

runtime_path, plan_path, data_path = sys.argv[1], sys.argv[2], sys.argv[3]
fake = ctypes.CDLL("libcuda.so.1")
fake.fake_mem_alloc.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
rt = ctypes.CDLL(runtime_path)
rt.pipeLinkLoadPipeline.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
args = [ctypes.c_void_p, ctypes.POINTER(PipeLinkTensor), ctypes.c_int32]
rt.pipeLinkExecute.argtypes = args + args[1:]
rt.pipeLinkDestroyPipeline.argtypes = [ctypes.c_void_p]
rt.pipeLinkGetLastErrorMessage.restype = ctypes.c_char_p
msg = lambda: rt.pipeLinkGetLastErrorMessage().decode()
data = np.load(data_path)
x, w, bias = data["x"], data["w"], data["bias"]
M, K = x.shape
N = w.shape[1]
assert rt.pipeLinkInitialize() == 0
blocks = fake.fake_live_blocks()
h = ctypes.c_void_p()
assert rt.pipeLinkLoadPipeline(plan_path.encode(), ctypes.byref(h)) == 0, msg()
assert fake.fake_htod_copies() == 2, fake.fake_htod_copies()  # w and bias, once, at load
assert fake.fake_live_blocks() == blocks + 1  # one device block holds every constant

def device(a):
    ptr = ctypes.c_uint64()
    assert fake.fake_mem_alloc(ctypes.byref(ptr), max(a.nbytes, 1)) == 0
    ctypes.memmove(ptr.value, a.ctypes.data, a.nbytes)
    return ptr.value

keep = []
def tensors(items):
    out = (PipeLinkTensor * len(items))()
    for t, (ptr, shape) in zip(out, items):
        dims = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        keep.append(dims)
        t.data, t.ndim, t.shape = ptr, len(shape), dims
        t.device.device_type, t.device.device_id = 2, 0
        t.dtype.code, t.dtype.bits, t.dtype.lanes = 2, 32, 1
    return out

def read(ptr, shape):
    return np.frombuffer(ctypes.string_at(ptr, int(np.prod(shape)) * 4), np.float32).reshape(shape)

want = (0.5 * x) @ w + bias
for run in range(3):
    y, x_out = device(np.full((M, N), np.nan, np.float32)), device(np.full((M, K), np.nan, np.float32))
    outs = tensors([(y, (M, N)), (x_out, (M, K))])
    assert rt.pipeLinkExecute(h, tensors([(device(x), (M, K))]), 1, outs, 2) == 0, msg()
    assert np.allclose(read(y, (M, N)), want, rtol=1e-4, atol=1e-4), run
    assert np.array_equal(read(x_out, (M, K)), x)
assert fake.fake_htod_copies() == 2  # never again per run
both = tensors([(device(x), (M, K)), (device(w), (K, N))])
assert rt.pipeLinkExecute(h, both, 2, outs, 2) == 2 and "takes 1 inputs" in msg()
live = fake.fake_live_blocks()
assert rt.pipeLinkDestroyPipeline(h) == 0
# destroy frees the constants' block (and the context's arena): nothing of the plan's stays
assert fake.fake_live_blocks() == live - 2, (live, fake.fake_live_blocks())
assert rt.pipeLinkFinalize() == 0
print("OK")
"""


def test_a_cuda_plan_uploads_its_constants_once_on_the_fake_driver(fake_dir, runtime_lib, tmp_path):  # noqa: F811
    rng = np.random.default_rng(12)
    x, w, bias = (rng.standard_normal(s).astype(np.float32) for s in ((M, K), (K, N), (N,)))
    np.savez(tmp_path / "data.npz", x=x, w=w, bias=bias)
    plan = tmp_path / "constants.plk"
    plan.write_bytes(cuda_plan_with_constants(w=w, bias=bias))
    env = dict(
        host_env(), LD_LIBRARY_PATH=str(fake_dir), PIPELINK_CUBLASLT=str(fake_dir / "libfakecublaslt.so")
    )
    run = [sys.executable, "-c", FAKE_CHILD, str(runtime_lib), str(plan), str(tmp_path / "data.npz")]
    proc = subprocess.run(run, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0 and proc.stdout.startswith("OK"), proc.stdout + proc.stderr


def test_a_stage_writing_a_constant_is_refused(core, tmp_path):
    rng = np.random.default_rng(13)
    w, bias = rng.standard_normal((K, N)).astype(np.float32), rng.standard_normal(N).astype(np.float32)
    path = tmp_path / "writes.plk"
    path.write_bytes(cuda_plan_with_constants(w=w, bias=bias, write_constant=True))
    status, message = load(core, path)
    assert (
        status == ErrorCode.PIPELINK_ERR_INTEGRITY and "never write a pipeline input or a constant" in message
    )


def test_fuzzed_cuda_plans_with_constants_are_statuses_never_crashes(c_api_test, tmp_path):
    rng = np.random.default_rng(14)
    w, bias = rng.standard_normal((K, N)).astype(np.float32), rng.standard_normal(N).astype(np.float32)
    path = tmp_path / "constants.plk"
    path.write_bytes(cuda_plan_with_constants(w=w, bias=bias))
    proc = subprocess.run(
        [c_api_test, "fuzz", path, "300", "15"], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, f"rc {proc.returncode}\n{proc.stdout}{proc.stderr}"
    assert "integrity" in proc.stdout


# -- CUDA plans with constants on a GPU host: an ONNX model, the MLP block ---------------------------------
def _gpu_runtime():
    """The C API through ctypes, initialized (open_runtime points it at the wheel's cuBLASLt)."""
    lib = open_runtime()
    lib.pipeLinkLoadPipeline.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
    args = [ctypes.c_void_p, ctypes.POINTER(PipeLinkTensor), ctypes.c_int32]
    lib.pipeLinkExecute.argtypes = args + args[1:]
    lib.pipeLinkDestroyPipeline.argtypes = [ctypes.c_void_p]
    lib.pipeLinkGetLastErrorMessage.restype = ctypes.c_char_p
    assert lib.pipeLinkInitialize() == 0
    return lib


def _cuda_tensors(items: list, keep: list):
    """Contiguous torch CUDA tensors -> a PipeLinkTensor array (``keep`` holds the shape arrays)."""
    out = (PipeLinkTensor * len(items))()
    for t, item in zip(out, items, strict=True):
        dims = (ctypes.c_int64 * item.dim())(*item.shape)
        keep.append(dims)
        dt = get_dtype(str(item.dtype).removeprefix("torch."))
        t.data, t.ndim, t.shape = item.data_ptr(), item.dim(), dims
        t.device.device_type, t.device.device_id = DEVICE_CUDA, 0
        t.dtype.code, t.dtype.bits, t.dtype.lanes = dt.dl_code, dt.bits, 1
    return out


def _onnx_mlp():
    """x[4, 32] -> MatMul(W1) + b1 -> Relu -> MatMul(W2) + b2 -> y[4, 16], weights as initializers."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(21)
    init = {
        "w1": rng.standard_normal((32, 64)).astype(np.float32) * 0.2,
        "b1": rng.standard_normal(64).astype(np.float32) * 0.1,
        "w2": rng.standard_normal((64, 16)).astype(np.float32) * 0.2,
        "b2": rng.standard_normal(16).astype(np.float32) * 0.1,
    }
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h1"], name="fc1"),
        helper.make_node("Add", ["h1", "b1"], ["a1"], name="fc1_bias"),
        helper.make_node("Relu", ["a1"], ["r1"], name="act"),
        helper.make_node("MatMul", ["r1", "w2"], ["h2"], name="fc2"),
        helper.make_node("Add", ["h2", "b2"], ["y"], name="fc2_bias"),
    ]
    graph = helper.make_graph(
        nodes,
        "onnx_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])],
        [numpy_helper.from_array(a, n) for n, a in init.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model, init


@pytest.mark.gpu
def test_an_onnx_model_runs_as_a_cuda_plan_from_the_c_api(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnx")
    model, init = _onnx_mlp()
    pipe = pl.from_onnx(model, device="cuda")
    with pipe:
        assert sorted(pipe.weights) == sorted(init) and pipe.inputs == ["x"]
        x = torch.randn(4, 32, device="cuda")
        want = np.asarray(next(iter(pipe.run(x=x).values())).numpy())
        torch.cuda.synchronize()
        plans = [pipe.save(tmp_path / "onnx_mlp.plk"), _onnx_cli_compile(model, tmp_path, "cuda")]
    ref = np.maximum(x.cpu().numpy() @ init["w1"] + init["b1"], 0) @ init["w2"] + init["b2"]
    assert rel_error(want, ref) < 2e-3  # Python's run() is right (its products may round through tf32)
    lib = _gpu_runtime()
    keep: list = []
    for plan in plans:  # Pipeline.save, and `pipelink import` + `pipelink compile --device cuda`
        handle = ctypes.c_void_p()
        status = lib.pipeLinkLoadPipeline(str(plan).encode(), ctypes.byref(handle))
        assert status == 0, lib.pipeLinkGetLastErrorMessage()
        try:
            for _ in range(2):  # the constants were uploaded once; a second run reads them again
                y = torch.full((4, 16), float("nan"), device="cuda")
                torch.cuda.synchronize()
                status = lib.pipeLinkExecute(handle, _cuda_tensors([x], keep), 1, _cuda_tensors([y], keep), 1)
                assert status == 0, lib.pipeLinkGetLastErrorMessage()
                assert_close(y.cpu().numpy(), want, "float32", f"{plan.name} through the C API")
        finally:
            assert lib.pipeLinkDestroyPipeline(handle) == 0
    assert lib.pipeLinkFinalize() == 0


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_mlp_block_with_bound_weights_runs_as_a_cuda_plan(tmp_path, dtype):
    # The MLP plan of test_cuda_gpu.py (layer_norm, two cuBLASLt products with epilogues) with its six
    # parameters bound: the caller passes x only; through the C API and through load(native=True).
    torch = pytest.importorskip("torch")
    from benchmarks import cases

    case = cases.mlp(8, 1024, dtype)
    rng = np.random.default_rng(31)
    np_dtype = get_dtype(dtype).numpy
    weights = {
        n: (rng.standard_normal(shape) * scale + offset).astype(np.float32).astype(np_dtype)
        for n, (shape, scale, offset) in case.inputs.items()
        if n != "x"
    }
    tdt = getattr(torch, dtype)
    x = torch.randn(8, 1024, device="cuda").to(tdt)
    with pl.load(case.doc, device="cuda", weights=weights) as pipe:
        assert pipe.inputs == ["x"]
        want = np.asarray(pipe.run(x=x)["y"].numpy(), dtype=np.float32)
        torch.cuda.synchronize()
        plan = pipe.save(tmp_path / "mlp.plk")
    with pl.load(case.doc, device="cuda", weights=weights, native=True) as nat:
        got = nat.run(x=x)["y"]
        torch.cuda.synchronize()
        assert_close(np.asarray(got.numpy(), dtype=np.float32), want, dtype, "native=True with bound weights")
    lib = _gpu_runtime()
    keep: list = []
    handle = ctypes.c_void_p()
    status = lib.pipeLinkLoadPipeline(str(plan).encode(), ctypes.byref(handle))
    assert status == 0, lib.pipeLinkGetLastErrorMessage()
    try:
        for _ in range(2):
            y = torch.full((8, 1024), float("nan"), dtype=tdt, device="cuda")
            torch.cuda.synchronize()
            status = lib.pipeLinkExecute(handle, _cuda_tensors([x], keep), 1, _cuda_tensors([y], keep), 1)
            assert status == 0, lib.pipeLinkGetLastErrorMessage()
            assert_close(y.float().cpu().numpy(), want, dtype, f"mlp {dtype} through the C API")
    finally:
        assert lib.pipeLinkDestroyPipeline(handle) == 0
        assert lib.pipeLinkFinalize() == 0
