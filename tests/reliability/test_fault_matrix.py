"""The fault matrix: {raises, bad status, NaN, segfault, abort, hang} x {fail, identity, skip, fallback}.

Healthy branches' outputs must be bit-identical to a fault-free run, the policy must apply, and the
process must survive (segfault, abort and hang run under isolation "process").
"""

from __future__ import annotations

import numpy as np
import pytest

import pipelink as pl
from tests.reliability.faulty_ops import NEEDS_PROCESS, fault_pipeline

X = np.random.default_rng(42).standard_normal((8, 16)).astype(np.float32)
POLICIES = ["fail", "identity", "skip", {"fallback": "relu"}]
FAULTS = ["raise", "status", "nan", "segfault", "abort", "hang"]
EXPECTED_CODE = {"hang": pl.ErrorCode.PIPELINK_ERR_TIMEOUT}


@pytest.fixture(scope="module")
def clean():
    return {k: np.array(v) for k, v in pl.load(fault_pipeline("none", "fail"), device="cpu").run(x=X).items()}


def _policy_id(p):
    return p if isinstance(p, str) else "fallback"


@pytest.mark.parametrize("policy", POLICIES, ids=_policy_id)
@pytest.mark.parametrize("fault", FAULTS)
def test_fault_matrix(fault, policy, clean):
    isolation = "process" if fault in NEEDS_PROCESS else "none"
    with pl.load(fault_pipeline(fault, policy, isolation=isolation), device="cpu") as pipe:
        code = EXPECTED_CODE.get(fault, pl.ErrorCode.PIPELINK_ERR_MODULE_CRASH)
        if policy == "fail":
            with pytest.raises(pl.PipeLinkError) as e:
                pipe.run(x=X)
            assert e.value.code == code and e.value.stage == "faulty"
            return
        out = pipe.run(x=X)
        np.testing.assert_array_equal(np.asarray(out["k"]), clean["k"])  # the healthy branch, bit for bit
        rep = pipe.last_report.stages["faulty"]
        assert rep.error is not None and rep.error.code == code
        if policy == "identity":
            assert rep.status == "degraded"
            np.testing.assert_array_equal(np.asarray(out["g"]), np.maximum(X, 0))
        elif policy == "skip":
            assert rep.status == "skipped" and "g" not in out
            assert pipe.last_report.missing_outputs == ["g"]
        else:
            assert rep.action == "fallback:relu"
            np.testing.assert_array_equal(np.asarray(out["g"]), np.maximum(X, 0))


def test_worker_restarts_after_crash_and_later_runs_are_correct():
    doc = fault_pipeline("segfault", "identity", isolation="process")
    with pl.load(doc, device="cpu") as pipe:
        pipe.run(x=X)
        assert pipe.last_report.stages["faulty"].error.cause == "SIGSEGV"
        pipe.run(x=X)  # the worker was restarted and crashed again: still reported, still alive
        assert pipe.last_report.stages["faulty"].status == "degraded"


def test_isolated_healthy_stage_matches_in_process():
    doc = fault_pipeline("none", "fail", isolation="process")
    ref = pl.load(fault_pipeline("none", "fail"), device="cpu").run(x=X)
    with pl.load(doc, device="cpu") as pipe:
        for _ in range(3):
            out = pipe.run(x=X)
            for name in ("g", "k"):
                np.testing.assert_array_equal(np.asarray(out[name]), np.asarray(ref[name]))


def test_isolation_of_a_locally_defined_operator_is_refused():
    @pl.operator("test_local_op_v1", inputs=["x"], outputs=["y"], shapes={"y": "x"})
    def local(x, y):
        np.copyto(y, x)

    doc = {
        "pipeline": [{"name": "test_local_op_v1", "inputs": ["x"], "outputs": ["y"], "isolation": "process"}]
    }
    pipe = pl.load(doc, device="cpu")
    with pytest.raises(pl.ModuleLoadError, match="importable"):
        pipe.run(x=X)
