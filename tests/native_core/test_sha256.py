"""The core's SHA-256 (sha256.c) equals hashlib's: the portable code and, where the processor has the SHA
extensions, the SHA-NI path the default build picks (plans with constants hash their weights at load)."""

from __future__ import annotations

import ctypes
import hashlib
import subprocess

import numpy as np
import pytest

from pipelink.native.build import SOURCE_DIR, find_compiler

LENGTHS = [*range(0, 200), 4095, 4096, 4097, (1 << 20) + 13]


@pytest.mark.parametrize("variant", ["default", "portable"])
def test_sha256_matches_hashlib(tmp_path, variant):
    cc = find_compiler()
    if cc is None:
        pytest.skip("no C compiler")
    lib_path = tmp_path / f"libsha_{variant}.so"
    flags = ["-DPLK_SHA256_PORTABLE"] if variant == "portable" else []
    src = str(SOURCE_DIR / "sha256.c")
    cmd = [*cc, "-std=c11", "-O2", "-shared", "-fPIC", *flags, src, "-o", str(lib_path), "-lpthread"]
    subprocess.run(cmd, check=True)
    lib = ctypes.CDLL(str(lib_path))
    lib.plk_sha256.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p]
    rng = np.random.default_rng(17)
    out = ctypes.create_string_buffer(32)
    for n in LENGTHS:
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        lib.plk_sha256(data, n, out)
        assert out.raw == hashlib.sha256(data).digest(), f"{variant}: {n} bytes"
