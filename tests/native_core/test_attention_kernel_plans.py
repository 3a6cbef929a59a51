"""The attention kernels in CUDA plans, on any machine: the scaled softmax with its bias input and its scale
(an f32 argument) and as_strided are prebuilt launches (``native_launches``) whose every pointer names its
port, written into a plan with the planfile's encoders and read by the core. Binding needs no GPU (a
stand-in backend compiles nothing); a well-formed plan then needs a GPU of its compute capability, like
every CUDA plan here (test_cuda_plans.py). Real compiled plans run in tests/native_core/test_cuda_gpu.py."""

from __future__ import annotations

import hashlib
from types import SimpleNamespace

import pytest

from pipelink.descriptor import KernelContext
from pipelink.errors import ConfigError, ErrorCode
from pipelink.ops.softmax.cuda import softmax_bind
from pipelink.ops.transpose.cuda import as_strided_bind
from pipelink.runtime.plan import Step
from pipelink.runtime.planfile import (
    DEVICE_CUDA,
    STORAGE_EXTERNAL,
    PlanParts,
    _kernel_stage,
    _launches,
    _Payload,
    assemble,
)

from .test_cuda_plans import core, load  # noqa: F401 - the fixture that opens the core

CUBIN = b"\x7fELF stand-in cubin of the attention kernels"


class _Backend:
    """What a PlanLaunch asks of the CUDA backend at bind; nothing is compiled or launched."""

    info = SimpleNamespace(features={"sm_count": 132})
    compiler = SimpleNamespace(cubin_of=lambda kernel: CUBIN)

    def compile_kernel(self, source, name, options):
        return name

    def kernel_function(self, kernel):
        return kernel

    def empty(self, shape, dtype):
        return SimpleNamespace(ptr=0, shape=shape)


def _ctx(in_shapes, out_shape, attrs, dtype="float32") -> KernelContext:
    return KernelContext(
        stage="s",
        attrs=attrs,
        in_shapes=tuple(in_shapes),
        in_dtypes=tuple(None if s is None else dtype for s in in_shapes),
        out_shapes=(out_shape,),
        out_dtypes=(dtype,),
        backend=_Backend(),
    )


def _plan(launch, tensors, ins, outs) -> bytes:
    stages = _Payload()
    _kernel_stage(stages, "s", launch, _Cubins(), lambda: (stages.refs(ins), stages.refs(outs)))
    parts = PlanParts(
        name="attention_kernels",
        arena_bytes=0,
        arena_alignment=256,
        compute_capability=0,
        tensors=[(n, "float32", shape, STORAGE_EXTERNAL, 0) for n, shape in tensors],
        inputs=list(ins),
        outputs=list(outs),
        libraries=[],
        cubins=[(hashlib.sha256(CUBIN).digest(), CUBIN)],
        n_stages=1,
        stages=stages.bytes(),
        device=(DEVICE_CUDA, 0),
    )
    return assemble(parts)


class _Cubins:
    def of(self, cubin) -> int:
        return 0


SCORES, MASK = (2, 3, 16, 16), (1, 1, 16, 16)


def test_the_scaled_softmax_launch_names_its_bias_port_and_carries_its_scale(core, tmp_path):  # noqa: F811
    attrs = {"axis": -1, "scale": 0.125}
    (launch,) = softmax_bind(_ctx([SCORES, MASK], SCORES, attrs)).native_launches()
    assert launch.name == "pl_softmax_scaled" and launch.cubin == CUBIN
    params = launch.params
    assert params[:3] == (("ptr", ("in", 0), 16), ("ptr", ("in", 1), 16), ("ptr", ("out", 0), 16))
    assert params[3:7] == (("i64", 2 * 3 * 16), ("i32", 16), ("f32", 0.125), ("i64", 1))
    # the row's bias offset: rows decoded over [B*H, T] (batch and heads share the mask: stride 0)
    assert params[7:9] == (("i64", 6), ("i64", 16)) and params[15:17] == (("i64", 0), ("i64", 16))
    path = tmp_path / "softmax.plk"
    path.write_bytes(_plan(launch, [("scores", SCORES), ("mask", MASK), ("probs", SCORES)], [0, 1], [2]))
    status, message = load(core, path)
    assert status == ErrorCode.PIPELINK_ERR_HARDWARE_UNSUPPORTED, message  # parsed: needs a GPU of cc 0.0


def test_a_scale_without_bias_leaves_the_bias_pointer_null(core, tmp_path):  # noqa: F811
    (launch,) = softmax_bind(_ctx([SCORES, None], SCORES, {"axis": -1, "scale": 2.0})).native_launches()
    assert launch.params[1] == ("ptr", None, 4) and launch.params[5] == ("f32", 2.0)
    path = tmp_path / "scaled.plk"
    path.write_bytes(_plan(launch, [("scores", SCORES), ("probs", SCORES)], [0], [1]))
    assert load(core, path)[0] == ErrorCode.PIPELINK_ERR_HARDWARE_UNSUPPORTED


def test_softmax_along_another_axis_is_not_a_prebuilt_launch():
    """Moved last, softmaxed and moved back through scratch buffers of its own: the core cannot replay it,
    and compiling says so, naming the stage (the Python executor runs it)."""
    kernel = softmax_bind(_ctx([SCORES, MASK], SCORES, {"axis": 1, "scale": 0.5}))
    stage = SimpleNamespace(id="s", desc=SimpleNamespace(name="softmax"), path="/pipeline/0")
    step = Step(stage, kernel=kernel, variant="cuda:nvrtc", in_names=("a", "b"), out_names=("y",))
    with pytest.raises(ConfigError, match="'s'.*not a prebuilt launch"):
        _launches(step)


def test_the_as_strided_launch_reads_its_input_at_the_view_offset(core, tmp_path):  # noqa: F811
    x_shape, view = (2, 8, 48), (2, 2, 8, 8)
    attrs = {"shape": view, "strides": (384, 8, 48, 1), "offset": 32}
    (launch,) = as_strided_bind(_ctx([x_shape], view, attrs)).native_launches()
    assert launch.name == "pl_as_strided"
    # 16-byte words: the view's 256 floats are 64 words, its offset 32 floats 8 words
    assert launch.params[:4] == (("ptr", ("in", 0), 16), ("ptr", ("out", 0), 16), ("i64", 64), ("i64", 8))
    path = tmp_path / "view.plk"
    path.write_bytes(_plan(launch, [("qkv", x_shape), ("v", view)], [0], [1]))
    assert load(core, path)[0] == ErrorCode.PIPELINK_ERR_HARDWARE_UNSUPPORTED
    empty = as_strided_bind(_ctx([x_shape], (0, 4), {"shape": (0, 4), "strides": (4, 1), "offset": 0}))
    assert empty.native_launches() == [] and empty([], [], None) is None, "an empty view launches nothing"
