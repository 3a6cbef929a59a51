"""The seed's C API from C: every bad argument, the LayerNorm walkthrough, policies, threads, plan fuzzing.

The checks themselves live in c_api_test.c; a failed check prints its line and the runtime's message.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from pipelink.runtime.planfile import FORMAT_VERSION, HEADER_SIZE, MAGIC

from .conftest import host_env

LONG = os.environ.get("PIPELINK_LONG") == "1"


def test_every_api_check_passes(c_api_test, plans):
    run = [c_api_test, "api", plans]
    proc = subprocess.run(run, capture_output=True, text=True, env=host_env(), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " 0 failed" in proc.stdout


@pytest.mark.parametrize("seed", [1, 2])
def test_fuzzed_plans_are_statuses_never_crashes(c_api_test, plans, seed):
    # Run in a child process: a crash is a negative return code here, not the end of the test session.
    n = 5000 if LONG else 150
    for plan in ("ln.plk", "ops.plk", "lnw.plk"):  # lnw.plk: a plan with constants
        proc = subprocess.run(
            [c_api_test, "fuzz", plans / plan, str(n), str(seed)], capture_output=True, text=True, timeout=600
        )
        assert proc.returncode == 0, f"{plan} seed {seed}: rc {proc.returncode}\n{proc.stdout}{proc.stderr}"
        assert "integrity" in proc.stdout


def test_plan_envelope_is_as_documented(plans):
    # docs/plan-format.md: magic, format version, header size, device type, payload size, sha256.
    import hashlib
    import struct

    data = (plans / "ln.plk").read_bytes()
    assert data[:8] == MAGIC
    version, header, device, device_id, size = struct.unpack_from("<IIiiQ", data, 8)
    assert (version, header, device, device_id) == (FORMAT_VERSION, HEADER_SIZE, 1, 0) and FORMAT_VERSION == 5
    assert size == len(data) - HEADER_SIZE
    assert data[32:64] == hashlib.sha256(data[HEADER_SIZE:]).digest()
