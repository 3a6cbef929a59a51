"""Mutation fuzz of the native-module trust boundary: random byte edits of a valid module file.

Every mutated file goes through ``load_library`` (probing on) and ``inspect_library`` in a child process
(spawned per batch); each must load or raise a PipeLinkError, and no child may die. CI runs a few hundred;
``PIPELINK_LONG=1`` runs the issue's 10,000.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context
from pathlib import Path

import pytest

from pipelink.modules.build import build_module

from .module_fuzz import interesting_ranges, mutate, run_batch

LONG = os.environ.get("PIPELINK_LONG") == "1"
CASES = 10_000 if LONG else 300
BATCH = 50
SEED = 20261201
GOOD = Path(__file__).resolve().parents[1] / "native" / "modules" / "good.c"


def test_mutations_are_deterministic_and_change_the_file(tmp_path):
    data = build_module(GOOD, tmp_path / "libgood.so").read_bytes()
    ranges = interesting_ranges(data)
    first = [mutate(data, ranges, SEED, i) for i in range(20)]
    assert first == [mutate(data, ranges, SEED, i) for i in range(20)]
    assert all(m != data and len(m) == len(data) for m in first)


def test_random_mutations_of_a_module_end_in_a_load_or_a_pipelink_error(tmp_path):
    data = build_module(GOOD, tmp_path / "libgood.so").read_bytes()
    work = tmp_path / "mutants"
    work.mkdir()
    outcomes: Counter = Counter()
    failures: list[str] = []
    started = time.perf_counter()
    pool = ProcessPoolExecutor(max_workers=2, mp_context=get_context("spawn"), max_tasks_per_child=1)
    with pool:
        jobs = {
            pool.submit(run_batch, data, SEED, start, min(BATCH, CASES - start), str(work)): start
            for start in range(0, CASES, BATCH)
        }
        for job, start in jobs.items():
            try:
                counts, failed = job.result()
            except BrokenProcessPool:
                pytest.fail(f"a fuzz child died on mutations {start}..{start + BATCH - 1}")
            outcomes += counts
            failures += failed
    elapsed = time.perf_counter() - started
    print(f"\nmodule mutation fuzz: {CASES} mutations in {elapsed:.1f} s: {dict(sorted(outcomes.items()))}")
    assert not failures, f"{len(failures)} non-PipeLinkError exceptions; first:\n{failures[0]}"
    assert sum(outcomes.values()) == 2 * CASES
    # The fuzz reaches both sides: some mutants still load, many are refused.
    assert outcomes["load: ok"] > 0 and outcomes["load: PIPELINK_ERR_MODULE_LOAD_FAILED"] > 0
