"""Hot reload: a module file replaced while a pipeline uses it is swapped in by pipe.reload()."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

import pipelink as pl
from pipelink.modules.build import build_module

SOURCE = """#include <pipelink.h>
PIPELINK_COMPUTE(rop_compute) {
    const float* x = (const float*)in[0].data; float* y = (float*)out[0].data;
    for (int64_t i = 0; i < pipelink_numel(&in[0]); ++i) y[i] = x[i] + @ADD@;
    return PIPELINK_SUCCESS;
}
PIPELINK_VERSION(rop, @MAJ@, @MIN@, 0)
PIPELINK_MANIFEST({"name": "rop", "version": "@VER@", "entry": "rop_compute", "devices": ["cpu"],
                   "inputs": [{"name": "x", "dtype": "float32"}], "outputs": [{"name": "y", "shape": "x"}]})
"""


def build(tmp_path, major, minor, addend):
    src = tmp_path / f"rop_{major}_{minor}.c"
    src.write_text(
        SOURCE.replace("@ADD@", f"{addend}.0f")
        .replace("@MAJ@", str(major))
        .replace("@MIN@", str(minor))
        .replace("@VER@", f"{major}.{minor}.0")
    )
    return build_module(src, tmp_path / f"build_{major}_{minor}" / "librop.so")


def install(built, target):
    # Replace the file the way a deployment does: write beside it, then rename over it.
    tmp = target.with_suffix(".new")
    shutil.copy(built, tmp)
    os.replace(tmp, target)


def test_reload_swaps_minor_and_refuses_major(tmp_path):
    v1_0, v1_1, v2_0 = build(tmp_path, 1, 0, 1), build(tmp_path, 1, 1, 3), build(tmp_path, 2, 0, 2)
    live = tmp_path / "librop.so"
    install(v1_0, live)
    doc = {
        "pipeline": [
            {"name": "rop", "library": str(live), "inputs": ["x"], "outputs": ["y"]},
            {"name": "relu", "inputs": ["y"], "outputs": ["z"]},
        ]
    }
    x = np.random.default_rng(0).standard_normal(17).astype(np.float32)
    pipe = pl.load(doc, device="cpu")
    np.testing.assert_array_equal(np.asarray(pipe.run(x=x)["z"]), np.maximum(x + 1, 0))
    assert pipe.reload() == []  # nothing changed

    install(v1_1, live)
    (
        np.testing.assert_array_equal(np.asarray(pipe.run(x=x)["z"]), np.maximum(x + 1, 0)),
        "no swap before reload()",
    )
    assert pipe.reload() == ["rop"]
    np.testing.assert_array_equal(np.asarray(pipe.run(x=x)["z"]), np.maximum(x + 3, 0))
    assert "rop@1.1.0" in pipe.load_report.versions["rop"]

    install(v2_0, live)
    with pytest.raises(pl.VersionMismatchError, match="different major"):
        pipe.reload()
    np.testing.assert_array_equal(np.asarray(pipe.run(x=x)["z"]), np.maximum(x + 3, 0))


def test_two_copies_of_one_module_coexist_but_different_modules_conflict(tmp_path):
    from pipelink.modules.native import load_library
    from pipelink.modules.registry import OperatorRegistry

    built = build(tmp_path, 1, 0, 1)
    copy_a, copy_b = tmp_path / "a" / "librop.so", tmp_path / "b" / "librop.so"
    for c in (copy_a, copy_b):
        c.parent.mkdir()
        shutil.copy(built, c)
    reg = OperatorRegistry()
    load_library(copy_a, registry=reg)
    load_library(copy_b, registry=reg)  # the same bytes: two pipelines may each ship a copy
    assert {d.source for d in reg.versions("rop")} == {str(copy_a), str(copy_b)}
    other = tmp_path / "c" / "librop.so"
    other.parent.mkdir()
    shutil.copy(build(tmp_path, 1, 0, 5), other)  # same name and version, different code
    with pytest.raises(pl.ModuleLoadError, match="two modules"):
        load_library(other, registry=reg)
