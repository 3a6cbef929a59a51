"""gemm's mapping onto one cuBLASLt call (``route_gemm``), checked without a GPU: the route is replayed
with NumPy as cuBLASLt defines the call, ``D = epilogue(alpha * A @ B + beta * C [+ bias vector])``,
plus the launches it puts before and after, and compared with gemm's formula."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pipelink.ops.gemm.cuda import plan_bias_expand, route_gemm
from tests.unit.test_cuda_sources import _emulate_strided

M, N, K = 3, 5, 7


def _gelu(v):
    return 0.5 * v * (1.0 + np.vectorize(math.erf)(v / math.sqrt(2.0)))


def _gelu_tanh(v):
    return 0.5 * v * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v**3)))


ACT = {"none": lambda v: v, "relu": lambda v: np.maximum(v, 0.0), "gelu": _gelu, "gelu_tanh": _gelu_tanh}
EPILOGUE_ACT = {
    "DEFAULT": "none",
    "BIAS": "none",
    "RELU": "relu",
    "RELU_BIAS": "relu",
    "GELU": "gelu_tanh",
    "GELU_BIAS": "gelu_tanh",
}


def _replay(route, a, b, bias, res, alpha, activation):
    c = np.zeros((M, N))
    if route.expand_bias:
        plan = plan_bias_expand("float64", bias.shape, (M, N))  # the strided copy into D, as the kernel reads
        assert plan.kernel == "pl_permute"
        c = _emulate_strided(plan, "s", bias).reshape(M, N)
    source = {None: c, 2: bias, 3: res}[route.c_source]
    d = alpha * (a @ b) + (route.beta * source if route.beta else 0.0)
    if route.bias_vector:
        d = d + bias.reshape(-1)
    d = ACT[EPILOGUE_ACT[route.epilogue]](d)
    if route.post_activation:
        d = ACT[activation](d)
    if route.post_residual:
        d = d + res
    return d


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("bias_shape", [None, (N,), (1, N), (M, 1), (), (1,), (M, N)])
@pytest.mark.parametrize("beta", [1.0, 0.5])
@pytest.mark.parametrize("activation", list(ACT))
@pytest.mark.parametrize("with_res", [False, True])
def test_route_computes_gemm(dtype, bias_shape, beta, activation, with_res):
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((M, K)), rng.standard_normal((K, N))
    bias = None if bias_shape is None else rng.standard_normal(bias_shape)
    res = rng.standard_normal((M, N)) if with_res else None
    route = route_gemm(dtype, (M, N), N, bias_shape, None if res is None else (M, N), beta, activation)
    want = 0.5 * (a @ b) + (0.0 if bias is None else beta * bias)
    want = ACT[activation](want) + (0.0 if res is None else res)
    np.testing.assert_allclose(_replay(route, a, b, bias, res, 0.5, activation), want, rtol=1e-12, atol=1e-12)


def test_routes_prefer_fused_paths():
    vector = route_gemm("float16", (M, N), N, (N,), None, 1.0, "gelu_tanh")
    assert (vector.epilogue, vector.bias_vector, vector.c_source) == ("GELU_BIAS", True, None)
    scaled = route_gemm("float32", (M, N), N, (N,), None, 2.0, "none")  # beta != 1: no bias epilogue
    assert scaled.expand_bias and scaled.beta == 2.0 and scaled.epilogue == "DEFAULT"
    full = route_gemm("float32", (M, N), N, (M, N), (M, N), 0.5, "relu")
    assert full.c_source == 2 and not full.expand_bias and full.post_residual and full.epilogue == "RELU"
    residual = route_gemm("bfloat16", (M, N), N, (N,), (M, N), 1.0, "none")
    assert residual.c_source == 3 and residual.beta == 1.0 and not residual.post_residual
    erf = route_gemm("float32", (M, N), N, None, None, 1.0, "gelu")
    assert erf.epilogue == "DEFAULT" and erf.post_activation
    f64 = route_gemm("float64", (M, N), N, (N,), None, 1.0, "gelu_tanh")
    assert f64.epilogue == "BIAS" and f64.post_activation
