"""The CUDA backend under the runtime: graph replay, concurrent streams, pool stability, DLPack with
PyTorch, CUDA error reporting, the kernel cache."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import pipelink as pl
from pipelink.backends import get_backend
from pipelink.errors import CUDAError

pytestmark = pytest.mark.gpu


def _chain() -> dict:
    return {
        "name": "chain",
        "outputs": ["y"],
        "pipeline": [
            {"name": "layer_norm", "id": "ln", "inputs": ["x", "gamma", "beta"], "outputs": ["h"]},
            {"name": "gelu", "id": "act", "inputs": ["h"], "outputs": ["a"]},
            {"name": "scale", "id": "sc", "inputs": ["a"], "outputs": ["y"], "attrs": {"factor": 0.5}},
        ],
    }


def _feed(rng, rows=67, cols=515):
    return {
        "x": rng.standard_normal((rows, cols)).astype(np.float32),
        "gamma": rng.standard_normal(cols).astype(np.float32),
        "beta": rng.standard_normal(cols).astype(np.float32),
    }


def test_graph_replay_equals_eager_exactly():
    rng = np.random.default_rng(1)
    with (
        pl.load(_chain(), device="cuda") as eager,
        pl.load(_chain(), device="cuda", cuda_graph=True) as graphed,
    ):
        for _ in range(3):  # the first run captures, the next ones replay
            feed = _feed(rng)
            want = eager.run(feed)["y"].numpy()
            got = graphed.run(feed)["y"].numpy()
            np.testing.assert_array_equal(
                got, want, err_msg="a graph replay must equal the eager run bit for bit"
            )


def test_two_branches_on_new_streams_1000_runs():
    cfg = {
        "name": "branches",
        "outputs": ["y"],
        "pipeline": [
            {
                "name": "relu",
                "id": "left",
                "inputs": ["x"],
                "outputs": ["l"],
                "constraints": {"stream_affinity": "new"},
            },
            {
                "name": "scale",
                "id": "right",
                "inputs": ["x"],
                "outputs": ["r"],
                "attrs": {"factor": 3.0},
                "constraints": {"stream_affinity": "new"},
            },
            {
                "name": "add",
                "id": "merge",
                "inputs": ["l", "r"],
                "outputs": ["y"],
                "constraints": {"stream_affinity": {"stream_id": 0}},
            },
        ],
    }
    rng = np.random.default_rng(2)
    with pl.load(cfg, device="cuda") as pipe:
        for i in range(1000):
            x = rng.standard_normal((129, 1031)).astype(np.float32)
            y = pipe.run(x=x)["y"].numpy()
            want = np.maximum(x, 0) + 3.0 * x
            if not np.allclose(y, want, rtol=1e-6, atol=1e-6):
                pytest.fail(
                    f"run {i}: the merge read a branch before it finished (max error "
                    f"{np.abs(y - want).max():g})"
                )


def test_memory_does_not_grow_over_10000_runs():
    rng = np.random.default_rng(3)
    feed = _feed(rng, 16, 256)
    with pl.load(_chain(), device="cuda") as pipe:
        for _ in range(50):
            pipe.run(feed)
        gc.collect()
        before = pl.memory.stats("cuda")
        for _ in range(10_000):
            out = pipe.run(feed)
        del out
        gc.collect()
        after = pl.memory.stats("cuda")
    assert after["allocated_bytes"] <= before["allocated_bytes"], (before, after)
    assert after["reserved_bytes"] <= before["reserved_bytes"] + (1 << 20), (before, after)


def test_dropped_outputs_return_to_the_pool():
    backend = get_backend("cuda")
    base = pl.memory.stats("cuda")["allocated_bytes"]
    t = pl.empty((1000, 1000), "float32", device="cuda")
    assert pl.memory.stats("cuda")["allocated_bytes"] >= base + 4_000_000
    del t
    gc.collect()
    assert pl.memory.stats("cuda")["allocated_bytes"] == base
    backend.clear_pool()
    assert pl.memory.stats("cuda")["bins"] == {}


def test_dlpack_round_trips_with_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    x = torch.from_numpy(rng.standard_normal((33, 65)).astype(np.float32)).cuda()
    cfg = {"name": "r", "outputs": ["y"], "pipeline": [{"name": "relu", "inputs": ["x"], "outputs": ["y"]}]}
    with pl.load(cfg, device="cuda") as pipe:
        out = pipe.run(x=x)["y"]
        ty = torch.from_dlpack(out)
        assert ty.device.type == "cuda"
        assert ty.data_ptr() == out.ptr, "torch.from_dlpack of an output must not copy"
        torch.testing.assert_close(ty, torch.relu(x))
        # A torch tensor as an input is used in place: the identity's input pointer is torch's.
        t_in = pl.Tensor.from_dlpack(x)
        assert t_in.ptr == x.data_ptr()
        back = pipe.run(x=ty)["y"]
        torch.testing.assert_close(torch.from_dlpack(back), torch.relu(x))


def test_cuda_error_of_a_stage_is_reported_with_its_name():
    @pl.operator("raises_cuda_error_v1", inputs=["x"], outputs=["y"], device="cuda")
    def boom(x, y, *, stream=None):
        raise CUDAError("simulated launch failure", cuda_error="CUDA_ERROR_LAUNCH_FAILED", cuda_code=719)

    cfg = {
        "name": "err",
        "outputs": ["y"],
        "pipeline": [{"name": "raises_cuda_error_v1", "id": "boom", "inputs": ["x"], "outputs": ["y"]}],
    }
    with pl.load(cfg, device="cuda") as pipe:
        with pytest.raises(CUDAError) as info:
            pipe.run(x=np.ones(8, np.float32))
        assert info.value.stage == "boom"
        assert info.value.cuda_error == "CUDA_ERROR_LAUNCH_FAILED"
        assert pipe.last_report.stages["boom"].status == "failed"


def test_check_errors_waits_for_queued_work_and_is_clean_after_it():
    # Wrong if check_errors returned before the device finished (it would miss asynchronous errors) or
    # reported an error after ordinary work.
    backend = get_backend("cuda")
    stream = backend.default_stream()
    x = backend.import_input(np.random.default_rng(3).standard_normal(1 << 22).astype(np.float32))
    y = backend.empty(x.shape, x.dtype)
    backend.copy(y, x, stream=stream)
    done = backend.record_event(stream)
    backend.check_errors(stage="probe")
    assert done.is_done, "check_errors returned before the queued copy finished"
    np.testing.assert_array_equal(np.asarray(y.cpu()), np.asarray(x.cpu()))


def test_count_nonfinite_on_device():
    backend = get_backend("cuda")
    for dtype in ("float32", "float16", "bfloat16", "float64"):
        x = np.linspace(-1, 1, 4099).astype(pl.dtypes.get_dtype(dtype).numpy)
        x[[3, 100, 4098]] = [np.nan, np.inf, -np.inf]
        t = backend.import_input(x)
        assert backend.count_nonfinite(t, stream=backend.default_stream()) == 3, dtype


def test_strided_copy():
    torch = pytest.importorskip("torch")
    backend = get_backend("cuda")
    base = torch.arange(6 * 7 * 5, dtype=torch.float32, device="cuda").reshape(6, 7, 5)
    view = base.permute(2, 0, 1)[:, 1:, ::2]
    src = pl.Tensor.from_dlpack(view)
    assert not src.is_contiguous
    dst = backend.empty(src.shape, src.dtype)
    backend.copy(dst, src, stream=backend.default_stream())
    np.testing.assert_array_equal(dst.numpy(), view.cpu().numpy())


def test_kernel_cache_hits_memory_on_second_compile():
    backend = get_backend("cuda")
    src = 'extern "C" __global__ void pl_test_kernel(float* x) { x[threadIdx.x] += 1.0f; }'
    k1 = backend.compile_kernel(src, "pl_test_kernel")
    hits = dict(backend.compiler.hits)
    k2 = backend.compile_kernel(src, "pl_test_kernel")
    assert k1 is k2 and backend.compiler.hits["memory"] == hits["memory"] + 1


def test_info_reports_the_device():
    info = get_backend("cuda").info
    assert info.kind == "cuda" and info.compute_capability >= (7, 0)
    assert info.features["sm_count"] > 0 and info.features["tensor_core"] == 4 * info.features["sm_count"]
    assert info.uuid and info.driver_version


def test_pin_memory_inputs_upload_through_their_own_pinned_buffer():
    import pipelink as pl
    from pipelink.backends import get_backend

    doc = {
        "inputs": {"x": {"shape": [1 << 22], "dtype": "float32", "pin_memory": True}},
        "pipeline": [{"name": "scale", "inputs": ["x"], "outputs": ["y"], "attrs": {"factor": 3.0}}],
    }
    pipe = pl.load(doc, device="cuda")
    rng = np.random.default_rng(21)
    for _ in range(3):  # the buffer is reused run after run: every result must be this run's
        x = rng.standard_normal(1 << 22).astype(np.float32)
        np.testing.assert_allclose(pipe.run(x=x)["y"].numpy(), 3 * x, rtol=1e-6)
    assert "x" in get_backend("cuda").memory._pinned_inputs  # its own page-locked staging buffer
