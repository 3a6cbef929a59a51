"""pl.torch.as_op on the CPU (docs/interop.md): a pipeline as a PyTorch custom operator, eager, inside
torch.compile(fullgraph=True) and under torch.library.opcheck, with shapes from the pipeline's rules."""

from __future__ import annotations

import itertools
import subprocess
import sys

import numpy as np
import pytest

import pipelink as pl

torch = pytest.importorskip("torch")

_names = itertools.count()

MLP = {
    "inputs": {
        "x": {"shape": ["M", "K"], "dtype": "float32"},
        "w": {"shape": ["K", "N"], "dtype": "float32"},
    },
    "outputs": ["h", "y"],
    "pipeline": [
        {"name": "gemm", "id": "proj", "inputs": ["x", "w"], "outputs": ["h"]},
        {"name": "gelu", "id": "act", "inputs": ["h"], "outputs": ["y"]},
    ],
}
RELU = {"pipeline": [{"name": "relu", "inputs": ["x"], "outputs": ["y"]}]}


def op_name() -> str:
    return f"pltest::op{next(_names)}"


def reference(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    h = x @ w
    return h, torch.nn.functional.gelu(h)


@pytest.fixture
def mlp():
    with pl.load(MLP, device="cpu") as pipe:
        yield pl.torch.as_op(pipe, op_name())


def test_eager_results_match_pytorch(mlp):
    x, w = torch.randn(5, 16), torch.randn(16, 3)
    h, y = mlp(x, w)
    want_h, want_y = reference(x, w)
    torch.testing.assert_close(h, want_h, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(y, want_y, rtol=1e-5, atol=1e-5)
    assert h.shape == (5, 3) and y.dtype == torch.float32


def test_the_op_is_reachable_through_torch_ops():
    with pl.load(RELU, device="cpu") as pipe:
        name = op_name()
        pl.torch.as_op(pipe, name)
        namespace, short = name.split("::")
        x = torch.randn(7)
        torch.testing.assert_close(getattr(getattr(torch.ops, namespace), short)(x), x.relu())


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_inside_torch_compile_fullgraph_without_a_graph_break(mlp, backend):
    """fullgraph=True raises on any graph break, so passing means the op traced as one node."""

    def model(x, w):
        h, y = mlp(x * 2.0, w)
        return y + h.sum()

    compiled = torch.compile(model, fullgraph=True, backend=backend)
    x, w = torch.randn(4, 8), torch.randn(8, 6)
    torch.testing.assert_close(compiled(x, w), model(x, w), rtol=1e-5, atol=1e-5)


def test_dynamic_shapes_recompile_per_shape_and_stay_correct(mlp):
    compiled = torch.compile(lambda x, w: mlp(x, w)[1], fullgraph=True, backend="aot_eager", dynamic=True)
    for m in (3, 9):
        x, w = torch.randn(m, 8), torch.randn(8, 5)
        torch.testing.assert_close(compiled(x, w), reference(x, w)[1], rtol=1e-5, atol=1e-5)


def test_opcheck_passes_schema_fake_autograd_registration_and_aot_dispatch(mlp):
    results = torch.library.opcheck(mlp, (torch.randn(3, 4), torch.randn(4, 2)))
    assert set(results.values()) == {"SUCCESS"}, results


def test_the_fake_implementation_resolves_dimension_symbols_from_the_inputs(mlp):
    """M from x, N from w: (6, K) @ (K, 11) is (6, 11) without running anything."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        x = mode.from_tensor(torch.empty(6, 4))
        w = mode.from_tensor(torch.empty(4, 11))
        h, y = mlp(x, w)
    assert tuple(h.shape) == (6, 11) and tuple(y.shape) == (6, 11)
    assert h.dtype == torch.float32


def test_inputs_that_break_the_declared_shapes_are_refused_by_the_fake_implementation_too(mlp):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode, pytest.raises(pl.ShapeMismatchError, match="dimension K"):
        mlp(mode.from_tensor(torch.empty(6, 4)), mode.from_tensor(torch.empty(5, 11)))


def test_bound_weights_stay_in_the_pipeline_and_the_op_takes_the_other_inputs():
    w = np.random.default_rng().standard_normal((8, 3)).astype(np.float32)
    doc = {"pipeline": [{"name": "gemm", "inputs": ["x", "w"], "outputs": ["y"]}]}
    with pl.load(doc, device="cpu", weights={"w": w}) as pipe:
        op = pl.torch.as_op(pipe, op_name())
        x = torch.randn(5, 8)
        torch.testing.assert_close(op(x), x @ torch.from_numpy(w), rtol=1e-5, atol=1e-5)


def test_the_op_mutates_nothing_and_returns_fresh_tensors():
    doc = {
        "inputs": {"x": {"shape": ["N"], "dtype": "float32"}},
        "outputs": ["x", "y"],
        "pipeline": [{"name": "relu", "inputs": ["x"], "outputs": ["y"]}],
    }
    with pl.load(doc, device="cpu") as pipe:
        op = pl.torch.as_op(pipe, op_name())
        x = torch.randn(9)
        keep = x.clone()
        xo, y = op(x)
    torch.testing.assert_close(x, keep)
    torch.testing.assert_close(xo, x)
    assert xo.data_ptr() != x.data_ptr()
    torch.testing.assert_close(y, x.relu())


def test_a_tensor_of_another_device_is_refused_naming_both():
    """The real implementation's device check (a meta tensor stands for a device this machine lacks: the
    dispatcher itself would send a meta tensor to the fake implementation)."""
    with pl.load(RELU, device="cpu") as pipe, pytest.raises(pl.InvalidArgumentError) as e:
        pl.torch._check_device(pipe, (torch.empty(4, device="meta"),), ["x"])
    assert "input 'x' is on meta:0, but pipeline" in e.value.message and "runs on cpu" in e.value.message


def test_an_unsupported_dtype_is_refused():
    with pl.load(RELU, device="cpu") as pipe:
        op = pl.torch.as_op(pipe, op_name())
        with pytest.raises(pl.InvalidArgumentError, match="dtype torch.complex64, which PipeLink does not"):
            op(torch.zeros(3, dtype=torch.complex64))


def test_a_pipeline_with_skip_stages_is_refused():
    doc = {"pipeline": [{"name": "relu", "inputs": ["x"], "outputs": ["y"], "on_error": "skip"}]}
    with pl.load(doc, device="cpu") as pipe, pytest.raises(pl.InvalidArgumentError, match="on_error 'skip'"):
        pl.torch.as_op(pipe, op_name())


@pytest.mark.parametrize("name", ["no_namespace", "twice"])
def test_a_name_pytorch_refuses_is_an_invalid_argument(name):
    with pl.load(RELU, device="cpu") as pipe:
        if name == "twice":
            name = op_name()
            pl.torch.as_op(pipe, name)
        with pytest.raises(pl.InvalidArgumentError, match="cannot register pipeline"):
            pl.torch.as_op(pipe, name)


def test_import_pipelink_does_not_import_torch():
    code = "import sys, pipelink; assert 'torch' not in sys.modules, 'torch imported'; pipelink.Pipeline"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_cpu_results_match_the_pipeline_run_bit_for_bit(mlp):
    x, w = torch.randn(3, 8), torch.randn(8, 4)
    with pl.load(MLP, device="cpu") as pipe:
        want = np.asarray(pipe.run(x=x.numpy(), w=w.numpy())["y"])
    np.testing.assert_array_equal(mlp(x, w)[1].numpy(), want)
