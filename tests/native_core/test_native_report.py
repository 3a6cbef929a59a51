"""What a run of the native core reports: ``last_report.stages`` lists every stage of its plan (status "ok",
the variant it ran, no time: the core does not time stages), built only when read; and ``pipelink run``'s
table says the core made the run and how to get per-stage times (``--profile``)."""

from __future__ import annotations

import json
import re

import numpy as np

import pipelink as pl
import pipelink.pipeline as pipeline_module
from pipelink import cli
from pipelink.cli import main
from pipelink.runtime.trace import trace_events

from .conftest import SHAPE


def _chain(plans) -> dict:
    """x -double-> h -halve-> y -offset-> z: three stages of the test module, all run by the core."""
    lib = str(plans / "lib" / "libcore_ops.so")
    return {
        "name": "chain3",
        "inputs": {"x": {"shape": SHAPE, "dtype": "float32"}},
        "outputs": ["z"],
        "pipeline": [
            {"name": "core_scale", "id": "double", "library": lib, "inputs": ["x"], "outputs": ["h"],
             "attrs": {"alpha": 2.0}},
            {"name": "core_scale", "id": "halve", "library": lib, "inputs": ["h"], "outputs": ["y"],
             "attrs": {"alpha": 0.5}},
            {"name": "core_offset", "id": "shift", "library": lib, "inputs": ["y"], "outputs": ["z"],
             "attrs": {"offset": 1.0}},
        ],
    }  # fmt: skip


def _x(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(SHAPE).astype(np.float32)


def test_a_native_run_reports_every_stage_with_its_variant(runtime_lib, plans):
    with pl.load(_chain(plans), device="cpu", native=False) as ref:
        ref.run(x=_x(0))
        want = ref.last_report.stages
    with pl.load(_chain(plans), device="cpu") as pipe:
        pipe.run(x=_x(1))
        report = pipe.last_report
        assert report.executor == "native" and report.executor_reason is None
        assert list(report.stages) == ["double", "halve", "shift"]  # every stage, in plan order
        for sid, stage in report.stages.items():
            assert stage.stage == sid and stage.status == "ok" and stage.error is None
            assert stage.operator == want[sid].operator
            # The same native module the Python executor calls: the same variant, named the same way.
            assert stage.variant == want[sid].variant and stage.variant
            assert stage.time_s is None and stage.device_time_s is None  # the core does not time stages
        assert report.stages["shift"].operator == "core_offset"
        assert report.ok and report.degraded == [] and report.total_time_s > 0
        assert [s["stage"] for s in report.to_dict()["stages"]] == ["double", "halve", "shift"]
        # A trace of it: one span for the run (no per-stage times to lay out), never a crash.
        events = [e for e in trace_events(pipe, report) if e["ph"] == "X"]
        assert len(events) == 1 and events[0]["cat"] == "run"
        assert events[0]["args"]["stages"] == ["double", "halve", "shift"]
        # profile=True goes through the Python executor and times each stage.
        pipe.run(x=_x(2), profile=True)
        timed = pipe.last_report
        assert timed.executor == "python" and all(s.time_s >= 0 for s in timed.stages.values())
        assert list(timed.stages) == ["double", "halve", "shift"]


def test_native_reports_are_built_when_read_not_on_the_hot_path(runtime_lib, plans, monkeypatch):
    built = []
    real = pipeline_module.native_report

    def counted(*args, **kwargs):
        built.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline_module, "native_report", counted)
    with pl.load(_chain(plans), device="cpu") as pipe:
        for seed in range(5):
            pipe.run(x=_x(seed))
        assert built == [] and pipe._last_report.__class__ is tuple  # runs store (signature, seconds)
        first = pipe.last_report
        assert len(built) == 1 and pipe.last_report is first  # built once, then kept
        assert list(first.stages) == ["double", "halve", "shift"]
    # Read after close: still the report of the run it was.
    assert list(first.stages) == ["double", "halve", "shift"]


def test_pipelink_run_says_the_core_made_the_run_and_how_to_time_stages(
    runtime_lib, plans, tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr(cli.console, "width", 120)  # rows on one line each, whatever the terminal
    config = tmp_path / "chain3.json"
    config.write_text(json.dumps(_chain(plans)))
    assert main(["run", str(config), "--random", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    flat = " ".join(out.split())
    assert "chain3 on cpu, native core" in flat
    for sid, op in (("double", "core_scale"), ("halve", "core_scale"), ("shift", "core_offset")):
        row = next(line for line in out.splitlines() if f" {sid} " in line)
        cells = [c.strip() for c in re.split(r"[│┃]", row) if c.strip()]
        assert cells[0] == sid and cells[1] == op and "ok" in cells[3], row
        assert cells[4] == "-" and cells[5] == "-", row  # no host or device time: not measured
    assert "run by the native core" in flat and "does not time stages" in flat
    assert "--profile runs the Python executor, which times each stage" in flat
    assert re.search(r"native core: \d+(\.\d)? (B|KiB|MiB) of arenas in 1 execution context", flat)

    # --profile: the Python executor, every stage timed, no native note.
    assert main(["run", str(config), "--random", "--device", "cpu", "--profile"]) == 0
    out = capsys.readouterr().out
    flat = " ".join(out.split())
    assert "native core" not in flat
    row = next(line for line in out.splitlines() if " shift " in line)
    cells = [c.strip() for c in re.split(r"[│┃]", row) if c.strip()]
    assert re.fullmatch(r"\d+\.\d{3}", cells[4]), row
