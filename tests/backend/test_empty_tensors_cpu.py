"""A stage whose every output has no element (a dim of 0) has nothing to compute: it binds and runs no
kernel (the variant ``empty``), where its reference would reduce over nothing (a softmax of [3, 4, 0],
the empty last window of CANINE's local attention at a short length). A stage that reads an empty tensor
and makes a non-empty one still runs (a sum over an empty axis is 0)."""

from __future__ import annotations

import numpy as np
import pytest

import pipelink as pl
from pipelink.runtime.executor import EMPTY_VARIANT


def _config(shape, pipeline, outputs):
    return {
        "name": "empty",
        "inputs": {"x": {"shape": list(shape), "dtype": "float32"}},
        "outputs": outputs,
        "pipeline": pipeline,
    }


_SHAPES = [(3, 4, 0), (3, 0, 4), (0, 2, 2)]


@pytest.mark.parametrize(
    ("op", "attrs", "shape"),
    [("softmax", {"axis": -1}, s) for s in _SHAPES]
    + [("relu", {}, s) for s in _SHAPES]
    # over an empty last axis its mean and rstd outputs [3, 4] are not empty: that one runs
    + [("layer_norm", {"axis": -1}, s) for s in _SHAPES[1:]],
)
def test_a_stage_with_empty_outputs_runs_no_kernel(op, attrs, shape):
    pipeline = [{"name": op, "id": "s", "inputs": ["x"], "outputs": ["y"], "attrs": attrs}]
    with pl.load(_config(shape, pipeline, ["y"]), device="cpu") as pipe:
        y = pipe.run(x=np.zeros(shape, np.float32))["y"].numpy()
        assert y.size == 0 and y.shape[: len(shape) - 1] == shape[:-1]
        assert pipe.last_report.stages["s"].variant == EMPTY_VARIANT


def test_a_stage_reading_an_empty_tensor_into_a_full_one_still_runs():
    pipeline = [
        {"name": "relu", "id": "act", "inputs": ["x"], "outputs": ["a"]},
        {"name": "reduce_sum", "id": "sum", "inputs": ["a"], "outputs": ["y"], "attrs": {"axes": [1]}},
    ]
    with pl.load(_config((3, 0), pipeline, ["y"]), device="cpu") as pipe:
        np.testing.assert_array_equal(pipe.run(x=np.zeros((3, 0), np.float32))["y"].numpy(), np.zeros((3, 1)))
        stages = pipe.last_report.stages
        assert stages["act"].variant == EMPTY_VARIANT and stages["sum"].variant != EMPTY_VARIANT
