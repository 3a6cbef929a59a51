"""gelu, silu, sigmoid and tanh on 16-bit types use hardware exp/reciprocal approximations (hardswish and
erf computed in float): every result must stay within one unit in the last place of the correctly rounded
value, over a dense grid that reaches deep into both tails (where an absolute-error approximation would
lose all relative accuracy)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import pipelink as pl
from pipelink.dtypes import get_dtype

from .helpers import one_stage

pytestmark = pytest.mark.gpu

MANTISSA_BITS = {"float16": 10, "bfloat16": 7}
SMALLEST = {"float16": 2.0**-24, "bfloat16": 2.0**-133}  # below this the result may round to zero


def gelu64(x: np.ndarray) -> np.ndarray:
    return np.array([0.5 * v * math.erfc(-v / math.sqrt(2.0)) for v in x])


def silu64(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def sigmoid64(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def hardswish64(x: np.ndarray) -> np.ndarray:
    return x * np.clip(x / 6.0 + 0.5, 0.0, 1.0)


EXACT = {
    "gelu": gelu64,
    "silu": silu64,
    "sigmoid": sigmoid64,
    "tanh": np.tanh,
    "hardswish": hardswish64,
    "erf": np.vectorize(math.erf, otypes=[np.float64]),
}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("op", list(EXACT))
def test_16bit_activations_are_within_one_ulp(op, dtype):
    npd = get_dtype(dtype).numpy
    tails = np.logspace(-6, 1.2, 5_000)
    x = np.concatenate([np.linspace(-16, 16, 200_003), -tails, tails])
    x = x.astype(np.float32).astype(npd)
    with np.errstate(over="ignore"):
        exact = EXACT[op](x.astype(np.float64))
    with pl.load(one_stage(op, {"x": None}, ["y"]), device="cuda") as pipe:
        got = pipe.run(x=x)["y"].numpy().astype(np.float64)
    ulp = np.abs(exact) * 2.0 ** -MANTISSA_BITS[dtype]
    err = np.abs(got - exact)
    bad = err > np.maximum(ulp, SMALLEST[dtype])
    worst = int(np.argmax(err / np.maximum(ulp, SMALLEST[dtype])))
    assert not bad.any(), (
        f"{op} {dtype}: {int(bad.sum())} results off by more than one ulp; worst at x={float(x[worst])!r}: "
        f"got {got[worst]!r}, exact {exact[worst]!r}"
    )
