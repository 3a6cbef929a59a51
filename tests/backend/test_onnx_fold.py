"""What a model computes from its shapes, evaluated at import (``pipelink.onnx.fold``): exports with a
dynamic batch compute their Reshape targets with Shape, Gather, Unsqueeze and Concat; the import turns them
into reshape targets (the input's own dim as 0, one unknown as -1) and constants, or refuses clearly."""

from __future__ import annotations

import time

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import helper  # noqa: E402

import pipelink as pl  # noqa: E402
from pipelink.onnx import import_model  # noqa: E402
from tests.backend import onnx_models as om  # noqa: E402

F = np.float32
i64 = lambda *v: np.array(v, dtype=np.int64)  # noqa: E731


def _n(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, name=outs[0], **attrs)


def _dims(source: str, *picks: int) -> list:
    """Shape(source), then each picked dim as a 1-d tensor (the exporter's pattern for x.size(k))."""
    nodes = [_n("Shape", [source], [f"{source}_shape"])]
    for k in picks:
        nodes += [
            _n("Gather", [f"{source}_shape", f"idx{k}"], [f"{source}_d{k}"], axis=0),
            _n("Unsqueeze", [f"{source}_d{k}", "axis0"], [f"{source}_u{k}"]),
        ]
    return nodes


def _heads_model():
    """x [batch, 8, 64] -> view(batch, 8, 4, 16) -> permute(0, 2, 1, 3): the target built from x's dims."""
    nodes = _dims("x", 0, 1) + [
        _n("Concat", ["x_u0", "x_u1", "heads", "head_dim"], ["target"], axis=0),
        _n("Reshape", ["x", "target"], ["h"]),
        _n("Transpose", ["h"], ["y"], perm=[0, 2, 1, 3]),
    ]
    init = {
        "idx0": i64(0).reshape(()),
        "idx1": i64(1).reshape(()),
        "axis0": i64(0),
        "heads": i64(4),
        "head_dim": i64(16),
    }
    return om.make_model(nodes, [("x", ["batch", 8, 64])], [("y", ["batch", 4, 8, 16])], init, "heads")


@pytest.mark.parametrize("batch", [1, 3])
def test_a_reshape_target_built_from_a_symbolic_batch_imports_and_runs(batch, rng):
    model = _heads_model()
    config, _ = import_model(model)
    ops = [s["name"] for s in config["pipeline"]]
    assert ops == ["reshape", "transpose"], ops  # Shape, Gather, Unsqueeze and Concat were evaluated
    assert config["pipeline"][0]["attrs"]["shape"] == [0, 8, 4, 16]  # the batch: the input's own dim
    x = rng.standard_normal((batch, 8, 64)).astype(F)
    with pl.from_onnx(model, device="cpu") as pipe:
        np.testing.assert_array_equal(
            pipe.run(x=x)["y"].numpy(), x.reshape(batch, 8, 4, 16).transpose(0, 2, 1, 3)
        )


def test_a_scale_computed_from_a_fixed_dim_becomes_a_constant(rng):
    # scores / sqrt(k.size(-1)): the head dim is fixed even with a dynamic batch
    nodes = [
        _n("Shape", ["k"], ["k_shape"]),
        _n("Gather", ["k_shape", "last"], ["d"], axis=0),
        _n("Cast", ["d"], ["d_f"], to=onnx.TensorProto.FLOAT),
        _n("Sqrt", ["d_f"], ["root"]),
        _n("Div", ["s", "root"], ["y"]),
    ]
    model = om.make_model(
        nodes,
        [("s", ["batch", 4]), ("k", ["batch", 16])],
        [("y", ["batch", 4])],
        {"last": i64(-1).reshape(())},
        "scale",
    )
    config, weights = import_model(model)
    assert [s["name"] for s in config["pipeline"]] == ["div"]
    (root,) = weights.values()
    assert float(root) == 4.0
    s, k = rng.standard_normal((2, 4)).astype(F), rng.standard_normal((2, 16)).astype(F)
    with pl.from_onnx(model, device="cpu") as pipe:
        np.testing.assert_allclose(pipe.run(s=s, k=k)["y"].numpy(), s / 4.0)


def test_a_sliced_shape_and_arithmetic_on_the_batch_give_one_inferred_dim(rng):
    # [batch * 8, 64]: the product of a symbolic dim is unknown at import, so it is the reshape's -1
    nodes = _dims("x", 0) + [
        _n("Mul", ["x_d0", "eight"], ["rows"]),
        _n("Unsqueeze", ["rows", "axis0"], ["rows_1d"]),
        _n("Shape", ["x"], ["all"]),
        _n("Slice", ["all", "minus1", "big"], ["last"]),  # x.shape[-1:]
        _n("Concat", ["rows_1d", "last"], ["target"], axis=0),
        _n("Reshape", ["x", "target"], ["y"]),
    ]
    init = {
        "idx0": i64(0).reshape(()),
        "axis0": i64(0),
        "eight": i64(8).reshape(()),
        "minus1": i64(-1),
        "big": i64(2**62),
    }
    model = om.make_model(nodes, [("x", ["batch", 8, 64])], [("y", ["rows", 64])], init, "rows")
    config, _ = import_model(model)
    assert [s["name"] for s in config["pipeline"]] == ["reshape"]
    assert config["pipeline"][0]["attrs"]["shape"] == [-1, 64]
    x = rng.standard_normal((3, 8, 64)).astype(F)
    with pl.from_onnx(model, device="cpu") as pipe:
        np.testing.assert_array_equal(pipe.run(x=x)["y"].numpy(), x.reshape(24, 64))


def test_an_expand_to_a_shape_built_from_the_input_keeps_its_dims(rng):
    # mask [2, 1, 8] expanded to [batch, 1, 8] with the batch taken from x
    nodes = _dims("x", 0) + [
        _n("Concat", ["x_u0", "one", "eight"], ["target"], axis=0),
        _n("Expand", ["m", "target"], ["me"]),
        _n("Add", ["x", "me"], ["y"]),
    ]
    init = {"idx0": i64(0).reshape(()), "axis0": i64(0), "one": i64(1), "eight": i64(8)}
    model = om.make_model(
        nodes, [("x", ["batch", 1, 8]), ("m", [2, 1, 8])], [("y", ["batch", 1, 8])], init, "mask"
    )
    with pytest.raises(pl.PipeLinkError, match="Expand's shape .*batch.* broadcasts only from 1"):
        import_model(model)  # m's dim 0 is 2: valid only for a batch of 1 or 2, known only at run time
    # Expanding x itself to its own batch keeps the dim (1 in the target: broadcasting keeps it).
    nodes[-2] = _n("Expand", ["x", "target"], ["me"])
    model = om.make_model(
        nodes, [("x", ["batch", 1, 8]), ("m", [2, 1, 8])], [("y", ["batch", 1, 8])], init, "mask"
    )
    config, _ = import_model(model)
    expand = next(s for s in config["pipeline"] if s["name"] == "expand")
    assert expand["attrs"]["shape"] == [1, 1, 8]
    x = rng.standard_normal((2, 1, 8)).astype(F)
    with pl.from_onnx(model, device="cpu") as pipe:
        np.testing.assert_array_equal(pipe.run(x=x, m=np.zeros((2, 1, 8), F))["y"].numpy(), 2 * x)


def _cls_token_model():
    """``torch.cat([cls.expand(x.size(0), -1, -1), x], 1)`` as PyTorch exports it at a dynamic batch: the
    target [batch, -1, -1] viewed as 1-d, its -1s replaced by 1s through Equal and Where, then Expand; and
    a mask of ones [batch, 9] from ConstantOfShape, added to a row of the result."""
    nodes = _dims("x", 0) + [
        _n("Concat", ["x_u0", "minus1", "minus1"], ["target"], axis=0),
        _n("Reshape", ["target", "flat"], ["target_1d"]),
        _n("Equal", ["target_1d", "minus1s"], ["is_minus1"]),
        _n("Where", ["is_minus1", "ones3", "target_1d"], ["expand_to"]),
        _n("Expand", ["cls", "expand_to"], ["cls_b"]),
        _n("Concat", ["cls_b", "x"], ["joined"], axis=1),
        _n("Concat", ["x_u0", "nine"], ["mask_shape"], axis=0),
        helper.make_node(
            "ConstantOfShape",
            ["mask_shape"],
            ["mask"],
            name="mask",
            value=onnx.numpy_helper.from_array(np.array([1.5], F)),
        ),
        _n("Unsqueeze", ["mask", "axis_last"], ["mask_col"]),
        _n("Add", ["joined", "mask_col"], ["y"]),
    ]
    init = {
        "idx0": i64(0).reshape(()),
        "axis0": i64(0),
        "minus1": i64(-1),
        "flat": i64(-1),
        "minus1s": i64(-1, -1, -1),
        "ones3": i64(1, 1, 1),
        "nine": i64(9),
        "axis_last": i64(-1),
    }
    return om.make_model(
        nodes, [("x", ["batch", 8, 4]), ("cls", [1, 1, 4])], [("y", ["batch", 9, 4])], init, "cls_token"
    )


@pytest.mark.parametrize("batch", [1, 3])
def test_an_expand_and_a_constant_of_shape_to_a_run_time_batch_take_it_from_the_input(batch, device, rng):
    """The batch of the Expand's and ConstantOfShape's targets is x's, which neither the cls token nor a
    constant has: it is read from x at run time (a slice of x down to its batch, compared with itself, as
    the condition of a Where broadcasting the token), and the result matches onnx's reference."""
    model = _cls_token_model()
    config, _ = import_model(model)
    ops = [s["name"] for s in config["pipeline"]]
    assert "where" in ops and ops.count("slice") == 2, ops  # one probe of x's batch per node
    x = rng.standard_normal((batch, 8, 4)).astype(F)
    cls = rng.standard_normal((1, 1, 4)).astype(F)
    (want,) = om.run_reference(model, {"x": x, "cls": cls})
    with pl.from_onnx(model, device=device) as pipe:
        np.testing.assert_array_equal(pipe.run(x=x, cls=cls)["y"].numpy(), want)


def _constant_of_shape_model(factor: str):
    """A ConstantOfShape to ``x.size(0) * factor`` (``two``: 2, ``x_d0``: the batch again) concatenated
    to x."""
    nodes = _dims("x", 0) + [
        _n("Mul", ["x_d0", factor], ["count"]),
        _n("Unsqueeze", ["count", "axis0"], ["count_1d"]),
        _n("ConstantOfShape", ["count_1d"], ["zeros"]),
        _n("Concat", ["x", "zeros"], ["y"], axis=0),
    ]
    init = {"idx0": i64(0).reshape(()), "axis0": i64(0), "two": i64(2).reshape(())}
    return om.make_model(nodes, [("x", ["batch"])], [("y", None)], init, "count")


@pytest.mark.parametrize("batch", [1, 3])
def test_a_run_time_multiple_of_the_batch_is_broadcast_from_the_batch(batch, device, rng):
    """A ConstantOfShape to ``2 * batch``: no tensor has that dim, but it is twice x's batch (x's dim
    repeated twice)."""
    x = rng.standard_normal(batch).astype(F)
    with pl.from_onnx(_constant_of_shape_model("two"), device=device) as pipe:
        np.testing.assert_array_equal(pipe.run(x=x)["y"].numpy(), np.concatenate([x, np.zeros(2 * batch, F)]))


def test_a_run_time_dim_no_earlier_tensor_has_is_refused():
    """A ConstantOfShape to ``batch * batch``: a dim known only at run time that no tensor has, nor is a
    multiple of one, so nothing can be broadcast to it."""
    with pytest.raises(pl.PipeLinkError, match="ConstantOfShape to a shape known only .* no tensor") as info:
        import_model(_constant_of_shape_model("x_d0"))
    assert [u["op_type"] for u in info.value.unsupported] == ["ConstantOfShape"]


def test_a_reshape_resolved_at_import_lets_shape_inference_keep_the_batch(device, rng):
    """x [batch, 8, 64] viewed by a computed target as [batch, 8, 4, 16], transposed, then viewed as
    ``[x.size(0), 4, -1]``. ONNX's inference gives the first view's output fresh dims (its target is
    computed); the import runs it again with the target it resolved ([0, 8, 4, 16]), so the transposed
    tensor's dim 0 is x's batch and the second target is [0, 4, -1] (not two unknowns)."""
    nodes = _dims("x", 0) + [
        _n("Concat", ["x_u0", "eight", "four", "sixteen"], ["target"], axis=0),
        _n("Reshape", ["x", "target"], ["h"]),
        _n("Transpose", ["h"], ["t"], perm=[0, 2, 1, 3]),
        _n("Concat", ["x_u0", "four", "minus1"], ["merge"], axis=0),
        _n("Reshape", ["t", "merge"], ["y"]),
    ]
    init = {
        "idx0": i64(0).reshape(()),
        "axis0": i64(0),
        "eight": i64(8),
        "four": i64(4),
        "sixteen": i64(16),
        "minus1": i64(-1),
    }
    model = om.make_model(nodes, [("x", ["batch", 8, 64])], [("y", None)], init, "merge_heads")
    config, _ = import_model(model)
    shapes = [s["attrs"]["shape"] for s in config["pipeline"] if s["name"] == "reshape"]
    assert shapes == [[0, 8, 4, 16], [0, 4, -1]], shapes
    x = rng.standard_normal((3, 8, 64)).astype(F)
    (want,) = om.run_reference(model, {"x": x})
    with pl.from_onnx(model, device=device) as pipe:
        np.testing.assert_array_equal(pipe.run(x=x)["y"].numpy(), want)


def test_a_tensor_broadcast_to_the_batch_keeps_its_name_for_a_later_reshape(device, rng):
    """m [1, 8] expanded to x's batch, added to x, then viewed as ``[x.size(0), -1, 4]``: onnx gives the
    Expand's output fresh dims (its target is computed), so the sum's dim 0 would not be x's batch and the
    view would have two unknowns; the import types the Expand's output [batch, 8] for its inference."""
    nodes = _dims("x", 0) + [
        _n("Concat", ["x_u0", "eight"], ["target"], axis=0),
        _n("Expand", ["m", "target"], ["me"]),
        _n("Add", ["me", "x"], ["z"]),
        _n("Concat", ["x_u0", "minus1", "four"], ["view"], axis=0),
        _n("Reshape", ["z", "view"], ["y"]),
    ]
    init = {"idx0": i64(0).reshape(()), "axis0": i64(0), "eight": i64(8), "minus1": i64(-1), "four": i64(4)}
    model = om.make_model(nodes, [("x", ["batch", 8]), ("m", [1, 8])], [("y", None)], init, "me")
    config, _ = import_model(model)
    (reshape,) = [s for s in config["pipeline"] if s["name"] == "reshape" and s["outputs"] == ["y"]]
    assert reshape["attrs"]["shape"] == [0, -1, 4]
    x, m = rng.standard_normal((3, 8)).astype(F), rng.standard_normal((1, 8)).astype(F)
    (want,) = om.run_reference(model, {"x": x, "m": m})
    with pl.from_onnx(model, device=device) as pipe:
        np.testing.assert_array_equal(pipe.run(x=x, m=m)["y"].numpy(), want)


def _interpolate_model(height: int, width: int):
    """``F.interpolate(x, size=(height, width), mode="bilinear")`` at a dynamic batch: the sizes are x's own
    N and C (a Slice of its Shape), then the two constants."""
    nodes = [
        _n("Shape", ["x"], ["x_shape"]),
        _n("Slice", ["x_shape", "zero", "two"], ["nc"]),
        _n("Concat", ["nc", "hw"], ["sizes"], axis=0),
        _n(
            "Resize",
            ["x", "", "", "sizes"],
            ["y"],
            mode="linear",
            coordinate_transformation_mode="pytorch_half_pixel",
        ),
    ]
    init = {"zero": i64(0), "two": i64(2), "hw": i64(height, width)}
    return om.make_model(nodes, [("x", ["batch", 3, 7, 5])], [("y", None)], init, "interpolate")


@pytest.mark.parametrize("batch", [1, 2])
def test_a_resize_to_sizes_of_the_inputs_own_batch_runs_by_the_scales_they_imply(batch, device, rng):
    """Sizes [N, C, 9, 12] with N and C x's own (known only at run time): the scales ``[1, 1, 9/7, 12/5]``
    (float64) give the same output and the same sampling as the sizes (onnx's reference)."""
    model = _interpolate_model(9, 12)
    config, _ = import_model(model)
    (resize,) = [s for s in config["pipeline"] if s["name"] == "resize"]
    assert resize["attrs"]["scales"] == [1.0, 1.0, 9 / 7, 12 / 5]
    x = rng.standard_normal((batch, 3, 7, 5)).astype(F)
    (want,) = om.run_reference(model, {"x": x})
    with pl.from_onnx(model, device=device) as pipe:
        got = pipe.run(x=x)["y"].numpy()
    assert got.shape == want.shape == (batch, 3, 9, 12)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_resize_to_a_size_no_scale_gives_back_is_refused():
    """7 to 61: ``floor(7 * (61 / 7))`` is 60 in float64, so no scale gives that size."""
    with pytest.raises(pl.PipeLinkError, match="size 61 of axis 2 .* no scale resize can give"):
        import_model(_interpolate_model(61, 12))


def test_two_dims_known_only_at_run_time_are_refused_with_the_reshape_named():
    nodes = _dims("x", 0) + [
        _n("Mul", ["x_d0", "two"], ["a"]),
        _n("Unsqueeze", ["a", "axis0"], ["a1"]),
        _n("Concat", ["a1", "a1"], ["target"], axis=0),
        _n("Reshape", ["x", "target"], ["y"]),
    ]
    init = {"idx0": i64(0).reshape(()), "axis0": i64(0), "two": i64(2).reshape(())}
    model = om.make_model(nodes, [("x", ["batch", 4])], [("y", None)], init, "two_unknowns")
    with pytest.raises(pl.PipeLinkError, match=r"Reshape.*2 entries known only when the model runs") as info:
        import_model(model)
    assert [u["op_type"] for u in info.value.context["unsupported"]] == ["Reshape"]


def test_a_table_past_the_shape_arithmetic_limit_folds(rng):
    """WavLM's [frames, frames] position buckets start from a ConstantOfShape of constants: 79 * 79 = 6,241
    elements, past what shape arithmetic folds (a table op's only way in is folding)."""
    from pipelink.onnx.fold import MAX_FOLD_ELEMENTS, fold_limit

    assert MAX_FOLD_ELEMENTS < 79 * 79 <= fold_limit("ConstantOfShape")
    value = helper.make_tensor("v", onnx.TensorProto.FLOAT, [1], [0.5])
    nodes = [_n("ConstantOfShape", ["shape"], ["table"], value=value), _n("Add", ["x", "table"], ["y"])]
    model = om.make_model(nodes, [("x", [79, 79])], [("y", None)], {"shape": i64(79, 79)}, "table")
    x = rng.standard_normal((79, 79)).astype(F)
    with pl.from_onnx(model, device="cpu") as pipe:
        np.testing.assert_array_equal(pipe.run(x=x)["y"].numpy(), x + F(0.5))


def test_an_integer_division_by_zero_of_constants_folds_to_zero_without_a_warning():
    """A hostile model's integer Div by 0 folds to 0, as the div stage computes it at run time; NumPy's
    RuntimeWarning from onnx's reference never reaches the user."""
    import warnings

    nodes = [_n("Div", ["a", "b"], ["q"]), _n("Add", ["x", "q"], ["y"])]
    model = om.make_model(nodes, [("x", [2])], [("y", None)], {"a": i64(6, 4), "b": i64(0, 2)}, "div0")
    model.graph.input[0].type.tensor_type.elem_type = onnx.TensorProto.INT64
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        config, weights = import_model(model)
    assert [w.message for w in seen] == []
    assert [stage["name"] for stage in config["pipeline"]] == ["add"]  # the Div folded
    with pl.load(config, weights=weights, device="cpu") as pipe:
        np.testing.assert_array_equal(pipe.run(x=i64(1, 1))["y"].numpy(), i64(1, 3))


def test_a_constant_made_by_folding_has_its_own_shape_for_the_nodes_after_it(rng):
    """A ConstantOfShape of dims computed from x's shape folds; the Pad of it then needs its shape, which
    shape inference could not give (Funnel's TorchScript export: ``unk__`` dims): the folded value's."""
    value = helper.make_tensor("v", onnx.TensorProto.FLOAT, [1], [1.0])
    nodes = [
        *_dims("x", 1),
        _n("Sub", ["x_u1", "one"], ["less"]),
        _n("Concat", ["less", "less"], ["dims"], axis=0),
        _n("ConstantOfShape", ["dims"], ["ones"], value=value),
        _n("Pad", ["ones", "pads"], ["padded"], mode="constant"),
        _n("Add", ["padded", "z"], ["y"]),
    ]
    inits = {"idx1": i64(1)[0], "axis0": i64(0), "one": i64(1), "pads": i64(1, 0, 0, 0)}
    model = om.make_model(nodes, [("x", [3, 6]), ("z", [6, 5])], [("y", None)], inits, "pad_of_folded")
    model.graph.value_info.append(
        helper.make_tensor_value_info("ones", onnx.TensorProto.FLOAT, ["unk_1", "unk_2"])
    )
    z = rng.standard_normal((6, 5)).astype(F)
    want = np.pad(np.ones((5, 5), F), ((1, 0), (0, 0))) + z
    with pl.from_onnx(model, device="cpu") as pipe:
        np.testing.assert_array_equal(pipe.run(x=np.zeros((3, 6), F), z=z)["y"].numpy(), want)


def test_a_reshape_target_past_int64_is_refused_not_a_crash():
    """x [2**62, 4, c, 16] viewed as [-1, c, 16]: the -1 the import resolves is 2**64, past int64 (the
    value shape inference would have been given): a refusal naming the dim, never an OverflowError."""
    nodes = [
        *_dims("x", 2),
        _n("Concat", ["minus_one", "x_u2", "sixteen"], ["target"], axis=0),
        _n("Reshape", ["x", "target"], ["y"]),
    ]
    inits = {"idx2": i64(2)[0], "axis0": i64(0), "minus_one": i64(-1), "sixteen": i64(16)}
    model = om.make_model(nodes, [("x", [2**62, 4, "c", 16])], [("y", None)], inits, "past_int64")
    with pytest.raises(pl.PipeLinkError, match=r"x.shape\[0\] must be <= 9007199254740992"):
        pl.from_onnx(model, device="cpu")


def test_a_huge_constant_of_shape_is_not_evaluated_and_is_refused():
    nodes = [_n("ConstantOfShape", ["shape"], ["big"]), _n("Add", ["x", "big"], ["y"])]
    init = {"shape": i64(1 << 20, 1 << 20)}  # 2**40 elements: never allocated
    model = om.make_model(nodes, [("x", [1])], [("y", None)], init, "huge")
    start = time.perf_counter()
    with pytest.raises(pl.PipeLinkError, match="ConstantOfShape"):
        import_model(model)
    assert time.perf_counter() - start < 5.0


@pytest.mark.parametrize(
    ("nodes", "init"),
    [
        (  # three vectors of 1,365 broadcast to 2.5e9 elements: never evaluated
            [_n("Where", ["c", "a", "b"], ["big"]), _n("Add", ["x", "big"], ["y"])],
            {
                "c": np.ones((1365, 1, 1), bool),
                "a": np.ones((1, 1365, 1), F),
                "b": np.ones((1, 1, 1365), F),
            },
        ),
        (  # a Range with an infinite limit
            [_n("Range", ["s", "l", "d"], ["big"]), _n("Add", ["x", "big"], ["y"])],
            {"s": np.array(0.0, F), "l": np.array(np.inf, F), "d": np.array(1.0, F)},
        ),
        (  # an Expand of one element to 2**40
            [_n("Expand", ["one", "shape"], ["big"]), _n("Add", ["x", "big"], ["y"])],
            {"one": np.ones((1,), F), "shape": i64(1 << 20, 1 << 20)},
        ),
        (  # a Tile of 4 elements by 2**40
            [_n("Tile", ["four", "reps"], ["big"]), _n("Add", ["x", "big"], ["y"])],
            {"four": np.ones((4,), F), "reps": i64(1 << 40)},
        ),
        (  # a OneHot of depth 2**40
            [_n("OneHot", ["idx", "depth", "vals"], ["big"]), _n("Add", ["x", "big"], ["y"])],
            {"idx": i64(1), "depth": i64(1 << 40).reshape(()), "vals": np.array([0.0, 1.0], F)},
        ),
        (  # a Mod of two vectors broadcast to 1.9e6 elements
            [_n("Mod", ["a", "b"], ["big"], fmod=1), _n("Add", ["x", "big"], ["y"])],
            {"a": np.ones((1365, 1), F), "b": np.ones((1, 1365), F)},
        ),
    ],
)
def test_constant_nodes_too_big_to_evaluate_stay_nodes(nodes, init):
    model = om.make_model(nodes, [("x", [1])], [("y", None)], init, "big")
    start = time.perf_counter()
    try:
        import_model(model)
    except pl.PipeLinkError as e:  # refused by a converter: fine, as long as nothing was evaluated
        assert "Where" in e.message or "Range" in e.message or "big" in e.message
    assert time.perf_counter() - start < 5.0


def test_a_node_that_cannot_take_a_run_time_shape_is_refused_by_name():
    # Gather of index 5 from a rank-2 shape: the shape's length is known at import, so the index is bad
    nodes = [
        _n("Shape", ["x"], ["s"]),
        _n("Gather", ["s", "five"], ["d"], axis=0),
        _n("Cast", ["d"], ["y"], to=1),
    ]
    model = om.make_model(nodes, [("x", ["batch", 4])], [("y", None)], {"five": i64(5).reshape(())}, "bad")
    with pytest.raises(
        pl.PipeLinkError, match="Gather index 5 is out of range for 's', a shape of 2"
    ) as info:
        import_model(model)
    assert [u["op_type"] for u in info.value.context["unsupported"]] == ["Gather"]


def test_a_constant_slice_follows_the_onnx_clamping_not_numpys(rng):
    # dims [2, 3, 5, 7]; Slice(start -6, end INT64_MIN, step -1) over 4 entries: the spec clamps the start
    # to 0 for a negative step, so it takes entry 0 (NumPy's rule, onnx's reference, takes nothing)
    nodes = [
        _n("Slice", ["dims", "s", "e", "a", "st"], ["picked"]),
        _n("Concat", ["picked", "rest"], ["target"], axis=0),
        _n("Reshape", ["x", "target"], ["y"]),
    ]
    init = {
        "dims": i64(2, 3, 5, 7),
        "s": i64(-6),
        "e": i64(-(2**63)),
        "a": i64(0),
        "st": i64(-1),
        "rest": i64(-1),
    }
    model = om.make_model(nodes, [("x", [2, 6])], [("y", None)], init, "slice")
    config, _ = import_model(model)
    assert config["pipeline"][0]["attrs"]["shape"] == [2, -1]
    x = rng.standard_normal((2, 6)).astype(F)
    with pl.from_onnx(model, device="cpu") as pipe:
        assert pipe.run(x=x)["y"].numpy().shape == (2, 6)


def test_a_shape_that_is_a_graph_output_is_refused_not_folded_away():
    model = om.make_model([_n("Shape", ["x"], ["s"])], [("x", ["batch", 4])], [("s", None)], {}, "shape_out")
    with pytest.raises(pl.PipeLinkError, match="Shape"):
        import_model(model)


def test_pads_folded_from_a_2d_slice_let_shape_inference_see_the_next_pad():
    """PyTorch's export of F.pad with computed pads: a 2-d constant sliced with a negative step, transposed,
    reshaped and cast gives the pads. The Slice folds by the slice operator's rule; shape inference then
    knows the padded shape, which the reflect Pad after it needs (each padded axis's size): re-inferring
    after folding imports it, and the result is onnx's."""
    from onnx.reference import ReferenceEvaluator

    pairs = np.array([[0, 0], [0, 0], [1, 2], [2, 1]], np.int64)  # begin/end per axis, as torch writes them
    nodes = [
        _n("Slice", ["pairs", "s0", "e0", "a0", "st0"], ["rev"]),  # rows reversed: axes last to first
        _n("Transpose", ["rev"], ["cols"], perm=[1, 0]),
        _n("Reshape", ["cols", "flat"], ["pads64"]),
        _n("Cast", ["pads64"], ["pads"], to=7),
        _n("Pad", ["x", "pads"], ["p1"]),
        _n("Pad", ["p1", "refl"], ["y"], mode="reflect"),
    ]
    init = {
        "pairs": pairs[::-1].copy(),
        "s0": i64(-1),
        "e0": i64(-(2**63) + 1),
        "a0": i64(0),
        "st0": i64(-1),
        "flat": i64(-1),
        "refl": i64(0, 0, 1, 1, 0, 0, 1, 1),
    }
    model = om.make_model(nodes, [("x", [1, 2, 4, 5])], [("y", None)], init, "pads")
    x = np.random.default_rng(40).standard_normal((1, 2, 4, 5)).astype(F)
    (ref,) = ReferenceEvaluator(model).run(None, {"x": x})
    config, _ = import_model(model)
    assert [s["name"] for s in config["pipeline"]][-1] != "slice"  # the pads arithmetic left no stage
    with pl.from_onnx(model) as pipe:
        np.testing.assert_allclose(pipe.run(x=x)["y"].numpy(), ref, rtol=1e-6)


def test_a_shape_read_before_its_input_was_known_is_folded_again():
    """LeViT's and Swin's pattern: a Reshape target computed from Shape(p) of a tensor whose shape ONNX
    shape inference learns only after folding (p is padded by computed pads). The first fold reads
    Shape(p) as symbolic dims, and a target of two products of them cannot be made static; once
    re-inferred, the whole graph is folded again, the Shape is a constant, and the Reshape imports."""
    from onnx.reference import ReferenceEvaluator

    pairs = np.array([[0, 0], [0, 0], [1, 2], [2, 1]], np.int64)
    nodes = [
        _n("Slice", ["pairs", "s0", "e0", "a0", "st0"], ["rev"]),
        _n("Transpose", ["rev"], ["cols"], perm=[1, 0]),
        _n("Reshape", ["cols", "flat"], ["pads"]),
        _n("Pad", ["x", "pads"], ["p"]),
        _n("Shape", ["p"], ["s"]),
        *(_n("Gather", ["s", f"i{k}"], [f"d{k}"], axis=0) for k in range(4)),
        _n("Mul", ["d0", "d1"], ["m01"]),
        _n("Mul", ["d2", "d3"], ["m23"]),
        _n("Concat", ["m01", "m23"], ["target"], axis=0),
        _n("Reshape", ["p", "target"], ["y"]),
    ]
    init = {
        "pairs": pairs[::-1].copy(),
        "s0": i64(-1),
        "e0": i64(-(2**63) + 1),
        "a0": i64(0),
        "st0": i64(-1),
        "flat": i64(-1),
        **{f"i{k}": i64(k) for k in range(4)},
    }
    model = om.make_model(nodes, [("x", [1, 2, 4, 5])], [("y", None)], init, "reshape_after_pad")
    x = np.random.default_rng(41).standard_normal((1, 2, 4, 5)).astype(F)
    (ref,) = ReferenceEvaluator(model).run(None, {"x": x})
    config, _ = import_model(model)
    reshape = [s for s in config["pipeline"] if s["name"] == "reshape"]
    assert len(reshape) == 1 and reshape[0]["attrs"]["shape"] == [2, 56]  # 1 * 2, (4 + 3) * (5 + 3)
    with pl.from_onnx(model) as pipe:
        np.testing.assert_allclose(pipe.run(x=x)["y"].numpy(), ref, rtol=1e-6)


def test_the_shape_of_a_folded_constant_is_its_arrays():
    """DINOv2's pattern: a constant position table reshaped by a target computed with Pow (both folded),
    then Shape of it read for another Reshape; shape inference has no shape for the folded tensor, the
    fold takes the array's own."""
    nodes = [
        _n("Pow", ["four", "two"], ["sixteen_f"]),
        _n("Cast", ["sixteen_f"], ["sixteen"], to=7),
        _n("Unsqueeze", ["sixteen", "axis0"], ["n"]),
        _n("Concat", ["n", "minus1"], ["target"], axis=0),
        _n("Reshape", ["table", "target"], ["grid"]),
        _n("Shape", ["grid"], ["gs"]),
        _n("Reshape", ["x", "gs"], ["y"]),
    ]
    init = {
        "four": np.array(4.0, F),
        "two": np.array(2.0, F),
        "axis0": i64(0),
        "minus1": i64(-1),
        "table": np.arange(64, dtype=F),
    }
    model = om.make_model(nodes, [("x", [8, 8])], [("y", None)], init, "shape_of_constant")
    config, _ = import_model(model)
    (stage,) = config["pipeline"]
    assert stage["name"] == "reshape" and stage["attrs"]["shape"] == [16, 4]


# -- graph outputs that are constants ------------------------------------------------------------------
def test_constant_graph_outputs_are_copied_out_and_the_weight_keeps_one_name(device, rng):
    """A Constant node, an Identity of an initializer, a Shape, a Size and a window of constants made as
    graph outputs: each is an ``identity`` stage from its weight; a stage reading the same constant binds
    the same weight (one array, one name), and the run matches onnx's reference."""
    k = rng.standard_normal((2, 3)).astype(F)
    nodes = [
        helper.make_node("Constant", [], ["k"], value=onnx.numpy_helper.from_array(k, "k")),
        _n("Identity", ["w"], ["w_out"]),
        _n("Shape", ["x"], ["s"]),
        _n("Size", ["x"], ["n"]),
        _n("HannWindow", ["four"], ["hann"]),
        _n("Add", ["x", "k"], ["y"]),
        _n("Mul", ["y", "w"], ["z"]),
    ]
    init = {"w": rng.standard_normal((3,)).astype(F), "four": np.array(4, np.int64)}
    graph = helper.make_graph(
        nodes,
        "constant_outputs",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info(name, 0, None) for name in ("z", "k", "w_out", "s", "n", "hann")],
        [onnx.numpy_helper.from_array(a, n) for n, a in init.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    config, weights = import_model(model)
    assert config["outputs"] == ["z", "k", "w_out", "s", "n", "hann"]
    copies = {s["outputs"][0]: s["inputs"][0] for s in config["pipeline"] if s["name"] == "identity"}
    assert copies == {"k": "k_value", "w_out": "w", "s": "s_value", "n": "n_value", "hann": "hann_value"}
    assert sorted(weights) == ["hann_value", "k_value", "n_value", "s_value", "w"]
    x = rng.standard_normal((2, 3)).astype(F)
    want = om.run_reference(model, {"x": x})
    with pl.from_onnx(model, device=device) as pipe:
        got = pipe.run(x=x)
        for name, expected in zip(config["outputs"], want, strict=True):
            value = got[name].numpy()
            assert value.dtype == expected.dtype and value.shape == expected.shape, name
            np.testing.assert_allclose(value, expected, rtol=1e-6, err_msg=name)
        pipe.run(x=x)["k"].numpy()[...] = 0  # the caller's copy: the next run still reads k
        np.testing.assert_allclose(pipe.run(x=x)["k"].numpy(), k)


def test_a_shape_output_with_a_symbolic_dim_stays_a_refused_node():
    """Shape of a tensor whose batch is known only when the model runs is not a constant: it stays a node,
    and PipeLink has no Shape stage, so the import says so."""
    graph = helper.make_graph(
        [_n("Shape", ["x"], ["s"])],
        "symbolic_shape",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("s", onnx.TensorProto.INT64, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    with pytest.raises(pl.PipeLinkError) as info:
        import_model(model)
    assert [u["op_type"] for u in info.value.unsupported] == ["Shape"]


def test_a_castlike_of_a_constant_folds_on_its_targets_dtype_alone(device, rng):
    """``CastLike(-inf, scores)`` (a mask's fill, as exporters write it) needs only the scores' dtype: it
    folds into a constant of that dtype even though the scores are computed, so a Pad or Where reading it
    sees a constant."""
    nodes = [
        _n("Mul", ["x", "two"], ["scores"]),
        _n("CastLike", ["fill", "scores"], ["fill_like"]),
        _n("Pad", ["scores", "pads", "fill_like"], ["y"], mode="constant"),
    ]
    init = {"two": np.array(2.0, np.float16), "fill": np.array(-np.inf, F), "pads": i64(0, 1, 0, 2)}
    graph = helper.make_graph(
        nodes,
        "castlike_fill",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT16, [2, 3])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT16, [2, 6])],
        [onnx.numpy_helper.from_array(a, n) for n, a in init.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    config, weights = import_model(model)
    assert "cast" not in [s["name"] for s in config["pipeline"]]  # (without the fold: refused, Pad's value)
    x = rng.standard_normal((2, 3)).astype(np.float16)
    (want,) = om.run_reference(model, {"x": x})
    with pl.from_onnx(model, device=device) as pipe:
        np.testing.assert_array_equal(pipe.run(x=x)["y"].numpy(), want)


def _range_model(start, delta, dtype=np.int64):
    """y = Range(start, x.size(0), delta) of x [batch, 4], in ``dtype`` (the exporter casts the dim)."""
    nodes = [
        _n("Shape", ["x"], ["s"]),
        _n("Gather", ["s", "idx0"], ["d0"], axis=0),
        _n("Cast", ["d0"], ["limit"], to=helper.np_dtype_to_tensor_dtype(np.dtype(dtype))),
        _n("Range", ["start", "limit", "delta"], ["y"]),
    ]
    init = {"idx0": i64(0).reshape(()), "start": np.array(start, dtype), "delta": np.array(delta, dtype)}
    model = om.make_model(nodes, [("x", ["batch", 4])], [], init, "range")
    model.graph.output.append(
        helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), None)
    )
    return model


@pytest.mark.parametrize(
    ("start", "delta", "dtype"), [(0, 1, np.int64), (1, 2, np.int64), (2, 1, np.int32), (0, 3, F)]
)
@pytest.mark.parametrize("batch", [1, 3, 7])
def test_a_range_to_the_run_time_batch_counts_along_it(start, delta, dtype, batch, device, rng):
    """``arange(x.size(0))``, as transformers' masks index the batch: the limit is x's batch, known only
    when the model runs; the import counts along it (a line of ones read from x, its exclusive running sum,
    sliced, scaled and shifted for another start or step), and an empty range (start past the batch) is
    empty, as onnx's reference says."""
    model = _range_model(start, delta, dtype)
    x = rng.standard_normal((batch, 4)).astype(F)
    want = np.arange(start, batch, delta, dtype=dtype)
    with pl.from_onnx(model, device=device) as pipe:
        got = pipe.run(x=x)["y"].numpy()
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    ("start", "delta", "why"), [(0.5, 1.0, "whole number"), (0, -1, "delta >= 1"), (-2, 1, "start")]
)
def test_a_range_to_a_run_time_limit_with_another_start_or_step_is_refused(start, delta, why):
    """The count of a Range from 0.5, backwards, or from below 0 is no dim any tensor has."""
    dtype = F if isinstance(start, float) else np.int64
    with pytest.raises(pl.PipeLinkError, match=f"Range to a limit known only .*{why}") as info:
        import_model(_range_model(start, delta, dtype))
    assert [u["op_type"] for u in info.value.context["unsupported"]] == ["Range"]


def _range_times_model(factor: str):
    """Range(0, x.size(0) * factor), cast to float (``two``: 2, ``d0``: the batch again)."""
    nodes = [
        _n("Shape", ["x"], ["s"]),
        _n("Gather", ["s", "idx0"], ["d0"], axis=0),
        _n("Mul", ["d0", factor], ["limit"]),
        _n("Range", ["zero", "limit", "one"], ["r"]),
        _n("Cast", ["r"], ["y"], to=1),
    ]
    init = {
        "idx0": i64(0).reshape(()),
        "two": i64(2).reshape(()),
        "zero": i64(0).reshape(()),
        "one": i64(1).reshape(()),
    }
    return om.make_model(nodes, [("x", ["batch", 4])], [("y", None)], init, "range_times")


@pytest.mark.parametrize("batch", [1, 3])
def test_a_range_to_a_multiple_of_the_batch_counts_along_it(batch, device, rng):
    x = rng.standard_normal((batch, 4)).astype(F)
    with pl.from_onnx(_range_times_model("two"), device=device) as pipe:
        np.testing.assert_array_equal(pipe.run(x=x)["y"].numpy(), np.arange(2 * batch, dtype=F))


def test_a_range_to_arithmetic_on_the_batch_is_refused():
    """Range(0, batch * batch): a limit no tensor has as a dim, nor is a multiple of one."""
    with pytest.raises(pl.PipeLinkError, match="Range to a limit known only .* no tensor"):
        import_model(_range_times_model("d0"))


@pytest.mark.parametrize("batch", [1, 3])
def test_a_batch_index_flattened_and_viewed_back_keeps_the_batch_for_an_expand(batch, device, rng):
    """transformers' mask pattern: ``arange(batch)`` unsqueezed to [batch, 1, 1], times 4, plus ``arange(4)``,
    gathers from x flattened, viewed by ``Shape`` of the indices ([batch, 1, 4]) after a flatten to [-1],
    then expanded to [batch, 3, 4]. ONNX's inference gives the view back fresh dims (its target is
    computed); the import types it with the batch it names, so the Expand keeps x's batch."""
    nodes = [
        _n("Shape", ["x"], ["s"]),
        _n("Gather", ["s", "idx0"], ["d0"], axis=0),
        _n("Range", ["zero", "d0", "one"], ["rows"]),
        _n("Unsqueeze", ["rows", "axes12"], ["rows3"]),
        _n("Mul", ["rows3", "four"], ["base"]),
        _n("Add", ["base", "cols"], ["index"]),
        _n("Reshape", ["x", "flat"], ["xflat"]),
        _n("Gather", ["xflat", "index"], ["picked"], axis=0),
        _n("Reshape", ["picked", "flat"], ["line"]),
        _n("Shape", ["index"], ["index_shape"]),
        _n("Reshape", ["line", "index_shape"], ["back"]),
        _n("Unsqueeze", ["d0", "axis0"], ["d0_1d"]),
        _n("Concat", ["d0_1d", "three", "four_1d"], ["target"], axis=0),
        _n("Expand", ["back", "target"], ["y"]),
    ]
    init = {
        "idx0": i64(0).reshape(()),
        "zero": i64(0).reshape(()),
        "one": i64(1).reshape(()),
        "axes12": i64(1, 2),
        "four": i64(4).reshape(()),
        "cols": i64(0, 1, 2, 3).reshape(1, 1, 4),
        "flat": i64(-1),
        "axis0": i64(0),
        "three": i64(3),
        "four_1d": i64(4),
    }
    model = om.make_model(nodes, [("x", ["batch", 4])], [("y", None)], init, "batch_index")
    x = rng.standard_normal((batch, 4)).astype(F)
    (want,) = om.run_reference(model, {"x": x})
    with pl.from_onnx(model, device=device) as pipe:
        got = pipe.run(x=x)["y"].numpy()
    assert got.shape == (batch, 3, 4)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("batch", [1, 3])
def test_a_constant_pad_of_an_input_with_a_run_time_batch(batch, device, rng):
    """HF MobileNetV2's "same" padding at a dynamic batch: the constant blocks padded on H and W are 1 on
    the batch, broadcast to x's batch when the model runs."""
    nodes = [_n("Pad", ["x", "pads", "value"], ["y"], mode="constant")]
    init = {"pads": i64(0, 0, 1, 0, 0, 0, 2, 1), "value": np.array(0.5, F)}
    model = om.make_model(nodes, [("x", ["batch", 2, 5, 5])], [("y", None)], init, "pad_batch")
    x = rng.standard_normal((batch, 2, 5, 5)).astype(F)
    want = np.pad(x, [(0, 0), (0, 0), (1, 2), (0, 1)], constant_values=0.5)
    with pl.from_onnx(model, device=device) as pipe:
        np.testing.assert_array_equal(pipe.run(x=x)["y"].numpy(), want)


def _tile_model(repeats_after_batch: list[int], query_shape: list[int]):
    """y = Tile(query, [x.size(0), *repeats_after_batch]): DETR's ``query.repeat(batch, 1, 1)``."""
    nodes = _dims("x", 0) + [
        _n("Concat", ["x_u0", "rest"], ["repeats"], axis=0),
        _n("Tile", ["query", "repeats"], ["y"]),
    ]
    init = {"idx0": i64(0).reshape(()), "axis0": i64(0), "rest": i64(*repeats_after_batch)}
    inputs = [("x", ["batch", 3]), ("query", query_shape)]
    return om.make_model(nodes, inputs, [("y", None)], init, "tile_batch")


@pytest.mark.parametrize("rest", [[1, 1], [2, 1]])
@pytest.mark.parametrize("batch", [1, 3])
def test_a_tile_by_the_run_time_batch_broadcasts_a_dim_of_one(rest, batch, device, rng):
    """The batch repeats query's dim of 1: x's batch broadcast to; a constant repeat of 2 is tiled first."""
    model = _tile_model(rest, [1, 10, 4])
    x = rng.standard_normal((batch, 3)).astype(F)
    query = rng.standard_normal((1, 10, 4)).astype(F)
    with pl.from_onnx(model, device=device) as pipe:
        got = pipe.run(x=x, query=query)["y"].numpy()
    np.testing.assert_array_equal(got, np.tile(query, [batch, *rest]))


@pytest.mark.parametrize("rest", [[1, 1], [1, 3]])
@pytest.mark.parametrize("batch", [1, 3])
def test_a_tile_by_the_run_time_batch_of_a_dim_other_than_one_spreads_it(rest, batch, device, rng):
    """DeBERTa's ``pos_key.repeat(batch, 1, 1)`` of [heads, span, d]: heads viewed as [1, heads], broadcast
    to [batch, heads] and merged (a constant repeat tiled first)."""
    model = _tile_model(rest, [2, 10, 4])
    x = rng.standard_normal((batch, 3)).astype(F)
    query = rng.standard_normal((2, 10, 4)).astype(F)
    with pl.from_onnx(model, device=device) as pipe:
        got = pipe.run(x=x, query=query)["y"].numpy()
    np.testing.assert_array_equal(got, np.tile(query, [batch, *rest]))


def _multiple_model(op: str, divide: bool):
    """``op`` (Expand or Tile) of a constant c to a count computed from x's batch: ``4 * batch`` (DeBERTa's
    relative positions expanded to ``batch * heads``, torch.export), or ``(4 * batch) // 4`` (the
    TorchScript export's ``query.size(0) // pos_key.size(0)`` for a Tile)."""
    count = ["x_d0", "four"]
    nodes = [
        _n("Shape", ["x"], ["x_shape"]),
        _n("Gather", ["x_shape", "idx0"], ["x_d0"], axis=0),
        _n("Mul", count, ["times"]),
    ]
    last = "times"
    if divide:
        nodes.append(_n("Div", ["times", "four"], ["count"]))
        last = "count"
    nodes += [
        _n("Unsqueeze", [last, "axis0"], ["count_1d"]),
        _n("Concat", ["count_1d", "rest"], ["shape"], axis=0),
    ]
    nodes.append(_n(op, ["c", "shape"], ["y"]))
    c = (
        np.arange(2 * 5 * 3, dtype=F).reshape(2, 5, 3)[:1]
        if op == "Expand"
        else np.arange(30, dtype=F).reshape(2, 5, 3)
    )
    init = {
        "idx0": i64(0).reshape(()),
        "axis0": i64(0),
        "four": i64(4).reshape(()),
        "rest": i64(5, 3) if op == "Expand" else i64(1, 1),
        "c": c,
    }
    return om.make_model(nodes, [("x", ["batch", 3])], [("y", None)], init, f"{op.lower()}_multiple"), c


@pytest.mark.parametrize(("op", "divide"), [("Expand", False), ("Tile", True)])
@pytest.mark.parametrize("batch", [1, 3])
def test_a_count_computed_as_a_multiple_of_the_batch_takes_it_from_the_input(op, divide, batch, device, rng):
    model, c = _multiple_model(op, divide)
    x = rng.standard_normal((batch, 3)).astype(F)
    with pl.from_onnx(model, device=device) as pipe:
        got = pipe.run(x=x)["y"].numpy()
    want = np.broadcast_to(c, (4 * batch, 5, 3)) if op == "Expand" else np.tile(c, (batch, 1, 1))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("batch", [1, 3])
def test_a_tile_by_constants_of_an_input_with_run_time_dims_concatenates_copies(batch, device, rng):
    """GPT-J's rotary ``repeat_interleave`` at a dynamic sequence: x [batch, seq, 1, 4] tiled by [1, 1, 2, 3]
    (no dim of x need be known: each repeated axis a concat of copies)."""
    nodes = [_n("Tile", ["x", "reps"], ["y"])]
    model = om.make_model(
        nodes, [("x", ["batch", "seq", 1, 4])], [("y", None)], {"reps": i64(1, 1, 2, 3)}, "tile_concat"
    )
    x = rng.standard_normal((batch, 5, 1, 4)).astype(F)
    with pl.from_onnx(model, device=device) as pipe:
        np.testing.assert_array_equal(pipe.run(x=x)["y"].numpy(), np.tile(x, (1, 1, 2, 3)))
    many = om.make_model(nodes, [("x", ["batch", 4])], [("y", None)], {"reps": i64(1, 65)}, "tile_many")
    with pytest.raises(pl.PipeLinkError, match="each from 1 to 64"):
        import_model(many)


def test_a_named_dim_tiled_once_keeps_its_name_for_a_later_view(device, rng):
    """GPT-J at a dynamic sequence: its rotary table [1, seq, 1] tiled by constants to [1, seq, 4] scales x
    [batch, seq, 4], and the result is viewed as ``[-1, x.size(1), 4]``: that view resolves only if the
    product still has x's ``seq`` (ONNX's inference names a tiled dim afresh)."""
    nodes = _dims("x", 1) + [
        _n("Tile", ["p", "reps"], ["table"]),
        _n("Mul", ["x", "table"], ["scaled"]),
        _n("Concat", ["minus_one", "x_u1", "four"], ["target"], axis=0),
        _n("Reshape", ["scaled", "target"], ["y"]),
    ]
    init = {
        "idx1": i64(1).reshape(()),
        "axis0": i64(0),
        "reps": i64(1, 1, 4),
        "minus_one": i64(-1),
        "four": i64(4),
    }
    inputs = [("x", ["batch", "seq", 4]), ("p", [1, "seq", 1])]
    model = om.make_model(nodes, inputs, [("y", None)], init, "tile_named")
    x = rng.standard_normal((2, 5, 4)).astype(F)
    p = rng.standard_normal((1, 5, 1)).astype(F)
    with pl.from_onnx(model, device=device) as pipe:
        np.testing.assert_array_equal(pipe.run(x=x, p=p)["y"].numpy(), x * np.tile(p, (1, 1, 4)))


@pytest.mark.parametrize("batch", [1, 3])
def test_an_expand_to_a_multiple_of_the_batch_keeps_that_name_for_a_later_view(batch, device, rng):
    """DeBERTa's relative positions (TorchScript, dynamic batch): a constant expanded to
    ``[q.size(0), 2]`` where q is x viewed as ``[4*batch, 2]``, added to q, viewed back as
    ``[x.size(0), -1]``: that view resolves only if the Expand's output keeps the name ``4*batch``."""
    nodes = [
        _n("Reshape", ["x", "pairs"], ["q"]),
        *_dims("q", 0),
        _n("Concat", ["q_u0", "two"], ["target"], axis=0),
        _n("Expand", ["c", "target"], ["e"]),
        _n("Add", ["e", "q"], ["s"]),
        *_dims("x", 0),
        _n("Concat", ["x_u0", "minus_one"], ["back"], axis=0),
        _n("Reshape", ["s", "back"], ["y"]),
    ]
    init = {
        "pairs": i64(-1, 2),
        "idx0": i64(0).reshape(()),
        "axis0": i64(0),
        "two": i64(2),
        "minus_one": i64(-1),
        "c": np.array([[1.0, -2.0]], F),
    }
    model = om.make_model(nodes, [("x", ["batch", 8])], [("y", None)], init, "expand_named")
    x = rng.standard_normal((batch, 8)).astype(F)
    with pl.from_onnx(model, device=device) as pipe:
        got = pipe.run(x=x)["y"].numpy()
    np.testing.assert_array_equal(got, (x.reshape(-1, 2) + init["c"]).reshape(batch, -1))


@pytest.mark.parametrize("batch", [1, 3])
def test_a_one_hot_of_a_known_dim_folds_into_a_tiles_repeats(batch, device, rng):
    """The TorchScript export of ``repeat_interleave(top_k, dim=0)`` in transformers' MoE experts (Mixtral,
    Qwen2-MoE, DeepSeek-V3, gpt-oss) at a dynamic batch: the repeats are ``OneHot([1], 3, [1, k])``, k
    read from the shape of the router's [tokens, k] output, whose tokens are known only at run time."""
    nodes = [
        _n("Shape", ["routed"], ["routed_shape"]),
        _n("Gather", ["routed_shape", "idx1"], ["k"], axis=0),
        _n("Unsqueeze", ["k", "axis0"], ["k_1d"]),
        _n("Concat", ["one", "k_1d"], ["values"], axis=0),
        _n("OneHot", ["where", "depth", "values"], ["hot"]),
        _n("Reshape", ["hot", "minus_one"], ["repeats"]),
        _n("Unsqueeze", ["x", "axis1"], ["x3"]),
        _n("Tile", ["x3", "repeats"], ["y"]),
    ]
    init = {
        "idx1": i64(1).reshape(()),
        "axis0": i64(0),
        "axis1": i64(1),
        "one": i64(1),
        "where": i64(1),
        "depth": i64(3).reshape(()),
        "minus_one": i64(-1),
    }
    inputs = [("x", ["tokens", 4]), ("routed", ["tokens", 2])]
    model = om.make_model(nodes, inputs, [("y", None)], init, "one_hot_repeats")
    x = rng.standard_normal((batch, 4)).astype(F)
    routed = rng.standard_normal((batch, 2)).astype(F)
    with pl.from_onnx(model, device=device) as pipe:
        got = pipe.run(x=x, routed=routed)["y"].numpy()
    np.testing.assert_array_equal(got, np.tile(x[:, None], (1, 2, 1)))


def test_a_tile_by_two_run_time_counts_one_of_a_dim_other_than_one_is_refused():
    nodes = _dims("x", 0, 1) + [
        _n("Concat", ["x_u0", "x_u1", "one"], ["repeats"], axis=0),
        _n("Tile", ["query", "repeats"], ["y"]),
    ]
    init = {"idx0": i64(0).reshape(()), "idx1": i64(1).reshape(()), "axis0": i64(0), "one": i64(1)}
    model = om.make_model(
        nodes, [("x", ["batch", "seq"]), ("query", [2, 1, 4])], [("y", None)], init, "tile_two"
    )
    with pytest.raises(pl.PipeLinkError, match="beside another such count") as info:
        import_model(model)
    assert [u["op_type"] for u in info.value.context["unsupported"]] == ["Tile"]


def test_a_tile_by_a_run_time_count_of_an_input_of_unknown_rank_is_refused():
    with pytest.raises(pl.PipeLinkError, match="Tile needs its input's rank") as info:
        import_model(_tile_model([1, 1], None))
    assert [u["op_type"] for u in info.value.context["unsupported"]] == ["Tile"]


def _heads_fold_model(factor: int = 4):
    """BLOOM's attention at a dynamic batch: x [batch, 16, 4, 8] (sequence, heads, head dim) transposed to
    [batch, 4, 16, 8], viewed as ``[x.size(0) * factor, -1, 8]``, scaled, and viewed back as
    ``[t.size(0) // factor, 4, 16, -1]``."""
    nodes = _dims("x", 0) + [
        _n("Transpose", ["x"], ["t"], perm=[0, 2, 1, 3]),
        _n("Mul", ["x_d0", "factor"], ["bh"]),
        _n("Unsqueeze", ["bh", "axis0"], ["bh_1d"]),
        _n("Concat", ["bh_1d", "minus1", "eight"], ["merge"], axis=0),
        _n("Reshape", ["t", "merge"], ["m"]),
        _n("Mul", ["m", "half"], ["scaled"]),
        _n("Shape", ["scaled"], ["s_shape"]),
        _n("Gather", ["s_shape", "idx0"], ["s_d0"], axis=0),
        _n("Div", ["s_d0", "factor"], ["b"]),
        _n("Unsqueeze", ["b", "axis0"], ["b_1d"]),
        _n("Concat", ["b_1d", "four", "sixteen", "minus1"], ["split"], axis=0),
        _n("Reshape", ["scaled", "split"], ["y"]),
    ]
    init = {
        "idx0": i64(0).reshape(()),
        "axis0": i64(0),
        "factor": i64(factor).reshape(()),
        "minus1": i64(-1),
        "eight": i64(8),
        "four": i64(4),
        "sixteen": i64(16),
        "half": np.array(0.5, F),
    }
    return om.make_model(nodes, [("x", ["batch", 16, 4, 8])], [("y", None)], init, "bloom_heads")


@pytest.mark.parametrize("batch", [1, 3])
def test_a_view_by_a_multiple_of_the_batch_resolves_by_the_element_count(batch, device, rng):
    """``[batch * 4, -1, 8]`` of [batch, 4, 16, 8] has two entries known only at run time, but the batch
    cancels in the element count: the -1 is 16, and the multiple of the batch is the one -1. The view back
    (``size(0) // 4``) then reads that dim as 4 times the batch, and keeps it."""
    model = _heads_fold_model()
    config, _ = import_model(model)
    shapes = [s["attrs"]["shape"] for s in config["pipeline"] if s["name"] == "reshape"]
    assert shapes == [[-1, 16, 8], [-1, 4, 16, 8]], shapes
    x = rng.standard_normal((batch, 16, 4, 8)).astype(F)
    (want,) = om.run_reference(model, {"x": x})
    with pl.from_onnx(model, device=device) as pipe:
        got = pipe.run(x=x)["y"].numpy()
    np.testing.assert_array_equal(got, want)


def test_a_view_by_a_multiple_of_the_batch_that_does_not_divide_is_refused():
    """``[batch * 3, -1, 8]`` of [batch, 4, 16, 8]: 512 elements per batch entry over 3 * 8 is no whole
    dim."""
    with pytest.raises(
        pl.PipeLinkError, match=r"Reshape's shape \[3\*batch, -1, 8\] has 1 entries known only"
    ):
        import_model(_heads_fold_model(factor=3))


@pytest.mark.parametrize("batch", [1, 3])
def test_an_expand_to_a_multiple_of_the_batch_matches_a_view_that_made_it(batch, device, rng):
    """Swin's windows at a dynamic batch (torch.export): x [batch, 2, 2, 8] viewed by a constant target as
    [-1, 8] (4 windows per image), normalized by its L2 norm expanded to ``[x.size(0) * 4, 8]``. Shape
    inference gives the view a fresh dim; the import names it 4 times the batch, which the Expand's
    computed entry is."""
    nodes = _dims("x", 0) + [
        _n("Reshape", ["x", "flat"], ["r"], allowzero=1),
        _n("ReduceL2", ["r", "axis1"], ["norm"], keepdims=1),
        _n("Mul", ["x_d0", "four"], ["windows"]),
        _n("Reshape", ["windows", "one"], ["windows_1d"]),
        _n("Concat", ["windows_1d", "eight"], ["target"], axis=0),
        _n("Expand", ["norm", "target"], ["spread"]),
        _n("Div", ["r", "spread"], ["y"]),
    ]
    init = {
        "idx0": i64(0).reshape(()),
        "axis0": i64(0),
        "flat": i64(-1, 8),
        "axis1": i64(1),
        "four": i64(4).reshape(()),
        "one": i64(1),
        "eight": i64(8),
    }
    model = om.make_model(nodes, [("x", ["batch", 2, 2, 8])], [("y", None)], init, "windows")
    x = rng.standard_normal((batch, 2, 2, 8)).astype(F)
    (want,) = om.run_reference(model, {"x": x})
    with pl.from_onnx(model, device=device) as pipe:
        got = pipe.run(x=x)["y"].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("batch", [1, 3])
def test_a_tile_of_a_constant_and_a_resize_to_computed_sizes_keep_the_batch(batch, device, rng):
    """DETR at a dynamic batch: its queries (a constant) tiled by ``[batch, 1, 1]`` and its mask resized
    to sizes built from ``Shape`` of its input. ONNX's inference gives both outputs fresh dims; the import
    names them with the batch, so their sums with batch-sized tensors keep it, and the views
    ``[x.size(0), 2, -1]`` of those sums have one entry to infer, not two."""
    nodes = [
        *_dims("x", 0),
        _n("Concat", ["x_u0", "one_one"], ["reps"], axis=0),
        _n("Tile", ["query", "reps"], ["tiled"]),
        _n("Add", ["tiled", "x"], ["q"]),
        _n("Shape", ["m"], ["m_shape"]),
        _n("Slice", ["m_shape", "zero", "two", "zero"], ["m_lead"]),
        _n("Concat", ["m_lead", "eight_eight"], ["sizes"], axis=0),
        _n("Resize", ["m", "", "", "sizes"], ["big"], mode="nearest"),
        _n("Add", ["big", "z"], ["masked"]),
        _n("Concat", ["x_u0", "two", "minus1"], ["merge"], axis=0),
        _n("Reshape", ["q", "merge"], ["q_view"]),
        _n("Reshape", ["masked", "merge"], ["m_view"]),
    ]
    init = {
        "idx0": i64(0).reshape(()),
        "axis0": i64(0),
        "one_one": i64(1, 1),
        "query": rng.standard_normal((1, 10, 4)).astype(F),
        "zero": i64(0),
        "two": i64(2),
        "eight_eight": i64(8, 8),
        "minus1": i64(-1),
    }
    inputs = [("x", ["batch", 10, 4]), ("m", ["batch", 2, 4, 4]), ("z", ["batch", 2, 8, 8])]
    model = om.make_model(nodes, inputs, [("q_view", None), ("m_view", None)], init, "detr_batch")
    feeds = {
        "x": rng.standard_normal((batch, 10, 4)).astype(F),
        "m": rng.standard_normal((batch, 2, 4, 4)).astype(F),
        "z": rng.standard_normal((batch, 2, 8, 8)).astype(F),
    }
    want = om.run_reference(model, feeds)
    with pl.from_onnx(model, device=device) as pipe:
        outs = pipe.run(**feeds)
        got = [outs["q_view"].numpy(), outs["m_view"].numpy()]
    for g_, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g_, w, rtol=1e-6, atol=1e-6)


def _heads_merge_split_model(bloom: bool = False):
    """Attention heads at a dynamic batch and sequence (torch.export's bmm): x [batch, 4, seq, 16] viewed
    as ``[-1, x.size(2), 16]`` (heads merged into the batch; BLOOM writes ``[x.size(0) * 4, -1, 16]``),
    transposed to [4 * batch, 16, seq], and viewed as ``[t.size(0) // 4, 4, 16, t.size(2)]`` (split)."""
    merge = [
        _n("Gather", ["x_shape", "idx0"], ["x_d0"], axis=0),
        _n("Mul", ["x_d0", "four0"], ["bh"]),
        _n("Unsqueeze", ["bh", "axis0"], ["bh_1d"]),
        _n("Concat", ["bh_1d", "minus1", "sixteen"], ["merge"], axis=0),
    ]
    if not bloom:
        merge = [
            _n("Slice", ["x_shape", "two", "three"], ["x_seq"]),
            _n("Concat", ["minus1", "x_seq", "sixteen"], ["merge"], axis=0),
        ]
    nodes = [
        _n("Shape", ["x"], ["x_shape"]),
        *merge,
        _n("Reshape", ["x", "merge"], ["m"], allowzero=1),
        _n("Transpose", ["m"], ["t"], perm=[0, 2, 1]),
        _n("Shape", ["t"], ["t_shape"]),
        _n("Gather", ["t_shape", "idx0"], ["t_d0"], axis=0),
        _n("Div", ["t_d0", "four0"], ["b"]),
        _n("Unsqueeze", ["b", "axis0"], ["b_1d"]),
        _n("Slice", ["t_shape", "two", "three"], ["t_seq"]),
        _n("Concat", ["b_1d", "four", "sixteen", "t_seq"], ["split"], axis=0),
        _n("Reshape", ["t", "split"], ["y"], allowzero=1),
    ]
    init = {
        "two": i64(2),
        "three": i64(3),
        "minus1": i64(-1),
        "sixteen": i64(16),
        "idx0": i64(0).reshape(()),
        "four0": i64(4).reshape(()),
        "axis0": i64(0),
        "four": i64(4),
    }
    return om.make_model(nodes, [("x", ["batch", 4, "seq", 16])], [("y", None)], init, "heads_merge_split")


@pytest.mark.parametrize("bloom", [False, True])
@pytest.mark.parametrize(("batch", "seq"), [(1, 5), (3, 7)])
def test_views_with_two_run_time_dims_line_up_the_input_and_copy_them(batch, seq, bloom, device, rng):
    """Each view has two entries known only at run time that are not the input's dims at the same place,
    so no one reshape target says it; the tail of each is the input's tail moved along: merged (flatten,
    then a reshape copying the sequence) or given a unit dim (unsqueeze, then a reshape copying 16 and the
    sequence). BLOOM's merge has its -1 in the tail: it is the input's sequence there, since the heads
    (``4 * batch`` and ``[batch, 4]``) have one product."""
    model = _heads_merge_split_model(bloom)
    config, _ = import_model(model)
    ops = [s["name"] for s in config["pipeline"]]
    assert ops.count("flatten") == 1 and ops.count("unsqueeze") == 1, ops
    x = rng.standard_normal((batch, 4, seq, 16)).astype(F)
    (want,) = om.run_reference(model, {"x": x})
    with pl.from_onnx(model, device=device) as pipe:
        got = pipe.run(x=x)["y"].numpy()
    assert got.shape == (batch, 4, 16, seq)
    np.testing.assert_array_equal(got, want)


def _conv1d_model(split_by: str = "x"):
    """GPT-2's ``Conv1D`` at a dynamic batch and sequence: x [batch, seq, 8] viewed as [-1, 8], times w,
    plus b, viewed back as ``split_by.size()[:-1] + (6,)``."""
    nodes = [
        _n("Reshape", ["x", "rows"], ["flat"]),
        _n("MatMul", ["flat", "w"], ["prod"]),
        _n("Add", ["prod", "b"], ["biased"]),
        _n("Shape", [split_by], ["lead_shape"]),
        _n("Slice", ["lead_shape", "zero", "minus1"], ["lead"]),
        _n("Concat", ["lead", "six"], ["back"], axis=0),
        _n("Reshape", ["biased", "back"], ["y"]),
    ]
    init = {
        "rows": i64(-1, 8),
        "w": np.linspace(-1, 1, 48, dtype=F).reshape(8, 6),
        "b": np.linspace(0, 1, 6, dtype=F),
        "zero": i64(0),
        "minus1": i64(-1),
        "six": i64(6),
    }
    inputs = [("x", ["batch", "seq", 8]), ("z", ["batch", "other", 8])]
    return om.make_model(nodes, inputs, [("y", None)], init, "conv1d")


@pytest.mark.parametrize(("batch", "seq"), [(1, 5), (3, 7)])
def test_a_view_back_of_rows_flattened_from_two_run_time_dims_gathers_them(batch, seq, device, rng):
    """``[batch * seq, 6]`` viewed as ``[batch, seq, 6]``: a split into two dims known only at run time.
    The first view's -1 is named ``batch*seq`` for shape inference, which the MatMul and Add keep, so
    the split is provably of that product, and the rows are gathered by the grid of their indices."""
    model = _conv1d_model()
    config, _ = import_model(model)
    assert "gather" in [s["name"] for s in config["pipeline"]]
    x = rng.standard_normal((batch, seq, 8)).astype(F)
    z = rng.standard_normal((batch, 2, 8)).astype(F)
    (want,) = om.run_reference(model, {"x": x, "z": z})
    with pl.from_onnx(model, device=device) as pipe:
        got = pipe.run(x=x, z=z)["y"].numpy()
    assert got.shape == (batch, seq, 6)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_a_split_into_dims_of_another_tensor_is_refused():
    """Viewed back by z's ``[batch, other]``: the rows are ``batch*seq``, which no import can split so."""
    with pytest.raises(pl.PipeLinkError, match=r"Reshape's shape \[batch, other, 6\] has 2 entries"):
        import_model(_conv1d_model("z"))


@pytest.mark.parametrize(
    ("op", "attrs"), [("InstanceNormalization", {}), ("GroupNormalization", {"num_groups": 2})]
)
@pytest.mark.parametrize(("batch", "length"), [(1, 9), (3, 20)])
def test_a_grouped_norm_of_a_run_time_length(op, attrs, batch, length, device, rng):
    """wav2vec2's feature extractor normalizes [batch, channels, samples] with the samples known only when
    the model runs: the view back after the layer_norm infers that length (-1)."""
    nodes = [helper.make_node(op, ["x", "s", "b"], ["y"], name="norm", epsilon=1e-5, **attrs)]
    init = {"s": np.linspace(0.5, 1.5, 4, dtype=F), "b": np.linspace(-0.2, 0.2, 4, dtype=F)}
    model = om.make_model(nodes, [("x", ["batch", 4, "samples"])], [("y", None)], init, "norm_length")
    x = rng.standard_normal((batch, 4, length)).astype(F)
    (want,) = om.run_reference(model, {"x": x})
    with pl.from_onnx(model, device=device) as pipe:
        np.testing.assert_allclose(pipe.run(x=x)["y"].numpy(), want, rtol=1e-4, atol=1e-5)


def test_a_grouped_norm_of_two_run_time_spatial_dims_is_refused():
    nodes = [helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], name="norm")]
    init = {"s": np.ones(4, F), "b": np.zeros(4, F)}
    model = om.make_model(nodes, [("x", ["batch", 4, "h", "w"])], [("y", None)], init, "norm_hw")
    with pytest.raises(pl.PipeLinkError, match="every spatial dim but one"):
        import_model(model)


@pytest.mark.parametrize(("batch", "seq"), [(1, 5), (3, 7)])
def test_dims_read_as_data_are_counted_when_the_model_runs(batch, seq, device, rng):
    """transformers' masks compute with dims: ``arange(batch) * seq`` and ``x + float(batch)``. Each dim
    read as data is counted along the tensor it came from (its probe's ones summed), a multiple times its
    factor, and cast to the value's dtype."""
    nodes = [
        _n("Shape", ["x"], ["s"]),
        _n("Gather", ["s", "idx0"], ["b"], axis=0),
        _n("Gather", ["s", "idx1"], ["t"], axis=0),
        _n("Range", ["zero", "b", "one"], ["rows"]),
        _n("Mul", ["rows", "t"], ["starts"]),
        _n("Mul", ["t", "two"], ["twice"]),
        _n("Add", ["starts", "twice"], ["offsets"]),
        _n("Cast", ["b"], ["b_float"], to=1),
        _n("Add", ["x", "b_float"], ["y"]),
    ]
    init = {
        "idx0": i64(0).reshape(()),
        "idx1": i64(1).reshape(()),
        "zero": i64(0).reshape(()),
        "one": i64(1).reshape(()),
        "two": i64(2).reshape(()),
    }
    model = om.make_model(nodes, [("x", ["batch", "seq"])], [("y", None)], init, "dims_as_data")
    model.graph.output.append(helper.make_tensor_value_info("offsets", onnx.TensorProto.INT64, None))
    x = rng.standard_normal((batch, seq)).astype(F)
    with pl.from_onnx(model, device=device) as pipe:
        outs = pipe.run(x=x)
        np.testing.assert_array_equal(outs["offsets"].numpy(), np.arange(batch) * seq + 2 * seq)
        np.testing.assert_array_equal(outs["y"].numpy(), x + np.float32(batch))


def test_arithmetic_of_two_run_time_dims_read_as_data_is_refused():
    """``batch * seq`` as data: a dim no tensor has (the import knows no product of two dims' values)."""
    nodes = [
        _n("Shape", ["x"], ["s"]),
        _n("Gather", ["s", "idx0"], ["b"], axis=0),
        _n("Gather", ["s", "idx1"], ["t"], axis=0),
        _n("Mul", ["b", "t"], ["n"]),
        _n("Cast", ["n"], ["n_float"], to=1),
        _n("Add", ["x", "n_float"], ["y"]),
    ]
    init = {"idx0": i64(0).reshape(()), "idx1": i64(1).reshape(())}
    model = om.make_model(nodes, [("x", ["batch", "seq"])], [("y", None)], init, "product_as_data")
    with pytest.raises(pl.PipeLinkError, match="read as data: the dim .* no tensor computed before"):
        import_model(model)


def _position_slice_model():
    """BERT's ``position_ids[:, :seq]``: a constant [1, 12] table sliced to x's run-time sequence."""
    nodes = [
        _n("Shape", ["x"], ["s"]),
        _n("Slice", ["s", "one", "two"], ["seq"]),
        _n("Slice", ["table", "zero", "seq", "one"], ["picked"]),
        _n("Add", ["x", "picked"], ["y"]),
    ]
    init = {"table": np.arange(12, dtype=F).reshape(1, 12), "zero": i64(0), "one": i64(1), "two": i64(2)}
    return om.make_model(nodes, [("x", ["batch", "seq"])], [("y", None)], init, "position_slice")


@pytest.mark.parametrize(("batch", "seq"), [(1, 5), (3, 12)])
def test_a_slice_to_the_run_time_sequence_gathers_the_table(batch, seq, device, rng):
    model = _position_slice_model()
    x = rng.standard_normal((batch, seq)).astype(F)
    (want,) = om.run_reference(model, {"x": x})
    with pl.from_onnx(model, device=device) as pipe:
        np.testing.assert_array_equal(pipe.run(x=x)["y"].numpy(), want)


def test_a_slice_to_a_run_time_end_past_the_axis_is_an_error_when_it_runs(rng):
    """ONNX clamps the end to the table's 12 entries (the Add then fails there, [13] against [12]); the
    gather's checked indices make the run an error that names the index."""
    pipe = pl.from_onnx(_position_slice_model(), device="cpu")
    with pipe, pytest.raises(pl.PipeLinkError, match="gather index 12 is out of range for axis 1 of size 12"):
        pipe.run(x=rng.standard_normal((2, 13)).astype(F))


@pytest.mark.parametrize(("batch", "seq"), [(1, 5), (3, 7)])
def test_a_merge_before_a_tail_of_two_run_time_dims_moves_the_tail_to_the_front(batch, seq, device, rng):
    """BLOOM's scores [batch, 4, seq, seq] viewed as ``[batch * 4, seq, -1]``: the tail has two dims known
    only at run time, which a flatten cannot split back; transposed to the front, the head's merge copies
    them (0s), and a transpose puts them back."""
    nodes = [
        _n("Shape", ["x"], ["s"]),
        _n("Gather", ["s", "idx0"], ["b"], axis=0),
        _n("Mul", ["b", "four"], ["bh"]),
        _n("Unsqueeze", ["bh", "axis0"], ["bh_1d"]),
        _n("Slice", ["s", "two", "three"], ["t"]),
        _n("Concat", ["bh_1d", "t", "minus1"], ["merge"], axis=0),
        _n("Reshape", ["x", "merge"], ["y"]),
    ]
    init = {
        "idx0": i64(0).reshape(()),
        "four": i64(4).reshape(()),
        "axis0": i64(0),
        "two": i64(2),
        "three": i64(3),
        "minus1": i64(-1),
    }
    model = om.make_model(nodes, [("x", ["batch", 4, "seq", "seq"])], [("y", None)], init, "bloom_scores")
    config, _ = import_model(model)
    assert [s["name"] for s in config["pipeline"]].count("transpose") == 2
    x = rng.standard_normal((batch, 4, seq, seq)).astype(F)
    (want,) = om.run_reference(model, {"x": x})
    with pl.from_onnx(model, device=device) as pipe:
        got = pipe.run(x=x)["y"].numpy()
    assert got.shape == (4 * batch, seq, seq)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("batch", "seq"), [(1, 5), (3, 7)])
def test_two_slices_of_a_run_time_dim_by_one_share_its_name(batch, seq, device, rng):
    """BART's ``shift_tokens_right`` at a dynamic sequence: ``x[:, :-1]`` expanded to the shape of
    ``zeros[:, 1:]``. ONNX's inference gives each slice a fresh dim; the import names both ``seq-1``,
    so the Expand keeps x's."""
    nodes = [
        _n("Slice", ["x", "zero", "minus1", "one"], ["head"]),
        _n("Shape", ["x"], ["s"]),
        _n("ConstantOfShape", ["s"], ["zeros"]),
        _n("Slice", ["zeros", "one", "end", "one"], ["tail"]),
        _n("Shape", ["tail"], ["tail_shape"]),
        _n("Expand", ["head", "tail_shape"], ["y"]),
    ]
    init = {"zero": i64(0), "minus1": i64(-1), "one": i64(1), "end": i64(2**63 - 1)}
    model = om.make_model(nodes, [("x", ["batch", "seq"])], [("y", None)], init, "shift_right")
    x = rng.standard_normal((batch, seq)).astype(F)
    (want,) = om.run_reference(model, {"x": x})
    with pl.from_onnx(model, device=device) as pipe:
        np.testing.assert_array_equal(pipe.run(x=x)["y"].numpy(), want)


@pytest.mark.parametrize(
    ("build", "changes"),
    [
        (lambda: _tile_model([2**62, 1], [1, 10, 4]), {}),  # a typed dim past int64
        (_heads_fold_model, {"minus1": i64(0), "four": i64(-1)}),  # a 0 (copy) past the input's rank
        (_conv1d_model, {"six": i64(0)}),
        (_heads_fold_model, {"factor": i64(-(2**63)).reshape(())}),
        (lambda: _heads_merge_split_model(True), {"sixteen": i64(2**62)}),
        (_conv1d_model, {"six": i64(-3)}),
        (lambda: _range_model(0, 2**62), {}),
    ],
)
def test_hostile_constants_in_the_run_time_shape_lowerings_are_refused_or_match(build, changes, rng):
    """Constants a fuzz of these models found (huge, negative, a copy past the rank): the import refuses
    them with a PipeLinkError or imports a model that matches onnxruntime, or refuses when it runs; never
    another exception."""
    model = build()
    for init in model.graph.initializer:
        if init.name in changes:
            init.CopyFrom(onnx.numpy_helper.from_array(np.asarray(changes[init.name]), init.name))
    try:
        import_model(model)
    except pl.PipeLinkError:
        return
    feeds = {
        i.name: rng.standard_normal([d.dim_value or 3 for d in i.type.tensor_type.shape.dim]).astype(F)
        for i in model.graph.input
    }
    try:
        with pl.from_onnx(model, device="cpu") as pipe:
            got = pipe.run(**feeds)
    except pl.PipeLinkError:
        return
    try:
        want = om.run_reference(model, feeds)
    except Exception:  # noqa: BLE001 - onnxruntime refuses the model too: nothing to compare
        return
    for out, w in zip(model.graph.output, want, strict=True):
        np.testing.assert_allclose(got[out.name].numpy(), w, rtol=1e-5, atol=1e-5)


def test_a_slice_to_a_run_time_end_by_a_step_other_than_one_is_refused():
    nodes = [
        _n("Shape", ["x"], ["s"]),
        _n("Slice", ["s", "one", "two"], ["seq"]),
        _n("Slice", ["table", "zero", "seq", "one", "two"], ["picked"]),
        _n("Add", ["x", "picked"], ["y"]),
    ]
    init = {"table": np.arange(12, dtype=F).reshape(1, 12), "zero": i64(0), "one": i64(1), "two": i64(2)}
    model = om.make_model(nodes, [("x", ["batch", "seq"])], [("y", None)], init, "slice_step")
    with pytest.raises(
        pl.PipeLinkError, match=r"Slice to an end known only .* step 1 \(got .*steps \[2\]"
    ) as info:
        import_model(model)
    assert "Slice" in [u["op_type"] for u in info.value.context["unsupported"]]
