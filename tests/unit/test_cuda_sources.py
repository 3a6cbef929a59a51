"""CPU-only checks of the built-in CUDA kernels: every op x dtype compiles (NVRTC, nvcc) to PTX that has
the planned kernel with exactly the argument list the plan passes, and the plans' index arithmetic
(broadcast, permute, transpose) is right. No GPU is needed; numerical GPU checks live in
scripts/kernel_selftest.py and tests/cuda/.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import pytest

from pipelink.dtypes import get_dtype
from pipelink.errors import InvalidArgumentError
from pipelink.ops import FAMILIES, cuda_kernel, cuda_kernels
from pipelink.ops.batch_norm.cuda import plan_batch_norm
from pipelink.ops.compare.cuda import COMPARE, LOGICAL, plan_compare, plan_logical_not, plan_predicate
from pipelink.ops.compare.cuda import DTYPES as COMPARE_DTYPES
from pipelink.ops.conv.col2im import col2im_geometry, plan_col2im
from pipelink.ops.conv.deform import plan_deform_conv2d
from pipelink.ops.conv.deform_im2col import plan_deform_im2col
from pipelink.ops.conv.deform_sampling import deform_geometry
from pipelink.ops.conv.window import window_2d, window_nd
from pipelink.ops.elementwise.cuda import (
    BINARY,
    BINARY_DTYPES,
    UNARY,
    UNARY_DTYPES,
    plan_bias_add,
    plan_binary,
    plan_cast,
    plan_cast_any,
    plan_unary,
)
from pipelink.ops.indexing.cuda import plan_eye_like, plan_gather_nd, plan_one_hot, plan_scatter_elements
from pipelink.ops.kernel import CUDA_VARIANT, LaunchPlan, include_dir
from pipelink.ops.normalization.cuda import plan_layer_norm, plan_rms_norm
from pipelink.ops.pool.cuda import plan_pool
from pipelink.ops.quantize.cuda import Q_KINDS, plan_quantize
from pipelink.ops.reduce.cuda import (
    ARG_DTYPES,
    ARG_KINDS,
    plan_arg_reduce,
    plan_hardmax,
    plan_reduce,
    plan_scan,
)
from pipelink.ops.reduce.cuda import DTYPES as REDUCE_DTYPES
from pipelink.ops.reduce.topk_cuda import plan_top_k
from pipelink.ops.resize import resize_plan
from pipelink.ops.resize.cuda import plan_resize
from pipelink.ops.roi.cuda import plan_roi_align
from pipelink.ops.rotary.cuda import ROTARY_DTYPES, plan_rotary_embedding
from pipelink.ops.shape.cuda import (
    plan_concat,
    plan_gather,
    plan_gather_elements,
    plan_scatter_nd,
    plan_trilu,
    plan_where,
)
from pipelink.ops.softmax.cuda import plan_softmax
from pipelink.ops.transpose.cuda import plan_as_strided, plan_transpose

FLOATS = ("float32", "float16", "bfloat16")
ALL_FLOATS = FLOATS + ("float64",)
EPS = 1e-5  # any eps: it is a kernel argument, not a macro
_PTX_KIND = {"ptr": "u64", "i64": "u64", "i32": "u32", "f32": "f32", "f64": "f64"}


def _cases() -> list[tuple[str, LaunchPlan]]:
    """One plan per op x dtype x interesting shape / tunable setting."""
    cases = []
    for dt in ALL_FLOATS:
        for op in (op for op in UNARY if dt in UNARY_DTYPES[op]):  # not bitwise_not: integers only
            cases.append((f"{op}-{dt}", plan_unary(op, dt, (1_000_003,), factor=0.5)))
        cases.append(
            (f"gelu-{dt}-unroll4", plan_unary("gelu", dt, (4096,), tuned={"unroll": 4, "block": 128}))
        )
        for op in (op for op in BINARY if dt in BINARY_DTYPES[op]):  # not the bitwise ops and shifts
            cases.append((f"{op}-{dt}", plan_binary(op, dt, (1000, 3), (1000, 3))))
        cases.append((f"add-bcast-{dt}", plan_binary("add", dt, (7, 1, 5, 3), (6, 1, 3))))
        cases.append(
            (f"mul-bcast-{dt}", plan_binary("mul", dt, (2, 3, 4, 5, 6, 7, 8, 9), (3, 1, 5, 1, 7, 1, 9)))
        )
        cases.append((f"bias_add-{dt}", plan_bias_add(dt, (37, 1000))))
        cases.append((f"bias_add-odd-{dt}", plan_bias_add(dt, (37, 999), tuned={"unroll": 2})))
        for out in ALL_FLOATS:
            if out != dt:
                cases.append((f"cast-{dt}-{out}", plan_cast(dt, out, (1_000_003,))))
        for c in (1000, 4096, 1001, 100_000):  # warp per row, block per row, vec 1, *_big
            cases.append((f"layer_norm-{dt}-{c}", plan_layer_norm(dt, (37, c), eps=EPS)))
        for c in (1000, 100_000):
            cases.append((f"rms_norm-{dt}-{c}", plan_rms_norm(dt, (37, c), has_gamma=c != 1000, eps=EPS)))
            cases.append((f"softmax-{dt}-{c}", plan_softmax(dt, (37, c))))
        cases.append(
            (
                f"layer_norm-{dt}-nobeta-512",
                plan_layer_norm(dt, (9, 4096), has_beta=False, tuned={"block": 512}, eps=EPS),
            )
        )
        cases.append(
            (
                f"layer_norm-{dt}-group8",
                plan_layer_norm(dt, (9, 64), tuned={"group": 8, "block": 64}, eps=EPS),
            )
        )
        for bias in (None, (0, 4096, 1), (0, 1, 0), (1, 0, 4)):  # scale only, vector, per row, strided
            cases.append(
                (f"softmax-scaled-{dt}-{bias}", plan_softmax(dt, (3, 4, 4096), scale=0.5, bias_strides=bias))
            )
        cases.append(
            (f"softmax-scaled-big-{dt}", plan_softmax(dt, (3, 100_000), scale=0.5, bias_strides=(0, 1)))
        )
        cases.append((f"transpose-{dt}", plan_transpose(dt, (3, 37, 41))))
        cases.append((f"transpose64-{dt}", plan_transpose(dt, (37, 41), tuned={"tile": 64, "tile_rows": 16})))
        cases.append((f"permute-{dt}", plan_transpose(dt, (2, 3, 4, 5), (3, 1, 0, 2))))
        cases.append((f"batch_norm-{dt}", plan_batch_norm(dt, (2, 3, 5, 8), eps=EPS)))
        cases.append(
            (f"batch_norm-2d-{dt}", plan_batch_norm(dt, (5, 16), has_gamma=False, has_beta=False, eps=EPS))
        )
    for dt in ("int8", "int16", "uint16", "uint32", "uint64"):
        cases.append((f"transpose-{dt}", plan_transpose(dt, (5, 7))))
    for dt in ("bool", "float16", "float32", "float64"):  # element words of 1, 2, 4 and 8 bytes
        cases.append((f"as_strided-{dt}", plan_as_strided(dt, (2, 8, 48), (2, 2, 8, 8), (384, 8, 48, 1), 1)))
        cases.append(
            (f"as_strided-tiled-{dt}", plan_as_strided(dt, (2, 8, 48), (2, 2, 8, 8), (384, 8, 1, 48), 16))
        )
    cases.append(
        ("as_strided-16B", plan_as_strided("float32", (2, 8, 48), (2, 2, 8, 8), (384, 8, 48, 1), 16))
    )
    cases.append(("as_strided-8B", plan_as_strided("float16", (4, 12), (4, 8), (12, 1), 4)))
    cases.append(("as_strided-index64", plan_as_strided("int8", (2**31 + 8,), (8, 4), (2**28, 1), 0)))
    for dt in ("bool", "float16", "float32", "int64", "float8_e4m3fn"):  # element sizes 1, 2, 4, 8
        for it in ("int32", "int64"):
            cases.append((f"gather-{dt}-{it}", plan_gather(dt, (50, 7), it, (3, 4), 0)))
            cases.append(
                (f"gather_elements-{dt}-{it}", plan_gather_elements(dt, (5, 7, 3), it, (4, 6, 3), -2))
            )
        cases.append((f"where-{dt}", plan_where(dt, (5, 1), (1, 7), (5, 7))))
        cases.append((f"trilu-{dt}", plan_trilu(dt, (3, 5, 7), -1, dt != "bool")))
        cases.append((f"scatter_nd-{dt}", plan_scatter_nd(dt, (4, 5, 6), "int64", (3, 2))))
    cases.append(("scatter_nd-k0-int32", plan_scatter_nd("float32", (4, 5), "int32", (2, 0))))
    for dt in ("bool", "float16", "float32", "int64"):  # indexing: element words of 1, 2, 4, 8 bytes
        for it in ("int32", "int64"):
            cases.append((f"gather_nd-{dt}-{it}", plan_gather_nd(dt, (3, 5, 7, 2), it, (3, 4, 2), 1)))
            cases.append(
                (f"scatter_elements-{dt}-{it}", plan_scatter_elements(dt, (5, 7, 3), it, (4, 6, 3), -2))
            )
        for it in ("int8", "uint8", "int64", "int16", "uint16", "uint32", "uint64"):
            cases.append((f"one_hot-{dt}-{it}", plan_one_hot(dt, it, (3, 4), 10, 1)))
        cases.append((f"eye_like-{dt}", plan_eye_like(dt, (4, 6), -1)))
    cases.append(("gather_nd-k8", plan_gather_nd("float32", (2,) * 9, "int64", (3, 8))))
    cases.append(("where-index64", plan_where("int8", (2**31, 1), (1,), (1, 2))))
    cases.append(("gather_elements-1d", plan_gather_elements("float32", (9,), "int64", (4,), 0)))
    cases.append(("gather_elements-8d", plan_gather_elements("int8", (3,) * 8, "int32", (2,) * 8, 3)))
    cases.append(("gather_elements-index64", plan_gather_elements("int8", (2**31, 2), "int64", (3, 2), 0)))
    for dt in ("bool", "float16", "float32", "float64"):  # words of 1, 2, 4 and 8 bytes
        cases.append((f"concat-{dt}", plan_concat(dt, [(4, 3), (4, 5)], 1)))
    cases.append(("concat-16B-64parts", plan_concat("float32", [(2, 4)] * 64, 1)))
    cases.append(("concat-index64", plan_concat("int8", [(2**21, 1025), (2**21, 1)], 1)))
    win = window_2d(
        (17, 19),
        (3, 2),
        {"strides": (2, 1), "dilations": (1, 2), "pads": (1, 0, 1, 1), "auto_pad": "NOTSET"},
        op="pool",
        ceil_mode=True,
    )
    win3 = window_nd(
        (5, 17, 19),
        (2, 3, 2),
        {"strides": (1, 2, 1), "dilations": (2, 1, 2), "pads": (1, 1, 0, 0, 1, 1), "auto_pad": "NOTSET"},
        op="pool",
        ceil_mode=True,
    )
    for rank, shape, window in ((2, (2, 3, 17, 19), win), (3, (2, 3, 5, 17, 19), win3)):
        for dt in ALL_FLOATS + ("int8", "uint8"):
            cases.append((f"max_pool{rank}d-{dt}", plan_pool(f"max_pool{rank}d", dt, shape, window)))
        for dt in ALL_FLOATS:
            for pad in (False, True):
                cases.append(
                    (
                        f"avg_pool{rank}d-{dt}-{pad}",
                        plan_pool(f"avg_pool{rank}d", dt, shape, window, count_include_pad=pad),
                    )
                )
    for coord in ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "asymmetric", "align_corners"):
        for nearest in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"):
            attrs = {
                "mode": "nearest",
                "scales": (1.0, 1.0, 2.0, 1.5),
                "sizes": (),
                "coordinate_transformation_mode": coord,
                "nearest_mode": nearest,
            }
            out, scales = resize_plan((2, 3, 5, 6), attrs)
            cases.append(
                (f"resize-nearest-{coord}-{nearest}", plan_resize("int8", (2, 3, 5, 6), out, scales, attrs))
            )
    for dt in ALL_FLOATS:
        for scales in ((1.0, 1.0, 1.0, 2.0), (1.0, 1.0, 2.0, 0.5), (1.0, 3.0, 2.0, 1.5)):  # 1-3 resized axes
            attrs = {
                "mode": "linear",
                "scales": scales,
                "sizes": (),
                "coordinate_transformation_mode": "half_pixel",
                "nearest_mode": "floor",
            }
            out, sc = resize_plan((2, 3, 5, 6), attrs)
            cases.append((f"resize-linear-{dt}-{scales}", plan_resize(dt, (2, 3, 5, 6), out, sc, attrs)))
            cubic = {**attrs, "mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": scales[1] == 3.0}
            cases.append((f"resize-cubic-{dt}-{scales}", plan_resize(dt, (2, 3, 5, 6), out, sc, cubic)))
            for filtered in (attrs, cubic):  # antialias: the filter stretched when downsampling
                aa = {**filtered, "antialias": True, "coordinate_transformation_mode": "half_pixel_symmetric"}
                name = f"resize-{aa['mode']}-antialias-{dt}-{scales}"
                cases.append((name, plan_resize(dt, (2, 3, 5, 6), out, sc, aa)))
    for q in Q_KINDS:
        for ft in FLOATS:
            for op in ("quantize_linear", "dequantize_linear"):
                cases.append((f"{op}-{q}-{ft}", plan_quantize(op, ft, q, (4, 6, 5), 1)))
        cases.append(
            (
                f"quantize_linear-{q}-nosat",
                plan_quantize("quantize_linear", "float32", q, (9,), None, saturate=False),
            )
        )
    for mode in ("down", "nearest"):  # e8m0's other round modes (up is the default, above)
        plan = plan_quantize("quantize_linear", "float16", "float8_e8m0fnu", (9,), None, round_mode=mode)
        cases.append((f"quantize_linear-float8_e8m0fnu-{mode}", plan))
    for kind, dtypes in REDUCE_DTYPES.items():
        for dt in dtypes:
            cases.append((f"reduce_{kind}-{dt}", plan_reduce(kind, dt, (8, 5, 40), (0, 2))))
        for dt in ("float32", "bfloat16", "int64"):
            if dt in dtypes:  # a block per output (long rows), and a plan with 64-bit indices
                cases.append((f"reduce_{kind}-long-{dt}", plan_reduce(kind, dt, (3, 5000), (1,))))
                cases.append((f"reduce_{kind}-i64-{dt}", plan_reduce(kind, dt, (2**31, 2), (1,))))
    for kind in ARG_KINDS:  # argmax / argmin: a warp per output (both tie rules), a block, 64-bit indices
        for dt in ARG_DTYPES:
            for last in (False, True):
                plan = plan_arg_reduce(kind, dt, (8, 5, 40), 1, select_last_index=last)
                cases.append((f"arg{kind}-{dt}-last{int(last)}", plan))
            cases.append((f"arg{kind}-long-{dt}", plan_arg_reduce(kind, dt, (3, 5000), 1)))
        for dt in ("float32", "bfloat16", "int64"):
            cases.append((f"arg{kind}-i64-{dt}", plan_arg_reduce(kind, dt, (2**31, 2), 0)))
    for kind in ("sum", "prod"):  # cumsum, cumprod: a warp per line (innermost axis), a thread per line
        for dt in ARG_DTYPES:
            for flags in ((False, False), (True, True)):
                for axis in (1, 2):
                    plan = plan_scan(kind, dt, (8, 5, 40), axis, exclusive=flags[0], reverse=flags[1])
                    cases.append((f"cum{kind}-{dt}-{axis}-{int(flags[0])}", plan))
    for dt in ALL_FLOATS:  # hardmax: argmax's walk writing the one-hot line; a warp, a block per line
        cases.append((f"hardmax-{dt}", plan_hardmax(dt, (8, 5, 40), 1)))
        cases.append((f"hardmax-long-{dt}", plan_hardmax(dt, (3, 5000), 1)))
    for dt in ARG_DTYPES:  # top_k: short lines, 4096 slots (narrow, wide indices), both orders
        for largest in (True, False):
            cases.append((f"top_k-{dt}-{largest}", plan_top_k(dt, (8, 40, 5), 1, 7, largest=largest)))
        cases.append((f"top_k-4096-{dt}", plan_top_k(dt, (2, 4096), 1, 4096)))
        cases.append((f"top_k-vocab-{dt}", plan_top_k(dt, (2, 50257), 1, 50)))
        cases.append((f"top_k-wide-{dt}", plan_top_k(dt, (1, 70000), 0 + 1, 1000, largest=False)))
    for op in UNARY:
        for dt in sorted(set(UNARY_DTYPES[op]) - set(ALL_FLOATS)):  # neg, abs, sign of the integers
            cases.append((f"{op}-{dt}", plan_unary(op, dt, (1000, 33))))
    for op in BINARY:
        for dt in set(BINARY_DTYPES[op]) - set(ALL_FLOATS):  # the wrapping integer kernels
            cases.append((f"{op}-{dt}", plan_binary(op, dt, (1000, 32), (1000, 32))))
            cases.append((f"{op}-bcast-{dt}", plan_binary(op, dt, (7, 1, 5, 3), (6, 1, 3))))
    for din, dout in (
        ("int32", "float16"),
        ("bfloat16", "int8"),
        ("bool", "float32"),
        ("float64", "uint8"),
        ("int64", "bool"),
        ("float32", "float8_e4m3fn"),
        ("float64", "float8_e5m2"),
        ("float8_e4m3fn", "float16"),
        ("float8_e5m2", "int32"),
        ("float8_e4m3fn", "float8_e5m2"),
        ("uint64", "float32"),
        ("float16", "uint16"),
        ("int16", "uint32"),
        ("uint32", "bool"),
        ("float64", "uint64"),
        ("float8_e5m2", "int16"),
        ("float32", "float8_e4m3fnuz"),
        ("float64", "float8_e5m2fnuz"),
        ("float8_e4m3fnuz", "bfloat16"),
        ("float8_e5m2fnuz", "float8_e4m3fn"),
        ("float16", "float8_e8m0fnu"),
        ("int64", "float8_e8m0fnu"),
        ("uint64", "float8_e8m0fnu"),
        ("float8_e8m0fnu", "float32"),
        ("float8_e8m0fnu", "int32"),
        ("float8_e4m3fnuz", "float8_e8m0fnu"),
    ):
        cases.append((f"cast_any-{din}-{dout}", plan_cast_any(din, dout, (1000,))))
    for op in (*COMPARE, *LOGICAL):  # every op x input dtype, same shape; broadcast per dtype and per op
        for dt in COMPARE_DTYPES[op]:
            cases.append((f"{op}-{dt}", plan_compare(op, dt, (1_000_003,), (1_000_003,))))
            if op in ("less", "equal", "logical_xor") or dt == "float16":
                cases.append((f"{op}-bcast-{dt}", plan_compare(op, dt, (7, 1, 5, 3), (6, 1, 3))))
    cases.append(("less-bcast-index64", plan_compare("less", "int8", (2**31, 1), (1, 2))))
    cases.append(("logical_not", plan_logical_not((1_000_003,))))
    cases.append(("logical_not-one-pass", plan_logical_not((4096,))))
    for dt in ("float32", "float16", "bfloat16", "float64"):
        cases.append((f"is_nan-{dt}", plan_predicate("is_nan", dt, (1001,))))
        cases.append((f"is_inf-{dt}", plan_predicate("is_inf", dt, (1001,), detect_negative=False)))
    for dt in ROTARY_DTYPES:  # rotary_embedding: both layouts x interleaved, position ids or per-token caches
        for shape, heads in (((2, 7, 48), 4), ((2, 4, 7, 12), 0)):
            for interleaved in (False, True):
                plan = plan_rotary_embedding(
                    dt,
                    shape,
                    num_heads=heads,
                    rotary_dim=8,
                    interleaved=interleaved,
                    cache_shape=(16, 4),
                    index_dtype="int32" if interleaved else "int64",
                )
                cases.append((f"rotary_embedding-{dt}-{len(shape)}d-{int(interleaved)}", plan))
        plan = plan_rotary_embedding(dt, (2, 7, 48), num_heads=4, cache_shape=(2, 7, 6))
        cases.append((f"rotary_embedding-{dt}-per-token", plan))
    cases.append(
        (
            "rotary_embedding-index64",
            plan_rotary_embedding(
                "float16", (2**31, 1, 2), num_heads=1, cache_shape=(4, 1), index_dtype="int64"
            ),
        )
    )
    # one compilation per distinct (source, macros): plans of other shapes would build the same module
    unique = {
        (plan.file, tuple(sorted(plan.macros.items())), plan.kernel): (name, plan) for name, plan in cases
    }
    return list(unique.values())


CASES = _cases()


def _check_ptx(ptx: str, plan: LaunchPlan) -> None:
    # the kernel exists and its parameters match, one by one, what plan.args() passes
    match = re.search(rf"\.entry {plan.kernel}\((.*?)\)", ptx, re.S)
    assert match, f"{plan.kernel} missing from the PTX"
    kinds = re.findall(r"\.param \.(\w+)", match.group(1))
    assert kinds == [_PTX_KIND[a.kind] for a in plan.arg_specs], (plan.kernel, kinds, plan.arg_specs)
    assert len(plan.args(**{a.name: 4096 for a in plan.arg_specs if a.kind == "ptr"})) == len(kinds)


# ------------------------------------------------------------------------------------------------
# NVRTC
# ------------------------------------------------------------------------------------------------
def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        pytest.skip("cuda.bindings is not installed (pip install cuda-bindings nvidia-cuda-nvrtc)")
    try:
        nvrtc.nvrtcVersion()
    except Exception as e:  # the shared library is missing
        pytest.skip(f"NVRTC library not loadable: {e}")
    return nvrtc


def _nvrtc_compile(source: str, name: str, options: list[str]) -> tuple[bool, str]:
    """(ok, PTX or log); module-level so that worker processes can run it."""
    from cuda.bindings import nvrtc

    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        return False, f"nvrtcCreateProgram: {err}"
    try:
        opts = [o.encode() for o in options]
        (res,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if res != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            _, size = nvrtc.nvrtcGetProgramLogSize(prog)
            log = b" " * size
            nvrtc.nvrtcGetProgramLog(prog, log)
            return False, log.decode(errors="replace")
        _, size = nvrtc.nvrtcGetPTXSize(prog)
        ptx = b" " * size
        nvrtc.nvrtcGetPTX(prog, ptx)
        return True, ptx.decode(errors="replace")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _nvrtc_ptx(nvrtc, plan: LaunchPlan, extra_include: tuple[str, ...] = ()) -> str:
    ok, text = _nvrtc_compile(
        plan.source(), plan.file, plan.options(arch="sm_90", extra_include=extra_include)
    )
    assert ok, f"{plan.kernel} {plan.macros}:\n{text}"
    return text


def _cuda_include() -> str | None:
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and (Path(root) / "include" / "cuda_fp16.h").is_file():
            return str(Path(root) / "include")
    return None


def test_nvrtc_compiles_every_case():
    """Every plan compiles with NVRTC without any CUDA header (the self-contained path) and its PTX
    matches the plan's argument list; a failure means a kernel the backend cannot build or launch."""
    _nvrtc()
    jobs = [(plan.source(), plan.file, plan.options(arch="sm_90")) for _, plan in CASES]
    # NVRTC holds the GIL: compile in worker processes to use every core
    try:
        with ProcessPoolExecutor(
            max_workers=min(4, os.cpu_count() or 1), mp_context=get_context("spawn")
        ) as pool:
            results = list(pool.map(_nvrtc_compile, *zip(*jobs, strict=True), chunksize=4))
    except (OSError, RuntimeError, AttributeError, ImportError):  # no worker processes here: one by one
        results = [_nvrtc_compile(*job) for job in jobs]
    for (name, plan), (ok, text) in zip(CASES, results, strict=True):
        assert ok, f"{name} {plan.macros}:\n{text}"
        assert ".target sm_90" in text, name
        _check_ptx(text, plan)


def test_nvrtc_with_cuda_headers():
    """With the toolkit's cuda_fp16.h / cuda_bf16.h reachable, the header path compiles too."""
    nvrtc = _nvrtc()
    inc = _cuda_include()
    if inc is None:
        pytest.skip("no CUDA include folder with cuda_fp16.h (set CUDA_HOME)")
    subset = [c for c in CASES if "bfloat16" in c[0] or "float16" in c[0]][::4]
    for _name, plan in subset:
        _check_ptx(_nvrtc_ptx(nvrtc, plan, (inc,)), plan)


# ------------------------------------------------------------------------------------------------
# nvcc (a representative subset: one plan per kernel and dtype family)
# ------------------------------------------------------------------------------------------------
def _nvcc_subset() -> list[tuple[str, LaunchPlan]]:
    seen, out = set(), []
    for name, plan in CASES:
        key = (plan.file, plan.macros.get("PL_T", plan.macros.get("PL_TIN")))
        if key not in seen and plan.macros.get("PL_T") in ("float", "__nv_bfloat16", "double", None):
            seen.add(key)
            out.append((name, plan))
    return out


def test_nvcc_compiles_subset():
    """nvcc (the toolkit that module authors use) accepts the same sources and options."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not found on PATH")
    subset = _nvcc_subset()
    with tempfile.TemporaryDirectory() as tmp:

        def build(case):
            name, plan = case
            src = plan.path
            out = Path(tmp) / f"{name}.ptx"
            cmd = [nvcc, "--ptx", "-o", str(out), *plan.options(arch="sm_90"), str(src)]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            assert proc.returncode == 0, f"{name}: {' '.join(cmd)}\n{proc.stderr}"
            return out.read_text()

        with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            ptxs = list(pool.map(build, subset))
    for (_name, plan), ptx in zip(subset, ptxs, strict=True):
        _check_ptx(ptx, plan)


def test_vectorised_loads_are_16_bytes():
    """The wide paths really issue 16-byte accesses (otherwise bandwidth targets are out of reach)."""
    nvrtc = _nvrtc()
    for plan in (plan_layer_norm("bfloat16", (8, 4096), eps=EPS), plan_unary("silu", "float32", (1 << 20,))):
        ptx = _nvrtc_ptx(nvrtc, plan)
        assert re.search(r"ld\.global(\.nc)?\.v4\.(u32|b32|f32)", ptx), plan.kernel
        assert re.search(r"st\.global\.v4\.(u32|b32|f32)", ptx), plan.kernel


# ------------------------------------------------------------------------------------------------
# plan logic (pure Python)
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dt", ALL_FLOATS)
@pytest.mark.parametrize("c", [1, 3, 6, 1000, 1001, 4096, 4098])
def test_row_vector_width_keeps_rows_aligned(dt, c):
    plan = plan_layer_norm(dt, (5, c), eps=EPS)
    vec, item = int(plan.macros["PL_VEC"]), np.dtype(get_dtype(dt).numpy).itemsize
    assert c % vec == 0 and vec * item <= 16
    if not plan.kernel.endswith("_big"):
        assert int(plan.macros["PL_GROUP"]) * vec * int(plan.macros["PL_MAX_VEC_PER_THREAD"]) >= c


def test_args_reject_misaligned_and_missing_pointers():
    plan = plan_layer_norm("bfloat16", (4, 4096), eps=EPS)
    ok = plan.args(x=256, gamma=512, beta=768, y=1024)
    assert ok[6] == np.int64(4) and ok[7] == np.int32(4096) and ok[8] == np.float32(1e-5)
    with pytest.raises(InvalidArgumentError, match="aligned"):
        plan.args(x=258, gamma=512, beta=768, y=1024)
    with pytest.raises(InvalidArgumentError, match="required"):
        plan.args(x=256, beta=768, y=1024)
    with pytest.raises(InvalidArgumentError, match="tunable"):
        plan_softmax("float32", (4, 8), tuned={"block": 100})


def _emulate_strided(plan: LaunchPlan, prefix: str, src: np.ndarray) -> np.ndarray:
    """What pl_permute / pl_binary_bcast read for every output element, from the plan's scalars."""
    ndim = int(plan.macros["PL_NDIM"])
    dims = [plan.scalars[f"d{k}"] for k in range(ndim)]
    idx = np.indices(dims).reshape(ndim, -1)
    off = sum(idx[k] * plan.scalars[f"{prefix}{k}"] for k in range(ndim))
    return src.reshape(-1)[off]


@pytest.mark.parametrize(
    "shape,perm",
    [
        ((2, 3, 4, 5), (3, 1, 0, 2)),
        ((2, 1, 4, 5), (0, 2, 3, 1)),
        ((6, 7), (1, 0)),
        ((2, 3, 4), (0, 2, 1)),
        ((2, 3, 4, 5), (0, 1, 3, 2)),
        ((2, 3, 4, 5), (2, 3, 0, 1)),
        ((3, 4, 5), (0, 1, 2)),
        ((1, 1), (1, 0)),
    ],
)
def test_transpose_plan_index_math(shape, perm):
    """The merged dims and strides a transpose plan hands the kernel reproduce numpy.transpose."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape)
    expect = np.transpose(x, perm).reshape(-1)
    plan = plan_transpose("float32", shape, perm)
    if plan.kernel == "pl_transpose":
        b, r, c = plan.scalars["batch"], plan.scalars["R"], plan.scalars["C"]
        got = x.reshape(b, r, c).transpose(0, 2, 1).reshape(-1)
    else:
        got = _emulate_strided(plan, "s", x)
    np.testing.assert_array_equal(got, expect)


@pytest.mark.parametrize(
    "sa,sb", [((7, 1, 5, 3), (6, 1, 3)), ((4, 5), (5,)), ((4, 1), (1, 6)), ((2, 3, 4), (2, 3, 4)), ((), (3,))]
)
def test_broadcast_plan_index_math(sa, sb):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(sa), rng.standard_normal(sb)
    plan = plan_binary("add", "float32", sa, sb)
    expect = (a + b).reshape(-1)
    if plan.kernel == "pl_binary":
        got = a.reshape(-1) + b.reshape(-1)
    else:
        got = _emulate_strided(plan, "sa", a) + _emulate_strided(plan, "sb", b)
    np.testing.assert_array_equal(got, expect)


@pytest.mark.parametrize(
    ("shape", "axes"),
    [
        ((3, 4, 5), (1,)),
        ((3, 4, 5), (0, 2)),
        ((3, 4, 5), ()),
        ((3, 4, 5), (0, 1, 2)),
        ((2, 3, 4, 5, 6), (1, 3)),
        ((2, 0, 3), (1,)),
        ((6, 2000), (1,)),
    ],
)
@pytest.mark.parametrize("kind", ["sum", "max"])
def test_reduce_plan_index_math(shape, axes, kind):
    """pl_reduce's walk (kept dims -> row base offset, reduced dims -> offsets in the row) with the plan's
    merged dims and strides folds exactly the elements numpy folds, in every output position."""
    x = np.random.default_rng(2).standard_normal(shape)
    plan = plan_reduce(kind, "float64", shape, axes)
    s = plan.scalars

    def offsets(prefix_d, prefix_s, ndim):
        dims = [s[f"{prefix_d}{k}"] for k in range(ndim)]
        idx = np.indices(dims).reshape(ndim, -1)
        return sum(idx[k] * s[f"{prefix_s}{k}"] for k in range(ndim))

    base = offsets("dk", "sk", int(plan.macros["PL_NDIM_K"]))
    off = offsets("dr", "sr", int(plan.macros["PL_NDIM_R"]))
    assert base.size == s["rows"] and off.size == s["count"]
    vals = x.reshape(-1)[base[:, None] + off[None, :]]
    fold = np.sum if kind == "sum" else np.max
    expect = fold(x, axis=axes, initial=-np.inf) if kind == "max" else fold(x, axis=axes)
    got = fold(vals, axis=1, initial=-np.inf) if kind == "max" else fold(vals, axis=1)
    np.testing.assert_allclose(got, np.asarray(expect).reshape(-1), rtol=1e-12)


def test_reduce_plan_refuses_what_its_kernel_lacks():
    with pytest.raises(InvalidArgumentError, match="dtype must be one of"):
        plan_reduce("mean", "int32", (4, 4), (1,))
    with pytest.raises(InvalidArgumentError, match="unknown scan"):
        plan_scan("max", "float32", (4, 4), 1)
    with pytest.raises(InvalidArgumentError, match="dtype must be one of"):
        plan_hardmax("int32", (4, 4), 1)
    with pytest.raises(InvalidArgumentError, match=r"k must be in \[0, 4\]"):
        plan_top_k("float32", (4, 4), 1, 5)
    with pytest.raises(InvalidArgumentError, match="unknown reduction"):
        plan_reduce("l2", "float32", (4, 4), (1,))
    with pytest.raises(InvalidArgumentError, match="dtype must be one of"):
        plan_reduce("sum", "bool", (4, 4), (1,))  # bool reduces by max and min (any, all) only
    assert plan_reduce("sum", "float32", (4, 5000), (1,)).params["group"] == 256  # a block per output
    assert plan_reduce("max", "int8", (4, 50), (1,)).macros["PL_LOWEST"] == "(-127LL - 1)"
    # the empty min is the highest value: a uint64 literal of its own, bool's True
    assert plan_reduce("min", "uint64", (4, 50), (1,)).macros["PL_HIGHEST"] == "18446744073709551615ULL"
    assert plan_reduce("min", "int16", (4, 50), (1,)).macros["PL_HIGHEST"] == "32767LL"
    assert plan_reduce("min", "bool", (4, 50), (1,)).macros["PL_HIGHEST"] == "1LL"


def _arg_wins(kind: str, last: bool, a: tuple, b: tuple) -> bool:
    """pl_arg_wins of reduce.cu: whether candidate a = (value, index) is kept over b."""
    (va, ia), (vb, ib) = a, b
    if ia < 0 or ib < 0:
        return ib < 0
    tie = ia > ib if last else ia < ib
    if np.isnan(va) or np.isnan(vb):
        return tie if np.isnan(va) and np.isnan(vb) else bool(np.isnan(va))
    if va == vb:
        return tie
    return va > vb if kind == "max" else va < vb


@pytest.mark.parametrize(
    ("shape", "axis"),
    [((3, 4, 5), 0), ((3, 4, 5), 1), ((3, 4, 5), 2), ((1, 7), 1), ((2, 1, 3), 1), ((4, 1500), 1)],
)
@pytest.mark.parametrize("last", [False, True])
@pytest.mark.parametrize("kind", ["max", "min"])
def test_arg_reduce_plan_walk_and_combine(shape, axis, last, kind):
    """pl_arg_reduce emulated with the plan's dims, strides and group: each lane keeps its best candidate
    over r = lane, lane + GROUP, ..., then pl_arg_group's xor butterfly in each warp and the warps in
    order; every output must be NumPy's index (NaN the extreme; the first tie, or the last)."""
    rng = np.random.default_rng(3)
    x = rng.integers(0, 3, shape).astype(np.float64)  # many ties
    x[rng.random(shape) < 0.05] = np.nan
    plan = plan_arg_reduce(kind, "float64", shape, axis, select_last_index=last)
    s, group = plan.scalars, plan.params["group"]
    assert group == int(plan.macros["PL_GROUP"]) and plan.macros["PL_LAST"] == str(int(last))

    def offsets(prefix_d, prefix_s, ndim):
        dims = [s[f"{prefix_d}{k}"] for k in range(ndim)]
        idx = np.indices(dims).reshape(ndim, -1)
        return sum(idx[k] * s[f"{prefix_s}{k}"] for k in range(ndim))

    base = offsets("dk", "sk", int(plan.macros["PL_NDIM_K"]))
    off = offsets("dr", "sr", int(plan.macros["PL_NDIM_R"]))
    assert base.size == s["rows"] and off.size == s["count"] == shape[axis]
    wins = lambda a, b: _arg_wins(kind, last, a, b)  # noqa: E731
    got = []
    for row_base in base:
        lanes = []
        for lane in range(group):
            best = (0.0, -1)
            for r in range(lane, s["count"], group):
                cand = (x.reshape(-1)[row_base + off[r]], r)
                best = cand if wins(cand, best) else best
            lanes.append(best)
        width = min(group, 32)
        offset = width // 2
        while offset:
            lanes = [
                lanes[k] if wins(lanes[k], lanes[k ^ offset]) else lanes[k ^ offset] for k in range(group)
            ]
            offset //= 2
        best = lanes[0]
        for w in range(1, group // 32):
            best = best if wins(best, lanes[32 * w]) else lanes[32 * w]
        got.append(best[1])
    find = np.argmax if kind == "max" else np.argmin
    want = (shape[axis] - 1) - find(np.flip(x, axis), axis=axis) if last else find(x, axis=axis)
    np.testing.assert_array_equal(np.array(got), want.reshape(-1))


def test_arg_reduce_plan_refuses_what_its_kernel_lacks():
    with pytest.raises(InvalidArgumentError, match="dtype must be one of"):
        plan_arg_reduce("max", "bool", (4, 4), 1)
    with pytest.raises(InvalidArgumentError, match="unknown index reduction"):
        plan_arg_reduce("sum", "float32", (4, 4), 1)
    with pytest.raises(InvalidArgumentError, match="of size >= 1"):
        plan_arg_reduce("min", "float32", (4, 0), 1)
    with pytest.raises(InvalidArgumentError, match="of size >= 1"):
        plan_arg_reduce("min", "float32", (4, 3), 2)
    plan = plan_arg_reduce("max", "int8", (4, 5000), 1, select_last_index=True)
    assert plan.params["group"] == 256 and plan.macros["PL_LAST"] == "1" and "PL_LOWEST" not in plan.macros
    assert plan_arg_reduce("min", "float16", (2**31, 2), 0).macros["PL_INDEX64"] == "1"


def test_every_kernel_source_defines_its_kernel():
    """Each family's KERNELS entry names a kernel its .cu file defines, with allowed defaults."""
    for op, src in cuda_kernels().items():
        assert f"{src.kernel}(" in src.text(), op
        assert src.path.parent.parent == Path(include_dir()), f"{op}: {src.path} is not in a family folder"
        for name, (default, allowed) in src.tunables.items():
            assert default in allowed, (op, name)


# conv's operators with kernels of their own (ops/conv/col2im.cu, deform.cu), not cuDNN's
OWN_KERNELS = ("col2im", "deform_conv2d", "deform_im2col")


def test_every_builtin_operator_declares_its_cuda_variant():
    """Each family with kernels registers its operators with a CUDA variant, but those it declares
    ``HOST_ONLY`` (their reference runs on staged host copies); operators tuned as another one find that
    kernel. The collectives have no kernels: their CUDA variant is NCCL (ops/collective)."""
    for family in FAMILIES:
        library = {
            ".collective": "cuda:nccl",
            ".gemm": "cuda:cublaslt",
            ".conv": "cuda:cudnn",
            ".attention": "cuda:cudnn",
        }
        variant = next((v for k, v in library.items() if family.__name__.endswith(k)), CUDA_VARIANT)
        assert hasattr(family, "cuda") == (variant != "cuda:nccl"), family.__name__
        for desc in family.descriptors():
            devices = [(v.device, v.name) for v in desc.variants]
            if desc.name in getattr(family, "HOST_ONLY", ()):  # declared: its reference runs staged
                assert [d for d, _ in devices] == ["cpu"] and desc.variants[0].host_ok, desc.name
                continue
            own = desc.name in OWN_KERNELS  # an operator of a library family with a built-in kernel
            assert ("cuda", CUDA_VARIANT if own else variant) in devices, desc.name
    assert cuda_kernel("silu_activation") is cuda_kernel("silu")
    assert cuda_kernel("gemm") is None  # cuBLASLt: nothing to tune


def test_source_hash_changes_with_the_source_and_macros(tmp_path):
    """The one kernel-source hash (tuning cache key and module key) changes when the code would."""
    from dataclasses import replace

    from pipelink.ops.kernel import source_hash

    src = cuda_kernel("layer_norm")
    copy = tmp_path / src.file
    copy.write_text(src.text())
    same = replace(src, path=copy)
    assert same.source_hash() == src.source_hash()
    copy.write_text(src.text() + "\n// changed\n")
    assert same.source_hash() != src.source_hash()
    assert replace(src, macros={"PL_X": "1"}).source_hash() != src.source_hash()
    assert source_hash("a", {"X": 1, "Y": 2}) == source_hash("a", {"Y": 2, "X": 1})


def test_eps_is_a_required_plan_argument():
    """The plans take eps from the stage (the descriptor's default), never a default of their own."""
    with pytest.raises(TypeError):
        plan_rms_norm("float32", (4, 8))  # type: ignore[call-arg]


def test_flat_kernels_keep_their_vectors_in_registers():
    """pl_vector_loop's lambdas capture the slot arrays by reference: after inlining they must stay in
    registers (a .local array would spill every vector to memory and halve the bandwidth); so must the
    scaled softmax's rows (its row transform is a functor) and as_strided's words in flight."""
    nvrtc = _nvrtc()
    plans = [
        plan_unary("gelu", "bfloat16", (1 << 20,), tuned={"unroll": 4}),
        plan_unary("scale", "float32", (4099,), sm_count=132),  # one pass (and a tail)
        plan_binary("add", "float32", (1 << 20,), (1 << 20,)),
        plan_bias_add("float16", (64, 1024)),
        plan_cast("float32", "bfloat16", (1 << 20,)),
        plan_batch_norm("float32", (8, 16, 32, 32), eps=EPS),
        plan_softmax("float32", (32, 12, 128, 128), scale=0.125, bias_strides=(0, 0, 128, 1)),
        plan_as_strided("float32", (32, 128, 2304), (32, 12, 128, 64), (294912, 64, 2304, 1), 768),
    ]
    for plan in plans:
        ptx = _nvrtc_ptx(nvrtc, plan)
        assert ".local" not in ptx, f"{plan.kernel} {plan.macros} uses local memory"


def test_the_tuner_finds_tunables_aliases_and_hashes_through_the_operator():
    """tune/kernels.py keeps no table of its own: what it knows comes from the family's cuda.py."""
    from pipelink.tune import kernels as cuda_tune

    assert cuda_tune.tunables_of("layer_norm") == cuda_kernel("layer_norm").tunables
    assert cuda_tune.tunables_of("silu_activation") == cuda_tune.tunables_of("silu")
    assert cuda_tune.aliases_of("softmax")["block_size"] == "block"
    assert cuda_tune.tunables_of("gemm") == {} and cuda_tune.aliases_of("gemm") == {}
    assert cuda_tune.source_hash("rms_norm") == cuda_kernel("rms_norm").source_hash()
    assert cuda_tune.source_hash("relu") != cuda_tune.source_hash("gelu")  # their macros differ
    with pytest.raises(InvalidArgumentError, match="no built-in CUDA kernel"):
        cuda_tune.source_hash("gemm")


def test_binary_plans_refuse_dtypes_their_kernel_lacks():
    """prelu has no integer kernel, the bitwise ops no float one, no binary kernel takes bool or a float8:
    the plan says which dtypes; div and pow take every integer width."""
    for op, dt in (("prelu", "int32"), ("add", "bool"), ("bitwise_and", "float32"), ("mul", "float8_e5m2")):
        with pytest.raises(InvalidArgumentError, match="dtype must be one of"):
            plan_binary(op, dt, (4,), (4,))
    for op, dt in (("div", "int8"), ("div", "uint64"), ("pow", "int64"), ("pow", "uint16")):
        assert plan_binary(op, dt, (4,), (4,)).macros["PL_T"] == get_dtype(dt).cuda_type
    assert plan_binary("mul", "uint8", (64,), (64,)).params["vec"] == 16  # 16 bytes per access
    assert plan_binary("add", "int64", (64,), (64,)).params["vec"] == 2


def test_resize_plan_marks_the_resized_axes_and_refuses_linear_integers():
    attrs = {
        "mode": "linear",
        "scales": (1.0, 1.0, 2.0, 0.5),
        "sizes": (),
        "coordinate_transformation_mode": "align_corners",
        "nearest_mode": "floor",
    }
    out, scales = resize_plan((1, 2, 4, 6), attrs)
    plan = plan_resize("float16", (1, 2, 4, 6), out, scales, attrs)
    assert plan.scalars["resized"] == 0b1100 and plan.macros["PL_NL"] == "2"
    assert (plan.scalars["dout2"], plan.scalars["dout3"], plan.scalars["sc3"]) == (8, 3, 0.5)
    with pytest.raises(InvalidArgumentError, match="mode 'linear' takes"):
        plan_resize("int8", (1, 2, 4, 6), out, scales, attrs)


def test_pool_plans_pass_the_resolved_window_and_refuse_what_they_lack():
    """The kernel gets the window conv/window.py resolved (the CPU reference's), argument by argument."""
    win = window_2d(
        (7, 6),
        (3, 2),
        {"strides": (2, 3), "dilations": (1, 1), "pads": (1, 0, 2, 1), "auto_pad": "NOTSET"},
        op="max_pool2d",
        ceil_mode=True,
    )
    plan = plan_pool("max_pool2d", "float16", (1, 2, 7, 6), win)
    s = plan.scalars
    window = tuple(s[k] for k in ("kh", "kw", "sh", "sw", "pt", "pl", "pb", "pr"))
    assert window == (3, 2, 2, 3, 1, 0, 2, 1)
    assert (s["OH"], s["OW"]) == win.out and s["n"] == 2 * win.out[0] * win.out[1]
    with pytest.raises(InvalidArgumentError, match="dtype must be one of"):
        plan_pool("avg_pool2d", "int8", (1, 2, 7, 6), win)
    with pytest.raises(InvalidArgumentError, match=r"\[N, C, H, W\]"):
        plan_pool("max_pool2d", "float32", (2, 7, 6), win)
    # 3-d: pads as [front, top, left, back, bottom, right], the depth's arguments first
    attrs3 = {"strides": (2, 1, 3), "dilations": (1, 2, 1), "pads": (1, 0, 1, 0, 2, 1), "auto_pad": "NOTSET"}
    win3 = window_nd((4, 7, 6), (2, 3, 2), attrs3, op="avg_pool3d", ceil_mode=True)
    plan = plan_pool("avg_pool3d", "bfloat16", (1, 2, 4, 7, 6), win3, count_include_pad=True)
    s = plan.scalars
    pads = tuple(s[k] for k in ("pf", "pt", "pl", "pk", "pb", "pr"))
    assert pads == (1, 0, 1, 0, 2, 1) and (s["kd"], s["sd"], s["dd"], s["dh"]) == (2, 2, 1, 2)
    assert (s["D"], s["OD"], s["OH"], s["OW"]) == (4, *win3.out) and s["n"] == 2 * math.prod(win3.out)
    assert plan.kernel == "pl_pool3d" and plan.macros["PL_NDIM"] == "3" and plan.macros["PL_COUNT_PAD"] == "1"
    with pytest.raises(InvalidArgumentError, match=r"\[N, C, D, H, W\] with a 3-d window"):
        plan_pool("max_pool3d", "float32", (1, 2, 7, 6), win)


def test_small_flat_work_is_spread_over_more_sms_unless_tuned():
    # kernel.spread_small: up to one 256-thread block per SM of vectors, one vector per thread
    small = plan_unary("relu", "float32", (4096,), sm_count=132)
    assert small.block == (256, 1, 1) and small.macros["PL_UNROLL"] == "1" and small.grid == (4, 1, 1)
    assert small.macros["PL_ONE_PASS"] == "1", "the grid covers every vector once: no grid-stride loop"
    big = plan_unary("relu", "float32", (1 << 20,), sm_count=132)
    assert big.block == (512, 1, 1) and big.macros["PL_UNROLL"] == "4" and big.macros["PL_ONE_PASS"] == "0"
    covered = plan_unary("relu", "float32", (1 << 20,), sm_count=132, tuned={"unroll": 1, "block": 1024})
    assert covered.grid[0] * 1024 >= (1 << 18) and covered.macros["PL_ONE_PASS"] == "1"
    tuned = plan_unary("relu", "float32", (4096,), sm_count=132, tuned={"block": 128})
    assert tuned.block == (128, 1, 1) and tuned.macros["PL_UNROLL"] == "4", "a tuned block is kept"
    pair = plan_binary("add", "bfloat16", (8, 1024), (8, 1024), sm_count=132)
    assert pair.block == (256, 1, 1) and pair.macros["PL_UNROLL"] == "1"
    assert plan_cast("float32", "bfloat16", (4096,), sm_count=132).block == (256, 1, 1)
    assert plan_bias_add("float16", (8, 1024), sm_count=132).block == (256, 1, 1)


# (x shape, view shape, strides, offset): 16-byte words (GPT-2's q heads), the tiled transpose (its keys,
# with a batch dim and ragged tiles), element words (misaligned offset, overlapping and broadcast reads).
AS_STRIDED_VIEWS = [
    ((2, 8, 48), (2, 2, 8, 8), (384, 8, 48, 1), 0),
    ((2, 8, 48), (2, 2, 8, 8), (384, 8, 1, 48), 16),
    ((3, 37, 41), (3, 41, 37), (1517, 1, 41), 0),
    ((2, 40, 33), (2, 30, 20), (1320, 1, 33), 5),
    ((4, 64), (4, 60), (64, 1), 1),
    ((60,), (12, 8), (4, 1), 3),
    ((4, 5), (6, 4, 5), (0, 5, 1), 0),
    ((3, 4), (), (), 7),
]


def _emulate_as_strided(plan: LaunchPlan, x: np.ndarray, shape) -> np.ndarray:
    """What pl_as_strided / pl_as_strided_tiled write, from the plan's scalars, in x's words."""
    s, word = plan.scalars, int(plan.macros["PL_BYTES"])
    words = x.reshape(-1).view(np.dtype((np.void, word)))
    ndim = int(plan.macros["PL_NDIM"])
    idx = np.indices([s[f"d{k}"] for k in range(ndim)]).reshape(ndim, -1)
    if plan.kernel == "pl_as_strided":
        y = words[s["offset"] + sum(idx[k] * s[f"s{k}"] for k in range(ndim))]
        assert y.size == s["n"]
    else:  # y[t(b) + c * yc + r] = x[offset + s(b) + r * xr + c]
        bx = sum(idx[k] * s[f"s{k}"] for k in range(ndim))[:, None, None]
        by = sum(idx[k] * s[f"t{k}"] for k in range(ndim))[:, None, None]
        r, c = np.arange(s["rows"])[None, None, :], np.arange(s["cols"])[None, :, None]
        dst = (by + c * s["yc"] + r).reshape(-1)
        y = np.empty(int(np.prod(shape)), words.dtype)
        assert np.array_equal(np.sort(dst), np.arange(y.size)), "every element of y written once"
        y[dst] = words[(s["offset"] + bx + r * s["xr"] + c).reshape(-1)]
    return np.frombuffer(y.tobytes(), x.dtype).reshape(shape)


@pytest.mark.parametrize("alignment", [16, 1])
@pytest.mark.parametrize(("x_shape", "shape", "strides", "offset"), AS_STRIDED_VIEWS)
def test_as_strided_plan_index_math(x_shape, shape, strides, offset, alignment):
    """The merged dims, words and strides an as_strided plan hands its kernel read exactly the view."""
    x = np.random.default_rng(3).standard_normal(x_shape).astype(np.float32)
    plan = plan_as_strided("float32", x_shape, shape, strides, offset, alignment=alignment)
    want = np.lib.stride_tricks.as_strided(x.reshape(-1)[offset:], shape, [4 * v for v in strides])
    np.testing.assert_array_equal(_emulate_as_strided(plan, x, shape), want)
    assert int(plan.macros["PL_BYTES"]) <= max(4, alignment)


def test_as_strided_plans_pick_their_path():
    q = plan_as_strided("float32", (32, 128, 2304), (32, 12, 128, 64), (294912, 64, 2304, 1), 768)
    assert q.kernel == "pl_as_strided" and q.macros["PL_BYTES"] == "16" and q.macros["PL_INDEX64"] == "0"
    assert q.scalars["offset"] == 192 and q.scalars["d3"] == 16, "16-byte words: 64 floats are 16 words"
    assert [a.align for a in q.arg_specs[:2]] == [16, 16]
    k = plan_as_strided("float32", (32, 128, 2304), (32, 12, 64, 128), (294912, 64, 1, 2304), 768)
    assert k.kernel == "pl_as_strided_tiled" and (k.scalars["cols"], k.scalars["rows"]) == (768, 128)
    short = plan_as_strided("float32", (2, 4099), (4099, 2), (1, 4099), 0)  # 2 rows: the tile would idle
    assert short.kernel == "pl_as_strided" and short.macros["PL_BYTES"] == "4"
    with pytest.raises(InvalidArgumentError, match="reads element"):
        plan_as_strided("float32", (4, 4), (4, 4), (4, 2), 0)
    with pytest.raises(InvalidArgumentError, match="nothing to launch"):
        plan_as_strided("float32", (4, 4), (0, 4), (4, 1), 0)


@pytest.mark.parametrize(
    ("shape", "bias_shape", "mode"),
    [
        ((2, 3, 16, 16), (1, 1, 16, 16), 1),
        ((2, 3, 16, 16), (16, 16), 1),
        ((2, 5, 33), (2, 5, 33), 1),
        ((2, 5, 33), (5, 1), 2),
        ((4, 6, 8), (4, 1, 8), 1),
        ((6, 4), (6, 4), 1),
    ],
)
def test_scaled_softmax_plan_reads_the_broadcast_bias(shape, bias_shape, mode):
    """The bias each row of pl_softmax_scaled reads (its offset decoded from the plan's dims and strides,
    then bc along the row) is NumPy's broadcast of the bias; vector reads only at aligned offsets."""
    from pipelink.ops.kernel import broadcast_strides

    rng = np.random.default_rng(4)
    bias = rng.standard_normal(bias_shape)
    plan = plan_softmax("float32", shape, scale=0.5, bias_strides=broadcast_strides(shape, bias_shape))
    s = plan.scalars
    assert plan.kernel == "pl_softmax_scaled" and int(plan.macros["PL_SOFTMAX_BIAS"]) == mode
    ndim = int(plan.macros["PL_BIAS_NDIM"])
    idx = np.indices([s[f"d{k}"] for k in range(ndim)]).reshape(ndim, -1)
    rows = sum(idx[k] * s[f"bs{k}"] for k in range(ndim))
    assert rows.size == s["rows"] and s["scale"] == 0.5
    if mode == 1:
        assert s["bc"] == 1 and (rows % int(plan.macros["PL_VEC"]) == 0).all()
    got = bias.reshape(-1)[rows[:, None] + np.arange(s["C"])[None, :] * s["bc"]]
    np.testing.assert_array_equal(got.reshape(shape), np.broadcast_to(bias, shape))


def test_plain_softmax_plan_is_kept_for_scale_one_without_bias():
    plain = plan_softmax("bfloat16", (8, 4096))
    assert plan_softmax("bfloat16", (8, 4096), scale=1.0) == plain and plain.kernel == "pl_softmax"
    assert [a.name for a in plain.arg_specs] == ["x", "y", "rows", "C"]
    scaled = plan_softmax("bfloat16", (8, 4096), scale=2.0)
    assert scaled.kernel == "pl_softmax_scaled" and scaled.macros["PL_SOFTMAX_BIAS"] == "0"
    assert scaled.arg_specs[1].optional and scaled.arg_specs[5].kind == "f32"
    assert plan_softmax("float64", (8, 64), scale=2.0).arg_specs[5].kind == "f64"


class _RecordingBackend:
    """PlanLaunch's backend without a GPU: compiles nothing, records which plan each launch used."""

    def __init__(self):
        self.launched: list[str] = []

    def compile_kernel(self, source, kernel, options):
        return kernel

    def kernel_function(self, kernel):
        return kernel

    def launch_prepared(self, function, dims, params, stream, *, what, stage):
        self.launched.append(dims)


class _At:
    def __init__(self, ptr):
        self.ptr = ptr


def test_a_launch_checks_each_pointer_against_its_own_alignment():
    """A float32 -> float16 cast whose output starts one half past a 16-byte boundary: the vector plan
    (x 16-byte, y 8-byte accesses) declines it, the element plan takes it (y needs 2 bytes, not x's 4:
    checking every pointer against the widest alignment sent the element plan to its own fallback until
    the recursion limit); a pointer off its element size is a clear error."""
    from pipelink.ops.kernel import PlanLaunch

    backend = _RecordingBackend()
    launch = PlanLaunch(
        backend,
        lambda a: plan_cast("float32", "float16", (4096,), alignment=a),
        {"x": ("in", 0), "y": ("out", 0)},
        "cast",
    )
    assert launch.plan.params["vec"] == 4
    launch([_At(1 << 20)], [_At(1 << 20)], None)
    assert launch._fallback is None  # aligned: the vector plan ran
    launch([_At(1 << 20)], [_At((1 << 20) + 2)], None)
    assert launch._fallback is not None and launch._fallback.plan.params["vec"] == 1
    assert len(backend.launched) == 2 and backend.launched[-1] == launch._fallback._dims
    with pytest.raises(InvalidArgumentError, match="not a multiple of its element size"):
        launch([_At(1 << 20)], [_At((1 << 20) + 1)], None)


def _roi_and_col2im_plans() -> list[tuple[str, LaunchPlan]]:
    """roi_align in every mode x coordinate mode x float dtype (adaptive and fixed grids share a module),
    col2im over 1, 2, 3 and 6 spatial axes."""
    plans = []
    for dt in ALL_FLOATS:
        for mode in ("avg", "max"):
            for coord in ("half_pixel", "output_half_pixel"):
                attrs = {
                    "mode": mode,
                    "output_height": 7,
                    "output_width": 5,
                    "sampling_ratio": 0,
                    "spatial_scale": 0.25,
                    "coordinate_transformation_mode": coord,
                }
                plans.append(
                    (f"roi_align-{dt}-{mode}-{coord}", plan_roi_align(dt, (2, 3, 17, 19), 11, attrs))
                )
        for d in (1, 2, 3, 6):
            attrs = {"image_shape": [5] * d, "block_shape": [2] * d, "dilations": [1] * d}
            geo = col2im_geometry({**attrs, "pads": [1] * (2 * d), "strides": [2] * d})
            plans.append((f"col2im-{dt}-{d}d", plan_col2im(dt, (2, 3 * 2**d, int(np.prod(geo.blocks))), geo)))
    return plans


@pytest.mark.parametrize(
    ("name", "plan"), _roi_and_col2im_plans(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_roi_align_and_col2im_compile(name, plan):
    """roi_align's and col2im's kernels compile with NVRTC to the argument list their plans pass."""
    _nvrtc()
    ok, text = _nvrtc_compile(plan.source(), plan.file, plan.options(arch="sm_90"))
    assert ok, f"{name} {plan.macros}:\n{text}"
    _check_ptx(text, plan)


def _deform_plans() -> list[tuple[str, LaunchPlan]]:
    """deform_conv2d in every float dtype, with and without its bias and its mask, and deform_im2col with
    and without the mask (groups and offset groups are arguments, not macros)."""
    attrs = {"strides": [2, 1], "pads": [1, 0, 1, 2], "dilations": [1, 2], "group": 2, "offset_group": 2}
    geo = deform_geometry((2, 4, 9, 8), (3, 3), attrs, m=6)
    plans = [
        (f"deform_conv2d-{dt}-bias{bias}-mask{mask}", plan_deform_conv2d(dt, geo, bias=bias, mask=mask))
        for dt in ALL_FLOATS
        for bias in (False, True)
        for mask in (False, True)
    ]
    columns = [
        (f"deform_im2col-{dt}-mask{mask}", plan_deform_im2col(dt, geo, mask=mask))
        for dt in ALL_FLOATS
        for mask in (False, True)
    ]
    return plans + columns


@pytest.mark.parametrize(("name", "plan"), _deform_plans(), ids=lambda v: v if isinstance(v, str) else "")
def test_deform_conv2d_compiles(name, plan):
    """deform_conv2d's and deform_im2col's kernels compile with NVRTC to the argument lists their plans
    pass."""
    _nvrtc()
    ok, text = _nvrtc_compile(plan.source(), plan.file, plan.options(arch="sm_90"))
    assert ok, f"{name} {plan.macros}:\n{text}"
    _check_ptx(text, plan)


def test_quantize_plan_rounds_e8m0_alone_by_round_mode():
    """round_mode picks e8m0's rounding (PL_ROUND, fp8.cuh's PL_E8M0_*); the other quantized types get no
    such macro (their variants stay as they were), and an unknown mode is refused before any compile."""
    for mode, macro in (("up", "PL_E8M0_UP"), ("down", "PL_E8M0_DOWN"), ("nearest", "PL_E8M0_NEAREST")):
        plan = plan_quantize("quantize_linear", "float32", "float8_e8m0fnu", (9,), None, round_mode=mode)
        assert plan.macros["PL_ROUND"] == macro and plan.macros["PL_Q"] == "PL_Q_E8M0"
    assert "PL_ROUND" not in plan_quantize("quantize_linear", "float32", "float8_e4m3fnuz", (9,), None).macros
    with pytest.raises(InvalidArgumentError, match="round_mode must be one of"):
        plan_quantize("quantize_linear", "float32", "float8_e8m0fnu", (9,), None, round_mode="even")
