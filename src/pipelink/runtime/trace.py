"""Chrome/Perfetto trace of one run: a host span per stage, and a device span where it was profiled, at
the time the device ran it (stages that overlapped on several streams go on lanes of their own)."""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["trace_events", "write_trace"]


def trace_events(pipe, report) -> list[dict]:
    """Trace events (``ph: "X"`` complete events, microseconds) laid out in execution order."""
    events = [
        {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": f"pipelink {pipe.name}"}},
        {"ph": "M", "pid": 1, "tid": 1, "name": "thread_name", "args": {"name": "host"}},
        {"ph": "M", "pid": 1, "tid": 2, "name": "thread_name", "args": {"name": f"device {pipe.device}"}},
    ]
    host_t, dev_t = 0.0, 0.0
    lanes: list[float] = []  # profiled device spans: the end of the last span on each lane
    untimed = [s.stage for s in report.stages.values() if s.time_s is None]
    if untimed:  # a run of the native core: it times the run, not its stages
        events.append(
            {
                "ph": "X",
                "pid": 1,
                "tid": 1,
                "name": f"{pipe.name} (native core)",
                "cat": "run",
                "ts": 0.0,
                "dur": report.total_time_s * 1e6,
                "args": {"stages": untimed, "note": "the core does not time stages: run with profile=True"},
            }
        )
    for s in report.stages.values():
        if s.time_s is None:
            continue
        args = {"operator": s.operator, "variant": s.variant, "status": s.status}
        if s.error is not None:
            args["error"] = s.error.message
        events.append(
            {
                "ph": "X",
                "pid": 1,
                "tid": 1,
                "name": s.stage,
                "cat": "stage",
                "ts": host_t,
                "dur": s.time_s * 1e6,
                "args": args,
            }
        )
        host_t += s.time_s * 1e6
        if s.device_time_s is None:
            continue
        if s.device_start_s is not None:  # where the device ran it (a lane per overlapping stage)
            ts = s.device_start_s * 1e6
            lane = next((k for k, end in enumerate(lanes) if end <= ts), len(lanes))
            lanes[lane : lane + 1] = [ts + s.device_time_s * 1e6]
        else:
            ts, lane = max(dev_t, host_t - s.time_s * 1e6), 0
            dev_t = ts + s.device_time_s * 1e6
        events.append(
            {
                "ph": "X",
                "pid": 1,
                "tid": 2 + lane,
                "name": s.stage,
                "cat": "kernel",
                "ts": ts,
                "dur": s.device_time_s * 1e6,
                "args": {"operator": s.operator},
            }
        )
    for lane in range(1, len(lanes)):
        events.append(
            {
                "ph": "M",
                "pid": 1,
                "tid": 2 + lane,
                "name": "thread_name",
                "args": {"name": f"device, lane {lane + 1}"},
            }
        )
    return events


def write_trace(path: str | Path, pipe, report) -> None:
    """Write the trace as JSON (open it in chrome://tracing or ui.perfetto.dev)."""
    Path(path).write_text(
        json.dumps({"traceEvents": trace_events(pipe, report), "displayTimeUnit": "ms"}, indent=1)
    )
