"""Graph inputs fixed at import (``import_model(constants=...)``, ``pipelink import --constant``), their
dims fixed at import (``shapes=``, ``pipelink import --shape``) and PipeLink as an ONNX backend
(``pipelink.onnx.backend``: ``prepare``/``run``, ``run_model``, ``run_node``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper  # noqa: E402

import pipelink as pl  # noqa: E402
from pipelink.cli import main  # noqa: E402
from pipelink.onnx import backend as plb  # noqa: E402
from pipelink.onnx import import_model  # noqa: E402

from . import onnx_models as om  # noqa: E402

F = np.float32


def _reshape_topk_model():
    """x [2, 6] reshaped to the graph input ``shape``, then TopK by the graph input ``k`` on the last axis:
    both inputs' values are needed at import."""
    nodes = [
        helper.make_node("Reshape", ["x", "shape"], ["r"]),
        helper.make_node("TopK", ["r", "k"], ["values", "indices"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "reshape_topk",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6]),
            helper.make_tensor_value_info("shape", TensorProto.INT64, [2]),
            helper.make_tensor_value_info("k", TensorProto.INT64, [1]),
        ],
        [
            helper.make_tensor_value_info("values", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("indices", TensorProto.INT64, None),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = om.ORT_IR_VERSION
    return model


def _feeds(rng, shape=(3, 4), k=2):
    return {
        "x": rng.standard_normal((2, 6)).astype(F),
        "shape": np.array(shape, np.int64),
        "k": np.array([k], np.int64),
    }


# -- import_model(constants=...) ------------------------------------------------------------------------
def test_an_input_needed_at_import_is_named_by_the_refusal():
    with pytest.raises(
        pl.InvalidArgumentError, match="is a graph input, known only when the model runs"
    ) as e:
        import_model(_reshape_topk_model())
    assert [u.get("graph_input") for u in e.value.unsupported] == ["shape", "k"]
    assert "constants={'shape': value}" in str(e.value) and "--constant k=VALUE" in str(e.value)


def test_constants_specialise_the_model_and_leave_the_other_inputs(device, rng):
    model = _reshape_topk_model()
    feeds = _feeds(rng)
    constants = {"shape": feeds["shape"], "k": [2]}  # a list converts to the declared int64 exactly
    config, _ = import_model(model, constants=constants)
    assert list(config["inputs"]) == ["x"]  # the values became the stages' attributes
    want = om.run_reference(model, feeds)
    with pl.from_onnx(model, device=device, constants=constants) as pipe:
        got = pipe.run(x=feeds["x"])
        np.testing.assert_allclose(got["values"].numpy(), want[0], rtol=1e-6)
        np.testing.assert_array_equal(got["indices"].numpy(), want[1])


@pytest.mark.parametrize(
    ("constants", "says"),
    [
        ({"shap": [3, 4]}, "'shap' is not an input of the ONNX model; did you mean 'shape'?"),
        ({"shape": [3, 4, 1]}, "'shape' has shape [3], but the model declares 2"),
        (
            {"shape": np.array([3.5, 4.0])},
            "'shape' is declared int64 and float64 values do not convert exactly",
        ),
        ({"k": np.array(["a"])}, "'k' cannot be the model's input"),
    ],
)
def test_constants_that_do_not_fit_the_input_are_refused(constants, says):
    with pytest.raises(pl.InvalidArgumentError, match="constants: ") as e:
        import_model(_reshape_topk_model(), constants=constants)
    assert says in str(e.value)


def test_a_float_constant_rounds_to_a_declared_float_type(rng):
    """x + b with b a float32 input given as float64: rounded to float32 (a float never needs exactness)."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "b"], ["y"])],
        "add",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, [3]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    b = np.array([0.1, 0.2, 0.3])
    x = rng.standard_normal(3).astype(F)
    with pl.from_onnx(model, device="cpu", constants={"b": b}) as pipe:
        assert list(pipe.inputs) == ["x"]
        np.testing.assert_array_equal(pipe.run(x=x)["y"].numpy(), x + b.astype(F))


# -- pipelink import --constant -------------------------------------------------------------------------
def test_cli_import_takes_constants_as_numbers_and_npy_files(tmp_path, capsys, rng):
    onnx.save(_reshape_topk_model(), tmp_path / "m.onnx")
    np.save(tmp_path / "shape.npy", np.array([4, 3], np.int64))
    out = tmp_path / "imported"
    args = [
        "import",
        str(tmp_path / "m.onnx"),
        "-o",
        str(out),
        "--constant",
        f"shape={tmp_path / 'shape.npy'}",
    ]
    assert main([*args, "--constant", "k=3"]) == 2  # k is declared [1]: a number is 0-d
    assert "'k' has shape [], but the model declares 1" in capsys.readouterr().err
    assert main([*args, "--constant", "k=3,"]) == 2
    assert "give a .npy file, a number or numbers joined by commas" in capsys.readouterr().err
    np.save(tmp_path / "k.npy", np.array([3], np.int64))
    assert main([*args, "--constant", f"k={tmp_path / 'k.npy'}"]) == 0
    config = json.loads((out / "pipeline.json").read_text())
    assert list(config["inputs"]) == ["x"]
    feeds = _feeds(rng, (4, 3), 3)
    want = om.run_reference(_reshape_topk_model(), feeds)
    with pl.load(out / "pipeline.json", device="cpu") as pipe:
        np.testing.assert_array_equal(pipe.run(x=feeds["x"])["indices"].numpy(), want[1])


@pytest.mark.parametrize(
    ("option", "says"),
    [
        ("shape", "--constant takes NAME=VALUE"),
        ("shape=missing.npy", "cannot read the array"),
        ("shape=99999999999999999999", "a value does not fit int64"),
        ("shape=three", "give a .npy file, a number or numbers joined by commas"),
    ],
)
def test_cli_constant_usage_errors_exit_2(tmp_path, capsys, option, says):
    onnx.save(_reshape_topk_model(), tmp_path / "m.onnx")
    assert main(["import", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "o"), "--constant", option]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error[PIPELINK_ERR_INVALID_ARGUMENT]") and says in err and "\n" not in err


def _computed_bounds_model():
    """y = Range(a + 1, limit, 1) and z = Pad(x, pads): Range's start is computed from the graph input
    ``a``; the pads from x's shape (a Shape) and the graph input ``p``."""
    one = helper.make_tensor("one", TensorProto.INT64, [], [1])
    nodes = [
        helper.make_node("Add", ["a", "one"], ["start"]),
        helper.make_node("Range", ["start", "limit", "one"], ["y"]),
        helper.make_node("Shape", ["x"], ["xs"]),
        helper.make_node("Sub", ["xs", "xs"], ["zeros"]),
        helper.make_node("Concat", ["zeros", "p"], ["pads"], axis=0),
        helper.make_node("Pad", ["x", "pads"], ["z"]),
    ]
    graph = helper.make_graph(
        nodes,
        "computed_bounds",
        [
            helper.make_tensor_value_info("a", TensorProto.INT64, []),
            helper.make_tensor_value_info("limit", TensorProto.INT64, []),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("p", TensorProto.INT64, [2]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.INT64, None),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, None),
        ],
        [one],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = om.ORT_IR_VERSION
    return model


def test_values_computed_from_inputs_name_those_inputs_and_not_the_data():
    with pytest.raises(pl.InvalidArgumentError, match="computed from the graph inputs 'a', 'limit'") as e:
        import_model(_computed_bounds_model())
    behind = {u["op_type"]: u.get("graph_inputs") for u in e.value.unsupported}
    assert behind["Range"] == ["a", "limit"]
    assert behind["Pad"] == ["p"]  # x reaches the pads through its Shape only: not its values


def test_backend_rep_specialises_on_the_inputs_a_computed_value_comes_from(device, rng):
    model = _computed_bounds_model()
    with plb.prepare(model, device=device.upper()) as rep:
        for a, limit, p in [(0, 4, (1, 2)), (2, 9, (0, 3)), (0, 4, (1, 2))]:
            feeds = {
                "a": np.array(a, np.int64),
                "limit": np.array(limit, np.int64),
                "x": rng.standard_normal((2, 3)).astype(F),
                "p": np.array(p, np.int64),
            }
            got = rep.run(feeds)
            for value, want in zip(got, om.run_reference(model, feeds), strict=True):
                np.testing.assert_array_equal(value, want)
        assert set(rep._needed) == {"a", "limit", "p"} and len(rep._pipelines) == 2
        pipe = next(iter(rep._pipelines.values()))
        assert "x" in pipe.inputs  # the data stays an input of the pipeline


def _split_in_a_branch_model():
    """x [2, 6] reshaped to a shape split out of the graph input ``dims`` inside an If's taken branch
    (the condition, on ``dims``'s size, folds): Split folds, and the refusal traces through the branch."""
    branch = helper.make_graph(
        [helper.make_node("Split", ["dims"], ["rows", "cols"], num_outputs=2)],
        "then",
        [],
        [helper.make_tensor_value_info(n, TensorProto.INT64, [1]) for n in ("rows", "cols")],
    )
    other = helper.make_graph(
        [helper.make_node("Identity", [n], [f"{n}_out"]) for n in ("r1", "c1")],
        "else",
        [],
        [helper.make_tensor_value_info(f"{n}_out", TensorProto.INT64, [1]) for n in ("r1", "c1")],
    )
    nodes = [
        helper.make_node("Size", ["dims"], ["n"]),
        helper.make_node("Equal", ["n", "two"], ["is_2d"]),
        helper.make_node("If", ["is_2d"], ["rows", "cols"], then_branch=branch, else_branch=other),
        helper.make_node("Concat", ["rows", "cols"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "split_branch",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6]),
            helper.make_tensor_value_info("dims", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [
            helper.make_tensor("two", TensorProto.INT64, [], [2]),
            helper.make_tensor("r1", TensorProto.INT64, [1], [1]),
            helper.make_tensor("c1", TensorProto.INT64, [1], [12]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = om.ORT_IR_VERSION
    return model


def test_a_value_split_inside_a_branch_is_traced_to_its_graph_input(device, rng):
    model = _split_in_a_branch_model()
    with pytest.raises(pl.InvalidArgumentError, match="computed from the graph input 'dims'") as e:
        import_model(model)
    assert [u.get("graph_inputs") for u in e.value.unsupported] == [["dims"]]
    with plb.prepare(model, device=device.upper()) as rep:
        for dims in [(3, 4), (4, 3)]:
            feeds = {"x": rng.standard_normal((2, 6)).astype(F), "dims": np.array(dims, np.int64)}
            (got,) = rep.run(feeds)
            np.testing.assert_array_equal(got, feeds["x"].reshape(dims))
        assert rep._needed == ("dims",)


# -- import_model(shapes=...), pipelink import --shape ----------------------------------------------------
_TABLE = np.arange(8, dtype=F).reshape(1, 8)


def _alibi_model():
    """x [batch, seq] plus the last seq entries of a constant table [1, 8], sliced from a start the model
    computes, ``max(0, 8 - seq)`` (MPT's ALiBi): a start known only at run time, refused unless seq is
    fixed at import. ``mask`` [batch, seq] shares the dim names and is added too."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "one"], ["seq"], axis=0),
        helper.make_node("Sub", ["eight", "seq"], ["left"]),
        helper.make_node("Max", ["left", "zero"], ["start0"]),
        helper.make_node("Unsqueeze", ["start0", "axis0"], ["start"]),
        helper.make_node("Slice", ["table", "start", "end", "axis1"], ["bias"]),
        helper.make_node("Add", ["x", "bias"], ["xb"]),
        helper.make_node("Add", ["xb", "mask"], ["y"]),
    ]
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    inits = {"one": i64(1)[0], "eight": i64(8)[0], "zero": i64(0)[0], "axis0": i64(0), "axis1": i64(1)}
    inits |= {"end": i64(2**62), "table": _TABLE}
    graph = helper.make_graph(
        nodes,
        "alibi",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq"]),
            helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["batch", "seq"]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq"])],
        [onnx.numpy_helper.from_array(np.asarray(v), n) for n, v in inits.items()],
    )
    graph.value_info.append(
        helper.make_tensor_value_info("bias", TensorProto.FLOAT, [1, "8 - Max(0, 8 - seq)"])
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = om.ORT_IR_VERSION
    return model


def test_a_start_computed_from_a_run_time_dim_is_refused_with_the_shapes_to_give():
    with pytest.raises(pl.PipeLinkError) as info:
        import_model(_alibi_model())
    assert info.value.code is pl.ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT
    message = info.value.message
    assert "x [batch, seq]" in message and "mask [batch, seq]" in message
    assert "shapes={'x': [batch, seq]}" in message and "--shape x=<batch>x<seq>" in message


def test_a_value_computed_from_shapes_alone_gets_the_same_hint(rng):
    """x[:, : seq % 100]: the Slice's end is computed from x's shape by a Mod the import does not keep
    symbolic; no graph input's value gives it, so fixing the dims is the way (CANINE's exports)."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "one"], ["seq"], axis=0),
        helper.make_node("Mod", ["seq", "hundred"], ["kept"]),
        helper.make_node("Unsqueeze", ["kept", "axis0"], ["end"]),
        helper.make_node("Slice", ["x", "start", "end", "axis1"], ["y"]),
    ]
    ints = {"one": 1, "hundred": 100, "axis0": [0], "start": [0], "axis1": [1]}
    graph = helper.make_graph(
        nodes,
        "mod_end",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(np.array(v, np.int64), n) for n, v in ints.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    with pytest.raises(pl.PipeLinkError) as info:
        import_model(model)
    assert info.value.run_time_dims == ["x"] and "--shape x=<batch>x<seq>" in info.value.message
    x = rng.standard_normal((2, 103)).astype(F)
    with pl.from_onnx(model, device="cpu", shapes={"x": [2, 103]}) as pipe:
        np.testing.assert_array_equal(pipe.run(x=x)["y"].numpy(), x[:, :3])


@pytest.mark.parametrize("seq", [3, 8])
def test_dims_fixed_at_import_fold_what_the_model_computes_from_them(rng, seq):
    """The model imports for the sizes given; the mask's dims of the same names are fixed with x's."""
    config, weights = import_model(_alibi_model(), shapes={"x": [2, seq]})
    assert [config["inputs"][n]["shape"] for n in ("x", "mask")] == [[2, seq], [2, seq]]
    with pl.from_onnx(_alibi_model(), device="cpu", shapes={"x": [2, seq]}) as pipe:
        x, mask = (rng.standard_normal((2, seq)).astype(F) for _ in range(2))
        np.testing.assert_allclose(pipe.run(x=x, mask=mask)["y"].numpy(), x + _TABLE[:, 8 - seq :] + mask)
        with pytest.raises(pl.PipeLinkError, match="declares"):
            pipe.run(x=rng.standard_normal((2, seq + 1)).astype(F), mask=mask)


@pytest.mark.parametrize(
    ("shapes", "says"),
    [
        ({"xx": [2, 3]}, "'xx' is not an input of the ONNX model; did you mean 'x'?"),
        ({"x": [2]}, "'x' is given 1 dims, but the model declares 2 (batchxseq)"),
        ({"x": [2, 0]}, "each an int from 1 to 2**63 - 1"),
        ({"x": [2, True]}, "each an int from 1 to 2**63 - 1"),
        ({"x": [2, 2.5]}, "each an int from 1 to 2**63 - 1"),
        ({"x": [2, 2**63]}, "each an int from 1 to 2**63 - 1"),
        ({"x": "2x3"}, "must be a list of dims"),
        ({"x": [2, 3], "mask": [2, 4]}, "the dim 'seq' is 3 in 'x' and 4 in 'mask'; one name is one size"),
    ],
)
def test_bad_shapes_at_import_are_refused_with_the_reason(shapes, says):
    with pytest.raises(pl.PipeLinkError) as info:
        import_model(_alibi_model(), shapes=shapes)
    assert info.value.code is pl.ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT and says in info.value.message


def test_shapes_at_import_must_agree_with_the_fixed_dims_and_not_repeat_constants():
    with pytest.raises(pl.PipeLinkError, match=r"'x' dim 1 is 5, but the model fixes it to 6 \(2x6\)"):
        import_model(_reshape_topk_model(), shapes={"x": [2, 5]})
    with pytest.raises(pl.PipeLinkError, match="'k' given in both constants and shapes"):
        import_model(_reshape_topk_model(), constants={"k": [3]}, shapes={"k": [1]})
    with pytest.raises(pl.PipeLinkError, match="shapes is a mapping of graph input names"):
        import_model(_reshape_topk_model(), shapes=[("x", [2, 6])])


def test_shapes_at_import_give_an_input_declared_without_a_shape_its_dims(rng):
    model = _alibi_model()
    for info in model.graph.input:
        info.type.tensor_type.ClearField("shape")
    config, _ = import_model(model, shapes={"x": [2, 4], "mask": [2, 4]})
    assert [config["inputs"][n]["shape"] for n in ("x", "mask")] == [[2, 4], [2, 4]]
    x, mask = (rng.standard_normal((2, 4)).astype(F) for _ in range(2))
    with pl.from_onnx(model, device="cpu", shapes={"x": [2, 4], "mask": [2, 4]}) as pipe:
        np.testing.assert_allclose(pipe.run(x=x, mask=mask)["y"].numpy(), x + _TABLE[:, 4:] + mask)


def test_cli_import_takes_shapes(tmp_path, capsys, rng):
    onnx.save(_alibi_model(), tmp_path / "m.onnx")
    out = tmp_path / "imported"
    args = ["import", str(tmp_path / "m.onnx"), "-o", str(out)]
    assert main(args) == 2
    assert "--shape x=<batch>x<seq>" in capsys.readouterr().err
    for option, says in [
        ("x=2xseven", "give the dimensions as non-negative integers joined by 'x'"),
        ("x", "--shape takes NAME="),
        ("y=2x5", "shapes: 'y' is not an input of the ONNX model"),
        ("x=2x0", "each an int from 1 to 2**63 - 1"),
    ]:
        assert main([*args, "--shape", option]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error[PIPELINK_ERR_INVALID_ARGUMENT]") and says in err and "\n" not in err
    assert main([*args, "--shape", "x=2x5"]) == 0
    config = json.loads((out / "pipeline.json").read_text())
    assert config["inputs"]["mask"]["shape"] == [2, 5]
    x, mask = (rng.standard_normal((2, 5)).astype(F) for _ in range(2))
    with pl.load(out / "pipeline.json", device="cpu") as pipe:
        np.testing.assert_allclose(pipe.run(x=x, mask=mask)["y"].numpy(), x + _TABLE[:, 3:] + mask)


# -- the ONNX backend -----------------------------------------------------------------------------------
def test_backend_rep_specialises_on_the_values_it_needs_and_keeps_each_pipeline(device, rng):
    model = _reshape_topk_model()
    with plb.prepare(model, device=device.upper()) as rep:
        for shape, k in [((3, 4), 2), ((4, 3), 1), ((3, 4), 2), ((6, 2), 2)]:
            feeds = _feeds(rng, shape, k)
            got = rep.run([feeds["x"], feeds["shape"], feeds["k"]])
            want = om.run_reference(model, feeds)
            np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
            np.testing.assert_array_equal(got[1], want[1])
        assert rep._needed == ("shape", "k") and len(rep._pipelines) == 3  # (3, 4) was imported once
        by_name = rep.run(_feeds(rng, (12, 1), 1))
        assert by_name[0].shape == (12, 1)


def test_backend_rep_specialises_on_the_shapes_of_run_time_dims_it_cannot_keep(device, rng):
    """A refusal caused by dims known only at run time (the error's run_time_dims): the rep imports the
    model for the shapes given, once per shape; the refusal it lifts is in the error of a plain import."""
    with pytest.raises(pl.PipeLinkError) as info:
        import_model(_alibi_model())
    assert info.value.run_time_dims == ["x", "mask"]
    with plb.prepare(_alibi_model(), device=device.upper()) as rep:
        for seq in (3, 8, 3, 5):
            x, mask = (rng.standard_normal((2, seq)).astype(F) for _ in range(2))
            (got,) = rep.run({"x": x, "mask": mask})
            np.testing.assert_allclose(got, x + _TABLE[:, 8 - seq :] + mask, rtol=1e-6)
        assert rep._sized == ("x", "mask") and rep._needed == () and len(rep._pipelines) == 3
        with pytest.raises(pl.PipeLinkError, match="'mask' is needed at import"):
            rep.run({"x": x})
        with pytest.raises(pl.PipeLinkError, match="each an int from 1"):  # a dim of 0: no empty tensors
            rep.run({"x": np.zeros((2, 0), F), "mask": np.zeros((2, 0), F)})


def test_backend_rep_drops_the_least_recent_pipeline(rng):
    values = [(shape, k) for shape in [(2, 6), (3, 4), (4, 3)] for k in (1, 2, 3)]
    assert len(values) > plb.MAX_SPECIALISED
    with plb.prepare(_reshape_topk_model()) as rep:
        for shape, k in values:
            rep.run(_feeds(rng, shape, k))
        assert len(rep._pipelines) == plb.MAX_SPECIALISED
        first = next(iter(rep._pipelines.values()))
        rep.run(_feeds(rng, (2, 6), 1))  # dropped: imported again, the oldest kept one goes
        assert first not in rep._pipelines.values() and len(rep._pipelines) == plb.MAX_SPECIALISED


def test_backend_run_model_and_run_node_match_the_reference(device, rng):
    model, feeds = om.mlp_block()
    names = [i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    got = plb.run_model(model, [feeds[n] for n in names], device=device.upper())
    for value, want in zip(got, om.run_reference(model, feeds), strict=True):
        np.testing.assert_allclose(value, want, rtol=1e-5, atol=1e-6)
    x = rng.standard_normal((4, 5)).astype(F)
    (y,) = plb.run_node(helper.make_node("Softmax", ["x"], ["y"], axis=1), [x], device=device.upper())
    np.testing.assert_allclose(y, np.exp(x) / np.exp(x).sum(1, keepdims=True), rtol=1e-5)
    (y,) = plb.run_node(helper.make_node("Relu", ["x"], ["y"]), [x], opset_version=13)
    np.testing.assert_array_equal(y, np.maximum(x, 0))


def test_backend_refusals_are_pipelink_errors(rng):
    model = _reshape_topk_model()
    with pytest.raises(pl.InvalidArgumentError, match="give CPU, CUDA or CUDA:N"):
        plb.prepare(model, device="TPU")
    assert plb.supports_device("CPU") and not plb.supports_device("TPU")
    with plb.prepare(model) as rep:
        with pytest.raises(pl.InvalidArgumentError, match="'k'.* must be a constant at import"):
            rep.run({"x": np.zeros((2, 6), F), "shape": np.array([3, 4])})  # the import's refusal stands
        rep.run(_feeds(rng))
        with pytest.raises(pl.InvalidArgumentError, match="4 inputs given; the model has 3"):
            rep.run([np.zeros((2, 6), F)] * 4)
        with pytest.raises(pl.InvalidArgumentError, match="'y' is not an input of the model"):
            rep.run({"y": np.zeros(1, F)})
        with pytest.raises(pl.InvalidArgumentError, match="input 'k' is needed at import"):
            rep.run({"x": np.zeros((2, 6), F), "shape": np.array([3, 4])})
        with pytest.raises(pl.InvalidArgumentError, match="takes no options"):
            rep.run(_feeds(rng), sync=True)
        # a value that makes the import refuse (a reshape to 5 elements) is the import's refusal
        with pytest.raises(pl.PipeLinkError):
            rep.run(_feeds(rng, (5, 1), 1))
    with pytest.raises(pl.InvalidArgumentError, match="1 inputs given, the node names 2"):
        plb.run_node(helper.make_node("Add", ["a", "b"], ["c"]), [np.zeros(2, F)])
    with pytest.raises(pl.InvalidArgumentError, match="outputs_info describes 2 outputs, the node has 1"):
        plb.run_node(helper.make_node("Relu", ["a"], ["b"]), [np.zeros(2, F)], outputs_info=[None, None])
    unknown = helper.make_node("NoSuchOp", ["a"], ["b"], domain="com.example")
    with pytest.raises(pl.PipeLinkError):
        plb.run_node(unknown, [np.zeros(2, F)])


def test_onnx_backend_test_runner_drives_the_backend():
    """onnx's own runner (``onnx.backend.test.BackendTest``) prepares and runs models through the backend:
    a few node cases, among them Reshape with its shape fed as an input (specialised) and GridSample."""
    import unittest

    import onnx.backend.test

    runner = onnx.backend.test.BackendTest(plb.PipeLinkBackend, __name__)
    runner.include(r"^test_(relu|reshape_reordered_all_dims|reshape_negative_dim|gridsample|top_k)_cpu$")
    suite = unittest.TestSuite(
        unittest.defaultTestLoader.loadTestsFromTestCase(case) for case in runner.test_cases.values()
    )
    result = unittest.TestResult()
    suite.run(result)
    ran = result.testsRun - len(result.skipped)
    assert ran == 5 and not result.failures and not result.errors, (result.failures, result.errors)
