"""The cuDNN glue of conv2d, conv_transpose2d and attention (ops/cudnn_graph.py and the families' cuda.py),
without a GPU: a recording stand-in for the ``cudnn`` module checks what each bind describes (dims, pads,
strides, masks, numerical notes), that a run hands cuDNN the stage's pointers by uid on the stage's
stream's handle, and that a plan cuDNN cannot build is a decline. The numbers themselves are checked on
the H200 (tests/backend, marked gpu).
"""

from __future__ import annotations

import dataclasses
import math
import types

import pytest

from pipelink.descriptor import KernelContext, VariantDeclined
from pipelink.ops.attention.cuda import bind_attention
from pipelink.ops.conv.cuda import bind_conv2d, bind_conv_transpose2d
from pipelink.ops.cudnn_graph import CuDNNKernel


class FakeTensor:
    def __init__(self, **fields):
        self.__dict__.update(fields)
        self.output = False

    def set_output(self, value):
        self.output = value
        return self

    def set_uid(self, uid):
        self.uid = uid
        return self

    def set_dim(self, dim):
        self.dim = dim
        return self

    def set_stride(self, stride):
        self.stride = stride
        return self

    def set_data_type(self, dtype):
        self.data_type = dtype
        return self


class FakeGraph:
    def __init__(self, fake, **kwargs):
        self.fake, self.kwargs, self.nodes, self.steps, self.executed = fake, kwargs, [], [], []

    def tensor(self, name, dim, stride, uid):
        return FakeTensor(name=name, dim=dim, stride=stride, uid=uid)

    def _node(self, op, **kwargs):
        out = FakeTensor(name=op)
        self.nodes.append((op, kwargs, out))
        return out

    def conv_fprop(self, image, weight, name, **geometry):
        return self._node("conv_fprop", image=image, weight=weight, **geometry)

    def conv_dgrad(self, loss, filter, name, **geometry):  # noqa: A002 - cuDNN's keyword
        return self._node("conv_dgrad", loss=loss, filter=filter, **geometry)

    def add(self, a, b, name):
        return self._node("add", a=a, b=b)

    def relu(self, input, name):  # noqa: A002 - cuDNN's keyword
        return self._node("relu", input=input)

    def sdpa(self, name, **kwargs):
        return self._node("sdpa", **kwargs), None

    def __getattr__(self, step):  # validate, build_operation_graph, create_execution_plans, ...
        def record(*args):
            self.steps.append((step, args))
            pointwise = sum(n[0] in ("add", "relu") for n in self.nodes)
            if step == "build_plans" and pointwise > self.fake.fuses:
                raise RuntimeError(f"no engine for conv + {pointwise} pointwise ops")

        return record

    def get_workspace_size(self):
        return 4096

    def execute(self, buffers, workspace, handle, tensor_uids):
        assert len(buffers) == len(tensor_uids) == len(set(tensor_uids))
        self.executed.append((dict(zip(tensor_uids, buffers, strict=True)), workspace, handle))


def fake_cudnn(*, refuse_fusion: bool = False, fuses: int = 99) -> types.SimpleNamespace:
    """A stand-in ``cudnn``: it plans graphs of a conv and at most ``fuses`` pointwise ops (0 with
    ``refuse_fusion``)."""
    fake = types.SimpleNamespace(fuses=0 if refuse_fusion else fuses, graphs=[], handles=[])
    names = ("FLOAT", "HALF", "BFLOAT16")
    fake.data_type = types.SimpleNamespace(**{n: n for n in names})
    fake.heur_mode = types.SimpleNamespace(A="A", FALLBACK="FALLBACK")
    notes = ("TENSOR_CORE", "DOWN_CONVERT_INPUTS", "REDUCED_PRECISION_REDUCTION", "FFT", "WINOGRAD")
    notes += ("WINOGRAD_TILE_4x4", "WINOGRAD_TILE_6x6", "WINOGRAD_TILE_13x13")
    fake.numerical_note = types.SimpleNamespace(**{n: n for n in notes})

    def pygraph(**kwargs):
        fake.graphs.append(FakeGraph(fake, **kwargs))
        return fake.graphs[-1]

    def create_handle():
        fake.handles.append({"stream": None})
        return fake.handles[-1]

    fake.pygraph, fake.create_handle = pygraph, create_handle
    fake.set_stream = lambda handle, stream: handle.update(stream=stream)
    return fake


class FakeBackend:
    def __init__(self):
        self.main = types.SimpleNamespace(handle=0x5E)
        self.workspaces = []

    def default_stream(self):
        return self.main

    def workspace(self, nbytes, *, stream):
        self.workspaces.append((nbytes, stream))
        return types.SimpleNamespace(ptr=0xA000)


@pytest.fixture
def cudnn(monkeypatch):
    fake = fake_cudnn()
    monkeypatch.setitem(__import__("sys").modules, "cudnn", fake)
    return fake


def _ctx(in_shapes, out_shape, attrs, dtype="float16", params=None, in_dtypes=None):
    return KernelContext(
        stage="s",
        attrs=attrs,
        in_shapes=tuple(in_shapes),
        in_dtypes=in_dtypes or tuple(None if s is None else dtype for s in in_shapes),
        out_shapes=(out_shape,),
        out_dtypes=(dtype,),
        backend=FakeBackend(),
        params=params,
    )


CONV_ATTRS = {
    "strides": [2, 2],
    "pads": [0, 0, 0, 0],
    "dilations": [1, 2],
    "auto_pad": "SAME_UPPER",
    "group": 1,
    "activation": "none",
}


def _ptr(p):
    return types.SimpleNamespace(ptr=p)


def test_conv2d_describes_the_onnx_geometry_and_runs_on_the_stream_handle(cudnn):
    ctx = _ctx([(2, 4, 8, 9), (6, 4, 3, 3), (6,)], (2, 6, 4, 5), CONV_ATTRS)
    kernel = bind_conv2d(ctx)
    assert isinstance(kernel, CuDNNKernel) and not kernel.post  # the bias fused in the graph
    (graph,) = cudnn.graphs
    (conv, geometry, _), (add, bias, y) = graph.nodes
    # SAME_UPPER, stride 2: H 8 -> 4 needs 1 pad (at the end); W 9 with dilation 2 -> 5 needs 4 (2 + 2).
    assert (conv, add) == ("conv_fprop", "add")
    assert geometry["pre_padding"] == [0, 2] and geometry["post_padding"] == [1, 2]
    assert geometry["stride"] == [2, 2] and geometry["dilation"] == [1, 2]
    assert geometry["image"].dim == [2, 4, 8, 9] and geometry["image"].stride == [288, 72, 9, 1]
    assert bias["b"].dim == [1, 6, 1, 1]
    assert y.output and y.uid == 4 and y.dim == [2, 6, 4, 5] and y.data_type == "HALF"
    assert graph.kwargs["io_data_type"] == "HALF" and graph.kwargs["compute_data_type"] == "FLOAT"
    ((_, (notes,)),) = [s for s in graph.steps if s[0] == "deselect_numeric_notes"]
    assert "DOWN_CONVERT_INPUTS" in notes and "TENSOR_CORE" not in notes  # half types use tensor cores
    stream = types.SimpleNamespace(handle=0x77)
    for _ in range(2):
        kernel([_ptr(0x10), _ptr(0x20), _ptr(0x30)], [_ptr(0x40)], stream)
    pack, workspace, handle = graph.executed[-1]
    assert pack == {1: 0x10, 2: 0x20, 3: 0x30, 4: 0x40} and workspace == 0xA000
    assert handle["stream"] == 0x77 and len(cudnn.handles) == 2  # the bind's (main stream) and this one's
    assert ctx.backend.workspaces == [(4096, ctx.backend.main), (4096, stream)]  # once per stream


@pytest.mark.parametrize(("policy", "tensor_cores"), [(None, False), ("tf32", True)])
def test_float32_convolutions_use_tf32_only_when_the_policy_says_so(cudnn, policy, tensor_cores):
    ctx = _ctx(
        [(1, 2, 5, 5), (3, 2, 3, 3), None], (1, 3, 3, 3), {**CONV_ATTRS, "auto_pad": "VALID"}, "float32"
    )
    ctx = dataclasses.replace(ctx, params={"math": policy} if policy else None)
    bind_conv2d(ctx)
    ((_, (notes,)),) = [s for s in cudnn.graphs[0].steps if s[0] == "deselect_numeric_notes"]
    assert ("TENSOR_CORE" in notes) is not tensor_cores
    assert ("WINOGRAD" in notes) is not tensor_cores


def test_a_bias_cudnn_cannot_fuse_is_its_own_launch(monkeypatch):
    fake = fake_cudnn(refuse_fusion=True)
    monkeypatch.setitem(__import__("sys").modules, "cudnn", fake)
    made = []
    monkeypatch.setattr("pipelink.ops.conv.cuda._bias_add", lambda ctx: made.append(ctx) or "add-launch")
    ctx = _ctx([(2, 4, 8, 9), (6, 4, 3, 3), (6,)], (2, 6, 4, 5), CONV_ATTRS)
    kernel = bind_conv2d(ctx)
    assert kernel.post == ("add-launch",) and made == [ctx]
    assert [n[0] for n in fake.graphs[-1].nodes] == ["conv_fprop"]


RESIDUAL_SHAPES = [(2, 4, 8, 9), (6, 4, 3, 3), (6,), (2, 6, 4, 5)]


def test_bias_residual_and_relu_fuse_into_one_graph_in_the_reference_order(cudnn):
    ctx = _ctx(RESIDUAL_SHAPES, (2, 6, 4, 5), {**CONV_ATTRS, "activation": "relu"})
    kernel = bind_conv2d(ctx)
    assert not kernel.post
    (graph,) = cudnn.graphs
    (conv, _, c), (bias, b_args, yb), (res, r_args, yr), (relu, relu_args, _) = graph.nodes
    assert (conv, bias, res, relu) == ("conv_fprop", "add", "add", "relu")
    assert b_args["a"] is c and b_args["b"].dim == [1, 6, 1, 1]
    assert r_args["a"] is yb and r_args["b"].dim == [2, 6, 4, 5] and r_args["b"].stride == [120, 20, 5, 1]
    assert relu_args["input"] is yr
    assert dict(kernel.operands)[r_args["b"].uid] == ("in", 3)
    kernel([_ptr(0x10), _ptr(0x20), _ptr(0x30), _ptr(0x50)], [_ptr(0x40)], types.SimpleNamespace(handle=9))
    assert graph.executed[-1][0] == {1: 0x10, 2: 0x20, 3: 0x30, 4: 0x40, r_args["b"].uid: 0x50}


@pytest.mark.parametrize(
    ("fuses", "after"),
    [(2, ["relu"]), (1, ["residual", "relu"]), (0, ["bias", "residual", "relu"])],
)
def test_what_cudnn_cannot_fuse_runs_after_it_in_order(monkeypatch, fuses, after):
    fake = fake_cudnn(fuses=fuses)
    monkeypatch.setitem(__import__("sys").modules, "cudnn", fake)
    for part in ("bias_add", "residual_add", "relu"):
        monkeypatch.setattr(f"pipelink.ops.conv.cuda._{part}", lambda ctx, p=part: p.removesuffix("_add"))
    ctx = _ctx(RESIDUAL_SHAPES, (2, 6, 4, 5), {**CONV_ATTRS, "activation": "relu"})
    kernel = bind_conv2d(ctx)
    assert list(kernel.post) == after
    fused = ["conv_fprop"] + ["add", "add", "relu"][:fuses]
    assert [n[0] for n in fake.graphs[-1].nodes] == fused
    assert (5 in kernel.uids) is (fuses >= 2) and (3 in kernel.uids) is (fuses >= 1)


def test_conv_transpose2d_is_the_data_gradient_with_its_pads_and_output_dims(cudnn):
    attrs = {
        "strides": [2, 3],
        "pads": [1, 0, 0, 1],
        "output_padding": [1, 2],
        "dilations": [1, 1],
        "group": 1,
    }
    ctx = _ctx([(1, 4, 3, 3), (4, 3, 3, 2), None], (1, 3, 6, 9), attrs, "bfloat16")
    kernel = bind_conv_transpose2d(ctx)
    ((op, geometry, y),) = cudnn.graphs[0].nodes
    assert op == "conv_dgrad" and geometry["loss"].uid == 1 and geometry["filter"].uid == 2
    assert geometry["pre_padding"] == [1, 0] and geometry["post_padding"] == [0, 1]
    assert geometry["stride"] == [2, 3]
    # output_padding only lengthens y: cuDNN gets the stage's output dims.
    assert y.output and y.uid == 4 and y.dim == [1, 3, 6, 9] and y.stride == [162, 54, 9, 1]
    assert kernel.operands[-1] == (4, ("out", 0)) and not kernel.post


def test_attention_passes_scale_causality_and_the_mask_as_bias(cudnn):
    ctx = _ctx(
        [(2, 4, 6, 64), (2, 2, 24, 64), (2, 2, 24, 32), (6, 24)],
        (2, 4, 6, 32),
        {"is_causal": True, "scale": None},
        "bfloat16",
    )
    kernel = bind_attention(ctx)
    ((op, args, o),) = cudnn.graphs[0].nodes
    assert op == "sdpa" and args["use_causal_mask"] is True and args["generate_stats"] is False
    assert math.isclose(args["attn_scale"], 1 / 8) and args["bias"].dim == [1, 1, 6, 24]
    assert args["k"].dim == [2, 2, 24, 64]  # grouped-query heads: cuDNN shares them as the reference
    assert o.dim == [2, 4, 6, 32] and o.uid == 5
    assert [uid for uid, _ in kernel.operands] == [1, 2, 3, 5, 4]


def test_a_graph_cudnn_cannot_plan_is_a_decline_with_its_reason(cudnn, monkeypatch):
    def refuse(self, *args):
        raise RuntimeError("CUDNN_STATUS_NOT_SUPPORTED: head dim 72")

    monkeypatch.setattr(FakeGraph, "check_support", refuse, raising=False)
    ctx = _ctx(
        [(1, 2, 8, 72), (1, 2, 8, 72), (1, 2, 8, 72), None], (1, 2, 8, 72), {"is_causal": False, "scale": 0.1}
    )
    with pytest.raises(
        VariantDeclined, match="cuDNN has no plan for this stage: RuntimeError: .*head dim 72"
    ):
        bind_attention(ctx)


class RawGraph(FakeGraph):
    """A frontend with the raw-pointer entry: operands ascending by uid, plan 3 selected."""

    selected_engine = None
    _plans = ("plan",)
    _plan_index = 0

    def __init__(self, fake, **kwargs):
        super().__init__(fake, **kwargs)
        self.raw_calls = []
        self._lowered_graph = types.SimpleNamespace(_execute_with_raw_ptrs=self._raw)

    def _raw(self, address, count, workspace, handle, plan_index):
        import ctypes

        pointers = list((ctypes.c_void_p * count).from_address(address))
        self.raw_calls.append((pointers, workspace, handle, plan_index))

    def _variant_pack_uids(self):
        return sorted(uid for uid, _ in self.operands)

    def _materialize_backend_plan(self, index):
        return types.SimpleNamespace(cpp_index=3)


def test_warm_runs_take_the_frontends_raw_entry_in_its_operand_order(monkeypatch):
    fake = fake_cudnn()
    fake.create_handle = lambda: types.SimpleNamespace(backend_handle=0xC0DE)
    fake.set_stream = lambda handle, stream: None
    monkeypatch.setitem(__import__("sys").modules, "cudnn", fake)
    ctx = _ctx([(2, 4, 8, 9), (6, 4, 3, 3), (6,)], (2, 6, 4, 5), CONV_ATTRS)
    graph = RawGraph(fake)
    operands = [(9, ("out", 0)), (2, ("in", 1)), (5, ("in", 0))]  # not in uid order
    graph.operands = operands
    kernel = CuDNNKernel(ctx, graph, operands, 4096)
    stream = types.SimpleNamespace(handle=0x77)
    kernel([_ptr(0x10), _ptr(0x20)], [_ptr(0x40)], stream)  # a stream's first run: the public execute
    assert len(graph.executed) == 1 and graph.raw_calls == []
    kernel([_ptr(0x11), _ptr(0x21)], [_ptr(0x41)], stream)
    assert graph.raw_calls == [([0x21, 0x11, 0x41], 0xA000, 0xC0DE, 3)]  # uids 2, 5, 9
    assert len(graph.executed) == 1


def test_a_frontend_without_the_raw_entry_keeps_the_public_execute(cudnn):
    ctx = _ctx([(2, 4, 8, 9), (6, 4, 3, 3), (6,)], (2, 6, 4, 5), CONV_ATTRS)
    kernel = bind_conv2d(ctx)
    stream = types.SimpleNamespace(handle=0x77)
    for _ in range(3):
        kernel([_ptr(0x10), _ptr(0x20), _ptr(0x30)], [_ptr(0x40)], stream)
    assert len(cudnn.graphs[0].executed) == 3
