"""The default hot path, AUTO (``pl.load(native=None)``): each input signature the native core can run goes
through it, the rest through the Python executor, with the decision cached and reported
(runtime/native_path.py). On the CPU the core runs plans of native C modules: the walkthrough's LayerNorm
module; NumPy built-ins stay on the Python executor."""

from __future__ import annotations

import gc
import json
import threading
import time

import numpy as np
import pytest

import pipelink as pl
import pipelink.runtime.native_path as native_path
from pipelink.errors import InvalidArgumentError, ShapeMismatchError

from .conftest import layernorm_config


def _args(seed: int, rows: int = 8, cols: int = 1024) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "input_tensor": rng.standard_normal((rows, cols)).astype(np.float32),
        "gamma_tensor": rng.standard_normal(cols).astype(np.float32),
        "beta_tensor": rng.standard_normal(cols).astype(np.float32),
        "eps_scalar": np.array(1e-5, np.float32),
    }


def _arrays(outs) -> dict[str, np.ndarray]:
    return {k: np.array(v) for k, v in outs.items()}


def _equal(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)  # same module, same bytes


@pytest.fixture
def undeclared(plans, tmp_path):
    """The walkthrough without declared inputs: one plan per input signature met at run time."""
    cfg = layernorm_config(str(plans / "lib" / "liblayernorm_module.so"))
    del cfg["inputs"]
    path = tmp_path / "ln_any.json"
    path.write_text(json.dumps(cfg))
    return path


@pytest.fixture
def compiles(monkeypatch):
    """Counts the plans compiled for the core (write_plan calls)."""
    calls = []
    real = native_path.write_plan

    def counted(pipe, path, shapes=None, **options):
        calls.append(dict(shapes or {}))
        return real(pipe, path, shapes, **options)

    monkeypatch.setattr(native_path, "write_plan", counted)
    return calls


@pytest.fixture
def private_tmp(monkeypatch, tmp_path):
    """A temp folder of this test's own, to see that nothing is left in it."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(native_path.tempfile, "tempdir", str(folder))
    return folder


def test_auto_runs_the_walkthrough_in_the_core_bit_for_bit(runtime_lib, plans, compiles, private_tmp):
    with (
        pl.load(plans / "ln.json", device="cpu", native=False) as ref,
        pl.load(plans / "ln.json", device="cpu") as auto,
    ):
        assert auto.hot_path == "auto" and ref.hot_path == "python"
        for seed in (1, 2, 3):  # later runs reuse the signature's plan with new values
            args = _args(seed)
            want = _arrays(ref.run(args))
            got = _arrays(auto.run(**args))  # keyword inputs take the same path
            _equal(got, want)
            report = auto.last_report
            assert report.executor == "native" and report.executor_reason is None
            assert list(report.stages) == auto.stages and report.total_time_s > 0  # untimed
            assert ref.last_report.executor == "python"
            assert ref.last_report.executor_reason == "loaded with native=False"
            assert set(ref.last_report.stages) == set(ref.stages)
        assert len(compiles) == 1  # compiled at the first run of the signature, never again
        (entry,) = auto.load_report.executors.items()
        assert entry == ("input_tensor=8x1024:float32, gamma_tensor=1024:float32, "
                         "beta_tensor=1024:float32, eps_scalar=():float32", "native")  # fmt: skip
        assert list(private_tmp.iterdir()) == []  # the plan file is gone once the core loaded it


def test_auto_takes_out_buffers_and_falls_back_for_what_the_core_cannot_take(runtime_lib, plans):
    args = _args(4)
    with pl.load(plans / "ln.json", device="cpu") as pipe:
        first = pipe.outputs[0]
        want = np.array(pipe.run(args)[first])
        buffer = np.full(want.shape, np.nan, np.float32)
        got = pipe.run(args, out={first: buffer})
        assert pipe.last_report.executor == "native"
        np.testing.assert_array_equal(buffer, want)
        assert np.shares_memory(np.asarray(got[first]), buffer)
        # A strided input: the Python executor imports it (same result), and says why it ran it.
        strided = dict(args, input_tensor=np.asfortranarray(args["input_tensor"]))
        _equal(_arrays(pipe.run(strided)), _arrays(pipe.run(args)))
        pipe.run(strided)
        assert pipe.last_report.executor == "python"
        assert "'input_tensor' is not a contiguous tensor of cpu" in pipe.last_report.executor_reason
        # Errors a user causes are the Python executor's, whatever the path.
        with pytest.raises(InvalidArgumentError, match="missing input 'gamma_tensor'"):
            pipe.run({k: v for k, v in args.items() if k != "gamma_tensor"})
        with pytest.raises(InvalidArgumentError, match="unexpected input|unknown input"):
            pipe.run(dict(args, extra=np.ones(3, np.float32)))
        with pytest.raises(ShapeMismatchError, match=r"out\['norm_output'\] has shape \[3, 3\]"):
            pipe.run(args, out={first: np.zeros((3, 3), np.float32)})
        with pytest.raises(InvalidArgumentError, match="leave stream= out"):
            pipe.run(args, stream=object())
        # The runs that fell back left the signature's plan in the core.
        pipe.run(args)
        assert pipe.last_report.executor == "native"


def test_auto_switches_signatures(runtime_lib, undeclared, compiles):
    small, large = _args(5, rows=4, cols=256), _args(6, rows=8, cols=1024)
    with (
        pl.load(undeclared, device="cpu", native=False) as ref,
        pl.load(undeclared, device="cpu") as auto,
    ):
        for args in (small, large, small, large, _args(7, rows=4, cols=256)):
            _equal(_arrays(auto.run(args)), _arrays(ref.run(args)))
            assert auto.last_report.executor == "native"
            assert auto.last_report.signature.startswith(f"input_tensor={args['input_tensor'].shape[0]}x")
        assert [c["input_tensor"][0] for c in compiles] == [(4, 256), (8, 1024)]  # once per signature
        assert list(auto.load_report.executors.values()) == ["native", "native"]
        # A signature the declared shapes or dtypes refuse is the Python executor's error, never cached.
        with pytest.raises(ShapeMismatchError):
            auto.run(dict(small, gamma_tensor=np.ones(3, np.float32)))
        assert len(auto.load_report.executors) == 2
    with pl.load(undeclared, device="cpu", native=True) as pipe, pytest.raises(ShapeMismatchError):
        pipe.run(dict(small, gamma_tensor=np.ones(3, np.float32)))


def test_declared_dtypes_hold_on_every_path(runtime_lib, plans):
    args = _args(15)
    wrong = dict(args, gamma_tensor=args["gamma_tensor"].astype(np.float64))
    for native in (None, True, False):
        with (
            pl.load(plans / "ln.json", device="cpu", native=native) as pipe,
            pytest.raises(InvalidArgumentError, match="'gamma_tensor' has dtype float64, but the pipeline"),
        ):
            pipe.run(wrong)


def test_auto_keeps_builtin_pipelines_on_the_python_executor(runtime_lib, compiles, private_tmp):
    doc = {
        "name": "numpy_only",
        "outputs": ["y"],
        "pipeline": [
            {"id": "act", "name": "relu", "inputs": ["x"], "outputs": ["h"]},
            {"id": "sq", "name": "mul", "inputs": ["h", "h"], "outputs": ["y"]},
        ],
    }
    rng = np.random.default_rng(8)
    with pl.load(doc, device="cpu") as pipe:
        assert pipe.hot_path == "auto"  # decided at the first run
        for shape in ((4,), (4,), (2, 3)):
            x = rng.standard_normal(shape).astype(np.float32)
            y = np.array(pipe.run(x=x)["y"])
            np.testing.assert_array_equal(y, np.maximum(x, 0) ** 2)
            report = pipe.last_report
            assert report.executor == "python"
            assert "stage 'act'" in report.executor_reason
            assert "built-in NumPy operator" in report.executor_reason
            assert set(report.stages) == {"act", "sq"}  # the Python executor's detail
        # A CPU plan refuses a NumPy built-in whatever the shapes: one refused compile, then no more asking.
        assert len(compiles) == 1
        assert pipe.hot_path == "python" and "stage 'act'" in pipe.load_report.hot_path_reason
        (reason,) = pipe.load_report.executors.values()
        assert reason.startswith("the native core cannot run this signature")
    assert list(private_tmp.iterdir()) == []


def test_auto_profile_checked_policies_and_native_false_go_python(runtime_lib, plans):
    args = _args(9)
    with pl.load(plans / "ln.json", device="cpu") as pipe:
        pipe.run(args, profile=True)
        assert pipe.last_report.executor == "python"
        assert "profile=True" in pipe.last_report.executor_reason
        assert list(pipe.last_report.stages) == pipe.stages
    with pl.load(plans / "ln.json", device="cpu", checked=True) as pipe:
        assert pipe.hot_path == "python" and "checked mode" in pipe.load_report.hot_path_reason
        pipe.run(args)
        assert "checked mode" in pipe.last_report.executor_reason
    with pl.load(plans / "ln.json", device="cpu", cuda_graph=True) as pipe:
        assert pipe.hot_path == "python" and "cuda_graph=True" in pipe.load_report.hot_path_reason
    x = np.random.default_rng(10).uniform(0.25, 2.0, (4, 6)).astype(np.float32)
    x[0, 0] = -1.0  # a stage fails: the Python executor reports it degraded
    with pl.load(plans / "ops.json", device="cpu") as pipe:
        assert pipe.hot_path == "python" and "'ident'" in pipe.load_report.hot_path_reason
        pipe.run(x=x)
        assert pipe.last_report.executor == "python" and pipe.last_report.degraded
    with (
        pl.load(plans / "ops.json", device="cpu", native=True) as pipe,
        pytest.raises(InvalidArgumentError, match="strict=True needs the Python executor"),
    ):
        pipe.run(x=x, strict=True)


def test_bound_weights_run_in_the_core_as_plan_constants(runtime_lib, plans, tmp_path):
    args = _args(11)
    gamma = args.pop("gamma_tensor")
    with pl.load(plans / "ln.json", device="cpu", weights={"gamma_tensor": gamma}, native=False) as ref:
        want = _arrays(ref.run(args))
    for native in (None, True):
        with pl.load(plans / "ln.json", device="cpu", weights={"gamma_tensor": gamma}, native=native) as pipe:
            assert pipe.inputs == [n for n in pipe.graph.external_inputs if n != "gamma_tensor"]
            got = _arrays(pipe.run(args))
            assert pipe.last_report.executor == "native", pipe.last_report.executor_reason
            for name, value in want.items():
                np.testing.assert_array_equal(got[name], value)


def test_auto_compile_failures_are_silent_and_cached(runtime_lib, plans, monkeypatch, private_tmp):
    calls = []

    def garbage(pipe, path, shapes=None, **_):  # a plan the core refuses at load (pipeLinkLoadPipeline)
        calls.append(path)
        path.write_bytes(b"not a plan at all")
        return path

    monkeypatch.setattr(native_path, "write_plan", garbage)
    args = _args(12)
    with pl.load(plans / "ln.json", device="cpu", native=False) as ref:
        want = _arrays(ref.run(args))
    with pl.load(plans / "ln.json", device="cpu") as pipe:
        for _ in range(3):
            _equal(_arrays(pipe.run(args)), want)
            assert pipe.last_report.executor == "python"
            assert "is not a PipeLink plan" in pipe.last_report.executor_reason  # the core's message
        assert len(calls) == 1
    assert list(private_tmp.iterdir()) == []

    def broken(pipe, path, shapes=None, **_):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(native_path, "write_plan", broken)
    with pl.load(plans / "ln.json", device="cpu") as pipe:
        _equal(_arrays(pipe.run(args)), want)
        assert "RuntimeError: disk on fire" in pipe.last_report.executor_reason
    with pl.load(plans / "ln.json", device="cpu", native=True) as pipe, pytest.raises(RuntimeError):
        pipe.run(args)


def test_auto_failures_in_the_core_are_the_python_executors_errors(runtime_lib, plans):
    x = np.random.default_rng(14).uniform(0.25, 2.0, (4, 6)).astype(np.float32)
    with pl.load(plans / "fail.json", device="cpu") as pipe:
        np.testing.assert_array_equal(np.array(pipe.run(x=x)["a"]), x)
        assert pipe.last_report.executor == "native"
        bad = x.copy()
        bad[0, 0] = -1.0  # core_flaky fails: the run is made again by the Python executor, which names it
        with pytest.raises(pl.PipeLinkError) as info:
            pipe.run(x=bad)
        assert info.value.context.get("stage") == "boom"
        assert pipe.last_report.stages["boom"].status == "failed"
        assert "the native core refused the run" in pipe.last_report.executor_reason
        with pytest.raises(InvalidArgumentError, match="overlaps input 'x'"):
            pipe.run(x=x, out={"a": x})  # the core refuses the overlap; the Python executor says why
        np.testing.assert_array_equal(np.array(pipe.run(x=x)["a"]), x)
        assert pipe.last_report.executor == "native"


def test_core_runs_take_no_pipeline_lock(runtime_lib, plans):
    args = _args(13)
    with pl.load(plans / "ln.json", device="cpu") as pipe:
        want = _arrays(pipe.run(args))  # compiles the signature
        got = {}
        with pipe._lock:  # held by "another run": a run through the core does not wait for it
            worker = threading.Thread(target=lambda: got.update(_arrays(pipe.run(args))))
            worker.start()
            worker.join(timeout=30)
            assert not worker.is_alive(), "a run through the core waited for Pipeline._lock"
        _equal(got, want)


def test_concurrent_runs_through_the_core(runtime_lib, plans):
    feeds = [_args(100 + i) for i in range(8)]
    with pl.load(plans / "ln.json", device="cpu", native=False) as ref:
        wants = [_arrays(ref.run(f)) for f in feeds]
    errors: list = []
    with pl.load(plans / "ln.json", device="cpu") as pipe:
        barrier = threading.Barrier(8)

        def work(i: int) -> None:
            try:
                barrier.wait()
                for _ in range(50):  # each thread's inputs differ: a shared DLTensor array would mix them
                    _equal(_arrays(pipe.run(feeds[i])), wants[i])
            except BaseException as e:  # noqa: BLE001 (reported by the main thread)
                errors.append(e)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert pipe.last_report.executor == "native"
    assert not errors, errors[:3]


def test_close_while_runs_go_through_the_core(runtime_lib, plans):
    feeds = [_args(200 + i) for i in range(6)]
    with pl.load(plans / "ln.json", device="cpu", native=False) as ref:
        wants = [_arrays(ref.run(f)) for f in feeds]
    pipe = pl.load(plans / "ln.json", device="cpu")
    pipe.run(feeds[0])
    started = threading.Barrier(7)
    done: list[int] = [0] * 6
    unexpected: list = []

    def work(i: int) -> None:
        started.wait()
        try:
            while True:
                _equal(_arrays(pipe.run(feeds[i])), wants[i])
                done[i] += 1
        except InvalidArgumentError as e:
            if "is closed" not in str(e):
                unexpected.append(e)
        except BaseException as e:  # noqa: BLE001
            unexpected.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    started.wait()
    deadline = time.monotonic() + 60
    while min(done) < 5 and not unexpected and time.monotonic() < deadline:  # every thread is running
        time.sleep(0.001)
    pipe.close()  # refuses new runs, waits for those inside the core, then destroys the plans
    for t in threads:
        t.join(timeout=60)
        assert not t.is_alive()
    assert not unexpected, unexpected[:3]
    with pytest.raises(InvalidArgumentError, match="is closed"):
        pipe.run(feeds[0])


def test_a_pipeline_dropped_without_close_gives_its_plans_back(runtime_lib, plans):
    pipe = pl.load(plans / "ln.json", device="cpu")
    pipe.run(_args(16))
    (compiled,) = pipe._native._plans.values()  # noqa: SLF001 - the plan the core holds
    destroy = compiled._destroy  # noqa: SLF001
    del pipe, compiled
    gc.collect()
    assert not destroy.alive, "the core's plan outlived its pipeline"
