"""Version rules: major refused, newer minor warned, patch silent, two majors side by side."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from native_helpers import run_op

from pipelink.errors import ErrorCode, VersionMismatchError
from pipelink.modules.native import load_library, load_operator


def test_two_majors_side_by_side_each_used_by_its_own_stage(libs, reg):
    load_library(libs["vop_v1"], registry=reg)
    load_library(libs["vop_v2"], registry=reg)
    x = np.random.default_rng().standard_normal(9).astype(np.float32)
    v1, v2 = reg.get("vop", "^1", stage="a"), reg.get("vop", ">=2,<3", stage="b")
    assert (str(v1.version), str(v2.version)) == ("1.2.3", "2.0.0")
    assert v1.source != v2.source
    np.testing.assert_array_equal(run_op(v1, [x], stage="a")[0], x + np.float32(1))
    np.testing.assert_array_equal(run_op(v2, [x], stage="b")[0], x + np.float32(2))


def test_major_mismatch_names_both_versions(libs, reg):
    module = load_library(libs["vop_v1"], registry=reg)
    with pytest.raises(VersionMismatchError) as info:
        module.operator("vop", "^2", stage="norm")
    msg = str(info.value)
    assert "'^2'" in msg and "1.2.3" in msg and "norm" in msg and str(libs["vop_v1"]) in msg
    assert info.value.code == ErrorCode.PIPELINK_ERR_VERSION_MISMATCH


def test_newer_minor_loads_with_a_warning(libs, reg, caplog):
    with caplog.at_level(logging.WARNING):
        desc = load_operator(libs["vop_v1"], "vop", "1.0", registry=reg, stage="s")
    assert str(desc.version) == "1.2.3"
    assert any(r.levelno == logging.WARNING and "newer minor" in r.getMessage() for r in caplog.records)


def test_patch_difference_is_silent(libs, reg, caplog):
    with caplog.at_level(logging.DEBUG):
        desc = load_operator(libs["vop_v1"], "vop", "1.2.0", registry=reg)
    assert str(desc.version) == "1.2.3"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_unknown_operator_in_module(libs, reg):
    from pipelink.errors import ModuleLoadError

    with pytest.raises(ModuleLoadError, match="does not provide operator 'nope'.*vop 1.2.3"):
        load_operator(libs["vop_v1"], "nope", registry=reg)
