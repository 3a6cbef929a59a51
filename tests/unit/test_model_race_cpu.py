"""The model race (``python -m benchmarks.models``) without a GPU: the tiny onnx.helper twins raced on the
CPU in process, and the verdict and report code on made-up records. No timed assertions: what is guarded
is that every record is checked before it is timed, reaches the JSON and Markdown, and is judged by the
rule "PipeLink at least as fast as the fastest rival, with a correct output".
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnx")

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import model_report, models  # noqa: E402
from benchmarks.model_zoo import MODELS, onnx_op_counts, tiny_model  # noqa: E402
from pipelink.runtime.executor import VIEW_VARIANT  # noqa: E402

BATCHES = (1, 2)
HAS_ORT = importlib.util.find_spec("onnxruntime") is not None


@pytest.fixture(scope="module")
def tiny_race(tmp_path_factory):
    out = tmp_path_factory.mktemp("race")
    argv = [
        "--device",
        "cpu",
        "--tiny",
        "--trace",
        "--out",
        str(out),
        "--batches",
        ",".join(map(str, BATCHES)),
    ]
    rc = models.main(argv)
    return rc, json.loads((out / "models.json").read_text()), (out / "models.md").read_text()


def test_race_imports_without_torch():
    # If this failed, the CPU smoke run (and CI) would need torch.
    code = "import sys, benchmarks.models; sys.exit(1 if 'torch' in sys.modules else 0)"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={"PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, f"importing the race imported torch or failed:\n{done.stderr}"


def test_every_model_has_a_tiny_twin_with_one_input_and_output():
    for name in MODELS:
        model, feeds = tiny_model(name, batch=3)
        assert len(model.graph.output) == 1, f"{name}: the race reads one output"
        assert len(feeds) == 1 and next(iter(feeds.values())).shape[0] == 3, f"{name}: batch not applied"
        assert sum(onnx_op_counts(model).values()) == len(model.graph.node)


def test_tiny_race_checks_and_times_every_record(tiny_race):
    rc, doc, _ = tiny_race
    assert rc == 0, "a record errored or PipeLink's output was wrong; see models.json"
    records = {(r["model"], r["batch"]): r for r in doc["records"]}
    assert sorted(records) == sorted((m, b) for m in MODELS for b in BATCHES)
    for key, rec in records.items():
        assert rec["status"] == "ok", f"{key}: {rec.get('error')}"
        assert rec["correctness"]["pipelink_eager"]["ok"], f"{key}: PipeLink differs from onnxruntime"
        assert rec["times_s"]["pipelink_eager"] > 0, f"{key}: PipeLink was not timed"
        if HAS_ORT:
            assert rec["times_s"]["onnxruntime"] > 0, f"{key}: onnxruntime was not timed"
        else:
            assert rec["errors"]["onnxruntime"].startswith("skipped"), f"{key}: onnxruntime without it"
        assert rec["errors"]["torch_eager"].startswith("skipped"), f"{key}: a torch column without torch"
        assert rec["verdict"]["status"] == "N/A", f"{key}: the CPU run must not judge the H200 target"
        assert rec["onnx_ops"] and rec["input_shape"][0] == key[1]


def test_tiny_race_profiles_every_stage_and_reports_variants(tiny_race):
    _, doc, _ = tiny_race
    for rec in doc["records"]:
        prof = rec["profile"]
        n_nodes = rec["stages"]["pipeline"]  # the stages of the imported pipeline (fused by default)
        assert rec["stages"]["fused"] and n_nodes <= rec["stages"]["unfused"] <= sum(rec["onnx_ops"].values())
        assert len(prof["stages"]) == n_nodes, f"{rec['model']}: a stage is missing from the profile"
        times = [s["time_s"] for s in prof["stages"]]
        assert times == sorted(times, reverse=True), "the slowest stage must come first"
        assert sum(o["count"] for o in prof["by_operator"]) == n_nodes
        assert sum(n for vs in rec["kernels"].values() for n in vs.values()) == n_nodes
        # Reshapes of intermediates run as views (no kernel): the variant "view".
        assert all(v.startswith("cpu") or v == VIEW_VARIANT for vs in rec["kernels"].values() for v in vs)
        spans = [e for e in json.loads(Path(rec["trace"]).read_text())["traceEvents"] if e["ph"] == "X"]
        assert {e["name"] for e in spans} == {s["stage"] for s in prof["stages"]}, "the trace lacks a stage"


def test_tiny_race_markdown_holds_every_record(tiny_race):
    _, doc, md = tiny_race
    for rec in doc["records"]:
        assert f"| {rec['model']} | {rec['batch']} |" in md
        assert f"{rec['model']} batch {rec['batch']}:" in md, "the breakdown of a record is missing"
        stages = rec["stages"]
        assert f"PipeLink stages: {stages['pipeline']} ({stages['unfused']} without" in md, "no stage count"
    if HAS_ORT:
        assert "onnxruntime has only" in md, "the table must say which onnxruntime provider was timed"


def _rec(**times):
    ok = {"rel_err": 1e-7, "tolerance": 1e-5, "ok": True}
    return {
        "model": "m",
        "batch": 1,
        "status": "ok",
        "times_s": times,
        "correctness": {k: dict(ok) for k in times if k.startswith("pipelink")},
    }


def test_judge_meets_only_at_least_as_fast_as_the_fastest_rival():
    rivals = {"onnxruntime": 5e-3, "torch_eager": 2e-3, "torch_compile": 1e-3}
    assert model_report.judge(_rec(pipelink_graph=1e-3, **rivals), judged=True)["status"] == "MET"
    missed = model_report.judge(_rec(pipelink_eager=3e-3, pipelink_graph=1.1e-3, **rivals), judged=True)
    assert missed["status"] == "MISSED" and "torch.compile" in missed["figure"]
    off_host = model_report.judge(_rec(pipelink_graph=0.5e-3, **rivals), judged=False)
    assert off_host["status"] == "N/A"


def test_judge_uses_the_faster_correct_mode_and_misses_on_a_wrong_output():
    rec = _rec(pipelink_eager=2e-3, pipelink_graph=0.5e-3, torch_eager=1e-3)
    rec["correctness"]["pipelink_graph"]["ok"] = False
    verdict = model_report.judge(rec, judged=True)
    assert verdict["status"] == "MISSED", "a wrong graph output must not win the race"
    assert "PipeLink eager" in verdict["figure"] and "wrong output" in verdict["figure"]
    assert model_report.judge(_rec(pipelink_eager=1e-3), judged=True)["status"] == "N/A"


def test_table_and_markdown_show_failed_and_skipped_records():
    records = [
        {**_rec(pipelink_eager=2e-3, torch_eager=1e-3), "verdict": {"status": "MISSED", "figure": "x"}},
        {"model": "resnet18", "batch": 32, "status": "error", "error": "RuntimeError: boom\nmore"},
        {"model": "espcn", "batch": 32, "status": "skipped", "reason": "time limit of 480 s reached"},
    ]
    rows = model_report.table_rows(records)
    assert all(len(r) == len(model_report.COLUMNS) for r in rows)
    assert rows[0][-2:] == ["0.50x", "MISSED"]
    assert rows[1][2] == "ERROR: RuntimeError: boom" and rows[2][2].startswith("SKIPPED: time limit")
    meta = {"device_name": "d", "commit": "c", "date": "t", "seed": 0, "elapsed_s": 1.0}
    md = model_report.markdown(meta, records)
    assert "| resnet18 | 32 | ERROR: RuntimeError: boom |" in md and "**MISSED** m batch 1" in md


def test_breakdown_names_the_slowest_stage_and_marks_staged_ones():
    rec = _rec(pipelink_eager=1e-3)
    rec["staged"] = ["conv1"]
    rec["skipped_variants"] = {"conv1": ["cuda: no kernel for this dtype"]}
    rec["kernels"] = {"conv2d": {"cpu:numpy": 1}, "relu": {"cuda": 1}}
    stages = [
        {"stage": "conv1", "operator": "conv2d", "variant": "cpu:numpy", "time_s": 9e-4},
        {"stage": "relu1", "operator": "relu", "variant": "cuda", "time_s": 1e-4},
    ]
    rec["profile"] = {
        "basis": "device",
        "total_s": 1e-3,
        "stages": stages,
        "by_operator": [{"operator": "conv2d", "count": 1, "time_s": 9e-4}],
    }
    lines = model_report.breakdown_lines(rec)
    assert "staged on host copies: conv1" in lines[2] and "no kernel for this dtype" in lines[3]
    slowest = next(i for i, line in enumerate(lines) if "slowest" in line) + 1
    assert "conv1" in lines[slowest] and "[staged]" in lines[slowest] and "90.0%" in lines[slowest]


@pytest.mark.parametrize(
    "argv", [["--models", "vgg"], ["--batches", "1,x"], ["--batches", "0"]], ids=["model", "batch", "zero"]
)
def test_bad_arguments_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        models.parse_args(argv)
    assert exc.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_pipelink_failing_leaves_the_rivals_and_fails_the_run(tmp_path, monkeypatch, capsys):
    import pipelink as pl

    def refuse(model, **options):
        raise pl.InvalidArgumentError("the ONNX model cannot be imported: 1 node PipeLink does not support")

    monkeypatch.setattr(pl.onnx, "import_model", refuse)
    rc = models.main(
        ["--device", "cpu", "--tiny", "--out", str(tmp_path), "--models", "espcn", "--batches", "1"]
    )
    (rec,) = json.loads((tmp_path / "models.json").read_text())["records"]
    assert rc == 1, "a model PipeLink cannot run must fail the race"
    assert "PipeLink wrong or failed: espcn/1" in capsys.readouterr().out, "the summary line must name it"
    assert "cannot be imported" in rec["errors"]["pipelink"]
    assert "pipelink_eager" not in rec["times_s"]
    if HAS_ORT:
        assert rec["times_s"]["onnxruntime"] > 0, "the rivals must still be timed"
    assert model_report.judge(rec, judged=True)["status"] == "MISSED"
    assert model_report.judge(rec, judged=False)["status"] == "N/A"
