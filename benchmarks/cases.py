"""The single-pipeline benchmark cases: their PipeLink configs, the PyTorch functions they are compared
with, float64 NumPy references (CPU runs), and the bytes and flops that set their roofline.

Sizes come in three sets: ``default`` (the issue's sizes, H200), ``quick`` (< 60 s) and ``tiny`` (the
CPU smoke run). Only the public config format is used: every doc here must pass ``pl.validate``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

__all__ = ["OpCase", "op_cases", "ITEMSIZE"]

ITEMSIZE = {"float32": 4, "bfloat16": 2, "float16": 2}
EPS = 1e-5


@dataclass
class OpCase:
    """One pipeline timed against PyTorch. ``inputs`` are in the order the torch function takes them."""

    name: str
    group: str
    dtype: str
    shape: str  # for the table, e.g. "65536x4096"
    doc: dict[str, Any]
    inputs: dict[str, tuple[tuple[int, ...], float, float]]  # name -> (shape, scale, offset)
    output: str
    torch_fn: Callable[[Any], Callable[..., Any]]  # torch -> fn(*inputs)
    numpy_ref: Callable[..., np.ndarray]  # float64 arrays -> float64 array
    nbytes: int
    flops: int
    roles: tuple[str, ...] = ()  # which targets this case is judged by
    large: bool = False  # counts for the graph-overhead target
    memory: bool = False  # also measure peak device memory
    notes: list[str] = field(default_factory=list)

    @property
    def set_bytes(self) -> int:
        """Bytes of one input set."""
        return sum(math.prod(s) for s, _, _ in self.inputs.values()) * ITEMSIZE[self.dtype]


def _decl(inputs: dict[str, tuple[tuple[int, ...], float, float]], dtype: str) -> dict[str, Any]:
    return {n: {"shape": list(s), "dtype": dtype} for n, (s, _, _) in inputs.items()}


# -- references (float64, CPU runs) ---------------------------------------------------------------
def _np_layer_norm(x, g, b):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + EPS) * g + b


_ERF = np.frompyfunc(math.erf, 1, 1)


def _np_gelu(x):
    return 0.5 * x * (1.0 + _ERF(x / math.sqrt(2.0)).astype(np.float64))


def _np_silu(x):
    return x / (1.0 + np.exp(-x))


def _np_mlp(x, g, b, w1, b1, w2, b2):
    return _np_gelu(_np_layer_norm(x, g, b) @ w1 + b1) @ w2 + b2 + x


def _np_conv2d(x, w, b, stride, pad):
    """Cross-correlation by windows: [N, C, H, W] x [M, C, k, k] -> [N, M, H', W'] (groups 1)."""
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = sliding_window_view(xp, w.shape[2:], axis=(2, 3))[:, :, ::stride, ::stride]
    return np.einsum("nchwij,mcij->nmhw", win, w) + b[None, :, None, None]


def _np_conv_transpose2d(x, w, b, stride, pad):
    """Each input pixel scatters w[c, :, i, j] to stride * pos + (i, j), then the pads are cropped."""
    n, _, h, wd = x.shape
    k = w.shape[2]
    full = np.zeros((n, w.shape[1], stride * (h - 1) + k, stride * (wd - 1) + k))
    for i in range(k):
        for j in range(k):
            full[:, :, i : i + stride * (h - 1) + 1 : stride, j : j + stride * (wd - 1) + 1 : stride] += (
                np.einsum("nchw,cm->nmhw", x, w[:, :, i, j])
            )
    return full[:, :, pad : full.shape[2] - pad, pad : full.shape[3] - pad] + b[None, :, None, None]


def _np_attention(q, k, v, causal):
    scores = q @ k.swapaxes(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        scores[..., np.triu(np.ones(scores.shape[-2:], bool), k=1)] = -np.inf
    p = np.exp(scores - scores.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


# -- torch functions (built only when torch is there) ---------------------------------------------
def _t_layer_norm(torch):
    f = torch.nn.functional
    return lambda x, g, b: f.layer_norm(x, (x.shape[-1],), g, b, EPS)


def _t_gemm_bias_gelu(torch):
    f = torch.nn.functional
    return lambda a, b, bias: f.gelu(a @ b + bias)


def _t_mlp(torch):
    f = torch.nn.functional

    def mlp(x, g, b, w1, b1, w2, b2):
        h = f.layer_norm(x, (x.shape[-1],), g, b, EPS)
        u = f.gelu(torch.addmm(b1, h, w1))  # nn.Linear's bias path
        return torch.addmm(b2, u, w2) + x

    return mlp


# -- case builders --------------------------------------------------------------------------------
def layer_norm(rows: int, cols: int, dtype: str, roles: tuple[str, ...] = ()) -> OpCase:
    inputs = {"x": ((rows, cols), 1.0, 0.5), "gamma": ((cols,), 0.1, 1.0), "beta": ((cols,), 0.1, 0.0)}
    doc = {
        "name": "bench_layer_norm",
        "inputs": _decl(inputs, dtype),
        "outputs": ["y"],
        "pipeline": [
            {
                "name": "layer_norm",
                "id": "ln",
                "inputs": ["x", "gamma", "beta"],
                "outputs": ["y"],
                "attrs": {"eps": EPS},
            }
        ],
    }
    n = rows * cols
    return OpCase(
        f"layer_norm_{rows}x{cols}_{_short(dtype)}",
        "layer_norm",
        dtype,
        f"{rows}x{cols}",
        doc,
        inputs,
        "y",
        _t_layer_norm,
        _np_layer_norm,
        (2 * n + 2 * cols) * ITEMSIZE[dtype],
        8 * n,
        roles,
        large=n * ITEMSIZE[dtype] >= 100e6,
    )


def unary(op: str, nbytes: int, dtype: str, roles: tuple[str, ...] = ()) -> OpCase:
    cols = 4096 if nbytes // ITEMSIZE[dtype] >= 4096 * 4 else 64
    rows = max(1, nbytes // ITEMSIZE[dtype] // cols)
    inputs = {"x": ((rows, cols), 1.5, 0.0)}
    doc = {
        "name": f"bench_{op}",
        "inputs": _decl(inputs, dtype),
        "outputs": ["y"],
        "pipeline": [{"name": op, "id": op, "inputs": ["x"], "outputs": ["y"]}],
    }
    # Python functions, not the builtins themselves: torch.compile traces Python frames only.
    fns = {
        "gelu": (lambda t: lambda x: t.nn.functional.gelu(x), _np_gelu),
        "silu": (lambda t: lambda x: t.nn.functional.silu(x), _np_silu),
    }
    n = rows * cols
    return OpCase(
        f"{op}_{_mib(n * ITEMSIZE[dtype])}_{_short(dtype)}",
        op,
        dtype,
        f"{rows}x{cols}",
        doc,
        inputs,
        "y",
        fns[op][0],
        fns[op][1],
        2 * n * ITEMSIZE[dtype],
        10 * n,
        roles,
        large=n * ITEMSIZE[dtype] >= 100e6,
    )


def add(nbytes: int, dtype: str, roles: tuple[str, ...] = ()) -> OpCase:
    cols = 4096 if nbytes // ITEMSIZE[dtype] >= 4096 * 4 else 64
    rows = max(1, nbytes // ITEMSIZE[dtype] // cols)
    inputs = {"a": ((rows, cols), 1.0, 0.0), "b": ((rows, cols), 1.0, 0.0)}
    doc = {
        "name": "bench_add",
        "inputs": _decl(inputs, dtype),
        "outputs": ["c"],
        "pipeline": [{"name": "add", "id": "add", "inputs": ["a", "b"], "outputs": ["c"]}],
    }
    n = rows * cols
    return OpCase(
        f"add_{_mib(n * ITEMSIZE[dtype])}_{_short(dtype)}",
        "add",
        dtype,
        f"{rows}x{cols}",
        doc,
        inputs,
        "c",
        lambda t: lambda a, b: t.add(a, b),
        np.add,
        3 * n * ITEMSIZE[dtype],
        n,
        roles,
        large=n * ITEMSIZE[dtype] >= 100e6,
    )


def gemm(m: int, n: int, k: int, dtype: str, *, epilogue: bool, roles: tuple[str, ...] = ()) -> OpCase:
    inputs = {"a": ((m, k), 1.0, 0.0), "b": ((k, n), 1.0, 0.0)}
    stage = {"name": "gemm", "id": "gemm", "inputs": ["a", "b"], "outputs": ["c"]}
    if epilogue:
        inputs["bias"] = ((n,), 1.0, 0.0)
        stage["inputs"] = ["a", "b", "bias"]
        stage["attrs"] = {"activation": "gelu"}
    doc = {"name": "bench_gemm", "inputs": _decl(inputs, dtype), "outputs": ["c"], "pipeline": [stage]}
    size = ITEMSIZE[dtype]
    nbytes = (m * k + k * n + m * n + (n if epilogue else 0)) * size
    group = "gemm_bias_gelu" if epilogue else "gemm"
    if epilogue:
        fn, ref = _t_gemm_bias_gelu, lambda a, b, bias: _np_gelu(a @ b + bias)
    else:
        fn, ref = (lambda t: lambda a, b: t.mm(a, b)), (lambda a, b: a @ b)
    return OpCase(
        f"{group}_{m}x{n}x{k}_{_short(dtype)}",
        group,
        dtype,
        f"{m}x{n}x{k}",
        doc,
        inputs,
        "c",
        fn,
        ref,
        nbytes,
        2 * m * n * k,
        roles,
        large=m * n * k >= 2**33,
    )


def mlp(tokens: int, d: int, dtype: str, roles: tuple[str, ...] = ()) -> OpCase:
    """The transformer MLP block: x + gemm(gelu(gemm(layer_norm(x), w1) + b1), w2) + b2."""
    hidden = 4 * d
    inputs = {
        "x": ((tokens, d), 1.0, 0.0),
        "gamma": ((d,), 0.1, 1.0),
        "beta": ((d,), 0.1, 0.0),
        "w1": ((d, hidden), 1.0 / math.sqrt(d), 0.0),
        "b1": ((hidden,), 0.1, 0.0),
        "w2": ((hidden, d), 1.0 / math.sqrt(hidden), 0.0),
        "b2": ((d,), 0.1, 0.0),
    }
    doc = {
        "name": "bench_mlp_block",
        "inputs": _decl(inputs, dtype),
        "outputs": ["y"],
        "pipeline": [
            {
                "name": "layer_norm",
                "id": "ln",
                "inputs": ["x", "gamma", "beta"],
                "outputs": ["h"],
                "attrs": {"eps": EPS},
            },
            {
                "name": "gemm",
                "id": "fc1",
                "inputs": ["h", "w1", "b1"],
                "outputs": ["u"],
                "attrs": {"activation": "gelu"},
            },
            {"name": "gemm", "id": "fc2", "inputs": ["u", "w2", "b2", "x"], "outputs": ["y"]},
        ],
    }
    size = ITEMSIZE[dtype]
    nbytes = (2 * tokens * d + 2 * d * hidden + hidden + 3 * d) * size  # x in, y out, weights once
    return OpCase(
        f"mlp_T{tokens}_d{d}_{_short(dtype)}",
        "mlp",
        dtype,
        f"T={tokens} d={d}",
        doc,
        inputs,
        "y",
        _t_mlp,
        _np_mlp,
        nbytes,
        4 * tokens * d * hidden,
        roles,
        large=tokens * d >= 2**22,
        memory=True,
    )


def conv2d(
    n: int, c: int, m: int, hw: int, k: int, dtype: str, *, stride: int = 1, roles: tuple[str, ...] = ()
) -> OpCase:
    """A ``k x k`` convolution with bias, "same" padding (odd k), NCHW: cuDNN on both sides."""
    pad = k // 2
    inputs = {"x": ((n, c, hw, hw), 1.0, 0.0), "w": ((m, c, k, k), 1.0 / math.sqrt(c * k * k), 0.0)}
    inputs["b"] = ((m,), 0.1, 0.0)
    stage = {"name": "conv2d", "id": "conv", "inputs": ["x", "w", "b"], "outputs": ["y"]}
    stage["attrs"] = {"pads": [pad] * 4, "strides": [stride, stride]}
    doc = {"name": "bench_conv2d", "inputs": _decl(inputs, dtype), "outputs": ["y"], "pipeline": [stage]}
    out = (hw + 2 * pad - k) // stride + 1
    size = ITEMSIZE[dtype]
    return OpCase(
        f"conv2d_{k}x{k}_{c}to{m}_{hw}px_b{n}_{_short(dtype)}",
        "conv2d",
        dtype,
        f"N={n} {c}->{m} {hw}x{hw} k={k} s={stride}",
        doc,
        inputs,
        "y",
        lambda t: lambda x, w, b: t.nn.functional.conv2d(x, w, b, stride=stride, padding=pad),
        lambda x, w, b: _np_conv2d(x, w, b, stride, pad),
        (n * c * hw * hw + m * c * k * k + m + n * m * out * out) * size,
        2 * n * m * out * out * c * k * k,
        roles,
    )


def conv_transpose2d(n: int, c: int, m: int, hw: int, dtype: str, roles: tuple[str, ...] = ()) -> OpCase:
    """The 2x upsampler of decoders and super-resolution: kernel 4, stride 2, pads 1 (hw -> 2 hw)."""
    k, stride, pad = 4, 2, 1
    inputs = {"x": ((n, c, hw, hw), 1.0, 0.0), "w": ((c, m, k, k), 1.0 / math.sqrt(c * k), 0.0)}
    inputs["b"] = ((m,), 0.1, 0.0)
    stage = {"name": "conv_transpose2d", "id": "up", "inputs": ["x", "w", "b"], "outputs": ["y"]}
    stage["attrs"] = {"pads": [pad] * 4, "strides": [stride, stride]}
    doc = {"name": "bench_conv_t", "inputs": _decl(inputs, dtype), "outputs": ["y"], "pipeline": [stage]}
    size = ITEMSIZE[dtype]
    return OpCase(
        f"conv_transpose2d_{c}to{m}_{hw}px_b{n}_{_short(dtype)}",
        "conv_transpose2d",
        dtype,
        f"N={n} {c}->{m} {hw}->{2 * hw} k=4 s=2",
        doc,
        inputs,
        "y",
        lambda t: lambda x, w, b: t.nn.functional.conv_transpose2d(x, w, b, stride=stride, padding=pad),
        lambda x, w, b: _np_conv_transpose2d(x, w, b, stride, pad),
        (n * c * hw * hw + c * m * k * k + m + n * m * 4 * hw * hw) * size,
        2 * n * c * hw * hw * m * k * k,
        roles,
    )


def attention(b: int, h: int, s: int, d: int, dtype: str, *, causal: bool, roles=()) -> OpCase:
    """Scaled dot-product attention, q/k/v ``[B, H, S, D]``: cuDNN's SDPA against PyTorch's."""
    inputs = {n: ((b, h, s, d), 1.0, 0.0) for n in ("q", "k", "v")}
    stage = {"name": "attention", "id": "sdpa", "inputs": ["q", "k", "v"], "outputs": ["y"]}
    stage["attrs"] = {"is_causal": causal}
    doc = {"name": "bench_attention", "inputs": _decl(inputs, dtype), "outputs": ["y"], "pipeline": [stage]}
    flops = 4 * b * h * s * s * d // (2 if causal else 1)
    return OpCase(
        f"attention_B{b}_H{h}_S{s}_D{d}{'_causal' if causal else ''}_{_short(dtype)}",
        "attention",
        dtype,
        f"B={b} H={h} S={s} D={d}{' causal' if causal else ''}",
        doc,
        inputs,
        "y",
        lambda t: lambda q, k, v: t.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal),
        lambda q, k, v: _np_attention(q, k, v, causal),
        4 * b * h * s * d * ITEMSIZE[dtype],
        flops,
        roles,
    )


def split(rows: int, cols: int, parts: int, dtype: str, roles: tuple[str, ...] = ()) -> OpCase:
    """x [rows, cols] split into ``parts`` equal parts along the last axis (GPT-2's qkv split): strided
    copies of row pitch ``cols``. PyTorch: torch.split + .contiguous() of every part. The check compares
    the last part (the runner checks one output; the GPU tests check every part)."""
    inputs = {"x": ((rows, cols), 1.0, 0.0)}
    outs = [f"y{i}" for i in range(parts)]
    doc = {
        "name": "bench_split",
        "inputs": _decl(inputs, dtype),
        "outputs": outs,
        "pipeline": [
            {
                "name": "split",
                "id": "split",
                "inputs": ["x"],
                "outputs": outs,
                "attrs": {"axis": -1, "num_outputs": parts},
            }
        ],
    }
    width = cols // parts

    def torch_fn(t):
        def fn(x):
            return [p.contiguous() for p in t.split(x, width, dim=-1)][-1]

        return fn

    n = rows * cols
    return OpCase(
        f"split{parts}_{rows}x{cols}_{_short(dtype)}",
        "split",
        dtype,
        f"{rows}x{cols}",
        doc,
        inputs,
        outs[-1],
        torch_fn,
        lambda x: np.split(x, parts, axis=-1)[-1],
        2 * n * ITEMSIZE[dtype],
        0,
        roles,
    )


def concat(rows: int, cols: int, parts: int, dtype: str, roles: tuple[str, ...] = ()) -> OpCase:
    """``parts`` tensors [rows, cols / parts] joined along the last axis into [rows, cols] (the inverse of
    :func:`split`). PyTorch: torch.cat."""
    inputs = {f"x{i}": ((rows, cols // parts), 1.0, float(i)) for i in range(parts)}
    doc = {
        "name": "bench_concat",
        "inputs": _decl(inputs, dtype),
        "outputs": ["y"],
        "pipeline": [
            {
                "name": "concat",
                "id": "concat",
                "inputs": list(inputs),
                "outputs": ["y"],
                "attrs": {"axis": -1},
            }
        ],
    }
    n = rows * (cols // parts) * parts
    return OpCase(
        f"concat{parts}_{rows}x{cols}_{_short(dtype)}",
        "concat",
        dtype,
        f"{rows}x{cols}",
        doc,
        inputs,
        "y",
        lambda t: lambda *xs: t.cat(xs, dim=-1),
        lambda *xs: np.concatenate(xs, axis=-1),
        2 * n * ITEMSIZE[dtype],
        0,
        roles,
    )


def _short(dtype: str) -> str:
    return {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}[dtype]


def _mib(nbytes: int) -> str:
    return f"{nbytes >> 20}MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10}KiB"


# -- the case lists -------------------------------------------------------------------------------
def op_cases(size: str) -> list[OpCase]:
    """Every single-pipeline case at ``size`` ("default", "quick" or "tiny"), in table order.

    ``roles`` name the targets a case is judged by (see ``benchmarks/targets.py``).
    """
    if size == "default":
        ln = [
            (1, 1024, "float32", ()),
            (1024, 1024, "float32", ()),
            (8192, 4096, "float32", ("ln_bw",)),
            (65536, 4096, "bfloat16", ("ln_bw",)),
        ]
        ew, mm, mlps = (
            256 << 20,
            (4096, 4096, 16384),
            [(4096, 4096, ("mlp_large",)), (8, 1024, ("mlp_small",))],
        )
        conv, conv1, convt, sdpa = (32, 64, 56), (32, 256, 64, 56), (32, 64, 32, 28), (8, 16, 1024, 64)
        qkv = (4096, 2304)  # GPT-2 small, batch 32 x 128 tokens: the attention's qkv split
    elif size == "quick":
        ln = [
            (1, 1024, "float32", ()),
            (1024, 1024, "float32", ()),
            (2048, 4096, "float32", ("ln_bw",)),
            (8192, 4096, "bfloat16", ("ln_bw",)),
        ]
        ew, mm, mlps = 64 << 20, (2048, 2048, 4096), [(1024, 1024, ("mlp_large",)), (8, 1024, ("mlp_small",))]
        conv, conv1, convt, sdpa = (8, 64, 56), (8, 256, 64, 56), (8, 64, 32, 28), (2, 16, 1024, 64)
        qkv = (4096, 2304)
    else:
        ln = [
            (1, 1024, "float32", ()),
            (16, 64, "float32", ()),
            (32, 64, "float32", ("ln_bw",)),
            (32, 64, "bfloat16", ("ln_bw",)),
        ]
        ew, mm, mlps = 16 << 10, (32, 32, 64), [(16, 32, ("mlp_large",)), (4, 16, ("mlp_small",))]
        conv, conv1, convt, sdpa = (2, 8, 10), (2, 16, 8, 10), (2, 8, 4, 6), (1, 2, 32, 16)
        qkv = (32, 96)
    cases = [layer_norm(r, c, dt, roles) for r, c, dt, roles in ln]
    for dt in ("float32", "bfloat16"):
        cases += [
            unary("gelu", ew, dt, ("elementwise_bw",)),
            unary("silu", ew, dt, ("elementwise_bw",)),
            add(ew, dt, ("elementwise_bw",)),
        ]
    cases.append(gemm(*mm, "bfloat16", epilogue=False, roles=("gemm",)))
    cases.append(gemm(*mm, "bfloat16", epilogue=True, roles=("gemm_epilogue",)))
    cases += [mlp(t, d, "bfloat16", roles) for t, d, roles in mlps]
    n, ch, hw = conv
    cases += [conv2d(n, ch, ch, hw, 3, dt, roles=("cudnn",)) for dt in ("float16", "bfloat16")]
    n, c1, m1, hw = conv1
    cases.append(conv2d(n, c1, m1, hw, 1, "float16", roles=("cudnn",)))
    cases.append(conv_transpose2d(*convt, "float16", roles=("cudnn",)))
    cases += [attention(*sdpa, "bfloat16", causal=c, roles=("cudnn",)) for c in (False, True)]
    cases += [split(*qkv, 3, "float32"), concat(*qkv, 3, "float32")]
    return cases
