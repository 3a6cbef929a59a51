"""The config's ``weights`` file: what is read, what is refused (each at ``/weights``), and how bound
arrays meet declared inputs (each mismatch at its own pointer)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipelink.config import build_config, check_document, read_config, read_weights
from pipelink.errors import ConfigError, ErrorCode

OPS = {"matmul", "add", "relu"}


def doc(**extra) -> dict:
    return {
        "weights": "w.npz",
        "pipeline": [{"name": "matmul", "inputs": ["x", "w1"], "outputs": ["y"]}],
        **extra,
    }


def bound_of(arrays: dict) -> dict:
    return {n: (a.shape, str(a.dtype)) for n, a in arrays.items()}


def test_weights_read_relative_to_the_config_file(tmp_path):
    (tmp_path / "sub").mkdir()
    np.savez(tmp_path / "sub" / "w.npz", w1=np.arange(12, dtype=np.float32).reshape(4, 3))
    path = tmp_path / "sub" / "p.json"
    path.write_text(json.dumps(doc()))
    raw, base, _ = read_config(path)
    arrays = read_weights(raw, base)
    assert list(arrays) == ["w1"]
    np.testing.assert_array_equal(arrays["w1"], np.arange(12, dtype=np.float32).reshape(4, 3))
    cfg = build_config(raw, base, path, weights=arrays)
    assert cfg.inputs["w1"].shape == (4, 3) and cfg.inputs["w1"].dtype == "float32"
    assert set(cfg.weights) == {"w1"}


def test_no_weights_key_reads_nothing(tmp_path):
    assert read_weights({"pipeline": []}, tmp_path) == {}


def _refused(tmp_path, match: str):
    with pytest.raises(ConfigError, match=match) as info:
        read_weights(doc(), tmp_path)
    assert info.value.code == ErrorCode.PIPELINK_ERR_INVALID_CONFIG
    assert [p.path for p in info.value.errors] == ["/weights"]
    return info.value


def test_missing_weights_file(tmp_path):
    _refused(tmp_path, "cannot be read.*relative to the config file")


def test_weights_file_that_is_not_npz(tmp_path):
    (tmp_path / "w.npz").write_text("w1 = [1, 2, 3]\n")
    _refused(tmp_path, "not an .npz archive")


def test_npy_file_is_not_an_npz(tmp_path):
    np.save(tmp_path / "w.npy", np.ones(3))
    (tmp_path / "w.npy").rename(tmp_path / "w.npz")
    _refused(tmp_path, "not an .npz archive")


def test_pickle_bearing_npz_is_refused_without_unpickling(tmp_path):
    np.savez(tmp_path / "w.npz", w1=np.array([{"a": 1}, None], dtype=object))
    _refused(tmp_path, "pickled objects, which are never loaded")


def test_damaged_npz(tmp_path):
    np.savez(tmp_path / "w.npz", w1=np.ones(1000, dtype=np.float32))
    data = (tmp_path / "w.npz").read_bytes()
    (tmp_path / "w.npz").write_bytes(data[: len(data) // 2])
    _refused(tmp_path, "not a readable .npz archive")


def test_array_name_must_be_a_tensor_name(tmp_path):
    np.savez(tmp_path / "w.npz", **{"1bad": np.ones(2, dtype=np.float32)})
    _refused(tmp_path, "'1bad', which is not a tensor name")


def test_array_dtype_pipelink_lacks(tmp_path):
    np.savez(tmp_path / "w.npz", w1=np.ones(2, dtype=np.complex64))
    _refused(tmp_path, "complex64, which PipeLink has no dtype for")


def test_bound_names_count_as_declared_inputs():
    d = doc(inputs={"x": {"shape": ["B", 4], "dtype": "float32"}})
    assert check_document(d, known_operators=OPS) != []  # w1 is unknown without the weights
    assert check_document(d, known_operators=OPS, bound={"w1": ((4, 3), "float32")}) == []


def test_declared_input_must_match_its_array():
    d = doc(
        inputs={"x": {"shape": ["B", 4], "dtype": "float32"}, "w1": {"shape": [4, 5], "dtype": "float16"}}
    )
    problems = check_document(d, known_operators=OPS, bound=bound_of({"w1": np.ones((4, 3), np.float32)}))
    by_path = {p.path: p.message for p in problems}
    assert set(by_path) == {"/inputs/w1/shape", "/inputs/w1/dtype"}
    assert "shape [4, 5]" in by_path["/inputs/w1/shape"] and "[4, 3]" in by_path["/inputs/w1/shape"]
    assert "float16" in by_path["/inputs/w1/dtype"] and "float32" in by_path["/inputs/w1/dtype"]


def test_declared_input_matching_its_array_is_fine():
    d = doc(
        inputs={"x": {"shape": ["B", 4], "dtype": "float32"}, "w1": {"shape": [4, "N"], "dtype": "float32"}}
    )
    assert check_document(d, known_operators=OPS, bound={"w1": ((4, 3), "float32")}) == []


def test_a_stage_cannot_produce_a_bound_name():
    d = doc()
    d["pipeline"].append({"name": "relu", "inputs": ["y"], "outputs": ["w1"]})
    problems = check_document(d, known_operators=OPS, bound={"w1": ((4, 3), "float32")})
    by_path = {p.path: p.message for p in problems}
    assert "bound by the weights file" in by_path["/pipeline/1/outputs/0"]


def test_schema_types_the_weights_key():
    problems = check_document({**doc(), "weights": 3}, known_operators=OPS)
    assert [p.path for p in problems] == ["/weights"]
