"""Error codes are stable, every exception carries its code and context, and survives pickling."""

from __future__ import annotations

import pickle

import pytest

import pipelink as pl
from pipelink.errors import ErrorCode, Problem, error_for_code

ALL = [
    pl.ConfigError,
    pl.InvalidArgumentError,
    pl.ModuleLoadError,
    pl.VersionMismatchError,
    pl.IntegrityError,
    pl.ShapeMismatchError,
    pl.DTypeMismatchError,
    pl.HardwareUnsupportedError,
    pl.ModuleCrashError,
    pl.PipeLinkTimeoutError,
    pl.OutOfMemoryError,
    pl.CUDAError,
    pl.TuningError,
]


def test_codes_are_stable_numbers():
    # The C header uses these numbers: changing one breaks every compiled module.
    assert [c.value for c in ErrorCode] == list(range(14))
    assert ErrorCode.PIPELINK_SUCCESS == 0 and ErrorCode.PIPELINK_ERR_TUNING_FAILED == 13


@pytest.mark.parametrize("cls", ALL)
def test_one_class_per_code_and_pickling(cls):
    err = cls("stage 'ln' broke", stage="ln", operator="layer_norm", device_uuid="GPU-1")
    assert error_for_code(cls.code) is cls
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is cls and again.code == cls.code
    assert again.message == "stage 'ln' broke" and again.stage == "ln" and again.device_uuid == "GPU-1"
    assert isinstance(again, pl.PipeLinkError)


def test_config_error_keeps_all_problems():
    problems = [
        Problem(ErrorCode.PIPELINK_ERR_INVALID_CONFIG, "/pipeline/0/name", "unknown operator"),
        Problem(ErrorCode.PIPELINK_ERR_INVALID_CONFIG, "/pipeline/1/id", "duplicate id"),
    ]
    err = pl.ConfigError("invalid:", errors=problems)
    assert err.errors == problems
    assert "/pipeline/1/id: duplicate id" in str(err)
    assert pickle.loads(pickle.dumps(err)).errors == problems


def test_unknown_status_maps_to_module_crash():
    assert error_for_code(999) is pl.ModuleCrashError
