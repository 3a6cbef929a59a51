"""Small ONNX op types lowered onto existing operators (``onnx/lowerings.py``; Scatter through the
ScatterElements converter): Scatter, SwiGLU, DynamicQuantizeLinear, TensorScatter, MaxUnpool and
MaxPool's Indices output, BatchNormalization's and Dropout's training modes, each against onnx's
ReferenceEvaluator on random inputs (MaxPool's Indices against the spec's rule where the reference departs
from it), on every device, and every refusal."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

import pipelink as pl  # noqa: E402
from pipelink.onnx import import_model  # noqa: E402
from tests.backend import onnx_models as om  # noqa: E402
from tests.conftest import assert_close  # noqa: E402

F = np.float32
helper = onnx.helper


def _model(op, feeds, inits, attrs, *, opset, n_out=1, inputs=None):
    """A one-node model (``om.one_node_model``) reading ``inputs`` (default: the feeds', then the
    initializers') and making ``y0``... ``y{n_out - 1}``."""
    names = inputs if inputs is not None else list(feeds) + list(inits)
    outs = [f"y{k}" for k in range(n_out)]
    return om.one_node_model(op, names, feeds, inits, attrs, outs, opset=opset, name="small_lowering")


def _run(model, feeds, device):
    with pl.from_onnx(model, device=device) as pipe:
        got = pipe.run(feeds)
        return [np.asarray(got[o.name].numpy()) for o in model.graph.output]


def _check(got, want, what, dtype="float32"):
    """Shapes and dtypes equal; floats within the dtype's tolerance, everything else exactly."""
    for k, (out, ref) in enumerate(zip(got, want, strict=True)):
        assert out.shape == ref.shape and out.dtype == ref.dtype, (what, k, out.shape, ref.shape, out.dtype)
        if ref.dtype.kind == "f":
            assert not np.isnan(out).any(), (what, k)
            assert_close(out, ref, dtype, f"{what} output {k}")
        else:
            np.testing.assert_array_equal(out, ref, err_msg=f"{what} output {k}")


def _stages(model):
    return om.stage_names(model)


def _refused(model, why):
    assert om.refused(model, why)[0]["node"] == "the_node"


# -- Scatter (opsets 9-10): ScatterElements without reduction --------------------------------------------
@pytest.mark.parametrize(("shape", "rows", "axis"), [((4, 5), 3, 0), ((3, 6), 4, 1), ((2, 5, 3), 2, -2)])
def test_scatter_is_scatter_elements(rng, device, shape, rows, axis):
    data = rng.standard_normal(shape).astype(F)
    size = shape[axis]
    upd_shape = list(shape)
    upd_shape[axis] = rows
    # distinct targets along the axis for every line (duplicates are undefined in the spec)
    order = np.argsort(
        rng.random([*upd_shape[: axis % len(shape)], size, *upd_shape[axis % len(shape) + 1 :]]), axis=axis
    )
    indices = np.take(order, np.arange(rows), axis=axis).astype(np.int64)
    indices[indices == size - 1] -= size  # a negative index counts from the end
    updates = rng.standard_normal(upd_shape).astype(F)
    feeds = {"data": data, "indices": indices, "updates": updates}
    model = _model("Scatter", feeds, {}, {"axis": axis}, opset=10)
    assert _stages(model) == ["scatter_elements"]
    # onnx's reference has no Scatter: the spec's twin, ScatterElements (opset 11), is the oracle
    twin = _model("ScatterElements", feeds, {}, {"axis": axis}, opset=11)
    _check(_run(model, feeds, device), om.run_reference(twin, feeds), "Scatter")


# -- SwiGLU (opset 28) -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("dtype", "shape", "attrs"),
    [
        (np.float32, (3, 8), {}),
        (np.float32, (2, 3, 5), {"alpha": 1.702}),
        (np.float16, (4, 6), {"alpha": 0.5}),
    ],
)
def test_swiglu_is_silu_times_the_value(rng, device, dtype, shape, attrs):
    a = (rng.standard_normal(shape) * 3).astype(dtype)
    b = rng.standard_normal(shape).astype(dtype)
    model = _model("SwiGLU", {"a": a, "b": b}, {}, attrs, opset=28)
    assert _stages(model) == ["silu", "mul"]
    tol = "float16" if dtype == np.float16 else "float32"
    _check(_run(model, {"a": a, "b": b}, device), om.run_reference(model, {"a": a, "b": b}), "SwiGLU", tol)


def test_swiglu_refuses_inputs_of_different_shapes_or_dtypes():
    a = np.zeros((2, 4), F)
    _refused(
        _model("SwiGLU", {"a": a, "b": np.zeros((1, 4), F)}, {}, {}, opset=28), "must have the same shape"
    )
    _refused(_model("SwiGLU", {"a": a, "b": np.zeros((2, 4), np.float16)}, {}, {}, opset=28), "one dtype")


# -- DynamicQuantizeLinear (opset 11) --------------------------------------------------------------------
def _dql_inputs(rng):
    mixed = (rng.standard_normal((3, 17)) * 4).astype(F)
    return {
        "mixed": mixed,
        "positive": np.abs(mixed) + F(0.25),  # min adjusted to 0: zero point 0
        "negative": -np.abs(mixed) - F(0.25),  # max adjusted to 0: zero point 255
        "zeros": np.zeros((2, 3), F),  # max == min: the reference's scale of 1 / 255, not 0 / 0
        "scalar": np.array(rng.standard_normal(), F),
        "integers": rng.integers(-300, 301, (4, 5)).astype(F),
        "tiny": (rng.standard_normal(9) * 1e-30).astype(F),
    }


@pytest.mark.parametrize("case", ["mixed", "positive", "negative", "zeros", "scalar", "integers", "tiny"])
def test_dynamic_quantize_linear_matches_the_reference_exactly(rng, device, case):
    x = _dql_inputs(rng)[case]
    model = _model("DynamicQuantizeLinear", {"x": x}, {}, {}, opset=11, n_out=3)
    got = _run(model, {"x": x}, device)
    # onnx's reference, not onnxruntime: for an all-zero x the spec's formula divides 0 by 0, and the two
    # differ (the reference's scale 1/255, onnxruntime's 1); the lowering follows the reference
    want = om.reference_evaluator(model, {"x": x})
    for out, ref in zip(got, want, strict=True):  # y, y_scale, y_zero_point: every bit
        assert out.shape == ref.shape and out.dtype == ref.dtype, (case, out.shape, ref.shape, out.dtype)
        np.testing.assert_array_equal(out, ref, err_msg=case)


def test_dynamic_quantize_linear_zero_point_rounds_half_to_even(device):
    """A range of 255 makes the scale 1 exactly: min -126.5 gives the zero point 126.5, which rounds to
    126 (even; rounding half up would give 127), and min -127.5 gives 128; x / scale on .5 rounds to even
    too (2.5 -> 2, 3.5 -> 4, -0.5 -> 0)."""
    for lo, zero in ((-126.5, 126), (-127.5, 128)):
        x = np.array([lo, lo + 255, 2.5, 3.5, -0.5], F)
        model = _model("DynamicQuantizeLinear", {"x": x}, {}, {}, opset=11, n_out=3)
        got = _run(model, {"x": x}, device)
        assert int(got[2]) == zero
        for out, ref in zip(got, om.run_reference(model, {"x": x}), strict=True):
            np.testing.assert_array_equal(out, ref)


def test_dynamic_quantize_linear_refuses_a_non_float32_input():
    x = np.zeros((2, 3), np.float16)
    _refused(_model("DynamicQuantizeLinear", {"x": x}, {}, {}, opset=11, n_out=3), "spec's x is float32")


# -- TensorScatter (opset 24) ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("cache", "length", "attrs", "starts"),
    [
        ((2, 3, 8, 4), 2, {}, [5, 1]),  # [B, H, T, D], axis -2
        ((3, 7, 5), 3, {"axis": 1}, [0, 4, 2]),  # [B, T, D]
        ((2, 3, 8, 4), 3, {"mode": "circular"}, [6, 7]),  # wraps round the end
        ((2, 6, 2, 3), 4, {"mode": "circular", "axis": 1}, [-3, 11]),  # a negative and a large start
        ((2, 5), 5, {"axis": -1}, [0, 0]),  # the whole cache
        ((2, 8, 4), 1, {"axis": 1, "mode": "linear"}, [-1, 3]),  # a negative index: from the end
    ],
)
def test_tensor_scatter_writes_each_batch_entry_at_its_index(rng, device, cache, length, attrs, starts):
    axis = attrs.get("axis", -2) % len(cache)
    update_shape = [length if k == axis else d for k, d in enumerate(cache)]
    feeds = {
        "past": rng.standard_normal(cache).astype(F),
        "update": rng.standard_normal(update_shape).astype(F),
        "writes": np.array(starts, np.int64),
    }
    model = _model("TensorScatter", feeds, {}, attrs, opset=24)
    assert _stages(model)[-1] == "scatter_elements"
    # onnx's reference: onnxruntime refuses a negative write index, which the reference counts from the end
    _check(_run(model, feeds, device), om.reference_evaluator(model, feeds), "TensorScatter")


@pytest.mark.parametrize(
    ("cache", "length", "attrs"),
    [((2, 3, 8, 4), 3, {}), ((3, 7, 5), 7, {"axis": 1}), ((2, 6, 2, 3), 4, {"mode": "circular", "axis": 1})],
)
def test_tensor_scatter_without_write_indices_fills_from_the_start(rng, device, cache, length, attrs):
    axis = attrs.get("axis", -2) % len(cache)
    update_shape = [length if k == axis else d for k, d in enumerate(cache)]
    feeds = {
        "past": rng.standard_normal(cache).astype(F),
        "update": rng.standard_normal(update_shape).astype(F),
    }
    model = _model("TensorScatter", feeds, {}, attrs, opset=24)
    assert _stages(model) == (["identity"] if length == cache[axis] else ["slice", "concat"])
    _check(_run(model, feeds, device), om.run_reference(model, feeds), "TensorScatter")


def test_tensor_scatter_takes_a_symbolic_batch(rng, device):
    feeds = {
        "past": (np.float32, ["B", 2, 6, 3]),
        "update": (np.float32, ["B", 2, 1, 3]),
        "writes": (np.int64, ["B"]),
    }
    model = _model("TensorScatter", feeds, {}, {"mode": "circular"}, opset=24)
    for batch in (1, 3):
        values = {
            "past": rng.standard_normal((batch, 2, 6, 3)).astype(F),
            "update": rng.standard_normal((batch, 2, 1, 3)).astype(F),
            "writes": rng.integers(0, 9, batch).astype(np.int64),
        }
        _check(_run(model, values, device), om.run_reference(model, values), f"TensorScatter batch {batch}")


def test_tensor_scatter_linear_write_past_the_end_is_an_error_on_the_cpu(rng):
    feeds = {
        "past": np.zeros((2, 4, 3), F),
        "update": np.ones((2, 2, 3), F),
        "writes": np.array([0, 3], np.int64),
    }
    model = _model("TensorScatter", feeds, {}, {"axis": 1}, opset=24)
    with pl.from_onnx(model, device="cpu") as pipe, pytest.raises(pl.PipeLinkError):
        pipe.run(feeds)


def test_tensor_scatter_refusals():
    def ts(past, update, attrs, writes=True):
        feeds = {"past": (np.float32, past), "update": (np.float32, update)}
        if writes:
            feeds["writes"] = (np.int64, [past[0]])
        return _model("TensorScatter", feeds, {}, attrs, opset=24)

    _refused(ts([2, 4, 3], [2, 1, 3], {"mode": "ring"}), "mode 'ring'")
    _refused(ts([2, 4, 3], [2, 4, 3], {"axis": 0}), "along axis 0")
    _refused(ts([2, 4, 3], [2, 5, 3], {"axis": 1}), "an update of 5 rows into a cache of 4")
    _refused(ts([2, "T", 3], [2, 1, 3], {"axis": 1}), "length .* known at import")
    _refused(ts([2, 4, "D"], [2, 1, "D"], {"axis": 1}), "dims other than the batch known")
    _refused(ts([2, 4, 3], [2, 1, 5], {"axis": 1}, writes=False), "differ in dim 2")
    feeds = {"past": (np.float32, None), "update": (np.float32, [2, 1, 3])}
    _refused(_model("TensorScatter", feeds, {}, {}, opset=24), "needs the ranks")
    _refused(ts([2, 4, 3], [2, 1, 3], {"axis": 3}), "axis 3 of past_cache")
    for writes in ([3], [2, 1]):
        feeds = {
            "past": (np.float32, [2, 4, 3]),
            "update": (np.float32, [2, 1, 3]),
            "writes": (np.int64, writes),
        }
        _refused(
            _model("TensorScatter", feeds, {}, {"axis": 1}, opset=24), "must be 1-d, one per batch entry"
        )


# -- MaxUnpool -------------------------------------------------------------------------------------------
def _pooled(rng, shape, kernel, strides, pads=None):
    """A MaxPool's output and Indices from onnx's reference (strides other than 1: its looping path,
    which flattens the indices over the whole tensor as the spec says)."""
    x = rng.permutation(np.prod(shape)).reshape(shape).astype(F)  # distinct values: one maximum
    attrs = {"kernel_shape": kernel, "strides": strides, **({"pads": pads} if pads else {})}
    y, idx = om.run_reference(_model("MaxPool", {"x": x}, {}, attrs, opset=22, n_out=2), {"x": x})
    return y + rng.standard_normal(y.shape).astype(F), idx, attrs


@pytest.mark.parametrize(
    ("shape", "kernel", "strides", "pads", "output_shape"),
    [
        ((2, 3, 6, 8), [2, 2], [2, 2], None, None),
        # the inferred shape is the pool's input; windows that do not overlap: no index twice (which of
        # two values lands there is left open, and CUDA's scatter picks either)
        ((1, 2, 7, 4), [3, 2], [3, 3], [1, 0, 1, 1], None),
        ((2, 2, 6, 6), [2, 2], [2, 2], None, [2, 2, 7, 8]),  # padded at the end to output_shape
        ((2, 3, 9), [3], [3], None, [2, 3, 11]),  # 1-d
        ((1, 2, 4, 4, 6), [2, 2, 3], [2, 2, 3], None, None),  # 3-d
    ],
)
def test_max_unpool_scatters_into_zeros(rng, device, shape, kernel, strides, pads, output_shape):
    x, idx, attrs = _pooled(rng, shape, kernel, strides, pads)
    inits = {} if output_shape is None else {"output_shape": np.array(output_shape, np.int64)}
    model = _model("MaxUnpool", {"x": x, "i": idx}, inits, attrs, opset=22)
    assert "scatter_elements" in _stages(model)
    got = _run(model, {"x": x, "i": idx}, device)
    # onnx's reference (and the spec's example with output_shape): the indices index the inferred shape,
    # padded at the end to output_shape; onnxruntime indexes output_shape's layout
    _check(got, om.reference_evaluator(model, {"x": x, "i": idx}), "MaxUnpool")


def test_max_unpool_opset_9_with_a_negative_index(rng, device):
    x = rng.standard_normal((1, 2, 2, 2)).astype(F)
    idx = np.array([0, 3, 9, -1, 20, 22, 27, 30], np.int64).reshape(1, 2, 2, 2)  # -1: the last element
    model = _model("MaxUnpool", {"x": x, "i": idx}, {}, {"kernel_shape": [2, 2], "strides": [2, 2]}, opset=9)
    _check(
        _run(model, {"x": x, "i": idx}, device),
        om.reference_evaluator(model, {"x": x, "i": idx}),
        "MaxUnpool-9",
    )


def test_max_unpool_refusals():
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2]}
    feeds = {"x": (np.float32, [1, 1, 2, 2]), "i": (np.int64, [1, 1, 2, 2])}
    computed = dict(feeds, s=(np.int64, [4]))
    _refused(_model("MaxUnpool", computed, {}, attrs, opset=22), "must be a constant")
    small = {"s": np.array([1, 1, 3, 4], np.int64)}
    _refused(_model("MaxUnpool", feeds, small, attrs, opset=22), "no smaller than the shape")
    batch = {"x": (np.float32, ["N", 1, 2, 2]), "i": (np.int64, ["N", 1, 2, 2])}
    _refused(_model("MaxUnpool", batch, {}, attrs, opset=22), "every dim known")
    _refused(_model("MaxUnpool", feeds, {}, {"kernel_shape": [2]}, opset=22), "must give 2 dims")
    flat = {"x": (np.float32, [1, 1, 2, 2]), "i": (np.int64, [4])}
    _refused(_model("MaxUnpool", flat, {}, attrs, opset=22), "must have X's shape")
    _refused(
        _model("MaxUnpool", feeds, {}, {"kernel_shape": [1, 1], "pads": [1, 1, 1, 1]}, opset=22), "empty dim"
    )


# -- MaxPool's Indices -----------------------------------------------------------------------------------
def _spec_max_pool(x, kernel, strides, dilations, pads_begin, out, order):
    """The spec's MaxPool with Indices, by loops: the first maximum of each window in row-major tap order
    (a NaN, where the window has one: max_pool2d's NaN propagates), its index flat over the whole input."""
    n, c, *spatial = x.shape
    y = np.empty((n, c, *out), x.dtype)
    idx = np.empty((n, c, *out), np.int64)
    plane = int(np.prod(spatial))
    for b, ch, *pos in itertools.product(range(n), range(c), *(range(o) for o in out)):
        best = None
        for tap in itertools.product(*(range(k) for k in kernel)):
            at = [
                p * s - pb + t * d
                for p, s, pb, t, d in zip(pos, strides, pads_begin, tap, dilations, strict=True)
            ]
            if not all(0 <= a < size for a, size in zip(at, spatial, strict=True)):
                continue
            v = x[(b, ch, *at)]
            if best is None or (not np.isnan(best[0]) and (np.isnan(v) or v > best[0])):
                best = (v, at)
        v, at = best
        flat = (
            np.ravel_multi_index(at, spatial) if order == 0 else np.ravel_multi_index(at[::-1], spatial[::-1])
        )
        y[(b, ch, *pos)] = v
        idx[(b, ch, *pos)] = (b * c + ch) * plane + flat
    return y, idx


@pytest.mark.parametrize(
    ("shape", "attrs"),
    [
        ((2, 3, 7, 8), {"kernel_shape": [3, 3], "strides": [2, 2]}),
        ((1, 2, 6, 7), {"kernel_shape": [2, 3], "strides": [2, 1], "pads": [1, 1, 0, 1]}),
        ((2, 2, 9, 9), {"kernel_shape": [3, 2], "strides": [2, 2], "dilations": [2, 3]}),
        ((1, 3, 5, 5), {"kernel_shape": [2, 2], "strides": [2, 2], "storage_order": 1}),
        ((1, 2, 7, 6), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
        ((1, 2, 7, 7), {"kernel_shape": [3, 2], "strides": [2, 3], "auto_pad": "SAME_UPPER"}),
        ((2, 3, 11), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),  # 1-d
    ],
)
def test_max_pool_indices_match_the_reference(rng, device, shape, attrs):
    """Strides or dilations other than 1: onnx's reference takes its looping path, the spec's rule."""
    x = rng.standard_normal(shape).astype(F)
    model = _model("MaxPool", {"x": x}, {}, attrs, opset=22, n_out=2)
    _check(_run(model, {"x": x}, device), om.run_reference(model, {"x": x}), "MaxPool Indices")


@pytest.mark.parametrize(
    ("shape", "attrs"),
    [
        ((2, 3, 5, 6), {"kernel_shape": [2, 3]}),
        ((1, 2, 5, 5), {"kernel_shape": [3, 3], "pads": [1, 2, 1, 0], "storage_order": 1}),
        ((2, 2, 7), {"kernel_shape": [4], "pads": [2, 1]}),
    ],
)
def test_max_pool_indices_with_unit_strides_follow_the_spec(rng, device, shape, attrs):
    """With unit strides and dilations onnx's reference (1.23) takes another path, whose Indices split a
    tap's position by the output's shape instead of the kernel's and leave out the batch and channel
    offsets (and which reads 4 pads as [top, bottom, left, right]): the spec's rule, which onnx's
    looping path follows, is checked by loops here."""
    x = rng.integers(-4, 5, shape).astype(F)  # many ties: the first maximum wins
    model = _model("MaxPool", {"x": x}, {}, attrs, opset=22, n_out=2)
    kernel, spatial = attrs["kernel_shape"], len(shape) - 2
    pads = attrs.get("pads", [0] * 2 * spatial)
    out = [n + pads[k] + pads[spatial + k] - kernel[k] + 1 for k, n in enumerate(shape[2:])]
    ones = [1] * spatial
    want = _spec_max_pool(x, kernel, ones, ones, pads[:spatial], out, attrs.get("storage_order", 0))
    _check(_run(model, {"x": x}, device), list(want), "MaxPool Indices")


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.float16])
def test_max_pool_indices_of_other_dtypes_pick_the_first_maximum(rng, device, dtype):
    x = rng.integers(0, 4, (2, 2, 6, 6)).astype(dtype)
    attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    model = _model("MaxPool", {"x": x}, {}, attrs, opset=22, n_out=2)
    want = _spec_max_pool(x, [3, 3], [2, 2], [1, 1], [1, 1], (3, 3), 0)
    _check(_run(model, {"x": x}, device), list(want), f"MaxPool Indices {np.dtype(dtype).name}", "float16")


def test_max_pool_indices_point_at_the_first_nan(rng, device):
    x = rng.standard_normal((1, 2, 6, 6)).astype(F)
    x[0, 0, 1, 2] = x[0, 0, 2, 1] = x[0, 1, 5, 5] = np.nan
    attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    model = _model("MaxPool", {"x": x}, {}, attrs, opset=22, n_out=2)
    y, idx = _run(model, {"x": x}, device)
    want_y, want_idx = _spec_max_pool(x, [3, 3], [2, 2], [1, 1], [1, 1], (3, 3), 0)
    np.testing.assert_array_equal(idx, want_idx)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(want_y))
    assert np.isnan(y).sum() == 3 + 1  # the windows holding (1, 2) or (2, 1), and (5, 5)


def test_max_pool_indices_refusals():
    attrs = {"kernel_shape": [2, 2]}
    batch = _model("MaxPool", {"x": (np.float32, ["N", 1, 4, 4])}, {}, attrs, opset=22, n_out=2)
    _refused(batch, "the Indices output needs X's shape, every dim known")
    cube = _model(  # a 4-d window: no pool of that rank
        "MaxPool", {"x": (np.float32, [1, 1, 4, 4, 4, 4])}, {}, {"kernel_shape": [2] * 4}, opset=22, n_out=2
    )
    _refused(cube, r"\[N, C, L\] or \[N, C, H, W\]")
    wrong = _model("MaxPool", {"x": (np.float32, [1, 1, 4, 4])}, {}, {"kernel_shape": [2]}, opset=22, n_out=2)
    _refused(wrong, "kernel_shape \\[2\\] for an input of 2 spatial dims")
    order = _model(
        "MaxPool", {"x": (np.float32, [1, 1, 4, 4])}, {}, dict(attrs, storage_order=2), opset=22, n_out=2
    )
    _refused(order, "storage_order=2")
    # taps at -1 and 4 of an axis of 4: the window is padding only (onnx's reference leaves it -1)
    spread = {"kernel_shape": [2, 2], "dilations": [5, 5], "pads": [1, 1, 1, 1]}
    hollow = _model("MaxPool", {"x": (np.float32, [1, 1, 4, 4])}, {}, spread, opset=22, n_out=2)
    _refused(hollow, "wholly on the padding")


# -- BatchNormalization with training_mode=1: the batch's statistics, the running ones updated ----------
@pytest.mark.parametrize(
    ("shape", "n_out", "attrs"),
    [((2, 3, 4, 5), 3, {}), ((6, 4), 3, {"momentum": 0.75, "epsilon": 1e-3}), ((3, 2, 7), 1, {})],
)
def test_batch_norm_training_mode_uses_the_batch_statistics(rng, device, shape, n_out, attrs):
    c = shape[1]
    feeds = {"x": (rng.standard_normal(shape) * 3 + 1).astype(F)}
    inits = {
        "s": rng.standard_normal(c).astype(F),
        "b": rng.standard_normal(c).astype(F),
        "m": rng.standard_normal(c).astype(F),
        "v": rng.uniform(0.5, 2, c).astype(F),
    }
    model = _model("BatchNormalization", feeds, inits, {"training_mode": 1, **attrs}, opset=15, n_out=n_out)
    want = om.reference_evaluator(model, feeds)  # onnxruntime's inference build has no training mode
    _check(_run(model, feeds, device), want, f"BatchNormalization training {shape}")


def test_batch_norm_training_mode_of_a_constant_standardizes_weights(rng, device):
    """BiT's weight standardization: a constant conv weight viewed as [1, out, -1] normalised by its own
    statistics in training mode (the exporter's initializer), then added to an input."""
    w = (rng.standard_normal((1, 4, 18)) * 2 + 0.5).astype(F)
    inits = {"w": w, "s": np.ones(4, F), "b": np.zeros(4, F), "m": np.zeros(4, F), "v": np.ones(4, F)}
    bn = helper.make_node("BatchNormalization", ["w", "s", "b", "m", "v"], ["n"], name="bn", training_mode=1)
    add = helper.make_node("Add", ["x", "n"], ["y"], name="the_add")
    graph = helper.make_graph(
        [bn, add],
        "weight_standardization",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4, 18])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    feeds = {"x": rng.standard_normal((1, 4, 18)).astype(F)}
    mean, var = w.mean(axis=(0, 2), keepdims=True), w.var(axis=(0, 2), keepdims=True)
    want = feeds["x"] + (w - mean) / np.sqrt(var + 1e-5)
    _check(_run(model, feeds, device), [want.astype(F)], "BatchNormalization training of a constant")


def test_batch_norm_training_mode_refusals():
    inits = {k: np.ones(3, F) for k in "sbmv"}
    unranked = _model("BatchNormalization", {"x": (F, None)}, inits, {"training_mode": 1}, opset=15)
    _refused(unranked, "rank must be known")
    stats = _model("BatchNormalization", {"x": (F, [1, 3, 2])}, inits, {}, opset=15, n_out=3)
    _refused(stats, "in training mode only")


# -- Dropout in training mode: a ratio of 0 drops nothing (a copy, the mask all true) --------------------
def test_dropout_training_mode_with_zero_ratio_is_a_copy(rng, device):
    feeds = {"x": rng.standard_normal((3, 4)).astype(F)}
    inits = {"r": np.array(0.0, F), "t": np.array(True)}
    model = _model("Dropout", feeds, inits, {}, opset=13, n_out=2)
    got = _run(model, feeds, device)
    _check(got, [feeds["x"], np.ones((3, 4), bool)], "Dropout training, ratio 0")
    inits["r"] = np.array(0.25, F)
    _refused(_model("Dropout", feeds, inits, {}, opset=13, n_out=2), "ratio 0.25.*no random operators")


# -- OptionalHasElement and OptionalGetElement: PipeLink's values are tensors, never optionals ----------
def test_optional_has_element_is_known_at_import_and_get_element_is_a_copy(rng, device):
    x = rng.standard_normal((2, 3)).astype(F)
    for inputs, want in (([], False), ([""], False), (["x"], True)):
        feeds = {"x": x} if inputs == ["x"] else {}
        model = _model("OptionalHasElement", feeds, {}, {}, opset=18, inputs=inputs)
        assert _stages(model) == ["identity"]  # the folded constant, copied out as the graph output
        (got,) = _run(model, feeds, device)
        assert got.dtype == np.bool_ and got.shape == () and bool(got) is want, inputs
    model = _model("OptionalGetElement", {"x": x}, {}, {}, opset=18)
    _check(_run(model, {"x": x}, device), [x], "OptionalGetElement of a tensor")


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda: helper.make_tensor_sequence_value_info("x", onnx.TensorProto.FLOAT, [2]), "a sequence"),
        (
            lambda: helper.make_value_info(
                "x",
                helper.make_optional_type_proto(helper.make_tensor_type_proto(onnx.TensorProto.FLOAT, [2])),
            ),
            "an optional",
        ),
        (
            lambda: helper.make_tensor_value_info("x", onnx.TensorProto.UNDEFINED, [2]),
            "a tensor without an element type",
        ),
    ],
)
def test_graph_inputs_that_are_not_tensors_are_named_by_kind(make, says):
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"], name="the_node")],
        "not_tensors",
        [make()],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(pl.PipeLinkError, match=f"the graph input is {says}; PipeLink's pipeline inputs") as e:
        import_model(model)
    assert e.value.code.name == "PIPELINK_ERR_INVALID_ARGUMENT"
