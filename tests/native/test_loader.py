"""load_library: registration, marshalling against NumPy, services, and every bad library's error."""

from __future__ import annotations

import ctypes
import gc
import hashlib
import logging
import subprocess
import sys

import numpy as np
import pytest
from native_helpers import run_op

from pipelink.errors import ErrorCode, IntegrityError, ModuleCrashError, ModuleLoadError, ShapeMismatchError
from pipelink.modules.native import load_library

rng = np.random.default_rng()


def test_good_module_registers_each_operator_with_its_source(libs, reg):
    module = load_library(libs["good"], registry=reg)
    assert {d.key for d in module.operators} == {"scale_add@1.0.0", "row_sum@1.1.0", "attr_probe@1.0.0"}
    desc = reg.get("row_sum")
    assert desc.source == str(libs["good"].resolve()) and libs["good"].is_absolute()
    assert [v.device for v in desc.variants] == ["cpu"]
    assert all(v.source == desc.source for v in desc.variants)
    assert desc.dtype_vars == {"T": frozenset({"float32", "float64"})}
    assert module.manifest_source == "section"  # read without running the library
    assert load_library(str(libs["good"]), registry=reg) is module  # cached, not registered twice


@pytest.mark.parametrize("with_bias", [True, False])
def test_scale_add_matches_numpy(libs, reg, with_bias):
    desc = load_library(libs["good"], registry=reg).operator("scale_add")
    x = rng.standard_normal((3, 5, 7)).astype(np.float32)
    b = rng.standard_normal(7).astype(np.float32) if with_bias else None
    alpha = float(rng.uniform(0.5, 3))
    (y,) = run_op(desc, [x, b], {"alpha": alpha})
    expected = np.float32(alpha) * x + (b if with_bias else 0)
    np.testing.assert_allclose(y, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_row_sum_matches_numpy(libs, reg, dtype):
    desc = load_library(libs["good"], registry=reg).operator("row_sum")
    x = rng.standard_normal((6, 33)).astype(dtype)
    (y,) = run_op(desc, [x])
    assert y.dtype == dtype and np.isfinite(y).all()
    np.testing.assert_allclose(
        y, x.astype(np.float64).sum(axis=1), rtol=1e-5 if dtype == np.float32 else 1e-12
    )


def test_attrs_and_tunables_reach_the_module(libs, reg):
    desc = load_library(libs["good"], registry=reg).operator("attr_probe")
    weights = rng.standard_normal(4).round(3).tolist()
    (y,) = run_op(
        desc,
        [rng.standard_normal(3)],
        {"alpha": 1.25, "count": 7, "flag": True, "weights": weights, "mode": "precise"},
        params={"block": 128},
    )
    # alpha, count, flag, sum(weights), sum(dims [1,2]), strlen + 1000 (count == strlen), n_attrs, block
    np.testing.assert_allclose(y, [1.25, 7, 1, sum(weights), 3, 1007, 7, 128])


def test_context_hooks_log_and_workspace(libs, reg, caplog):
    module = load_library(libs["good"], registry=reg)
    count = module.library.good_destroyed_count
    count.restype = ctypes.c_int64
    before = count()
    with caplog.at_level(logging.INFO, logger="pipelink.native"):
        run_op(
            module.operator("scale_add"), [rng.standard_normal(5).astype(np.float32), None], {"alpha": 2.5}
        )
    assert "scale_add context created (alpha=2.5)" in caplog.text
    gc.collect()
    assert count() == before + 1  # the bound kernel is gone, so its context was destroyed


def test_known_status_raises_its_class_naming_module_operator_and_status(libs, reg):
    desc = load_library(libs["failing"], registry=reg).operator("fail_shape")
    with pytest.raises(ShapeMismatchError) as info:
        run_op(desc, [rng.standard_normal(4).astype(np.float32)], stage="stage_a")
    msg = str(info.value)
    assert str(libs["failing"]) in msg and "'fail_shape'" in msg and "stage_a" in msg
    assert "status 6 (PIPELINK_ERR_SHAPE_MISMATCH)" in msg
    assert info.value.status == 6 and info.value.code == ErrorCode.PIPELINK_ERR_SHAPE_MISMATCH


def test_unknown_status_is_a_module_crash(libs, reg):
    desc = load_library(libs["failing"], registry=reg).operator("fail_odd")
    with pytest.raises(ModuleCrashError) as info:
        run_op(desc, [rng.standard_normal(4).astype(np.float32)])
    assert "status 77" in str(info.value) and str(libs["failing"]) in str(info.value)
    assert info.value.code == ErrorCode.PIPELINK_ERR_MODULE_CRASH


BAD = {
    "missing": ("does not exist", "build the module first"),
    "notelf": ("not an ELF shared library", "pipelink build"),
    "nomanifest": ("no PipeLink manifest", "PIPELINK_MANIFEST"),
    "badjson": ("not valid JSON", "line 1"),
    "abi99": ("abi_version 99", "rebuild the module"),
    "missing_entry": ("'ghost_compute_missing'", "does not export"),
    "version_disagree": ("pipeLinkVersion_skew_1_1_0 instead of pipeLinkVersion_skew_1_0_0", "agree"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_library_is_a_clear_module_load_error(libs, reg, name, tmp_path):
    path = tmp_path / "libmissing.so" if name == "missing" else libs[name]
    with pytest.raises(ModuleLoadError) as info:
        load_library(path, registry=reg)
    msg = str(info.value)
    assert info.value.code == ErrorCode.PIPELINK_ERR_MODULE_LOAD_FAILED
    assert str(path) in msg
    for fragment in BAD[name]:
        assert fragment in msg
    assert reg.names() == []


def test_two_modules_claiming_one_name_and_version(libs, reg):
    load_library(libs["good"], registry=reg)
    with pytest.raises(ModuleLoadError) as info:
        load_library(libs["duplicate"], registry=reg)
    assert "provided by two modules" in str(info.value) and str(libs["duplicate"]) in str(info.value)
    # The failed load left nothing behind; the first module's operator is intact.
    assert [d.source for d in reg.versions("scale_add")] == [str(libs["good"])]


def test_sha256_is_checked_before_the_library_is_opened(libs, reg):
    # The bomb aborts when opened: prove it, then show a wrong digest stops it first.
    crash = subprocess.run(
        [sys.executable, "-c", f"import ctypes; ctypes.CDLL({str(libs['bomb'])!r})"], capture_output=True
    )
    assert crash.returncode != 0
    with pytest.raises(IntegrityError) as info:
        load_library(libs["bomb"], sha256="0" * 64, registry=reg)
    assert info.value.code == ErrorCode.PIPELINK_ERR_INTEGRITY and "0" * 64 in str(info.value)
    with pytest.raises(IntegrityError):  # not ModuleLoadError: the digest comes before the ELF check
        load_library(libs["notelf"], sha256="ab" * 32, registry=reg)


def test_matching_sha256_loads(libs, reg):
    digest = hashlib.sha256(libs["vop_v1"].read_bytes()).hexdigest()
    module = load_library(libs["vop_v1"], sha256=digest.upper(), registry=reg)
    assert module.sha256 == digest


def test_data_ptr_for_every_kind_of_array():
    from pipelink.modules.services import data_ptr

    a = rng.standard_normal((4, 6)).astype(np.float32)
    frozen = a.copy()
    frozen.flags.writeable = False
    for view in (a, a[1:], a[:, 2:], a.T, np.zeros(0), np.asarray(3.0), frozen):
        assert data_ptr(view) == view.__array_interface__["data"][0]
    assert data_ptr(None) is None


def test_a_bound_kernel_follows_new_arrays_between_calls(libs, reg):
    # The kernel re-stores addresses only for new objects: new arrays must still be read and written.
    from pipelink.backends.cpu import CPUBackend
    from pipelink.descriptor import KernelContext

    desc = load_library(libs["good"], registry=reg).operator("row_sum")
    ctx = KernelContext("s", {}, ((3, 4),), ("float32",), ((3,),), ("float32",), CPUBackend())
    kernel = desc.variants[0].bind(ctx)
    for _ in range(3):
        x = rng.standard_normal((3, 4)).astype(np.float32)
        y = np.full(3, np.nan, np.float32)
        kernel([x], [y], None)
        # float32 sums in another order than NumPy's: bounded by the terms' magnitude, not the sum's (a row
        # summing near 0 has a large relative error; this flaked at 1.4e-5 relative on such a row)
        bound = 4 * np.finfo(np.float32).eps * np.abs(x).sum(axis=1)
        np.testing.assert_array_less(np.abs(y - x.astype(np.float64).sum(axis=1)), bound)
