"""The benchmark suite's CPU smoke run (``python -m benchmarks --device cpu --tiny``), in process.

No device and no torch needed: PipeLink is timed alone on tiny sizes. What these tests guard: the suite
imports without torch, every case runs and is checked against its reference, and the JSON and Markdown
reports hold every case (a case missing there would silently vanish from the GPU run's report too).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import suite  # noqa: E402


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    rc = suite.main(["--device", "cpu", "--tiny", "--out", str(out), "--seed", "1234"])
    return rc, out


def _expected_cases() -> list[str]:
    return [name for entry in suite.plan_cases("tiny") for name in entry.names]


def test_suite_imports_without_torch():
    # If this failed, `python -m benchmarks` would need torch even for the CPU run.
    code = "import sys, benchmarks.suite; sys.exit(1 if 'torch' in sys.modules else 0)"
    env_path = f"{ROOT / 'src'}:{ROOT}"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env={"PYTHONPATH": env_path}, capture_output=True, text=True
    )
    assert done.returncode == 0, f"importing the suite imported torch or failed:\n{done.stderr}"


def test_tiny_cpu_run_writes_every_case(tiny_run):
    rc, out = tiny_run
    assert rc == 0, "a case errored in the tiny CPU run; see results.json"
    doc = json.loads((out / "results.json").read_text())
    cases = {c["case"]: c for c in doc["cases"]}
    expected = _expected_cases()
    assert sorted(cases) == sorted(expected), "results.json must hold every case exactly once"
    for name, case in cases.items():
        if case["status"] == "skipped":  # only the native build may be skipped (no C compiler)
            assert case["group"] == "native", f"{name} was skipped: {case.get('reason')}"
            continue
        assert case["status"] == "ok", f"{name}: {case.get('error')}"
        assert case["times_s"].get("pipelink_eager", 0) > 0, f"{name} has no PipeLink eager time"
        assert case["correctness"], f"{name} was not checked against a reference"
        for check, result in case["correctness"].items():
            assert result["ok"], f"{name} {check}: rel err {result['rel_err']} > {result['tolerance']}"
        if case["group"] != "native":
            assert "torch_eager" in case["errors"], f"{name}: the run must say why PyTorch was not compared"


def test_json_records_run_metadata_and_targets(tiny_run):
    _, out = tiny_run
    doc = json.loads((out / "results.json").read_text())
    meta = doc["meta"]
    for key in ("commit", "date", "device_name", "seed", "versions"):
        assert meta.get(key), f"results.json meta lacks {key!r}"
    assert meta["seed"] == 1234
    assert doc["ceilings"]["copy_bandwidth_Bps"] > 0 and doc["ceilings"]["mm_flops_per_s"] > 0
    # The targets are H200 figures: a CPU run reports its measurements but judges none of them.
    assert {t["status"] for t in doc["targets"]} == {"N/A"}
    assert all(t["figure"].startswith("not judged on cpu") for t in doc["targets"])
    assert any("chain" in t["target"] for t in doc["targets"]), "the per-stage overhead target is missing"
    # Every case with timings also has a roofline time computed from the ceilings of this run.
    for case in doc["cases"]:
        if case["status"] == "ok" and case["group"] not in ("chain", "native"):
            assert case["roofline_s"] > 0, f"{case['case']} has no roofline"


def test_markdown_has_a_row_per_case_and_png_or_note(tiny_run):
    _, out = tiny_run
    md = (out / "results.md").read_text()
    assert "| case | PipeLink eager | PipeLink graph | PyTorch eager | torch.compile |" in md
    for name in _expected_cases():
        assert f"| {name}" in md, f"results.md has no row for {name}"
    meta = json.loads((out / "results.json").read_text())["meta"]
    assert (out / "results.png").exists() or any("matplotlib" in n for n in meta["notes"]), (
        "without results.png the report must say why"
    )


def test_cases_selects_by_group_and_rejects_unknown_names(tmp_path):
    rc = suite.main(["--device", "cpu", "--tiny", "--out", str(tmp_path), "--cases", "chain,gelu"])
    assert rc == 0
    names = {c["case"] for c in json.loads((tmp_path / "results.json").read_text())["cases"]}
    assert names == {"chain_20x64_fp32", "gelu_16KiB_fp32", "gelu_16KiB_bf16"}
    with pytest.raises(SystemExit, match="unknown case 'no_such_case'"):
        suite.main(["--device", "cpu", "--tiny", "--out", str(tmp_path), "--cases", "no_such_case"])
