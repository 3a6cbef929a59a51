"""End-to-end pipelines on the CPU backend, compared with an independent NumPy reference."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import pipelink as pl
from tests.conftest import assert_close, run_in_threads

ROOT = Path(__file__).resolve().parents[2]
MLP = ROOT / "examples" / "transformer_mlp" / "pipeline.json"


def erf(x):
    return np.vectorize(math.erf)(x)


def mlp_reference(x, gamma, beta, w1, b1, w2, b2, eps=1e-5):
    x = x.astype(np.float64)
    mu = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    h = (x - mu) / np.sqrt(var + eps) * gamma + beta
    u = h @ w1 + b1
    a = 0.5 * u * (1 + erf(u / np.sqrt(2)))
    return x + (a @ w2 + b2)


def mlp_inputs(rng, t=37):
    return {
        "x": rng.standard_normal((t, 256)).astype(np.float32),
        "gamma": rng.standard_normal(256).astype(np.float32),
        "beta": rng.standard_normal(256).astype(np.float32),
        "w1": (rng.standard_normal((256, 1024)) / 16).astype(np.float32),
        "b1": rng.standard_normal(1024).astype(np.float32),
        "w2": (rng.standard_normal((1024, 256)) / 32).astype(np.float32),
        "b2": rng.standard_normal(256).astype(np.float32),
    }


def test_main_example_matches_reference():
    rng = np.random.default_rng(7)
    feed = mlp_inputs(rng)
    with pl.load(MLP, device="cpu") as pipe:
        out = pipe.run(feed)
        assert set(out) == {"y"} and out["y"].shape == (37, 256)
        assert_close(np.asarray(out["y"]), mlp_reference(**feed), "float32", "mlp")
        report = pipe.last_report
        assert [s.status for s in report.stages.values()] == ["ok"] * 5
        assert report.new_signature
        pipe.run(mlp_inputs(rng))
        assert not pipe.last_report.new_signature, "a second run of the same signature must reuse the plan"


def test_returned_outputs_are_never_overwritten():
    rng = np.random.default_rng(8)
    pipe = pl.load(MLP, device="cpu")
    first_in, second_in = mlp_inputs(rng), mlp_inputs(rng)
    first = pipe.run(first_in)["y"]
    kept = np.array(first)
    second = pipe.run(second_in)["y"]
    np.testing.assert_array_equal(np.asarray(first), kept)
    assert first.ptr != second.ptr


def chain(n, shape=None, dtype="float32"):
    doc = {
        "pipeline": [
            {
                "name": "scale",
                "id": f"s{i}",
                "inputs": [f"t{i}"],
                "outputs": [f"t{i + 1}"],
                "attrs": {"factor": 1.5},
            }
            for i in range(n)
        ]
    }
    if shape is not None:
        doc["inputs"] = {"t0": {"shape": list(shape), "dtype": dtype}}
    return doc


def test_chain_of_n_stages_plans_two_buffers():
    # Unchecked: checked mode (PIPELINK_CHECKED=1) adds guard bytes after every buffer.
    pipe = pl.load(chain(10, (64, 64)), device="cpu", checked=False)
    plan = pipe.memory_plan  # declared inputs: planned at load, before any run
    size = 64 * 64 * 4
    assert plan.naive_bytes == 9 * size and plan.peak_bytes == 2 * size
    x = np.random.default_rng(1).standard_normal((64, 64)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(pipe.run(t0=x)["t10"]), x * 1.5**10, rtol=1e-5)


def test_branch_and_broadcast_merge():
    doc = {
        "pipeline": [
            {"name": "relu", "id": "left", "inputs": ["x"], "outputs": ["l"]},
            {"name": "silu", "id": "right", "inputs": ["x"], "outputs": ["r"]},
            {"name": "mul", "id": "merge", "inputs": ["l", "r"], "outputs": ["m"]},
            {"name": "add", "id": "bias", "inputs": ["m", "b"], "outputs": ["y"]},
        ]
    }
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 1, 3)).astype(np.float32)
    b = rng.standard_normal((5, 3)).astype(np.float32)
    y = pl.load(doc, device="cpu").run(x=x, b=b)["y"]
    x64 = x.astype(np.float64)
    ref = np.maximum(x64, 0) * (x64 / (1 + np.exp(-x64))) + b
    assert y.shape == (4, 5, 3)
    assert_close(np.asarray(y), ref, "float32", "branch+merge")


def test_non_broadcastable_merge_is_a_shape_mismatch_at_run():
    pipe = pl.load(
        {"pipeline": [{"name": "add", "id": "merge", "inputs": ["a", "b"], "outputs": ["c"]}]}, device="cpu"
    )
    with pytest.raises(pl.ShapeMismatchError) as e:
        pipe.run(a=np.zeros((4, 3), np.float32), b=np.zeros((5,), np.float32))
    assert e.value.code == pl.ErrorCode.PIPELINK_ERR_SHAPE_MISMATCH
    assert "merge" in str(e.value) and "broadcast" in str(e.value)


def test_declared_shape_mismatch_is_reported_at_load():
    doc = {
        "inputs": {"a": {"shape": [8, 16], "dtype": "float32"}, "w": {"shape": [12, 4], "dtype": "float32"}},
        "pipeline": [{"name": "gemm", "id": "proj", "inputs": ["a", "w"], "outputs": ["c"]}],
    }
    with pytest.raises(pl.ShapeMismatchError) as e:
        pl.load(doc, device="cpu")
    (problem,) = e.value.errors
    assert problem.path == "/pipeline/0/inputs/1"
    assert "proj" in problem.message and "K" in problem.message
    assert "16" in problem.message and "12" in problem.message


def test_undeclared_shape_mismatch_is_reported_at_first_run():
    pipe = pl.load(
        {"pipeline": [{"name": "gemm", "id": "proj", "inputs": ["a", "w"], "outputs": ["c"]}]}, device="cpu"
    )
    with pytest.raises(pl.ShapeMismatchError) as e:
        pipe.run(a=np.ones((8, 16), np.float32), w=np.ones((12, 4), np.float32))
    assert (e.value.stage, e.value.symbol, e.value.expected, e.value.got) == ("proj", "K", 16, 12)


def test_dtype_mismatch_between_ports():
    pipe = pl.load({"pipeline": [{"name": "add", "inputs": ["a", "b"], "outputs": ["c"]}]}, device="cpu")
    with pytest.raises(pl.DTypeMismatchError):
        pipe.run(a=np.ones(3, np.float32), b=np.ones(3, np.float16))


@pytest.mark.parametrize(
    "feed, fragment",
    [
        ({}, "missing input 'x'"),
        ({"x": np.ones((2, 256), np.float32), "gama": 1}, "did you mean 'gamma'"),
    ],
)
def test_missing_and_extra_inputs(feed, fragment):
    pipe = pl.load(MLP, device="cpu")
    full = mlp_inputs(np.random.default_rng(0))
    if feed:
        full.update(feed)
    else:
        del full["x"]
    with pytest.raises(pl.InvalidArgumentError, match=fragment) as e:
        pipe.run(full)
    assert e.value.code == pl.ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT and e.value.input


def test_wrong_dtype_and_shape_of_declared_input():
    pipe = pl.load(MLP, device="cpu")
    feed = mlp_inputs(np.random.default_rng(0))
    with pytest.raises(pl.InvalidArgumentError, match="'gamma' has dtype float64") as e:
        pipe.run({**feed, "gamma": feed["gamma"].astype(np.float64)})
    assert e.value.input == "gamma"
    with pytest.raises(pl.InvalidArgumentError, match=r"'x' has shape \[37, 128\]"):
        pipe.run({**feed, "x": feed["x"][:, :128].copy()})


def test_strided_input_gets_a_relayout_step():
    pipe = pl.load({"pipeline": [{"name": "softmax", "inputs": ["x"], "outputs": ["y"]}]}, device="cpu")
    base = np.random.default_rng(4).standard_normal((6, 20)).astype(np.float32)
    view = base[:, ::2]
    y = pipe.run(x=view)["y"]
    ref = np.exp(view - view.max(-1, keepdims=True))
    assert_close(np.asarray(y), ref / ref.sum(-1, keepdims=True), "float32")
    assert "x.contiguous" in pipe.memory_plan.buffers


def test_python_operator_decorator_and_attrs():
    reg_name = "test_scale_v1"

    @pl.operator(
        reg_name, version="1.2.0", inputs=["x"], outputs=["y"], shapes={"y": "x"}, attrs={"factor": 2.0}
    )
    def scale(x, y, *, factor, stream=None):
        np.multiply(x, factor, out=y)

    assert pl.get_operator_info(reg_name).version.minor == 2
    doc = {
        "pipeline": [
            {"name": reg_name, "version": "^1.1", "inputs": ["x"], "outputs": ["y"], "attrs": {"factor": 3}}
        ]
    }
    x = np.random.default_rng(5).standard_normal(9).astype(np.float32)
    np.testing.assert_allclose(np.asarray(pl.load(doc, device="cpu").run(x=x)["y"]), 3 * x, rtol=1e-6)
    with pytest.raises(pl.VersionMismatchError, match="2"):
        pl.load({**doc, "pipeline": [{**doc["pipeline"][0], "version": ">=2"}]}, device="cpu")
    with pytest.raises(pl.InvalidArgumentError, match="did you mean 'factor'"):
        pl.load({"pipeline": [{**doc["pipeline"][0], "attrs": {"facter": 1.0}}]}, device="cpu")


def test_concurrent_runs_from_eight_threads():
    pipe = pl.load(MLP, device="cpu")
    rng = np.random.default_rng(11)
    feeds = [mlp_inputs(rng, t=5 + i) for i in range(8)]
    refs = [mlp_reference(**f) for f in feeds]

    def worker(i):
        for _ in range(5):
            assert_close(np.asarray(pipe.run(feeds[i])["y"]), refs[i], "float32", f"thread {i}")

    run_in_threads(worker, 8)


def test_seed_layernorm_config_runs(tmp_path):
    cfg = ROOT / "examples" / "seed" / "layernorm_config.json"
    assert pl.validate(cfg) == []
    rng = np.random.default_rng(12)
    x = rng.standard_normal((3, 1024)).astype(np.float32)
    g, b = rng.standard_normal(1024).astype(np.float32), rng.standard_normal(1024).astype(np.float32)
    out = pl.load(cfg, device="cpu").run(input_tensor=x, gamma_tensor=g, beta_tensor=b, eps_scalar=1e-5)
    x64 = x.astype(np.float64)
    mu, var = x64.mean(1), x64.var(1)
    assert_close(
        np.asarray(out["norm_output"]), (x64 - mu[:, None]) / np.sqrt(var[:, None] + 1e-5) * g + b, "float32"
    )
    assert_close(np.asarray(out["mean_tensor"]), mu, "float32")
    assert_close(np.asarray(out["rstd_tensor"]), 1 / np.sqrt(var + 1e-5), "float32")


def test_seed_scheduling_config_validates_without_its_libraries():
    cfg = ROOT / "examples" / "seed" / "scheduling_config.json"
    assert pl.validate(cfg, libraries=False) == []
    problems = pl.validate(cfg)
    assert [p.path for p in problems] == ["/pipeline/0/library", "/pipeline/1/library"]
    assert all(p.code == pl.ErrorCode.PIPELINK_ERR_MODULE_LOAD_FAILED for p in problems)


def test_config_file_round_trip(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(chain(3, (4,))))
    out = pl.load(path, device="cpu").run(t0=np.ones(4, np.float32))
    np.testing.assert_allclose(np.asarray(out["t3"]), np.full(4, 1.5**3), rtol=1e-6)


def test_reused_memory_across_streams_is_ordered_by_events():
    # Two branches on streams 7 and 0; the arena reuses a finished branch's buffers for the other
    # branch's tensors. Every such reuse across streams must wait for the earlier buffer's readers.
    doc = {
        "inputs": {"x": {"shape": [256], "dtype": "float32"}},
        "pipeline": [
            {
                "name": "relu",
                "id": "left1",
                "inputs": ["x"],
                "outputs": ["a"],
                "constraints": {"stream_affinity": {"stream_id": 7}},
            },
            {"name": "relu", "id": "left2", "inputs": ["a"], "outputs": ["b"]},
            {
                "name": "silu",
                "id": "right1",
                "inputs": ["x"],
                "outputs": ["c"],
                "constraints": {"stream_affinity": {"stream_id": 0}},
            },
            {"name": "silu", "id": "right2", "inputs": ["c"], "outputs": ["d"]},
            {"name": "gelu", "id": "right3", "inputs": ["d"], "outputs": ["e"]},
            {"name": "add", "id": "join", "inputs": ["b", "e"], "outputs": ["y"]},
        ],
    }
    pipe = pl.load(doc, device="cpu")
    plan = pipe._last_plan  # noqa: SLF001 - inspecting the compiled plan
    steps = plan.steps
    checked = 0
    for a in plan.memory.buffers.values():
        for b in plan.memory.buffers.values():
            if a.last < b.first and a.overlaps_in_space(b):
                writer = steps[b.first]
                readers = [steps.index(s) for s in steps if a.name in s.in_names or a.name in s.out_names]
                for r in readers:
                    if steps[r].stream_id != writer.stream_id:
                        checked += 1
                        assert r in writer.waits, (
                            f"{writer.stage.id} reuses {a.name} without waiting for step {r}"
                        )
    assert checked, "the plan must contain a reuse across streams for this test to mean anything"
    x = np.random.default_rng(1).standard_normal(256).astype(np.float32)
    out = np.asarray(pipe.run(x=x)["y"]).astype(np.float64)
    x64 = x.astype(np.float64)
    silu = lambda v: v / (1 + np.exp(-v))  # noqa: E731
    d = silu(silu(x64))
    e = 0.5 * d * (1 + np.vectorize(math.erf)(d / np.sqrt(2)))
    np.testing.assert_allclose(out, np.maximum(x64, 0) + e, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "policy, compute",
    [
        ("fp16", "float16"),
        ("bf16", "bfloat16"),
        ("fp16_if_supported_else_fp32", "float32"),
        ("fp32", "float32"),
    ],
)
def test_precision_policy_inserts_casts(policy, compute):
    doc = {
        "inputs": {"x": {"shape": [16, 64], "dtype": "float32"}, "g": {"shape": [64], "dtype": "float32"}},
        "outputs": ["y"],
        "pipeline": [
            {
                "name": "layer_norm",
                "id": "ln",
                "inputs": ["x", "g"],
                "outputs": ["h"],
                "constraints": {"precision_policy": policy},
            },
            {"name": "relu", "inputs": ["h"], "outputs": ["y"]},
        ],
    }
    pipe = pl.load(doc, device="cpu")
    ids = pipe.stages
    tag = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}[compute]
    assert ids == [f"ln.to_{tag}.0", f"ln.to_{tag}.1", "ln", f"ln.from_{tag}.0", "relu"], ids
    assert pipe.graph.tensors[f"h@ln:{tag}"].dtype == compute  # the stage computes in the policy's dtype
    assert pipe.graph.tensors["h"].dtype == "float32"  # and its output is cast back
    rng = np.random.default_rng(2)
    x, g = rng.standard_normal((16, 64)).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    y = np.asarray(pipe.run(x=x, g=g)["y"])
    assert y.dtype == np.float32
    x64 = x.astype(np.float64)
    ref = np.maximum((x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + 1e-5) * g, 0)
    assert_close(y, ref, "float32" if compute == "float32" else compute, policy)
    if compute != "float32":
        assert np.abs(y - ref).max() > 1e-6, "a half-precision stage cannot match float32 to the last bit"


def test_explicit_half_policy_is_refused_on_a_gpu_without_it():
    from pipelink.graph.precision import resolve_precision
    from pipelink.hardware import HardwareInfo

    old_gpu = HardwareInfo(kind="cuda", name="old GPU", compute_capability=(7, 5), features={"fp16": 1})
    assert resolve_precision("bf16_if_supported_else_fp32", old_gpu)[0] == "float32"
    assert resolve_precision("fp16_if_supported_else_fp32", old_gpu)[0] == "float16"
    dtype, _, why = resolve_precision("bf16", old_gpu)
    assert why and "bf16" in why and "old GPU" in why


def test_async_preload_marks_the_stages_that_wait_for_the_copy_stream():
    doc = {
        "pipeline": [
            {"name": "relu", "id": "a", "inputs": ["x"], "outputs": ["h"]},
            {
                "name": "add",
                "id": "b",
                "inputs": ["h", "late"],
                "outputs": ["y"],
                "constraints": {"stream_affinity": "async_preload"},
            },
        ]
    }
    pipe = pl.load(doc, device="cpu")
    x, late = np.ones(8, np.float32), np.full(8, 2.0, np.float32)
    np.testing.assert_array_equal(np.asarray(pipe.run(x=x, late=late)["y"]), x + late)
    plan = pipe._last_plan  # noqa: SLF001
    assert [s.reads_preloaded for s in plan.steps] == [False, True]  # 'x' is not preloaded; 'late' is


def test_a_builtin_stage_without_a_tuned_entry_leaves_its_launch_to_the_kernels_plan(monkeypatch):
    # The defaults handed over as if tuned would stop a plan's shape-aware choice (ops/kernel.py:
    # spread_small); a tuned entry is applied as it is.
    import pipelink.pipeline as pipeline_module

    answer = {"source": "default"}

    def lookup(desc, info, shapes, dtypes):
        return {"block": 512, "unroll": 4}, answer["source"], "no tuned entry in CACHE"

    monkeypatch.setattr(pipeline_module, "lookup_tuned", lookup)
    doc = {
        "inputs": {"x": {"shape": [4], "dtype": "float32"}},
        "pipeline": [{"name": "relu", "id": "r", "inputs": ["x"], "outputs": ["y"]}],
    }
    with pl.load(doc, device="cpu") as pipe:
        signature = pipe._declared_signature()
        assert pipe._tuned_params(signature) == {}
        used = pipe.load_report.tuned["r"]
        assert used["source"] == "default" and used["params"] == {}
        assert "the kernel's defaults for the shape" in used["reason"]
        answer["source"] = "tuned"
        assert pipe._tuned_params(signature) == {"r": {"block": 512, "unroll": 4}}
