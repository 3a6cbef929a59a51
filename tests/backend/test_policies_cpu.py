"""Error policies on the CPU: fail, identity, skip, fallback, check_finite, strict, the error log."""

from __future__ import annotations

import json

import numpy as np
import pytest

import pipelink as pl

_calls = {"n": 0}


@pl.operator("test_flaky_v1", inputs=["x"], outputs=["y"], shapes={"y": "x"}, attrs={"mode": "ok"})
def flaky(x, y, *, mode):
    """Fails on demand: raise, NaN for some rows, or a correct copy times two."""
    _calls["n"] += 1
    if mode == "raise":
        raise ZeroDivisionError("variance is zero")
    np.multiply(x, 2, out=y)
    if mode == "nan":
        y[::3] = np.nan


def two_branch(policy, mode, check_finite=False, extra=None):
    """x -> flaky -> f ; x -> relu -> r (a healthy branch)."""
    stage = {
        "name": "test_flaky_v1",
        "id": "bn",
        "inputs": ["x"],
        "outputs": ["f"],
        "attrs": {"mode": mode},
        "on_error": policy,
        "constraints": {"check_finite": check_finite},
    }
    stages = [stage, {"name": "relu", "id": "healthy", "inputs": ["x"], "outputs": ["r"]}]
    if extra:
        stages.append(extra)
    return {"pipeline": stages}


X = np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32)


def test_fail_policy_raises_module_crash_naming_stage_and_cause():
    pipe = pl.load(two_branch("fail", "raise"), device="cpu")
    with pytest.raises(pl.ModuleCrashError) as e:
        pipe.run(x=X)
    err = e.value
    assert err.code == pl.ErrorCode.PIPELINK_ERR_MODULE_CRASH
    assert err.stage == "bn" and err.operator == "test_flaky_v1"
    assert "ZeroDivisionError: variance is zero" in str(err)
    assert pipe.last_report.stages["bn"].status == "failed"


def test_identity_keeps_pipeline_running_and_healthy_branch_bit_identical():
    clean = pl.load(two_branch("identity", "ok"), device="cpu").run(x=X)
    pipe = pl.load(two_branch("identity", "raise"), device="cpu")
    out = pipe.run(x=X)
    np.testing.assert_array_equal(np.asarray(out["f"]), X)  # identity: the input passed through
    np.testing.assert_array_equal(np.asarray(out["r"]), np.asarray(clean["r"]))
    rep = pipe.last_report.stages["bn"]
    assert (rep.status, rep.action, rep.error.code) == (
        "degraded",
        "identity",
        pl.ErrorCode.PIPELINK_ERR_MODULE_CRASH,
    )
    assert [s.stage for s in pipe.last_report.degraded] == ["bn"]


def test_check_finite_detects_nan_and_counts_it():
    pipe = pl.load(two_branch("identity", "nan", check_finite=True), device="cpu")
    out = pipe.run(x=X)
    np.testing.assert_array_equal(np.asarray(out["f"]), X)
    err = pipe.last_report.stages["bn"].error
    assert err.nonfinite == 2 * 4 and "non-finite" in str(err)


def test_nan_without_check_finite_is_not_detected():
    out = pl.load(two_branch("identity", "nan"), device="cpu").run(x=X)
    assert np.isnan(np.asarray(out["f"])).sum() == 8


def test_skip_marks_outputs_missing_and_skips_dependents():
    extra = {"name": "relu", "id": "after", "inputs": ["f"], "outputs": ["g"]}
    pipe = pl.load(two_branch("skip", "raise", extra=extra), device="cpu")
    out = pipe.run(x=X)
    assert set(out) == {"r"}, "missing outputs are never filled with garbage"
    assert pipe.last_report.missing_outputs == ["g"]
    assert pipe.last_report.stages["after"].status == "skipped"
    assert pipe.last_report.stages["healthy"].status == "ok"


def test_fallback_runs_another_operator():
    pipe = pl.load(two_branch({"fallback": "relu"}, "raise"), device="cpu")
    out = pipe.run(x=X)
    np.testing.assert_array_equal(np.asarray(out["f"]), np.maximum(X, 0))
    assert pipe.last_report.stages["bn"].action == "fallback:relu"


def test_strict_raises_even_with_a_policy():
    pipe = pl.load(two_branch("identity", "raise"), device="cpu")
    with pytest.raises(pl.ModuleCrashError):
        pipe.run(x=X, strict=True)


def test_identity_requires_matching_shapes_at_load():
    doc = {
        "inputs": {"x": {"shape": [4, 8], "dtype": "float32"}, "w": {"shape": [8, 3], "dtype": "float32"}},
        "pipeline": [{"name": "gemm", "inputs": ["x", "w"], "outputs": ["y"], "on_error": "identity"}],
    }
    with pytest.raises(pl.ShapeMismatchError) as e:
        pl.load(doc, device="cpu")
    assert e.value.errors[0].path == "/pipeline/0/on_error"


def test_fallback_with_incompatible_ports_is_refused_at_load():
    doc = {
        "inputs": {"x": {"shape": [4, 8], "dtype": "float32"}},
        "pipeline": [
            {
                "name": "relu",
                "inputs": ["x"],
                "outputs": ["y"],
                "on_error": {"fallback": "layer_norm"},
                "attrs": {},
            }
        ],
    }
    assert pl.validate(doc) == []  # layer_norm takes x and makes the same shape: compatible
    doc["pipeline"][0]["on_error"] = {"fallback": "gemm"}
    problems = pl.validate(doc)
    assert problems and problems[0].path == "/pipeline/0/on_error/fallback"


def test_error_log_gets_one_json_line_per_failure(tmp_path):
    log_path = tmp_path / "errors.jsonl"
    pl.configure_error_log(log_path)
    try:
        pipe = pl.load(two_branch("identity", "raise"), device="cpu")
        pipe.run(x=X)
        pipe.run(x=X)
    finally:
        pl.configure_error_log(None)
    lines = [json.loads(line) for line in log_path.read_text().splitlines()]
    assert len(lines) == 2
    entry = lines[0]
    assert entry["code"] == "PIPELINK_ERR_MODULE_CRASH" and entry["stage"] == "bn"
    assert (
        entry["operator"] == "test_flaky_v1" and entry["module"] == "python" and entry["version"] == "1.0.0"
    )
    assert "ZeroDivisionError" in entry["message"] and entry["time"].endswith("Z")


def test_fault_tolerance_example_keeps_every_batch():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / "fault_tolerance" / "run.py"
    spec = importlib.util.spec_from_file_location("fault_example", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    r = module.simulate(batches=40, batch_size=16, bad_rate=0.05, seed=3)
    assert r["zero_variance_samples"] > 0 and r["degraded_batches"] > 0
    assert r["finite_samples"] == r["samples"], "identity must keep every batch's outputs finite"
    assert r["last_error"] is None or "non-finite" in r["last_error"].message
