"""``precision_policy`` (seed section 3.4): which dtype a stage computes in on a device, and the
``precision_cast`` stages the linker inserts around it. Checked at load; nothing here runs kernels.
"""

from __future__ import annotations

import dataclasses

from ..errors import ErrorCode, Problem
from ..hardware import HardwareInfo
from ..modules.registry import OperatorRegistry
from .stages import LinkedStage

__all__ = ["PRECISIONS", "resolve_precision", "apply_precision"]

PRECISIONS = {"fp32": "float32", "tf32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def resolve_precision(policy: str, info: HardwareInfo) -> tuple[str, str | None, str | None]:
    """``(compute dtype, math mode, why not)`` for a stage's ``precision_policy`` on a device.

    ``*_if_supported_else_fp32`` picks the half type where the device computes it natively (a GPU with
    the feature; the CPU only emulates half types, so it gets float32). An explicit ``fp16``/``bf16``/
    ``tf32`` on a GPU without the feature is refused (the third element says why).
    """
    if policy.endswith("_if_supported_else_fp32"):
        half = policy.split("_", 1)[0]
        native = info.value(half) >= 1 and half not in info.emulated
        return (PRECISIONS[half] if native else "float32"), None, None
    dtype = PRECISIONS[policy]
    if policy in ("fp16", "bf16", "tf32") and info.value(policy) < 1 and policy not in info.emulated:
        return (
            dtype,
            None,
            (
                f"precision_policy {policy!r} needs {policy} support, which {info.name} lacks; "
                f"use '{'fp16' if policy == 'fp16' else 'bf16'}_if_supported_else_fp32'"
                if policy != "tf32"
                else f"precision_policy 'tf32' needs tf32 support, which {info.name} lacks; use 'fp32'"
            ),
        )
    return dtype, ("tf32" if policy == "tf32" else None), None


def apply_precision(
    stages: list[LinkedStage], registry: OperatorRegistry, info: HardwareInfo, problems: list[Problem]
) -> list[LinkedStage]:
    """Insert ``precision_cast`` stages around every stage with a ``precision_policy``: its float inputs
    are cast to the policy's dtype, its outputs back to the dtype of its first input. Stages are then
    renumbered in order (their config, and so their JSON Pointer, stays the original)."""

    out: list[LinkedStage] = []
    cast = None
    for st in stages:
        policy = st.config.constraints.precision_policy
        if not policy:
            out.append(st)
            continue
        dtype, math, why_not = resolve_precision(policy, info)
        if why_not is not None:
            problems.append(
                Problem(
                    ErrorCode.PIPELINK_ERR_HARDWARE_UNSUPPORTED,
                    f"{st.path}/constraints/precision_policy",
                    f"stage {st.id!r}: {why_not}",
                )
            )
            out.append(st)
            continue
        st.math, st.precision = math, dtype
        if math == "tf32":
            out.append(st)  # same dtypes; the kernels use tensor-float-32 math
            continue
        cast = cast or registry.get("precision_cast", source="builtin")
        tag = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}[dtype]
        base = dataclasses.replace(
            st.config, on_error=dataclasses.replace(st.config.on_error, kind="fail"), isolation="none"
        )
        first = next((n for n in st.inputs if n is not None), None)
        new_inputs = []
        for i, name in enumerate(st.inputs):
            if name is None:
                new_inputs.append(None)
                continue
            cast_name = f"{name}@{st.id}:{tag}"
            sid = f"{st.id}.to_{tag}.{i}"
            out.append(
                LinkedStage(
                    0,
                    sid,
                    dataclasses.replace(base, id=sid),
                    cast,
                    {"dtype": dtype},
                    (name, None),
                    (cast_name,),
                )
            )
            new_inputs.append(cast_name)
        named = len(st.config.outputs)  # unnamed outputs are scratch: nobody reads them back
        outs = tuple(f"{name}@{st.id}:{tag}" if j < named else name for j, name in enumerate(st.outputs))
        main = dataclasses.replace(st, inputs=tuple(new_inputs), outputs=outs)
        out.append(main)
        for j, (inner, name) in enumerate(zip(outs[:named], st.outputs[:named], strict=True)):
            sid = f"{st.id}.from_{tag}.{j}"
            out.append(
                LinkedStage(
                    0, sid, dataclasses.replace(base, id=sid), cast, {"dtype": dtype}, (inner, first), (name,)
                )
            )
    for i, st in enumerate(out):
        st.index = i
    return out
