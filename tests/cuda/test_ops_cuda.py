"""Every built-in operator on CUDA against the CPU reference, for every float dtype, on fresh random
inputs whose sizes are not multiples of the block size; outputs start as NaN (poisoned pool blocks)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.cuda.helpers import FLOATS, check_close, one_stage, rand, run_both

pytestmark = pytest.mark.gpu

SHAPES = [(1, 7), (37, 129), (3, 5, 1000), (2, 4099)]
UNARY = [("relu", {}), ("silu", {}), ("gelu", {}), ("gelu", {"approximate": "tanh"}),
         ("scale", {"factor": -1.75}), ("silu_activation", {})]


def _seed(*parts) -> int:
    return abs(hash(parts)) % (2**32)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("op,attrs", UNARY, ids=lambda v: str(v))
def test_unary(op, attrs, shape, dtype):
    rng = np.random.default_rng(_seed(op, shape, dtype))
    x_name, y_name = ("input", "output") if op == "silu_activation" else ("x", "y")
    feed = {x_name: rand(rng, shape, dtype)}
    got, ref = run_both(one_stage(op, feed, [y_name], attrs), feed)
    check_close(got[y_name], ref[y_name], dtype, f"{op}{attrs} {shape} {dtype}")


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", ["add", "mul"])
@pytest.mark.parametrize("shapes", [((37, 129), (37, 129)), ((3, 5, 7), (5, 1)), ((4099,), (1,)),
                                    ((2, 1, 33), (1, 17, 33))], ids=str)
def test_binary(op, shapes, dtype):
    rng = np.random.default_rng(_seed(op, shapes, dtype))
    feed = {"a": rand(rng, shapes[0], dtype), "b": rand(rng, shapes[1], dtype)}
    got, ref = run_both(one_stage(op, feed, ["c"]), feed)
    check_close(got["c"], ref["c"], dtype, f"{op} {shapes} {dtype}")


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(37, 129), (5, 3, 1024), (1, 7)], ids=str)
def test_bias_add(shape, dtype):
    rng = np.random.default_rng(_seed("bias", shape, dtype))
    feed = {"x": rand(rng, shape, dtype), "bias": rand(rng, shape[-1:], dtype)}
    got, ref = run_both(one_stage("bias_add", feed, ["y"]), feed)
    check_close(got["y"], ref["y"], dtype, f"bias_add {shape} {dtype}")


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", SHAPES + [(3, 8192)], ids=str)
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm(shape, dtype, affine):
    rng = np.random.default_rng(_seed("ln", shape, dtype, affine))
    feed = {"x": rand(rng, shape, dtype)}
    if affine:
        feed.update(gamma=rand(rng, shape[-1:], dtype), beta=rand(rng, shape[-1:], dtype))
    cfg = one_stage("layer_norm", feed, ["y", "mean", "rstd"], {"eps": 1e-5})
    got, ref = run_both(cfg, feed)
    for name in ("y", "mean", "rstd"):
        stats = "float64" if dtype == "float64" else "float32"
        check_close(got[name], ref[name], dtype if name == "y" else stats,
                    f"layer_norm.{name} {shape} {dtype}")


@pytest.mark.parametrize("dtype", FLOATS)
def test_layer_norm_v1(dtype):
    rng = np.random.default_rng(_seed("ln1", dtype))
    feed = {"input": rand(rng, (33, 257), dtype), "gamma": rand(rng, (257,), dtype),
            "beta": rand(rng, (257,), dtype), "eps": np.asarray(1e-3, np.float32)}
    got, ref = run_both(one_stage("layer_norm_v1", feed, ["output", "mean", "rstd"]), feed)
    check_close(got["output"], ref["output"], dtype, f"layer_norm_v1 {dtype}")


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_rms_norm(shape, dtype):
    rng = np.random.default_rng(_seed("rms", shape, dtype))
    feed = {"x": rand(rng, shape, dtype), "gamma": rand(rng, shape[-1:], dtype)}
    got, ref = run_both(one_stage("rms_norm", feed, ["y"], {"eps": 1e-6}), feed)
    check_close(got["y"], ref["y"], dtype, f"rms_norm {shape} {dtype}")


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,axis", [((37, 129), -1), ((3, 5, 1000), -1), ((2, 4099), 1),
                                        ((6, 9, 11), 1), ((6, 9, 11), 0)], ids=str)
def test_softmax(shape, axis, dtype):
    rng = np.random.default_rng(_seed("softmax", shape, axis, dtype))
    feed = {"x": rand(rng, shape, dtype)}
    got, ref = run_both(one_stage("softmax", feed, ["y"], {"axis": axis}), feed)
    check_close(got["y"], ref["y"], dtype, f"softmax axis={axis} {shape} {dtype}")


@pytest.mark.parametrize("dtype", FLOATS + ("int32", "uint8", "bool"))
@pytest.mark.parametrize("shape,perm", [((37, 129), []), ((3, 5, 7), [0, 2, 1]), ((4, 6, 8, 3), [3, 1, 0, 2]),
                                        ((1, 33), [1, 0])], ids=str)
def test_transpose(shape, perm, dtype):
    rng = np.random.default_rng(_seed("t", shape, dtype))
    feed = {"x": rand(rng, shape, dtype)}
    got, ref = run_both(one_stage("transpose", feed, ["y"], {"perm": perm}), feed)
    np.testing.assert_array_equal(got["y"], ref["y"], err_msg=f"transpose {shape} {perm} {dtype}")


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (4, 129), (3, 16, 33)], ids=str)
def test_batch_norm(shape, dtype):
    rng = np.random.default_rng(_seed("bn", shape, dtype))
    c = shape[1]
    feed = {"x": rand(rng, shape, dtype), "mean": rand(rng, (c,), dtype),
            "var": rand(rng, (c,), dtype, 0.1, 2.0),
            "gamma": rand(rng, (c,), dtype), "beta": rand(rng, (c,), dtype)}
    got, ref = run_both(one_stage("batch_norm", feed, ["y"], {"eps": 1e-5}), feed)
    check_close(got["y"], ref["y"], dtype, f"batch_norm {shape} {dtype}")


@pytest.mark.parametrize("src,dst", [("float32", "float16"), ("bfloat16", "float32"), ("float64", "bfloat16"),
                                     ("float32", "int32"), ("int32", "float16"), ("float16", "bool"),
                                     ("uint8", "int64"), ("float32", "float32")])
def test_cast(src, dst):
    rng = np.random.default_rng(_seed("cast", src, dst))
    feed = {"x": rand(rng, (37, 129), src, -100, 100)}
    got, ref = run_both(one_stage("cast", feed, ["y"], {"dtype": dst}), feed)
    check_close(got["y"], ref["y"], dst, f"cast {src}->{dst}")


@pytest.mark.parametrize("dtype", FLOATS + ("int64", "bool"))
def test_identity(dtype):
    rng = np.random.default_rng(_seed("id", dtype))
    feed = {"x": rand(rng, (37, 129), dtype)}
    got, ref = run_both(one_stage("identity", feed, ["y"]), feed)
    np.testing.assert_array_equal(got["y"], ref["y"])


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("activation", ["none", "relu", "gelu", "gelu_tanh"])
@pytest.mark.parametrize("extras", ["", "bias", "bias+residual"])
def test_gemm(dtype, activation, extras):
    rng = np.random.default_rng(_seed("gemm", dtype, activation, extras))
    m, k, n = 37, 72, 48
    feed = {"a": rand(rng, (m, k), dtype, -1, 1), "b": rand(rng, (k, n), dtype, -1, 1)}
    if "bias" in extras:
        feed["bias"] = rand(rng, (n,), dtype)
    if "residual" in extras:
        feed["residual"] = rand(rng, (m, n), dtype)
    cfg = one_stage("gemm", feed, ["c"], {"activation": activation, "alpha": 0.5})
    got, ref = run_both(cfg, feed)
    rtol, atol = {"float32": (1e-4, 1e-4), "float64": (1e-10, 1e-10)}.get(dtype, (2e-2, 2e-2))
    np.testing.assert_allclose(got["c"].astype(np.float64), ref["c"].astype(np.float64), rtol=rtol, atol=atol)


def test_gemm_trans_b_batched():
    rng = np.random.default_rng(3)
    feed = {"a": rand(rng, (2, 9, 40), "float32", -1, 1), "b": rand(rng, (24, 40), "float32", -1, 1)}
    got, ref = run_both(one_stage("gemm", feed, ["c"], {"trans_b": True}), feed)
    np.testing.assert_allclose(got["c"], ref["c"], rtol=1e-4, atol=1e-4)
