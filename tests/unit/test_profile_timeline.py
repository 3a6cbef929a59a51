"""``run(profile=True)`` on a device backend, without a GPU: every stage is bracketed by two timing events
that are read only after the run's last launch, so profiling waits for nothing between stages and stages
on several streams still overlap; each stage reports its device time and when it started on the device.

A fake device stands in for CUDA: each stream has its own clock, a kernel advances its stream's clock by
its duration, an event takes its stream's time, and a wait moves a stream's clock up to the event's.
"""

from __future__ import annotations

import numpy as np
import pytest

from pipelink.config import build_config
from pipelink.descriptor import OperatorDescriptor, Port, Variant
from pipelink.graph.linker import link
from pipelink.modules.registry import OperatorRegistry
from pipelink.pipeline import Pipeline
from pipelink.runtime.trace import trace_events
from tests.unit.test_variant_choice import FakeDevice


class _Stream:
    def __init__(self, name: str):
        self.name, self.clock = name, 0.0


class _Event:
    def __init__(self, t: float):
        self.t = t


class ClockedDevice(FakeDevice):
    """test_variant_choice's fake device (host memory dressed as a device) with a clock per stream; logs
    launches and event reads."""

    def __init__(self):
        super().__init__()
        self.main = _Stream("main")
        self.side: list[_Stream] = []

    def default_stream(self):
        return self.main

    def new_stream(self):
        self.side.append(_Stream(f"side{len(self.side)}"))
        return self.side[-1]

    def record_event(self, stream, timing=False):
        return _Event((stream or self.main).clock)

    def wait_event(self, stream, event):
        if event is not None:
            stream.clock = max(stream.clock, event.t)

    def elapsed(self, start, end):
        self.log.append("elapsed")
        return end.t - start.t

    def synchronize(self, stream=None):
        self.log.append("sync")


def _kernel_desc(name: str, seconds: float, backend: ClockedDevice) -> OperatorDescriptor:
    """y = x + 1 on the fake device, taking ``seconds`` of its stream's clock."""

    def bind(ctx):
        def kernel(ins, outs, stream):
            backend.log.append(f"launch {ctx.stage}")
            stream.clock += seconds
            np.add(ins[0].numpy(), 1.0, out=outs[0].numpy())

        return kernel

    return OperatorDescriptor(
        name=name,
        version="1.0.0",
        inputs=(Port("x"),),
        outputs=(Port("y", shape="x"),),
        variants=[Variant(device="cuda", bind=bind, name="cuda:fake")],
    )


def _pipeline(stages: list[dict], durations: dict[str, float]) -> tuple[Pipeline, ClockedDevice]:
    backend = ClockedDevice()
    reg = OperatorRegistry()
    for name, seconds in durations.items():
        reg.register(_kernel_desc(name, seconds, backend))
    doc = {"inputs": {"x": {"shape": [4], "dtype": "float32"}}, "pipeline": stages}
    graph, problems = link(build_config(doc, ".", None), reg, backend.info)
    assert problems == []
    return Pipeline(graph, backend, reg), backend


def test_a_profiled_run_reads_its_events_only_after_the_last_launch():
    stages = [
        {"name": "a_op", "id": "a", "inputs": ["x"], "outputs": ["h"]},
        {"name": "b_op", "id": "b", "inputs": ["h"], "outputs": ["y"]},
    ]
    pipe, backend = _pipeline(stages, {"a_op": 0.003, "b_op": 0.005})
    with pipe:
        out = pipe.run(x=np.zeros(4, np.float32), profile=True)
        np.testing.assert_array_equal(out["y"].numpy(), np.full(4, 2.0, np.float32))
        reads = [k for k, entry in enumerate(backend.log) if entry == "elapsed"]
        launches = [k for k, entry in enumerate(backend.log) if entry.startswith("launch")]
        assert launches and reads and max(launches) < min(reads), backend.log
        a, b = pipe.last_report.stages["a"], pipe.last_report.stages["b"]
        assert a.device_time_s == pytest.approx(0.003) and b.device_time_s == pytest.approx(0.005)
        assert a.device_start_s == pytest.approx(0.0) and b.device_start_s == pytest.approx(0.003)
        assert b.to_dict()["device_start_s"] == pytest.approx(0.003)
        # Without profile=True nothing is timed on the device.
        backend.log.clear()
        pipe.run(x=np.zeros(4, np.float32))
        assert "elapsed" not in backend.log
        assert pipe.last_report.stages["b"].device_start_s is None


def test_stages_on_two_streams_report_the_overlap_they_had():
    # The seed's composition in small: the all_reduce-like stage of chunk 1 on stream 1 runs beside the
    # layer_norm-like stage of chunk 0 on stream 2.
    def on(sid):
        return {"constraints": {"stream_affinity": {"stream_id": sid}}}

    stages = [
        {"name": "comm", "id": "c0", "inputs": ["x"], "outputs": ["r0"], **on(1)},
        {"name": "comm", "id": "c1", "inputs": ["x"], "outputs": ["r1"], **on(1)},
        {"name": "compute", "id": "n0", "inputs": ["r0"], "outputs": ["y0"], **on(2)},
        {"name": "compute", "id": "n1", "inputs": ["r1"], "outputs": ["y1"], **on(2)},
    ]
    pipe, _ = _pipeline(stages, {"comm": 0.004, "compute": 0.006})
    with pipe:
        pipe.run(x=np.zeros(4, np.float32), profile=True)
        st = pipe.last_report.stages
        spans = {k: (st[k].device_start_s, st[k].device_start_s + st[k].device_time_s) for k in st}
        assert spans["c0"] == pytest.approx((0.0, 0.004)) and spans["c1"] == pytest.approx((0.004, 0.008))
        assert spans["n0"] == pytest.approx((0.004, 0.010)) and spans["n1"] == pytest.approx((0.010, 0.016))
        # c1 ran while n0 computed: the trace puts them on two device lanes.
        events = [e for e in trace_events(pipe, pipe.last_report) if e.get("cat") == "kernel"]
        lanes = {e["name"]: e["tid"] for e in events}
        assert lanes["c1"] != lanes["n0"] and len(set(lanes.values())) == 2
        assert {e["name"]: e["ts"] for e in events}["n1"] == pytest.approx(10_000.0)
