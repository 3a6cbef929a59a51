"""Bound constants end to end: a config's weights file (or ``load(weights=...)``) binds inputs once at
load; ``run()`` neither takes them nor imports them again."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import pipelink as pl
from tests.conftest import assert_close


def write(tmp_path, arrays: dict, **extra) -> str:
    np.savez(tmp_path / "model.npz", **arrays)
    config = {
        "weights": "model.npz",
        "inputs": {"x": {"shape": ["B", 4], "dtype": "float32"}},
        "pipeline": [
            {"name": "matmul", "inputs": ["x", "w1"], "outputs": ["h"]},
            {"name": "add", "inputs": ["h", "b1"], "outputs": ["y"]},
        ],
        **extra,
    }
    (tmp_path / "p.json").write_text(json.dumps(config))
    return str(tmp_path / "p.json")


@pytest.fixture
def arrays(rng):
    return {
        "w1": rng.standard_normal((4, 3)).astype(np.float32),
        "b1": rng.standard_normal(3).astype(np.float32),
    }


def test_weights_bind_inputs_once(tmp_path, device, rng, arrays):
    pipe = pl.load(write(tmp_path, arrays), device=device)
    assert pipe.inputs == ["x"] and sorted(pipe.weights) == ["b1", "w1"]
    for batch in (2, 5, 2):
        x = rng.standard_normal((batch, 4)).astype(np.float32)
        assert_close(np.asarray(pipe.run(x=x)["y"].numpy()), x @ arrays["w1"] + arrays["b1"], "float32")


def test_run_never_imports_a_bound_constant_again(tmp_path, rng, arrays, monkeypatch):
    pipe = pl.load(write(tmp_path, arrays), device="cpu")
    imported = []
    backend = pipe._backend
    real = backend.import_input
    monkeypatch.setattr(backend, "import_input", lambda v, **kw: imported.append(v) or real(v, **kw))
    for batch in (2, 3, 3):
        pipe.run(x=rng.standard_normal((batch, 4)).astype(np.float32))
    # Only x is imported: a new signature goes through the import, a repeated one takes the fast path.
    assert [a.shape for a in imported] == [(2, 4), (3, 4)]


def test_passing_a_bound_input_is_an_error(tmp_path, arrays):
    pipe = pl.load(write(tmp_path, arrays), device="cpu")
    x = np.ones((2, 4), np.float32)
    with pytest.raises(pl.InvalidArgumentError, match="'w1' is bound by the weights file") as info:
        pipe.run(x=x, w1=arrays["w1"])
    assert info.value.input == "w1"


def test_a_missing_unbound_input_is_still_named(tmp_path, arrays):
    pipe = pl.load(write(tmp_path, arrays), device="cpu")
    with pytest.raises(pl.InvalidArgumentError, match="missing input 'x'"):
        pipe.run()


def test_declared_input_mismatching_its_array_fails_at_load(tmp_path, arrays):
    path = write(
        tmp_path,
        arrays,
        inputs={"x": {"shape": ["B", 4], "dtype": "float32"}, "w1": {"shape": [4, 7], "dtype": "float32"}},
    )
    with pytest.raises(pl.ConfigError) as info:
        pl.load(path, device="cpu")
    assert [p.path for p in info.value.errors] == ["/inputs/w1/shape"]


def test_a_bound_constant_with_the_wrong_shape_for_the_stage_fails_at_load(tmp_path, rng):
    bad = {"w1": rng.standard_normal((5, 3)).astype(np.float32), "b1": np.zeros(3, np.float32)}
    with pytest.raises(pl.PipeLinkError, match="w1|K"):
        pl.load(write(tmp_path, bad), device="cpu")


def test_missing_weights_file_fails_at_load_and_validate(tmp_path, arrays):
    path = write(tmp_path, arrays)
    (tmp_path / "model.npz").unlink()
    with pytest.raises(pl.ConfigError, match="cannot be read"):
        pl.load(path, device="cpu")
    assert [p.path for p in pl.validate(path)] == ["/weights"]


def test_load_takes_weights_as_arrays(device, rng, arrays):
    config = {"pipeline": [{"name": "matmul", "inputs": ["x", "w1"], "outputs": ["y"]}]}
    pipe = pl.load(config, device=device, weights={"w1": arrays["w1"]})
    x = rng.standard_normal((3, 4)).astype(np.float32)
    assert_close(np.asarray(pipe.run(x=x)["y"].numpy()), x @ arrays["w1"], "float32")


def test_load_refuses_weights_twice(tmp_path, arrays):
    with pytest.raises(pl.InvalidArgumentError, match="pass one of them"):
        pl.load(write(tmp_path, arrays), device="cpu", weights=arrays)


def test_load_refuses_object_arrays():
    config = {"pipeline": [{"name": "relu", "inputs": ["x"], "outputs": ["y"]}]}
    with pytest.raises(pl.InvalidArgumentError, match="Python objects"):
        pl.load(config, device="cpu", weights={"x": np.array([None], dtype=object)})


def test_cuda_graph_replay_with_bound_weights(tmp_path, device, rng, arrays):
    pipe = pl.load(write(tmp_path, arrays), device=device, cuda_graph=True)
    x = rng.standard_normal((4, 4)).astype(np.float32)
    for _ in range(3):
        assert_close(np.asarray(pipe.run(x=x)["y"].numpy()), x @ arrays["w1"] + arrays["b1"], "float32")


def test_plan_files_take_bound_constants_and_refuse_only_what_the_core_cannot_run(tmp_path, arrays):
    # Bound weights are constants inside a plan (tests/native_core/test_constants.py runs such plans);
    # what a CPU plan of this pipeline refuses is its built-in NumPy stages, never its weights.
    pipe = pl.load(write(tmp_path, arrays), device="cpu")
    with pipe, pytest.raises(pl.ConfigError, match="built-in NumPy operator"):
        pipe.save(tmp_path / "p.plk")


@pytest.mark.parametrize("how", ["file", "weights="])
def test_a_0d_weight_stays_0d(tmp_path, rng, arrays, how):
    # np.ascontiguousarray makes a 0-d array 1-d: a bound scalar must keep its declared shape [].
    arrays = dict(arrays, b1=np.array(0.5, np.float32))
    if how == "file":
        pipe = pl.load(write(tmp_path, arrays), device="cpu")
    else:
        config = json.loads(Path(write(tmp_path, arrays)).read_text())
        del config["weights"]
        pipe = pl.load(config, device="cpu", weights=arrays)
    x = rng.standard_normal((2, 4)).astype(np.float32)
    with pipe:
        assert np.asarray(pipe._bound["b1"]).shape == ()
        assert_close(np.asarray(pipe.run(x=x)["y"]), x @ arrays["w1"] + 0.5, "float32")
