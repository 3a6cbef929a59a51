"""Legacy kernels bound through a sidecar's signature template, compared with NumPy."""

from __future__ import annotations

import json

import numpy as np
import pytest
from native_helpers import layer_norm_reference, run_op

from pipelink.errors import InvalidArgumentError, ModuleLoadError
from pipelink.modules.legacy import parse_template
from pipelink.modules.manifest import parse_manifest
from pipelink.modules.native import load_library

rng = np.random.default_rng()


@pytest.fixture
def legacy(libs, reg):
    return load_library(libs["legacy"], registry=reg)


def test_sidecar_registers_legacy_operators(legacy):
    assert legacy.manifest_source == "sidecar"
    assert {d.name for d in legacy.operators} == {
        "legacy_gemm",
        "legacy_layer_norm",
        "legacy_layer_norm_seed",
        "legacy_scale",
    }


def test_gemm_template_matches_numpy(legacy):
    a = rng.standard_normal((5, 7)).astype(np.float32)
    b = rng.standard_normal((7, 3)).astype(np.float32)
    (c,) = run_op(legacy.operator("legacy_gemm"), [a, b])
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


def test_layer_norm_with_eps_attr_matches_numpy(legacy):
    x = rng.standard_normal((4, 19)).astype(np.float32)
    g, b = rng.standard_normal(19).astype(np.float32), rng.standard_normal(19).astype(np.float32)
    outs = run_op(legacy.operator("legacy_layer_norm"), [x, g, b], {"eps": 1e-3})
    for got, want in zip(outs, layer_norm_reference(x, g, b, np.float32(1e-3)), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_layer_norm_with_eps_input_as_in_the_seed_config(legacy):
    x = rng.standard_normal((3, 8)).astype(np.float32)
    g, b = rng.standard_normal(8).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    eps = np.array(0.5, dtype=np.float32)  # large, so using a wrong eps shows
    outs = run_op(legacy.operator("legacy_layer_norm_seed"), [x, g, b, eps])
    for got, want in zip(outs, layer_norm_reference(x, g, b, eps), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_by_value_arguments_and_status_return(legacy):
    x = rng.standard_normal(11).astype(np.float32)
    (y,) = run_op(legacy.operator("legacy_scale"), [x], {"factor": -1.5})
    np.testing.assert_allclose(y, x * np.float32(-1.5), rtol=1e-6)
    with pytest.raises(InvalidArgumentError, match="status 2"):
        run_op(legacy.operator("legacy_scale"), [np.zeros(0, np.float32)])


@pytest.mark.parametrize(
    "item, why",
    [
        ("in:Z", "not an input port"),
        ("shape:[M,Q]:int32", "symbol 'Q'"),
        ("dim:M", "needs a C type"),
        ("attr:nope:float32", "not an attribute"),
        ("frobnicate", "not a template item"),
        ("shape:[M]:float32", "not a template item"),
    ],
)
def test_template_errors_name_the_item(tmp_path, item, why):
    side = {
        "abi_version": 1,
        "operators": [
            {
                "name": "k",
                "version": "1.0.0",
                "symbol": "k",
                "inputs": [{"name": "A", "shape": ["M"]}],
                "outputs": [{"name": "C", "shape": "A"}],
                "signature": ["in:A", item],
            }
        ],
    }
    (spec,) = parse_manifest(json.dumps(side), tmp_path / "x.json", legacy=True)
    with pytest.raises(ModuleLoadError) as info:
        parse_template(spec, tmp_path / "libk.so")
    assert why in str(info.value) and repr(item) in str(info.value)
