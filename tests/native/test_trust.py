"""The library trust boundary: what was hashed is what runs, a module is its bytes, and opening one is probed.

Each test provokes one way a module file could run unverified code, run stale code, be mistaken for another
module or take the caller down, and shows that it cannot.
"""

from __future__ import annotations

import os
import platform
import shutil
import struct
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest
from native_helpers import run_op

import pipelink as pl
from pipelink.errors import ErrorCode, ModuleLoadError
from pipelink.modules import image as image_mod
from pipelink.modules import native
from pipelink.modules.build import build_module, include_dir
from pipelink.modules.image import probe_image, read_image
from pipelink.modules.inspect import inspect_library
from pipelink.modules.native import load_image, load_library
from pipelink.modules.registry import OperatorRegistry

SOURCE = """#include <pipelink.h>
PIPELINK_COMPUTE(tb_compute) {
    const float* x = (const float*)in[0].data; float* y = (float*)out[0].data;
    for (int64_t i = 0; i < pipelink_numel(&in[0]); ++i) y[i] = x[i] + @ADD@;
    return PIPELINK_SUCCESS;
}
PIPELINK_VERSION(tb, 1, 0, 0)
PIPELINK_MANIFEST({"name": "tb", "version": "1.0.0", "entry": "tb_compute", "devices": ["cpu"],
                   "inputs": [{"name": "x", "dtype": "float32"}], "outputs": [{"name": "y", "shape": "x"}]})
"""
rng = np.random.default_rng(12)


@pytest.fixture(scope="module")
def variants(tmp_path_factory) -> dict[int, bytes]:
    """addend -> the bytes of operator tb 1.0.0 computing y = x + addend (same name, version and size)."""
    out = tmp_path_factory.mktemp("trust")
    built = {}
    for add in (1, 7):
        src = out / f"tb{add}.c"
        src.write_text(SOURCE.replace("@ADD@", f"{add}.0f"))
        built[add] = build_module(src, out / f"b{add}" / "libtb.so").read_bytes()
    assert built[1] != built[7]
    return built


def addend_of(module) -> float:
    """Which code a loaded module runs: the addend its tb operator applies."""
    x = rng.standard_normal(9).astype(np.float32)
    (y,) = run_op(module.operator("tb"), [x])
    return float(np.round(y - x, 4).mean())


def test_a_file_swapped_after_the_hash_is_never_opened(tmp_path, variants, monkeypatch):
    live = tmp_path / "libtb.so"
    live.write_bytes(variants[1])
    digest = read_image(live).sha256
    real_read_elf = native.read_elf

    def swap_then_parse(data, path):
        live.write_bytes(variants[7])  # an attacker wins the race right after the hash
        return real_read_elf(data, path)

    monkeypatch.setattr(native, "read_elf", swap_then_parse)
    module = load_library(live, sha256=digest, registry=OperatorRegistry())
    assert live.read_bytes() == variants[7]  # the swap happened...
    assert module.sha256 == digest and addend_of(module) == 1.0  # ...and the hashed bytes are what runs


def test_a_rebuilt_file_is_new_code_and_reload_runs_it(tmp_path, variants):
    live = tmp_path / "libtb.so"
    live.write_bytes(variants[1])
    doc = {"pipeline": [{"name": "tb", "library": str(live), "inputs": ["x"], "outputs": ["y"]}]}
    x = rng.standard_normal(5).astype(np.float32)
    with pl.load(doc, device="cpu") as pipe:
        np.testing.assert_array_equal(np.asarray(pipe.run(x=x)["y"]), x + 1)
        tmp = live.with_suffix(".new")
        tmp.write_bytes(variants[7])  # rebuilt: same name and version, new code
        os.replace(tmp, live)
        np.testing.assert_array_equal(np.asarray(pipe.run(x=x)["y"]), x + 1)  # nothing swaps by itself
        assert pipe.reload() == ["tb"]
        np.testing.assert_array_equal(np.asarray(pipe.run(x=x)["y"]), x + 7)


def test_a_file_overwritten_in_place_does_not_change_the_running_code(tmp_path, variants):
    live = tmp_path / "libtb.so"
    live.write_bytes(variants[1])
    module = load_library(live, registry=OperatorRegistry())
    assert addend_of(module) == 1.0
    with open(live, "r+b") as f:  # same inode, rewritten under the mapping: used to SIGBUS or run new code
        f.truncate(0)
        f.flush()
        assert addend_of(module) == 1.0
        f.write(variants[7])
    assert addend_of(module) == 1.0


def test_an_identical_copy_elsewhere_is_the_same_module_after_the_original_changed(tmp_path, variants):
    reg = OperatorRegistry()
    first, copy = tmp_path / "a" / "libtb.so", tmp_path / "b" / "libtb.so"
    first.parent.mkdir()
    copy.parent.mkdir()
    first.write_bytes(variants[1])
    a = load_library(first, registry=reg)
    first.write_bytes(variants[7])  # the loaded module's file changes on disk (not reloaded)
    copy.write_bytes(variants[1])
    b = load_library(copy, registry=reg)  # the same bytes as the loaded module: not "two modules"
    assert a.sha256 == b.sha256 and a.library is b.library  # one content, one handle
    assert {d.source for d in reg.versions("tb")} == {str(first), str(copy)}
    other = tmp_path / "c" / "libtb.so"
    other.parent.mkdir()
    other.write_bytes(variants[7])
    with pytest.raises(ModuleLoadError, match="two modules"):  # different bytes still conflict
        load_library(other, registry=reg)


@pytest.mark.parametrize(
    "name, says",
    [("ctor_segv", "SIGSEGV"), ("ctor_exit", "exit code 3"), ("bomb", "SIGABRT")],
)
def test_a_constructor_that_kills_its_process_is_a_load_error(libs, name, says):
    with pytest.raises(ModuleLoadError) as info:
        load_library(libs[name], registry=OperatorRegistry(), probe=True)
    e = info.value
    assert e.code == ErrorCode.PIPELINK_ERR_MODULE_LOAD_FAILED and says in e.message
    assert str(libs[name]) in e.message and "child process" in e.message


def test_configs_probe_by_default(libs, monkeypatch):
    monkeypatch.delenv(image_mod.PROBE_ENV, raising=False)
    doc = {"pipeline": [{"name": "ctor_exit", "library": str(libs["ctor_exit"]), "inputs": ["x"],
                         "outputs": ["y"]}]}  # fmt: skip
    with pytest.raises(ModuleLoadError) as info:
        pl.load(doc, device="cpu")
    (problem,) = info.value.errors
    assert problem.code == ErrorCode.PIPELINK_ERR_MODULE_LOAD_FAILED and problem.path == "/pipeline/0/library"
    assert "exit code 3" in problem.message


def test_probing_can_be_turned_off_and_happens_once_per_content(libs, monkeypatch):
    calls = []
    real_run = subprocess.run
    monkeypatch.setattr(image_mod.subprocess, "run", lambda *a, **k: calls.append(a) or real_run(*a, **k))
    monkeypatch.setattr(image_mod, "_PROBED", {})
    monkeypatch.setenv(image_mod.PROBE_ENV, "0")
    load_library(libs["vop_v1"], registry=OperatorRegistry())
    assert calls == []
    monkeypatch.setenv(image_mod.PROBE_ENV, "1")
    load_library(libs["vop_v1"], registry=OperatorRegistry())
    load_library(libs["vop_v1"], registry=OperatorRegistry())
    assert len(calls) == 1


def _patch(data: bytes, offset: int, fmt: str, value: int) -> bytes:
    raw = bytearray(data)
    struct.pack_into(fmt, raw, offset, value)
    return bytes(raw)


def _load_headers(data: bytes):
    """(e_phoff, e_phentsize, [(index, p_type)]) of a 64-bit little-endian ELF file."""
    (phoff,) = struct.unpack_from("<Q", data, 0x20)
    entsize, count = struct.unpack_from("<HH", data, 0x36)
    return phoff, entsize, [(i, struct.unpack_from("<I", data, phoff + i * entsize)[0]) for i in range(count)]


@pytest.mark.parametrize("probe", [False, True])
def test_garbage_program_headers_are_refused_before_dlopen(libs, tmp_path, probe):
    data = libs["vop_v1"].read_bytes()
    phoff, entsize, headers = _load_headers(data)
    first_load = next(i for i, kind in headers if kind == 1)  # PT_LOAD
    dynamic = next(i for i, kind in headers if kind == 2)  # PT_DYNAMIC
    cases = {
        "offset": _patch(data, phoff + first_load * entsize + 8, "<Q", 1 << 60),  # p_offset
        "dynamic": _patch(data, phoff + dynamic * entsize + 16, "<Q", 0x7FFF_0000_0000),  # p_vaddr
        "align": _patch(data, phoff + first_load * entsize + 48, "<Q", 3),  # p_align
    }
    for what, bad in cases.items():
        path = tmp_path / f"lib{what}.so"
        path.write_bytes(bad)
        with pytest.raises(ModuleLoadError, match="damaged"):
            load_library(path, registry=OperatorRegistry(), probe=probe)
        with pytest.raises(ModuleLoadError, match="damaged"):
            inspect_library(path)


def _relocations(path):
    """(file offset of each .rela.dyn entry, its r_offset) and the address of the initialiser array."""
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as f:
        elf = ELFFile(f)
        rela = elf.get_section_by_name(".rela.dyn")
        init = elf.get_section_by_name(".init_array")["sh_addr"]
        entries = [(rela["sh_offset"] + 24 * i, r["r_offset"]) for i, r in enumerate(rela.iter_relocations())]
    return entries, init


def test_a_relocation_outside_the_image_is_refused_before_dlopen(libs, tmp_path):
    entries, _ = _relocations(libs["vop_v1"])
    # The first dynamic relocation now writes far outside the library (into whatever is mapped there).
    bad = _patch(libs["vop_v1"].read_bytes(), entries[0][0], "<Q", 0x7FF0_0000_0000)
    path = tmp_path / "libreloc.so"
    path.write_bytes(bad)
    with pytest.raises(ModuleLoadError, match="relocation writes at 0x7ff000000000"):
        load_library(path, registry=OperatorRegistry(), probe=False)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="patches an x86-64 relocation type")
def test_a_copy_relocation_in_a_library_is_refused(libs, tmp_path):
    entries, _ = _relocations(libs["vop_v1"])
    data = libs["vop_v1"].read_bytes()
    (info,) = struct.unpack_from("<Q", data, entries[0][0] + 8)
    bad = _patch(data, entries[0][0] + 8, "<Q", (info & ~0xFFFFFFFF) | 5)  # R_X86_64_COPY
    path = tmp_path / "libcopy.so"
    path.write_bytes(bad)
    with pytest.raises(ModuleLoadError, match="COPY relocation"):
        load_library(path, registry=OperatorRegistry(), probe=False)


def test_a_file_that_faults_inside_the_loader_is_caught_by_the_probe(libs, tmp_path):
    entries, init = _relocations(libs["vop_v1"])
    at = next(offset for offset, target in entries if target == init)
    # The constructor pointer now points at the ELF header (mapped, not executable): every header and
    # table is still valid, and dlopen jumps there.
    bad = _patch(libs["vop_v1"].read_bytes(), at + 16, "<q", 0)
    path = tmp_path / "libctor0.so"
    path.write_bytes(bad)
    crash = subprocess.run(
        [sys.executable, "-c", f"import ctypes; ctypes.CDLL({str(path)!r})"], capture_output=True, check=False
    )
    assert crash.returncode < 0  # opened in a process, it kills that process
    with pytest.raises(ModuleLoadError, match="SIGSEGV"):
        load_library(path, registry=OperatorRegistry(), probe=True)


def test_a_library_others_can_write_loads_with_a_warning(libs, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    lib = shutil.copy(libs["vop_v1"], shared / "libvop.so")
    with pytest.warns(UserWarning, match="world-writable"):
        load_library(lib, registry=OperatorRegistry())
    pinned = shutil.copy(libs["vop_v1"], shared / "libvop_pinned.so")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a pinned digest proves the bytes: nothing to warn about
        load_library(pinned, sha256=read_image(libs["vop_v1"]).sha256, registry=OperatorRegistry())
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    writable = shutil.copy(libs["vop_v2"], private / "libvop2.so")
    os.chmod(writable, 0o664)
    with pytest.warns(UserWarning, match="writable by others"):
        load_library(writable, registry=OperatorRegistry())
    os.chmod(writable, 0o644)
    safe = shutil.copy(libs["good"], private / "libgood.so")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_library(safe, registry=OperatorRegistry())


def _openers(marker) -> list[int]:
    return [int(line) for line in marker.read_text().split()] if marker.exists() else []


def test_with_process_isolation_only_the_worker_opens_the_module(libs, tmp_path, monkeypatch):
    marker = tmp_path / "opened_by"
    monkeypatch.setenv("PIPELINK_TEST_MARKER", str(marker))
    monkeypatch.setenv(image_mod.PROBE_ENV, "0")
    x = rng.standard_normal(6).astype(np.float32)
    stage = {"name": "marker_op", "library": str(libs["marker"]), "inputs": ["x"], "outputs": ["y"]}
    with pl.load({"pipeline": [{**stage, "isolation": "process"}]}, device="cpu") as pipe:
        np.testing.assert_array_equal(np.asarray(pipe.run(x=x)["y"]), 2 * x)
    opened = _openers(marker)
    assert opened and os.getpid() not in opened  # the worker opened it; this process never did
    assert not image_mod.is_opened(read_image(libs["marker"]).sha256)
    with pl.load({"pipeline": [stage]}, device="cpu") as pipe:  # the same config without isolation
        np.testing.assert_array_equal(np.asarray(pipe.run(x=x)["y"]), 2 * x)
    assert os.getpid() in _openers(marker)


def test_the_worker_opens_the_bytes_its_caller_verified(tmp_path, variants):
    live = tmp_path / "libtb.so"
    live.write_bytes(variants[1])
    verified = read_image(live)
    live.write_bytes(variants[7])
    module = load_image(verified, registry=OperatorRegistry(), probe=False)  # what a worker does
    assert addend_of(module) == 1.0


def test_a_manifest_only_a_function_returns_is_read_in_the_probe(libs, monkeypatch, tmp_path):
    marker = tmp_path / "opened_by"
    monkeypatch.setenv("PIPELINK_TEST_MARKER", str(marker))
    info = inspect_library(libs["fnmanifest"])
    assert info["manifest_source"] == "function" and info["operators"][0]["name"] == "fn_op"
    module = load_library(libs["fnmanifest"], registry=OperatorRegistry(), probe=False, open=False)
    assert [d.key for d in module.operators] == ["fn_op@1.0.0"]
    opened = _openers(marker)
    assert opened and os.getpid() not in opened  # read by running it, in a child process only
    x = rng.standard_normal(4).astype(np.float32)
    (y,) = run_op(module.operator("fn_op"), [x])  # binding a stage here opens it here
    np.testing.assert_array_equal(y, x + 10)
    assert os.getpid() in _openers(marker)


def test_probe_reports_a_library_the_loader_refuses(tmp_path):
    # An ELF that needs a library which does not exist: the loader refuses it, in the child.
    src = tmp_path / "needs.c"
    src.write_text(SOURCE.replace("@ADD@", "2.0f"))
    missing = build_module(src, tmp_path / "libpipelink_missing_dep.so")
    lib = tmp_path / "libneeds.so"
    subprocess.run(
        [shutil.which("cc") or "cc", "-shared", "-fPIC", "-I", str(include_dir()), str(src), "-o", str(lib),
         f"-L{tmp_path}", "-Wl,--no-as-needed", "-lpipelink_missing_dep"],
        check=True,
    )  # fmt: skip
    missing.unlink()
    with pytest.raises(ModuleLoadError, match="refused") as info:
        probe_image(read_image(lib))
    assert "libpipelink_missing_dep.so" in info.value.message
    with pytest.raises(ModuleLoadError, match="refused"):
        load_library(lib, registry=OperatorRegistry(), probe=False)


def test_an_over_long_or_odd_path_is_a_load_error(tmp_path):
    for path in (tmp_path / ("x" * 5000), "lib\0.so", tmp_path):
        with pytest.raises(ModuleLoadError):
            load_library(path, registry=OperatorRegistry())
    fifo = tmp_path / "libfifo.so"
    os.mkfifo(fifo)
    with pytest.raises(ModuleLoadError, match="not a regular file"):
        load_library(fifo, registry=OperatorRegistry())


def test_the_public_load_library_probes_on_request(libs):
    with pytest.raises(pl.ModuleLoadError, match="SIGSEGV"):
        pl.load_library(libs["ctor_segv"], probe=True)


def test_a_constructor_that_never_returns_is_a_load_error_after_the_probe_timeout(libs):
    started = time.perf_counter()
    with pytest.raises(ModuleLoadError, match="did not finish within 1 s"):
        probe_image(read_image(libs["ctor_hang"]), timeout_s=1.0)
    assert time.perf_counter() - started < 30
