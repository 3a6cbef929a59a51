"""The run-time contract on the CPU: declared dimension symbols hold across inputs, outputs are always
fresh tensors, and checked mode catches a stage that does not write its output."""

from __future__ import annotations

import numpy as np
import pytest

import pipelink as pl
from pipelink.dtypes import get_dtype
from pipelink.runtime.checked import CHECKED_ENV, GUARD_BYTES

rng = np.random.default_rng()


def f32(*shape) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


# -- declared dimension symbols ----------------------------------------------------------------------

ADD_N4 = {
    "inputs": {"a": {"shape": ["N", 4], "dtype": "float32"}, "b": {"shape": ["N", 4], "dtype": "float32"}},
    "pipeline": [{"name": "add", "inputs": ["a", "b"], "outputs": ["y"]}],
}
SQUARE = {
    "inputs": {"x": {"shape": ["N", "N"], "dtype": "float32"}},
    "pipeline": [{"name": "relu", "inputs": ["x"], "outputs": ["y"]}],
}


def test_a_symbol_bound_to_two_values_by_two_inputs_is_a_shape_mismatch():
    """Without the check, a of N=1 and b of N=5 would silently broadcast to (5, 4)."""
    with pl.load(ADD_N4, device="cpu") as pipe, pytest.raises(pl.ShapeMismatchError) as e:
        pipe.run(a=f32(1, 4), b=f32(5, 4))
    err = e.value
    assert err.code == pl.ErrorCode.PIPELINK_ERR_SHAPE_MISMATCH
    assert err.context["symbol"] == "N" and err.context["expected"] == 1 and err.context["got"] == 5
    assert "dimension N is 5, but 1 bound by input 'a'" in err.message and "input 'b'" in err.message


def test_a_symbol_repeated_in_one_declaration_binds_one_value():
    with pl.load(SQUARE, device="cpu") as pipe:
        x = f32(3, 3)
        np.testing.assert_array_equal(np.asarray(pipe.run(x=x)["y"]), np.maximum(x, 0))
        with pytest.raises(pl.ShapeMismatchError, match=r"dimension N is 4, but 3 bound by input 'x'"):
            pipe.run(x=f32(3, 4))


@pl.operator("test_contract_square", inputs={"x": ["N", "N"]}, outputs=["y"], shapes={"y": "x"})
def square_copy(x, y):
    np.copyto(y, x)


def test_an_operator_port_declared_n_by_n_refuses_a_3_by_4_input_at_run():
    doc = {"pipeline": [{"name": "test_contract_square", "id": "sq", "inputs": ["x"], "outputs": ["y"]}]}
    with pl.load(doc, device="cpu") as pipe:
        pipe.run(x=f32(3, 3))
        with pytest.raises(pl.ShapeMismatchError, match=r"stage 'sq' input 'x' .*dimension N is 4, but 3"):
            pipe.run(x=f32(3, 4))


def test_a_signature_that_breaks_the_declaration_is_never_cached():
    with pl.load(ADD_N4, device="cpu") as pipe:
        a, b = f32(5, 4), f32(5, 4)
        np.testing.assert_array_equal(np.asarray(pipe.run(a=a, b=b)["y"]), a + b)
        for _ in range(2):  # the second time would find a cached plan if the first had made one
            with pytest.raises(pl.ShapeMismatchError):
                pipe.run(a=f32(1, 4), b=b)
        assert all(sig[0][1][0] == sig[1][1][0] for sig in pipe._plans)  # noqa: SLF001 - no plan for N≠N
        # The fast path (inputs of the last plan's form) still serves valid runs.
        np.testing.assert_array_equal(np.asarray(pipe.run(a=b, b=a)["y"]), a + b)
        c = f32(2, 4)
        np.testing.assert_array_equal(np.asarray(pipe.run(a=c, b=c)["y"]), c + c)


def test_fixed_dimensions_and_rank_of_a_declaration_are_checked_with_the_symbols():
    with pl.load(ADD_N4, device="cpu") as pipe:
        with pytest.raises(pl.InvalidArgumentError, match=r"input 'a' has shape \[2, 5\], but the pipeline"):
            pipe.run(a=f32(2, 5), b=f32(2, 4))
        with pytest.raises(pl.InvalidArgumentError, match=r"input 'b' has shape \[8\]"):
            pipe.run(a=f32(2, 4), b=f32(8))


# -- fresh outputs -----------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["contiguous", "strided"])
def test_an_output_that_is_an_input_is_a_fresh_copy(layout):
    doc = {
        "inputs": {"x": {"shape": ["R", "C"], "dtype": "float32"}},
        "outputs": ["x", "y"],
        "pipeline": [{"name": "relu", "inputs": ["x"], "outputs": ["y"]}],
    }
    with pl.load(doc, device="cpu") as pipe:
        for run in range(3):  # the first run plans; later runs take the fast path
            base = f32(6, 8)
            x = base if layout == "contiguous" else base[:, ::2]
            out = pipe.run(x=x)
            got = np.asarray(out["x"])
            assert not np.shares_memory(got, base), f"run {run}: returned the caller's own array"
            expected = x.copy()
            x[...] = -7.0  # the caller reuses its buffer: the returned tensor must not change
            np.testing.assert_array_equal(got, expected)
            np.testing.assert_array_equal(np.asarray(out["y"]), np.maximum(expected, 0))


@pl.operator("test_contract_always_fails", inputs=["x"], outputs=["y"], shapes={"y": "x"})
def always_fails(x, y):
    raise RuntimeError("deliberate failure")


def test_an_identity_policy_output_is_a_fresh_copy():
    doc = {
        "pipeline": [
            {"name": "test_contract_always_fails", "inputs": ["x"], "outputs": ["y"], "on_error": "identity"}
        ]
    }
    with pl.load(doc, device="cpu") as pipe:
        x = f32(5, 3)
        y = np.asarray(pipe.run(x=x)["y"])
        assert pipe.last_report.stages["test_contract_always_fails"].action == "identity"
        assert not np.shares_memory(y, x)
        np.testing.assert_array_equal(y, x)


# -- checked mode ------------------------------------------------------------------------------------


@pl.operator("test_contract_writes_nothing", inputs=["x"], outputs=["y"], shapes={"y": "x"})
def writes_nothing(x, y):
    return None


@pl.operator("test_contract_writes_half", inputs=["x"], outputs=["y"], shapes={"y": "x"})
def writes_half(x, y):
    y.reshape(-1)[: y.size // 2] = 0


@pl.operator("test_contract_writes_nan", inputs=["x"], outputs=["y"], shapes={"y": "x"})
def writes_nan(x, y):
    y[...] = np.nan


@pl.operator("test_contract_copy", inputs=["x"], outputs=["y"], shapes={"y": "x"})
def copy(x, y):
    np.copyto(y, x)


def chain(op: str, last: str = "relu", **stage) -> dict:
    """x -> op -> t -> last -> y: ``t`` lives in the arena."""
    return {
        "outputs": ["y"],
        "pipeline": [
            {"name": op, "id": "s", "inputs": ["x"], "outputs": ["t"], **stage},
            {"name": last, "id": "r", "inputs": ["t"], "outputs": ["y"]},
        ],
    }


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64", "int32", "int8", "bool"])
@pytest.mark.parametrize("returned", [False, True], ids=["arena buffer", "returned output"])
def test_checked_mode_reports_an_output_the_stage_did_not_write(dtype, returned):
    doc = chain("test_contract_writes_nothing", last="test_contract_copy")
    if returned:
        doc = {"pipeline": doc["pipeline"][:1]}
    x = np.asarray(f32(4, 5)).astype(get_dtype(dtype).numpy)
    with pl.load(doc, device="cpu", checked=True) as pipe:
        for _ in range(2):  # the general path, then the fast path
            with pytest.raises(pl.ModuleCrashError, match="stage 's' .*did not write output 't'") as e:
                pipe.run(x=x)
            assert e.value.code == pl.ErrorCode.PIPELINK_ERR_MODULE_CRASH
            assert e.value.context["output"] == "t"
            assert pipe.last_report.stages["s"].status == "failed"


def test_the_stage_policy_applies_to_a_checked_mode_failure():
    with pl.load(chain("test_contract_writes_nothing", on_error="identity"), device="cpu", checked=True) as p:
        x = f32(3, 7)
        np.testing.assert_array_equal(np.asarray(p.run(x=x)["y"]), np.maximum(x, 0))
        rep = p.last_report.stages["s"]
        assert rep.status == "degraded" and "did not write output 't'" in rep.error.message
    with pl.load(chain("test_contract_writes_nothing", on_error="skip"), device="cpu", checked=True) as p:
        assert p.run(x=f32(3, 7)) == {}
        assert p.last_report.missing_outputs == ["y"]


@pytest.mark.parametrize("op", ["test_contract_writes_half", "test_contract_writes_nan"])
def test_checked_mode_flags_only_outputs_left_entirely_untouched(op):
    """A partial write, or a legitimate all-NaN result (the canonical NaN, not the poison bits), passes:
    checked mode cannot tell which elements an operator meant to write."""
    with pl.load(chain(op), device="cpu", checked=True) as pipe:
        pipe.run(x=f32(4, 4))
        assert pipe.last_report.ok


def test_a_correct_pipeline_gives_the_same_results_in_checked_mode():
    doc = {
        "outputs": ["y"],
        "pipeline": [
            {"name": "scale", "id": "s0", "inputs": ["x"], "outputs": ["t"], "attrs": {"factor": 2.0}},
            {"name": "relu", "id": "s1", "inputs": ["t"], "outputs": ["u"]},
            {"name": "add", "id": "s2", "inputs": ["u", "x"], "outputs": ["y"]},
        ],
    }
    x = f32(9, 33)
    plain, checked = pl.load(doc, device="cpu", checked=False), pl.load(doc, device="cpu", checked=True)
    with plain, checked:
        want = np.asarray(plain.run(x=x)["y"])
        for _ in range(2):
            np.testing.assert_array_equal(np.asarray(checked.run(x=x)["y"]), want)
            assert checked.last_report.ok
        assert checked.checked and not plain.checked
        assert not checked._last_plan.lean  # noqa: SLF001 - the lean loop has no room for the checks
        # Every intermediate owns GUARD_BYTES after it, which no other live buffer may share.
        buffers = list(checked.memory_plan.buffers.values())
        assert buffers and all(b.guard == GUARD_BYTES for b in buffers)
        for i, a in enumerate(buffers):
            for b in buffers[i + 1 :]:
                assert not (a.overlaps_in_time(b) and a.overlaps_in_space(b)), (a, b)
        assert checked.memory_plan.peak_bytes > plain.memory_plan.peak_bytes


def test_checked_mode_follows_the_environment_unless_load_says(monkeypatch):
    doc = chain("test_contract_writes_nothing")
    monkeypatch.setenv(CHECKED_ENV, "1")
    with pl.load(doc, device="cpu") as pipe:
        assert pipe.checked
        with pytest.raises(pl.ModuleCrashError, match="did not write"):
            pipe.run(x=f32(2, 2))
    with pl.load(doc, device="cpu", checked=False) as pipe:
        assert not pipe.checked
        pipe.run(x=f32(2, 2))  # unchecked: the garbage goes through unnoticed, as documented
    monkeypatch.setenv(CHECKED_ENV, "0")
    with pl.load(doc, device="cpu") as pipe:
        assert not pipe.checked
