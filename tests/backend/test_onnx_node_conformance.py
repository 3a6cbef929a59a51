"""onnx's own node test cases (``onnx.backend.test.case.node``: every operator's spec examples, with their
inputs and expected outputs) through PipeLink's ONNX backend (``pipelink.onnx.backend``: an input a node
needs the value of at import specialises the model). Each case is either refused at import or load with
a ``PipeLinkError`` (an op type, dtype or attribute PipeLink lacks), or runs and matches the expected
outputs: float outputs within the case's own tolerance (onnx's backend runner: rtol 1e-3, atol 1e-7 unless
the case says otherwise; its expected values are often written to 4 digits) or the package's for the
dtype where that is wider (the half types), NaN and inf where expected, integer and bool outputs
exactly. Never a crash, never a wrong answer. When onnx adds cases, they are checked too."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import numpy_helper  # noqa: E402

import pipelink as pl  # noqa: E402
from pipelink.dtypes import get_dtype, tolerance  # noqa: E402
from pipelink.onnx.backend import PipeLinkBackend  # noqa: E402


def _cases() -> list:
    from onnx.backend.test.case import node

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sorted(node.collect_testcases(None), key=lambda case: case.name)


CASES = _cases()


def _array(value):
    return numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else np.asarray(value)


def _undefined(model, feeds: dict) -> np.ndarray | None:
    """Where the spec leaves a Cast's result undefined and ml_dtypes' versions disagree: a float out of
    a sub-byte integer type's range (NaN and inf too) cast into it (a one-input Cast or CastLike model;
    onnx computes the expected values with the installed ml_dtypes: 0 in 0.7, wrapped before)."""
    types = {o.type.tensor_type.elem_type for o in model.graph.output}
    sub_ints = {
        onnx.TensorProto.INT4: (-8, 7),
        onnx.TensorProto.UINT4: (0, 15),
        onnx.TensorProto.INT2: (-2, 1),
        onnx.TensorProto.UINT2: (0, 3),
    }
    ops = {n.op_type for n in model.graph.node}
    if len(types) != 1 or next(iter(types)) not in sub_ints or not ops & {"Cast", "CastLike"} or not feeds:
        return None
    x = next(iter(feeds.values()))
    if x.dtype.kind not in "fV" or x.dtype.kind == "V" and get_dtype(x.dtype).is_sub_byte:
        return None
    lo, hi = sub_ints[next(iter(types))]
    with np.errstate(invalid="ignore"):
        whole = np.trunc(x.astype(np.float64))
        return ~(np.isfinite(whole) & (whole >= lo) & (whole <= hi))


def _check(name: str, got: np.ndarray, want: np.ndarray, case, undefined=None) -> None:
    assert got.shape == want.shape, f"{name}: shape {got.shape}, expected {want.shape}"
    if undefined is not None:
        got, want = got[~undefined], want[~undefined]
    try:
        dtype = get_dtype(want.dtype).name
        floating = get_dtype(want.dtype).is_floating
    except pl.PipeLinkError:
        dtype, floating = str(want.dtype), False
    if not floating:
        np.testing.assert_array_equal(got, want, err_msg=name)
        return
    g, w = got.astype(np.float64), want.astype(np.float64)
    special = ~np.isfinite(w)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=f"{name}: NaN where expected")
    np.testing.assert_array_equal(
        g[special & ~np.isnan(w)], w[special & ~np.isnan(w)], err_msg=f"{name}: inf"
    )
    rtol, atol = tolerance(dtype)
    finite = ~special
    np.testing.assert_allclose(
        g[finite], w[finite], rtol=max(case.rtol, rtol), atol=max(case.atol, atol), err_msg=name
    )


def run_case(case, device: str) -> str | None:
    """Run every data set of ``case`` through PipeLink's ONNX backend (``pipelink.onnx.backend``: the model
    imported, specialised on the inputs it needs the values of at import): None when each output matched,
    else the message of the ``PipeLinkError`` that refused it (at import, load or run). A wrong answer or
    any other exception raises."""
    model = case.model
    names = [i.name for i in model.graph.input]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rep = PipeLinkBackend.prepare(model, device=device)
    with rep:
        for inputs, outputs in case.data_sets:
            # a sequence, map or optional value is never fed: the import refuses such inputs
            feeds = {
                n: _array(v)
                for n, v in zip(names, inputs, strict=False)
                if n in rep.input_names and isinstance(v, np.ndarray | onnx.TensorProto | np.generic)
            }
            try:
                with warnings.catch_warnings(), np.errstate(all="ignore"):
                    warnings.simplefilter("ignore")
                    got = rep.run(feeds)
            except pl.PipeLinkError as e:  # refused at import or load, or at run (a shape the dims forbid)
                assert e.code.name.startswith("PIPELINK_ERR_"), e
                return str(e)
            undefined = _undefined(model, feeds)
            for out, value, want in zip(model.graph.output, got, outputs, strict=False):
                _check(f"{case.name} {out.name}", value, _array(want), case, undefined)
    return None


#: The cases that ran and matched on the CPU when the list was last written
#: (``python scripts/onnx_conformance.py --write``): each must still run, so a change that makes the
#: import refuse what it imported fails here instead of passing as a refusal. A case the installed onnx
#: lacks is not looked for; a case that starts to run is added by the next ``--write``.
RUNS_FILE = Path(__file__).with_name("onnx_conformance_runs.txt")
RUNS = frozenset(RUNS_FILE.read_text(encoding="utf-8").split())


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_onnx_node_case_is_refused_or_right(device, case):
    refusal = run_case(case, device)
    if refusal is not None and device == "cpu" and case.name in RUNS:
        pytest.fail(
            f"{case.name} ran and matched before (tests/backend/{RUNS_FILE.name}); now refused: {refusal}"
        )
