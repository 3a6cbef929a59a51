"""run()'s common case in C (``runtime/_hotpath.c``): after the first run of a signature, runs go from
``Pipeline.run`` straight to the core with no Python in between, give what the Python path gives, and hand
back to the Python path everything they do not know. On the CPU with the walkthrough's native module (the
CUDA side is tests/native_core/test_native_path_gpu.py's)."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

import pipelink as pl
from pipelink.errors import InvalidArgumentError
from pipelink.runtime import native_path, native_plan
from pipelink.runtime.native_path import NativeRunner
from tests.conftest import run_in_threads

from .test_native_run import _walkthrough_args

# CI builds the extension (pip install): there a missing build fails these tests instead of skipping them.
pytestmark = pytest.mark.skipif(
    native_path._FastRunner is None and not os.environ.get("CI"), reason="runtime/_hotpath.c is not built"
)


@pytest.fixture
def python_runs(monkeypatch):
    """Counts the runs that reach the Python side of the native path (NativeRunner.run)."""
    calls = []
    original = NativeRunner.run

    def counted(self, given, stream, out, **kwargs):
        calls.append(sorted(given))
        return original(self, given, stream, out, **kwargs)

    monkeypatch.setattr(NativeRunner, "run", counted)
    return calls


def _same(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for name in want:
        np.testing.assert_array_equal(np.asarray(got[name]), np.asarray(want[name]), err_msg=name)


def test_a_compiled_signature_runs_from_c_with_the_python_paths_results(runtime_lib, plans, python_runs):
    with (
        pl.load(plans / "ln.json", device="cpu", native=False) as ref,
        pl.load(plans / "ln.json", device="cpu") as pipe,
    ):
        first = pipe.run(_walkthrough_args(1))
        assert len(python_runs) == 1, "the first run of a signature compiles it on the Python side"
        assert pipe._native.fast is not None and pipe._native.fast.n_plans == 1
        kept = {k: np.asarray(v).copy() for k, v in first.items()}
        for seed in (2, 3, 4):
            args = _walkthrough_args(seed)
            got = pipe.run(args)
            _same(got, ref.run(args))
            assert pipe.last_report.executor == "native"
            assert pipe.last_report.signature.startswith("input_tensor=8x1024:float32")
        assert len(python_runs) == 1, "later runs of that signature must not reach the Python side"
        _same(first, kept)  # a returned output is never overwritten by a later run


def test_outputs_are_fresh_arrays_each_run(runtime_lib, plans):
    with pl.load(plans / "ln.json", device="cpu") as pipe:
        args = _walkthrough_args(5)
        a, b = pipe.run(args), pipe.run(args)
        for name in a:
            assert not np.shares_memory(np.asarray(a[name]), np.asarray(b[name])), name
            assert isinstance(b[name], pl.Tensor) and b[name].device == "cpu" and b[name].is_contiguous


@pytest.mark.parametrize(
    "change, python_side",
    [
        (lambda a: dict(a, input_tensor=np.asfortranarray(a["input_tensor"][:, :8])), True),  # strided
        (lambda a: dict(a, input_tensor=a["input_tensor"][:4].copy()), True),  # a new signature: compiled
        (lambda a: dict(a, input_tensor=pl.Tensor.from_numpy(a["input_tensor"])), False),  # pl.Tensor: C's
        (lambda a: {**a, "extra": np.zeros(3, np.float32)}, True),  # an unknown input: Python declines it
        (lambda a: dict(a, input_tensor=a["input_tensor"].astype(np.float64)), True),  # another dtype
        (lambda a: dict(a, input_tensor=a["input_tensor"].tolist()), True),  # not a tensor
    ],
    ids=["strided", "new-shape", "pl-tensor", "extra-input", "other-dtype", "list"],
)
def test_what_c_does_not_know_goes_to_the_python_side(runtime_lib, plans, python_runs, change, python_side):
    with (
        pl.load(plans / "ln.json", device="cpu", native=False) as ref,
        pl.load(plans / "ln.json", device="cpu") as pipe,
    ):
        pipe.run(_walkthrough_args(6))
        python_runs.clear()
        args = change(_walkthrough_args(7))
        try:
            want = ref.run(args)
        except pl.PipeLinkError as e:
            with pytest.raises(type(e)):
                pipe.run(args)
        else:
            _same(pipe.run(args), want)
        assert bool(python_runs) == python_side


def test_a_missing_input_is_the_python_paths_error(runtime_lib, plans):
    with pl.load(plans / "ln.json", device="cpu") as pipe:
        args = _walkthrough_args(8)
        pipe.run(args)
        del args["gamma_tensor"]
        with pytest.raises(InvalidArgumentError, match="gamma_tensor"):
            pipe.run(args)


def test_a_closed_pipeline_refuses_runs(runtime_lib, plans):
    pipe = pl.load(plans / "ln.json", device="cpu")
    args = _walkthrough_args(9)
    pipe.run(args)
    fast = pipe._native.fast
    pipe.close()
    assert fast.closed and fast.n_plans == 0, "closing must stop the C side and forget its plans"
    assert fast.run(args) is None
    with pytest.raises(pl.PipeLinkError, match="closed"):
        pipe.run(args)


def test_threads_share_one_pipeline(runtime_lib, plans):
    with (
        pl.load(plans / "ln.json", device="cpu", native=False) as ref,
        pl.load(plans / "ln.json", device="cpu") as pipe,
    ):
        pipe.run(_walkthrough_args(10))
        cases = [_walkthrough_args(20 + k) for k in range(8)]
        wants = [{n: np.asarray(v) for n, v in ref.run(a).items()} for a in cases]

        def work(k):
            for _ in range(50):
                _same(pipe.run(cases[k]), wants[k])

        run_in_threads(work, 8)


def test_the_runner_refuses_bad_construction():
    runner_type = native_path._FastRunner
    with pytest.raises(ValueError, match="kind"):
        runner_type(("x",), 7, 0, "cpu", 1, pl.Tensor, object(), host_output=print)
    with pytest.raises(ValueError, match="host_output"):
        runner_type(("x",), 1, 0, "cpu", 1, pl.Tensor, object())
    with pytest.raises(ValueError, match="capturing="):  # CUDA: the capture check before outputs are taken
        runner_type(("x",), 2, 0, "cuda:0", 1, pl.Tensor, object(), pool=object(), finish=print)
    runner = runner_type(("x",), 1, 0, "cpu", 1, pl.Tensor, object(), host_output=print)
    with pytest.raises(ValueError, match="inputs"):
        runner.add_plan(1, (), (), "sig")  # one input named, none described
    with pytest.raises(ValueError, match="shape"):
        runner.add_plan(1, (((-1,), 2, 32),), (), "sig")
    assert runner.run({"x": np.zeros(1, np.float32)}) is None  # no plan: not its run


def test_close_while_threads_run_from_c(runtime_lib, plans):
    # Wrong (a crash, or a run on freed plans) if close() could free the C side's plans while a run on
    # another thread was between reading its plan and entering the core.
    pipe = pl.load(plans / "ln.json", device="cpu")
    args = _walkthrough_args(30)
    pipe.run(args)
    start, errors, done = threading.Barrier(5), [], []

    def work():
        start.wait()
        try:
            while True:
                pipe.run(args)
                done.append(1)
        except pl.PipeLinkError as e:
            if "closed" not in str(e):
                errors.append(e)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    start.wait()
    while len(done) < 200:
        pass
    pipe.close()
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors[0]
    assert not any(t.is_alive() for t in threads)


def test_the_joined_entry_refuses_a_join_on_a_cpu_plan(runtime_lib, plans):
    import ctypes

    with pl.load(plans / "ln.json", device="cpu") as pipe:
        pipe.run(_walkthrough_args(31))
        lib = native_plan.runtime()
        (compiled,) = [c for c in pipe._native._plans.values() if isinstance(c, native_plan.LoadedPlan)]
        ins, outs = compiled.arrays()
        replayed = ctypes.c_int32(7)
        status = lib.plk_execute_joined(
            compiled.handle, ins, compiled.n_in, outs, compiled.n_out, None, 1, None, replayed
        )
        assert replayed.value == 0, "nothing was replayed"
        assert status == int(pl.ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT)
        assert b"CPU plan" in lib.pipeLinkGetLastErrorMessage()


class _Liar:
    """Claims to be a tensor and raises on every question."""

    def __getattr__(self, name):
        raise RuntimeError(f"no {name}")


@pytest.mark.parametrize(
    "value",
    [
        None,
        3,
        2.5,
        "text",
        b"bytes",
        memoryview(bytearray(8 * 1024 * 4)),
        np.zeros((8, 1024), dtype=object),
        np.zeros((8, 1024), dtype=[("a", np.float32)]),
        np.zeros((8, 1024), np.float32)[:, ::2],
        np.zeros((0, 1024), np.float32),
        np.zeros([1] * 33, np.float32) if np.__version__ >= "2" else np.zeros([1] * 32, np.float32),
        _Liar(),
    ],
    ids=[
        "none",
        "int",
        "float",
        "str",
        "bytes",
        "memoryview",
        "object",
        "structured",
        "strided",
        "empty",
        "many-dims",
        "liar",
    ],
)
def test_hostile_inputs_never_crash_the_c_side(runtime_lib, plans, value):
    # Wrong (a crash, a traceback other than a PipeLinkError, or a result) if the C side trusted a value it
    # could not read: each goes to the Python side, which refuses it clearly.
    with pl.load(plans / "ln.json", device="cpu") as pipe:
        args = _walkthrough_args(40)
        pipe.run(args)
        args["input_tensor"] = value
        assert pipe._native.fast.run(args) is None
        with pytest.raises(pl.PipeLinkError):
            pipe.run(args)


def test_outputs_are_built_in_c_as_tensor_trusted_builds_them():
    # run() makes each CUDA output pl.Tensor in C, setting the type's __slots__ as Tensor._trusted does;
    # a field missed or swapped there would be a wrong tensor handed to every caller.
    runner = native_path._FastRunner(("x",), 1, 0, "cpu", 1, pl.Tensor, object(), host_output=print)
    owner, dtype = object(), pl.get_dtype("bfloat16")
    args = (0x7F00, (4, 3), dtype, "cuda:0", (3, 1), owner, True)
    got, want = runner._make_tensor(*args), pl.Tensor._trusted(*args)
    assert type(got) is pl.Tensor
    for name in pl.Tensor.__slots__:
        if name != "__weakref__":
            assert getattr(got, name) is getattr(want, name), name
    assert got.is_contiguous and got.nbytes == 24 and got.dtype is dtype
    with pytest.raises(TypeError, match="7 arguments"):
        runner._make_tensor(1, 2)


def test_static_outputs_must_be_one_pl_tensor_per_output():
    runner = native_path._FastRunner(("x",), 1, 0, "cpu", 1, pl.Tensor, object(), host_output=print)
    ins, outs = (((4,), 2, 32),), (("y", (4,), (1,), pl.get_dtype("float32"), 2, 32, 16),)
    with pytest.raises(ValueError, match="one pl.Tensor per output"):
        runner.add_plan(1, ins, outs, "sig", ())
    with pytest.raises(TypeError, match="must be a pl.Tensor"):
        runner.add_plan(1, ins, outs, "sig", (np.zeros(4, np.float32),))
    runner.add_plan(1, ins, outs, "sig", (pl.Tensor.from_numpy(np.zeros(4, np.float32)),))
    assert runner.n_plans == 1
