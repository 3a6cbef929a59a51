"""resize.cu's tf_crop_and_resize plans compile with NVRTC (no GPU needed) to PTX whose kernel takes
exactly the arguments the plan passes (the roi windows and the fill among them), for every mode, antialias,
exclude_outside and the dtypes the kernel takes; numerical checks against the CPU reference are
tests/backend/test_ops_resize_tf_crop.py's (marker gpu)."""

from __future__ import annotations

import pytest

from pipelink.ops.resize import resize_plan
from pipelink.ops.resize.cuda import plan_resize
from tests.unit.test_cuda_sources import _check_ptx, _nvrtc, _nvrtc_compile

SHAPE = (2, 3, 5, 6)


def _cases():
    cases = []
    for mode, dtypes in (
        ("nearest", ("float32", "float16", "int8", "int64", "uint8")),
        ("linear", ("float32", "bfloat16", "float64")),
        ("cubic", ("float32", "float16", "float64")),
    ):
        for antialias in (False, True) if mode != "nearest" else (False,):
            for dt in dtypes:
                attrs = {
                    "mode": mode,
                    "scales": (1.0, 1.0, 2.0, 0.5),
                    "sizes": (),
                    "coordinate_transformation_mode": "tf_crop_and_resize",
                    "nearest_mode": "round_prefer_ceil",
                    "antialias": antialias,
                    "exclude_outside": mode == "cubic",
                    "roi": (0.0, 0.0, 0.2, -0.1, 1.0, 1.0, 0.9, 1.3),
                    "extrapolation_value": 3.0,
                }
                out, scales = resize_plan(SHAPE, attrs)
                cases.append((f"{mode}-aa{int(antialias)}-{dt}", plan_resize(dt, SHAPE, out, scales, attrs)))
    return cases


CASES = _cases()


@pytest.mark.parametrize(("name", "plan"), CASES, ids=[name for name, _ in CASES])
def test_tf_crop_and_resize_plans_compile_with_their_arguments(name, plan):
    _nvrtc()
    ok, text = _nvrtc_compile(plan.source(), plan.file, plan.options(arch="sm_90"))
    assert ok, f"{name} {plan.macros}:\n{text}"
    _check_ptx(text, plan)
    assert plan.macros["PL_COORD"] == "PL_COORD_TF_CROP_AND_RESIZE"
    assert (plan.scalars["rs3"], plan.scalars["re3"], plan.scalars["fill"]) == (-0.1, 1.3, 3.0)
