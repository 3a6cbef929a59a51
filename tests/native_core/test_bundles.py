"""Several input signatures in one plan file (a bundle, docs/plan-format.md "Several signatures"): written by
``pipelink compile`` with an input given several times and by ``Pipeline.save(shapes=[...])``; the core
runs the plan whose input shapes a call's tensors have, reports -1 for the dimensions they differ in, and
refuses other shapes, malformed bundles and bundles of unrelated plans with a status."""

from __future__ import annotations

import ctypes
import subprocess

import numpy as np
import pytest

import pipelink as pl
from pipelink.cli import main
from pipelink.errors import ErrorCode, InvalidArgumentError
from pipelink.modules.services import PipeLinkTensor
from pipelink.runtime.planfile import bundle, signatures_of

from .test_compile import ln_dir  # noqa: F401 (a fixture)

SHAPES = ["gamma_tensor=1024:float32", "beta_tensor=1024:float32", "eps_scalar=:float32"]


class _Info(ctypes.Structure):
    pass


class _TensorInfo(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("dtype", ctypes.c_uint8 * 4),
        ("dtype_id", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
    ]


_Info._fields_ = [
    ("name", ctypes.c_char_p),
    ("device_type", ctypes.c_int32),
    ("n_inputs", ctypes.c_int32),
    ("n_outputs", ctypes.c_int32),
    ("n_stages", ctypes.c_int32),
    ("inputs", ctypes.POINTER(_TensorInfo)),
    ("outputs", ctypes.POINTER(_TensorInfo)),
    ("arena_bytes", ctypes.c_uint64),
]


@pytest.fixture
def core(runtime_lib):
    lib = ctypes.CDLL(str(runtime_lib))
    lib.pipeLinkLoadPipeline.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
    lib.pipeLinkDestroyPipeline.argtypes = [ctypes.c_void_p]
    lib.pipeLinkGetPipelineInfo.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Info)]
    tensors = ctypes.POINTER(PipeLinkTensor)
    lib.pipeLinkExecute.argtypes = [ctypes.c_void_p, tensors, ctypes.c_int32, tensors, ctypes.c_int32]
    lib.pipeLinkGetLastErrorMessage.restype = ctypes.c_char_p
    assert lib.pipeLinkInitialize() == 0
    yield lib
    assert lib.pipeLinkFinalize() == 0


def _tensors(arrays):
    keep, out = [], (PipeLinkTensor * len(arrays))()
    for t, a in zip(out, arrays, strict=True):
        dims = (ctypes.c_int64 * max(a.ndim, 1))(*a.shape)
        keep.append(dims)
        t.data, t.ndim, t.shape = a.ctypes.data, a.ndim, dims
        t.device.device_type, t.device.device_id = 1, 0
        t.dtype.code, t.dtype.bits, t.dtype.lanes = 2, 32, 1
    return out, keep


def _args(rows: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "input_tensor": rng.standard_normal((rows, 1024)).astype(np.float32),
        "gamma_tensor": rng.standard_normal(1024).astype(np.float32),
        "beta_tensor": rng.standard_normal(1024).astype(np.float32),
        "eps_scalar": np.array(1e-5, np.float32),
    }


def test_one_plan_file_runs_every_signature_it_was_compiled_for(ln_dir, core, capsys):  # noqa: F811
    out = ln_dir / "two.plk"
    shapes = ["input_tensor=8x1024:float32", "input_tensor=16x1024:float32", *SHAPES]
    rc = main(
        ["compile", str(ln_dir / "config.json"), "-o", str(out), *sum((["--shape", s] for s in shapes), [])]
    )
    assert rc == 0, capsys.readouterr()
    assert out.read_bytes()[:8] == b"PLKBNDL\0"
    h = ctypes.c_void_p()
    assert core.pipeLinkLoadPipeline(str(out).encode(), ctypes.byref(h)) == 0, (
        core.pipeLinkGetLastErrorMessage()
    )
    try:
        info = _Info()
        assert core.pipeLinkGetPipelineInfo(h, ctypes.byref(info)) == 0
        first = info.inputs[0]
        assert first.name == b"input_tensor" and [first.shape[0], first.shape[1]] == [-1, 1024]
        assert [info.inputs[1].shape[0]] == [1024], "a dimension the signatures share keeps its value"
        with pl.load(ln_dir / "config.json", device="cpu", native=False) as ref:
            for rows in (16, 8, 16):
                args = _args(rows, rows)
                want = [np.asarray(v) for v in ref.run(args).values()]  # the pipeline's outputs, in order
                got = [np.full(w.shape, np.nan, w.dtype) for w in want]
                ins, keep_in = _tensors(list(args.values()))
                outs, keep_out = _tensors(got)
                assert core.pipeLinkExecute(h, ins, 4, outs, len(got)) == 0, (
                    core.pipeLinkGetLastErrorMessage()
                )
                for g, w in zip(got, want, strict=True):
                    np.testing.assert_array_equal(g, w)  # the same module, the same bytes
        ins, keep_in = _tensors(list(_args(4, 1).values()))
        outs, keep_out = _tensors(
            [np.zeros((4, 1024), np.float32), np.zeros(4, np.float32), np.zeros(4, np.float32)]
        )
        assert core.pipeLinkExecute(h, ins, 4, outs, 3) == int(ErrorCode.PIPELINK_ERR_SHAPE_MISMATCH)
        message = core.pipeLinkGetLastErrorMessage().decode()
        assert "no signature" in message and "8x1024" in message and "16x1024" in message, message
    finally:
        assert core.pipeLinkDestroyPipeline(h) == 0


def test_save_takes_a_list_of_signatures(ln_dir, core):  # noqa: F811
    with pl.load(ln_dir / "config.json", device="cpu") as pipe:
        specs = {"gamma_tensor": ((1024,), "float32"), "beta_tensor": ((1024,), "float32")}
        specs["eps_scalar"] = ((), "float32")
        signatures = [dict(specs, input_tensor=((rows, 1024), "float32")) for rows in (1, 2, 3)]
        path = pipe.save(ln_dir / "three.plk", shapes=signatures)
        with pytest.raises(InvalidArgumentError, match="1 to 64"):
            pipe.save(ln_dir / "none.plk", shapes=[])
    h = ctypes.c_void_p()
    assert core.pipeLinkLoadPipeline(str(path).encode(), ctypes.byref(h)) == 0, (
        core.pipeLinkGetLastErrorMessage()
    )
    assert core.pipeLinkDestroyPipeline(h) == 0


def test_a_bundle_of_unrelated_plans_is_refused(plans, core, tmp_path):
    mixed = tmp_path / "lib"  # the plans' modules resolve against the bundle's folder: the same as theirs
    mixed.symlink_to(plans / "lib")
    path = tmp_path / "mixed.plk"
    path.write_bytes(
        bundle([(plans / "ln.plk").read_bytes(), (plans / "lnw.plk").read_bytes()])
    )  # 4 vs 2 inputs
    h = ctypes.c_void_p()
    status = core.pipeLinkLoadPipeline(str(path).encode(), ctypes.byref(h))
    assert status == int(ErrorCode.PIPELINK_ERR_INTEGRITY) and not h.value
    assert b"signatures of one pipeline" in core.pipeLinkGetLastErrorMessage()


@pytest.mark.parametrize(
    "change, status, words",
    [
        (lambda b: b[:40], ErrorCode.PIPELINK_ERR_INTEGRITY, "truncated"),
        (
            lambda b: b[:8] + (9).to_bytes(4, "little") + b[12:],
            ErrorCode.PIPELINK_ERR_VERSION_MISMATCH,
            "version",
        ),
        (
            lambda b: b[:16] + (0).to_bytes(4, "little") + b[20:],
            ErrorCode.PIPELINK_ERR_INTEGRITY,
            "holds 0 plans",
        ),
        (lambda b: b[:-1] + bytes([b[-1] ^ 1]), ErrorCode.PIPELINK_ERR_INTEGRITY, "corrupt"),
        (lambda b: b + b"\0", ErrorCode.PIPELINK_ERR_INTEGRITY, "padded"),
    ],
    ids=["truncated", "version", "no-plans", "bit-flip", "padded"],
)
def test_a_malformed_bundle_is_a_status(plans, core, tmp_path, change, status, words):
    (tmp_path / "lib").symlink_to(plans / "lib")
    path = tmp_path / "bad.plk"
    path.write_bytes(change(bundle([(plans / "ln.plk").read_bytes()] * 2)))
    h = ctypes.c_void_p()
    assert core.pipeLinkLoadPipeline(str(path).encode(), ctypes.byref(h)) == int(status)
    assert words in core.pipeLinkGetLastErrorMessage().decode()


def test_fuzzed_bundles_are_statuses_never_crashes(c_api_test, plans, tmp_path):
    path = plans / "fuzz_bundle.plk"
    path.write_bytes(bundle([(plans / "ln.plk").read_bytes()] * 2))
    try:
        proc = subprocess.run(
            [c_api_test, "fuzz", path, "300", "11"], capture_output=True, text=True, timeout=600
        )
    finally:
        path.unlink()
    assert proc.returncode == 0, f"rc {proc.returncode}\n{proc.stdout}{proc.stderr}"
    assert "integrity" in proc.stdout


def test_repeated_shape_options_are_signatures():
    assert signatures_of(["x=2x3", "y=4"]) == {"x": ((2, 3), None), "y": ((4,), None)}
    assert signatures_of(["x=2x3", "x=5x3", "y=4"]) == [
        {"x": ((2, 3), None), "y": ((4,), None)},
        {"x": ((5, 3), None), "y": ((4,), None)},
    ]
    with pytest.raises(InvalidArgumentError, match="as many times"):
        signatures_of(["x=1", "x=2", "y=1", "y=2", "y=3"])


def test_compile_refuses_uneven_repeats_in_one_line(ln_dir, capsys):  # noqa: F811
    shapes = [
        "input_tensor=8x1024:float32",
        "input_tensor=16x1024:float32",
        "gamma_tensor=1024:float32",
        "gamma_tensor=1024:float32",
    ]
    shapes += ["gamma_tensor=1024:float32", *SHAPES[1:]]
    rc = main(
        ["compile", str(ln_dir / "config.json"), "-o", str(ln_dir / "x.plk")]
        + sum((["--shape", s] for s in shapes), [])
    )
    err = capsys.readouterr().err
    assert rc == 2 and "as many times" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
