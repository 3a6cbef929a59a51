"""Reporting and the `pipelink tune` function: table, export, optional plot, target factory errors."""

from __future__ import annotations

import importlib.util
import io
import json
import sys

import pytest
from rich.console import Console

from pipelink.errors import ErrorCode, HardwareUnsupportedError, InvalidArgumentError, TuningError
from pipelink.tune import TuneCache, defines, export, plot_space, run_tune, summary_line, trials_table, tune
from pipelink.tune import cli as tune_cli
from pipelink.tune.report import MATPLOTLIB_MISSING

try:
    from test_tune_support import OPTIMUM, SPACE, FakeTarget, make_config
except ImportError:  # tests/unit collected as a package
    from .test_tune_support import OPTIMUM, SPACE, FakeTarget, make_config  # type: ignore[no-redef]

HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None


def render(renderable) -> str:
    console = Console(file=io.StringIO(), width=250, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


@pytest.fixture(scope="module")
def result():
    return tune(
        FakeTarget(
            wrong=lambda p: p["block_size"] == 64 and p["vec"] == 4, fail_build=lambda p: p["unroll"] == 8
        ),
        make_config(),
    )


def rows_of(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.lstrip("│┃| ")[:1].isdigit()]


def test_table_has_a_row_per_trial_with_status_time_metric_roofline_and_verified(result):
    text = render(trials_table(result))
    headers = ("block_size", "unroll", "vec", "status", "p95 time (us)", "GB/s", "% roofline", "verified")
    for header in headers:
        assert header in text
    rows = rows_of(text)
    assert len(rows) == len(result.trials)
    best_row = next(r for r in rows if "* best" in r)
    assert f"{result.best.metric:.4g}" in best_row and "yes" in best_row
    assert f"{result.best.roofline_pct:.1f}" in best_row
    wrong_rows = [r for r in rows if " wrong " in r]  # block_size 64, vec 4; unroll 8 fails to build first
    assert len(wrong_rows) == 3 and all(" NO " in r and "CPU reference" in r for r in wrong_rows)
    assert any("inf" in r and "nvrtc" in r for r in rows)
    assert any("default" in r for r in rows)


def test_table_limit_keeps_the_best_and_every_failure(result):
    text = render(trials_table(result, limit=3))
    rows = rows_of(text)
    not_ok = sum(1 for t in result.trials if t.status != "ok")
    assert len(rows) == 3 + not_ok + (0 if result.default.status != "ok" else 1)


def test_summary_line_names_the_best_and_the_gain(result):
    line = summary_line(result)
    assert "block_size=256 unroll=4 vec=2" in line
    assert f"gain x{result.gain:.3f}" in line and "(p95)" in line


def test_defines_are_upper_case_macros():
    assert defines({"block_size": 256, "use_tma": True, "vec_type": "float4", "alpha": 0.5}) == [
        "-DBLOCK_SIZE=256",
        "-DUSE_TMA=1",
        "-DVEC_TYPE=float4",
        "-DALPHA=0.5",
    ]
    with pytest.raises(ValueError, match="C identifier"):
        defines({"block-size": 1})
    with pytest.raises(ValueError, match="cannot be passed"):
        defines({"mode": "two words"})
    with pytest.raises(ValueError, match="not a number"):
        defines({"shape": [1, 2]})


def test_export_json_and_flags(result, tmp_path):
    doc = json.loads(export(result, tmp_path / "out" / "tuned.json").read_text())
    assert doc["params"] == OPTIMUM and doc["operator"] == "scale"
    assert doc["defines"] == ["-DBLOCK_SIZE=256", "-DUNROLL=4", "-DVEC=2"]
    assert doc["key"]["device_name"] == "Fake H200" and doc["gain"] == pytest.approx(result.gain)
    flags = export(result, tmp_path / "tuned.flags").read_text()
    assert flags == "-DBLOCK_SIZE=256 -DUNROLL=4 -DVEC=2\n"


def test_plot_without_matplotlib_says_how_to_get_it(result, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails as if not installed
    with pytest.raises(ModuleNotFoundError, match="pip install matplotlib"):
        plot_space(result, tmp_path / "space.png")
    assert not (tmp_path / "space.png").exists()


@pytest.mark.skipif(not HAS_MATPLOTLIB, reason="matplotlib is not installed")
@pytest.mark.parametrize("names", [("block_size",), ("block_size", "unroll", "vec")])
def test_plot_writes_a_png(tmp_path, names):
    space = {n: SPACE[n] for n in names}
    res = tune(FakeTarget(), make_config(tuning_space=space))
    out = plot_space(res, tmp_path / "space.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_run_tune_end_to_end(tmp_path):
    cfg_path = tmp_path / "tune.json"
    cfg_path.write_text(
        json.dumps(
            {
                "tuning_space": SPACE,
                "benchmark_criteria": "throughput_gbps",
                "warmup_iters": 1,
                "measure_iters": 10,
            }
        )
    )
    out = io.StringIO()
    seen = {}

    def factory(config, device):
        seen.update(config=config, device=device)
        return FakeTarget()

    cache = TuneCache(tmp_path / "cache.json")
    res = run_tune(
        cfg_path,
        operator="scale",
        shapes="x=1048576",
        dtypes="float32",
        device="cuda:0",
        export=tmp_path / "tuned.flags",
        plot=tmp_path / "space.png",
        target_factory=factory,
        console=Console(file=out, width=200, color_system=None),
        cache=cache,
    )
    text = out.getvalue()
    assert res.best.params == OPTIMUM
    assert seen["device"] == "cuda:0" and seen["config"].shapes == {"x": (1048576,)}
    assert "tuning scale for throughput_gbps (p95 of 10 launches after 1 warm-up): all 84 variants" in text
    assert "best: block_size=256 unroll=4 vec=2" in text
    assert cache.lookup(FakeTarget().cache_key_fields()) == OPTIMUM
    assert (tmp_path / "tuned.flags").read_text().startswith("-DBLOCK_SIZE=256")
    if HAS_MATPLOTLIB:
        assert (tmp_path / "space.png").exists()
    else:
        assert MATPLOTLIB_MISSING.split(";")[0] in text.replace("\n", " ")


def test_run_tune_prints_the_table_before_reporting_total_failure(tmp_path):
    out = io.StringIO()
    with pytest.raises(TuningError) as info:
        run_tune(
            make_config().to_dict(),
            target_factory=lambda c, d: FakeTarget(fail_build=lambda p: True),
            console=Console(file=out, width=200, color_system=None),
            cache=TuneCache(tmp_path / "c.json"),
        )
    assert info.value.code is ErrorCode.PIPELINK_ERR_TUNING_FAILED
    assert out.getvalue().count("nvrtc") >= 10


def test_run_tune_rejects_a_factory_that_returns_no_target(tmp_path):
    with pytest.raises(TuningError, match="not a TuneTarget"):
        run_tune(
            make_config().to_dict(),
            target_factory=lambda c, d: object(),
            console=Console(file=io.StringIO()),
            cache=TuneCache(tmp_path / "c.json"),
        )


def test_default_factory_without_a_gpu_backend_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(tune_cli, "_BACKEND_MODULE", "pipelink.backends._no_such_backend")
    with pytest.raises(HardwareUnsupportedError, match=r"pip install 'pipelink\[cuda\]'") as info:
        tune_cli.default_target_factory(make_config(), "auto")
    assert info.value.code is ErrorCode.PIPELINK_ERR_HARDWARE_UNSUPPORTED
    with pytest.raises(InvalidArgumentError, match="--device cpu"):
        tune_cli.default_target_factory(make_config(), "cpu")


def test_default_factory_uses_the_backend_hook(monkeypatch):
    import types

    fake = types.ModuleType("fake_cuda_backend")
    fake.make_tune_target = lambda config, device: ("target", config.operator, device)
    monkeypatch.setitem(sys.modules, "fake_cuda_backend", fake)
    monkeypatch.setattr(tune_cli, "_BACKEND_MODULE", "fake_cuda_backend")
    assert tune_cli.default_target_factory(make_config(), "cuda:1") == ("target", "scale", "cuda:1")
