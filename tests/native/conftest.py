"""Fixtures for the native-module tests: every C test module compiled once per session with build_module."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pipelink.modules.build import build_module
from pipelink.modules.registry import OperatorRegistry

MODULES = Path(__file__).parent / "modules"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "layernorm_module"
NAMES = [
    "good",
    "vop_v1",
    "vop_v2",
    "nomanifest",
    "badjson",
    "abi99",
    "missing_entry",
    "version_disagree",
    "failing",
    "duplicate",
    "bomb",
    "legacy",
    "overrun",
    "ctor_segv",
    "ctor_exit",
    "ctor_hang",
    "marker",
    "fnmanifest",
]


@pytest.fixture(scope="session")
def libs(tmp_path_factory) -> dict[str, Path]:
    """name -> built library path (plus "notelf", a text file named like a library)."""
    out = tmp_path_factory.mktemp("native_modules")
    with ThreadPoolExecutor(max_workers=4) as pool:
        paths = dict(
            zip(
                NAMES,
                pool.map(lambda n: build_module(MODULES / f"{n}.c", out / f"lib{n}.so"), NAMES),
                strict=True,
            )
        )
    shutil.copy(MODULES / "liblegacy.so.pipelink.json", out / "liblegacy.so.pipelink.json")
    notelf = out / "libnotelf.so"
    notelf.write_text("this is not a shared library\n")
    paths["notelf"] = notelf
    return paths


@pytest.fixture
def reg() -> OperatorRegistry:
    """A fresh registry, so tests never see each other's operators."""
    return OperatorRegistry()
