"""``pl.load(..., native=True)``: run() through the native core (runtime/native_path.py) gives what the Python
executor gives, and refuses clearly what the core cannot do."""

from __future__ import annotations

import numpy as np
import pytest

import pipelink as pl
from pipelink.errors import ConfigError, InvalidArgumentError


def _walkthrough_args(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "input_tensor": rng.standard_normal((8, 1024)).astype(np.float32),
        "gamma_tensor": rng.standard_normal(1024).astype(np.float32),
        "beta_tensor": rng.standard_normal(1024).astype(np.float32),
        "eps_scalar": np.array(1e-5, np.float32),
    }


def test_native_run_matches_the_python_executor(runtime_lib, plans):
    with (
        pl.load(plans / "ln.json", device="cpu", native=False) as ref,
        pl.load(plans / "ln.json", device="cpu", native=True) as nat,
    ):
        assert nat.hot_path == "native"
        for seed in (1, 2):  # the second run reuses the signature's plan with new values
            args = _walkthrough_args(seed)
            want = {k: np.asarray(v) for k, v in ref.run(args).items()}
            got = {k: np.asarray(v) for k, v in nat.run(args).items()}
            assert nat.last_report.executor == "native" and ref.last_report.executor == "python"
            assert got.keys() == want.keys()
            for name in want:
                np.testing.assert_array_equal(got[name], want[name], err_msg=name)  # same module, same bytes


def test_native_run_writes_into_out_buffers(runtime_lib, plans):
    args = _walkthrough_args(3)
    with pl.load(plans / "ln.json", device="cpu", native=True) as pipe:
        first = pipe.outputs[0]
        want = np.asarray(pipe.run(args)[first])
        buffer = np.full(want.shape, np.nan, np.float32)
        got = pipe.run(args, out={first: buffer})
        np.testing.assert_array_equal(buffer, want)
        assert np.shares_memory(np.asarray(got[first]), buffer)
        with pytest.raises(InvalidArgumentError, match="out= buffer"):
            pipe.run(args, out={first: np.zeros((3, 3), np.float32)})


@pytest.mark.parametrize("negative", [False, True], ids=["clean", "degraded"])
def test_native_run_applies_the_on_error_policies(runtime_lib, plans, negative):
    rng = np.random.default_rng(5)
    x = rng.uniform(0.25, 2.0, (4, 6)).astype(np.float32)
    if negative:
        x[0, 0] = -1.0  # a stage fails: its identity / fallback policy takes over in the core as in Python
    with (
        pl.load(plans / "ops.json", device="cpu", native=False) as ref,
        pl.load(plans / "ops.json", device="cpu", native=True) as nat,
    ):
        want = {k: np.asarray(v) for k, v in ref.run(x=x).items()}
        got = {k: np.asarray(v) for k, v in nat.run(x=x).items()}
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-6, err_msg=name)


def test_native_run_refuses_what_the_core_cannot_do(runtime_lib, plans):
    with pl.load(plans / "ln.json", device="cpu", native=True, cuda_graph=True) as pipe:
        # No graphs on the CPU (the load report says so); the core runs it eagerly.
        assert any("no graph capture" in w for w in pipe.load_report.warnings)
        pipe.run(_walkthrough_args(5))
        assert pipe.last_report.executor == "native"
    with pytest.raises(InvalidArgumentError, match="native=True cannot run with checked mode"):
        pl.load(plans / "ln.json", device="cpu", native=True, checked=True)
    args = _walkthrough_args(6)
    with pl.load(plans / "ln.json", device="cpu", native=True) as pipe:
        with pytest.raises(InvalidArgumentError, match="profile=True needs the Python executor"):
            pipe.run(args, profile=True)
        strided = dict(args, input_tensor=np.asfortranarray(args["input_tensor"]))
        with pytest.raises(InvalidArgumentError, match="not a contiguous tensor of cpu"):
            pipe.run(strided)
        with pytest.raises(InvalidArgumentError, match="missing input 'gamma_tensor'"):
            pipe.run({k: v for k, v in args.items() if k != "gamma_tensor"})
    doc = {
        "name": "numpy_only",
        "inputs": {"x": {"shape": [4], "dtype": "float32"}},
        "outputs": ["y"],
        "pipeline": [{"id": "act", "name": "relu", "inputs": ["x"], "outputs": ["y"]}],
    }
    pipe = pl.load(doc, device="cpu", native=True)
    with pipe, pytest.raises(ConfigError, match="stage 'act'"):  # a NumPy built-in: the core cannot run it
        pipe.run(x=np.ones(4, np.float32))
