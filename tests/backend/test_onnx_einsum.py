"""ONNX Einsum at import (``pipelink.onnx.einsum``): one-node models of each form of equation run on each
device and compared with ONNX's ReferenceEvaluator; the stages the lowering picks; dims known only at run
time; integer operands; and the refusals, each naming the node and what is wrong."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import pipelink as pl  # noqa: E402
from pipelink.onnx import import_model  # noqa: E402
from pipelink.onnx.einsum import EinsumError, Equation, dots_are_ellipses, parse  # noqa: E402
from tests.conftest import assert_close  # noqa: E402

NODE = "the_einsum"

# (equation, the operands' shapes): the brief's table, then the forms around it.
EQUATIONS = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ("bhqk,bhkd->bhqd", [(2, 3, 4, 6), (2, 3, 6, 5)]),
    ("ij->ji", [(3, 4)]),
    ("ii->i", [(4, 4)]),
    ("ij->", [(3, 4)]),
    ("i,i->", [(5,), (5,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("...ij,...jk->...ik", [(2, 3, 3, 4), (2, 3, 4, 5)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 6)]),  # ellipses of two ranks, a 1 broadcast
    ("bnqd,bnkd->bnqk", [(2, 1, 4, 5), (1, 3, 6, 5)]),  # batch letters broadcast both ways
    ("ij,jk", [(3, 4), (4, 5)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("bid,bjd->bij", [(2, 3, 4), (2, 5, 4)]),
    # implicit outputs: the labels that appear once, sorted (upper case first); a repeated one is summed
    ("ji", [(3, 4)]),
    ("bij,bjk", [(2, 3, 4), (2, 4, 5)]),
    ("Ab,bA", [(3, 4), (4, 3)]),
    ("ii", [(4, 4)]),
    ("...ij,...jk", [(2, 3, 4), (2, 4, 5)]),
    # diagonals
    ("iij->ji", [(3, 3, 4)]),
    ("...ii->...i", [(2, 3, 3)]),
    ("ijij->ij", [(2, 3, 2, 3)]),
    ("ii,i->i", [(3, 3), (1,)]),
    # contractions of a 1 against n (broadcast), outer and elementwise products, sums
    ("ij,jk->ik", [(3, 1), (4, 5)]),
    ("ij,ij->i", [(2, 3), (2, 3)]),
    ("i,i->i", [(5,), (5,)]),
    ("...,...->...", [(2, 1, 4), (3, 1)]),
    (",ij->ij", [(), (2, 3)]),
    ("ijk->", [(2, 3, 4)]),
    ("ijk->kj", [(2, 3, 4)]),
    # free letters merged into matmul's M and N, spaces, more operands, a mid-term ellipsis
    ("bqrd,bdk->bqrk", [(2, 3, 4, 5), (2, 5, 6)]),
    (" a b , b c -> c a", [(2, 3), (3, 4)]),
    ("abc,cd,de->bea", [(2, 3, 4), (4, 5), (5, 2)]),
    ("b...d,d->b...", [(2, 3, 4, 5), (5,)]),
    ("bhqd,bhkd,bhke->bhqe", [(1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 3)]),
    ("ijk,jkl->il", [(2, 3, 4), (3, 4, 5)]),
    ("bij,jk->bik", [(2, 3, 4), (4, 5)]),
    ("ij,kj->ik", [(3, 4), (5, 4)]),
    ("ijk,ikl->ijl", [(2, 3, 4), (2, 4, 5)]),
]


def _model(equation, decls, dtype=TensorProto.FLOAT, inits=None, name=NODE):
    """A one-node Einsum model: inputs x0, x1, ... declared with ``decls`` (ints, symbols or None for
    no shape), ``inits`` bound as initializers instead."""
    inits = inits or {}
    names = [f"x{k}" for k in range(len(decls))]
    node = helper.make_node("Einsum", names, ["y"], name=name, equation=equation)
    graph = helper.make_graph(
        [node],
        "einsum",
        [
            helper.make_tensor_value_info(n, dtype, d)
            for n, d in zip(names, decls, strict=True)
            if n not in inits
        ],
        [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


def _feeds(rng, shapes, dtype):
    return {f"x{k}": rng.standard_normal(s).astype(dtype) for k, s in enumerate(shapes)}


def _check(pipe, model, feeds, dtype_name):
    expected = ReferenceEvaluator(model).run(None, feeds)[0]
    got = np.asarray(pipe.run(feeds)["y"].numpy())
    assert got.shape == expected.shape and got.dtype == expected.dtype, (got.shape, expected.shape)
    assert_close(got, expected, dtype_name, "Einsum")


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize(("equation", "shapes"), EQUATIONS)
def test_einsum_matches_the_onnx_reference(equation, shapes, dtype, device, rng):
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    model = _model(equation, shapes, elem)
    feeds = _feeds(rng, shapes, dtype)
    with pl.from_onnx(model, device=device) as pipe:
        _check(pipe, model, feeds, dtype)


def test_einsum_of_a_constant_and_of_a_computed_input(device, rng):
    """A weight (an initializer: its shape from the array) and an input made by another node (its shape
    from shape inference)."""
    w = rng.standard_normal((8, 6)).astype(np.float32)
    nodes = [
        helper.make_node("Relu", ["x"], ["h"], name="relu"),
        helper.make_node("Einsum", ["h", "w"], ["y"], name=NODE, equation="btd,dk->btk"),
    ]
    graph = helper.make_graph(
        nodes,
        "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8])],
        [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)],
        [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    x = rng.standard_normal((2, 3, 8)).astype(np.float32)
    with pl.from_onnx(model, device=device) as pipe:
        _check(pipe, model, {"x": x}, "float32")


# -- the stages the lowering picks ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("equation", "shapes", "stages"),
    [
        ("bhqk,bhkd->bhqd", [(2, 3, 4, 6), (2, 3, 6, 5)], ["matmul"]),  # already [batch, M, K] @ [K, N]
        ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)], ["transpose", "matmul"]),
        ("bqrd,bdk->bqrk", [(2, 3, 4, 5), (2, 5, 6)], ["reshape", "matmul", "reshape"]),  # q, r merged
        ("ij->ji", [(3, 4)], ["transpose"]),
        ("ij", [(3, 4)], ["identity"]),
        ("ii->i", [(4, 4)], ["as_strided"]),
        ("ij->", [(3, 4)], ["reduce_sum"]),
        ("i,i->", [(5,), (5,)], ["mul", "reduce_sum"]),  # a dot product: no matmul of 1 x 1
        ("i,j->ij", [(3,), (4,)], ["unsqueeze", "mul"]),
        ("bnqd,bnkd->bnqk", [(2, 1, 4, 5), (1, 3, 6, 5)], ["transpose", "matmul"]),  # matmul broadcasts
    ],
)
def test_einsum_lowers_onto_few_stages(equation, shapes, stages):
    config, _ = import_model(_model(equation, shapes))
    assert [s["name"] for s in config["pipeline"]] == stages
    assert config["pipeline"][-1]["outputs"] == ["y"]


# -- dims known only at run time ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("equation", "decls", "runs"),
    [
        ("bqd,dk->bqk", [["B", "T", 8], [8, 6]], [[(1, 3, 8), (8, 6)], [(2, 5, 8), (8, 6)]]),
        (
            "bhqd,bhkd->bhqk",
            [["B", 2, "T", 4], ["B", 2, "T", 4]],
            [[(1, 2, 3, 4), (1, 2, 3, 4)], [(3, 2, 5, 4), (3, 2, 5, 4)]],
        ),
        (
            "bhqk,bhkd->bhqd",
            [["B", 2, "T", "T"], ["B", 2, "T", 4]],
            [[(1, 2, 3, 3), (1, 2, 3, 4)], [(2, 2, 5, 5), (2, 2, 5, 4)]],
        ),
        ("bij,bjk->bik", [["B", "I", 4], ["B", 4, "K"]], [[(2, 3, 4), (2, 4, 5)], [(1, 1, 4), (1, 4, 2)]]),
        (
            "bqrd,bdk->bqrk",
            [["B", "Q", 3, 4], ["B", 4, 5]],
            [[(2, 3, 3, 4), (2, 4, 5)], [(1, 2, 3, 4), (1, 4, 5)]],
        ),
        ("btd,btd->bt", [["B", "T", 4], ["B", "T", 4]], [[(2, 3, 4), (2, 3, 4)], [(1, 6, 4), (1, 6, 4)]]),
        ("ikl,klj->ij", [["I", "K", "L"], ["K", "L", "J"]], [[(2, 3, 4), (3, 4, 5)], [(1, 2, 2), (2, 2, 3)]]),
        ("b...->...b", [["B", "T", 3]], [[(2, 4, 3)], [(5, 1, 3)]]),
    ],
)
def test_einsum_keeps_run_time_dims_symbolic(equation, decls, runs, device, rng):
    model = _model(equation, decls)
    config, weights = import_model(model)
    symbols = {d for decl in config["inputs"].values() for d in decl["shape"] if isinstance(d, str)}
    assert symbols, "the model's dim_param names stay symbols"
    with pl.load(config, device=device, weights=weights) as pipe:
        for shapes in runs:
            _check(pipe, model, _feeds(rng, shapes, np.float32), "float32")


# -- integers: the stages that take them ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("equation", "shapes", "dtype"),
    [
        ("ij->j", [(3, 4)], np.int32),
        ("ij->ji", [(3, 4)], np.int64),
        ("i,j->ij", [(3,), (4,)], np.int64),
        ("ij,ij->i", [(2, 3), (2, 3)], np.int32),  # mul and reduce_sum: no matmul
        ("ij,j->i", [(3, 4), (4,)], np.int64),
        ("ii->i", [(3, 3)], np.int32),
    ],
)
def test_einsum_of_integers_is_exact(equation, shapes, dtype, device, rng):
    model = _model(equation, shapes, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))
    feeds = {f"x{k}": rng.integers(-50, 50, s).astype(dtype) for k, s in enumerate(shapes)}
    with pl.from_onnx(model, device=device) as pipe:
        got = np.asarray(pipe.run(feeds)["y"].numpy())
    expected = ReferenceEvaluator(model).run(None, feeds)[0]
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)


# -- refusals ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("equation", "decls", "dtype", "why"),
    [
        ("", [(2, 3)], TensorProto.FLOAT, "the equation is empty"),
        ("ij,jk->i$", [(2, 3), (3, 4)], TensorProto.FLOAT, r"has '\$': only letters"),
        ("ij,jk->ik", [(2, 3)], TensorProto.FLOAT, r"has 2 operand term\(s\) but the node has 1 input"),
        (
            "ijk,jk->ik",
            [(2, 3), (3, 4)],
            TensorProto.FLOAT,
            r"term 'ijk' names 3 dim\(s\) but input 0 has rank 2",
        ),
        ("...ijk->k", [(2, 3)], TensorProto.FLOAT, r"names 3 dim\(s\) but input 0 has rank 2"),
        ("ij->ik", [(2, 3)], TensorProto.FLOAT, "output label 'k' is in no operand's term"),
        ("ij->ii", [(2, 3)], TensorProto.FLOAT, "output label 'i' appears 2 times"),
        (
            "...ij->ij",
            [(4, 2, 3)],
            TensorProto.FLOAT,
            r"'\.\.\.' stands for 1 dim\(s\) but the output has no",
        ),
        ("ij->j->i", [(2, 3)], TensorProto.FLOAT, "'-' and '>' may appear only as one '->'"),
        ("ij->i,j", [(2, 3)], TensorProto.FLOAT, "one term, without ','"),
        (
            "ij,jk->ik",
            [(2, 3), (4, 5)],
            TensorProto.FLOAT,
            r"label 'j' has sizes that do not broadcast: 3 in",
        ),
        (
            "ii->i",
            [["N", "N"]],
            TensorProto.FLOAT,
            r"a diagonal.*every dim known at import \(got \[\?, \?\]\)",
        ),
        ("ii->i", [(3, 4)], TensorProto.FLOAT, r"over dims of sizes \[3, 4\]"),
        ("ij,jk->ik", [(2, 3), (3, 4)], TensorProto.INT32, "of int32 operands .* needs a matmul"),
        ("ij,jk->ik", [None, (3, 4)], TensorProto.FLOAT, "needs the rank of each input"),
    ],
)
def test_einsum_refuses_what_it_cannot_express(equation, decls, dtype, why):
    with pytest.raises(pl.PipeLinkError, match=why) as info:
        import_model(_model(equation, decls, dtype))
    assert info.value.code.name == "PIPELINK_ERR_INVALID_ARGUMENT"
    assert info.value.unsupported == [
        {"op_type": "Einsum", "node": NODE, "why": info.value.unsupported[0]["why"]}
    ]
    assert f"Einsum node {NODE!r}: " in info.value.message


@pytest.mark.parametrize(
    ("equation", "ranks", "why"),
    [
        ("i.j->ij", [2], r"operand 0's term 'i\.j' has a '\.' outside a '\.\.\.'"),
        ("ij..->ij", [2], r"has a '\.' outside a '\.\.\.'"),
        ("...i...->i", [2], r"operand 0's term '\.\.\.i\.\.\.' has more than one '\.\.\.'"),
        ("ij->i.", [2], r"the output 'i\.' has a '\.' outside"),
    ],
)
def test_einsum_stray_dots_are_refused_at_import_without_shape_inference(equation, ranks, why):
    """onnx 1.23's shape inference never returns on an Einsum equation with a stray '.': the import skips
    inference for such a model, and the converter refuses the node. Wrong if the import hangs (pytest's
    timeout, or forever) or another message comes."""
    with pytest.raises(EinsumError, match=why):
        parse(equation, ranks)
    assert not dots_are_ellipses(equation)
    decls = [[2, 3]] if ranks == [2] else [[2] * r for r in ranks]
    with pytest.raises(pl.PipeLinkError, match=why) as info:
        import_model(_model(equation, decls))
    assert info.value.code.name == "PIPELINK_ERR_INVALID_ARGUMENT"


def test_einsum_parser_expands_ellipses_and_implicit_outputs():
    """The ellipsis's dims are right-aligned across operands (NumPy's broadcasting) and lead an implicit
    output; an implicit output is the letters that appear once, upper case before lower."""
    eq = parse("...ij,...jk", [4, 3])
    (a, b), out = eq.inputs, eq.output
    assert a[2:] == "ij" and b[1:] == "jk" and a[1] == b[0] and a[0] not in b
    assert out == a[:2] + "ik"
    assert parse("bA,Ab", [2, 2]).output == ""
    assert parse("zaB,Ba", [3, 2]).output == "z"
    assert parse("Ba, c", [2, 1]).output == "Bac"
    assert parse("ij->", [2]) == Equation(("ij",), "")


def test_einsum_refuses_merges_no_reshape_can_write(rng):
    """Contracted labels a and c, both known only at run time, merge into matmul's K with the one -1 a
    reshape has; the free labels f and g cannot then be copied in place in any layout, and the import
    says so rather than guessing a dim."""
    decls = [["D", "A", "E", "C"], ["E", "C", "A", "F", "G"]]
    with pytest.raises(pl.PipeLinkError, match="contracting 'a', 'c' needs dims merged into one") as info:
        import_model(_model("daec,ecafg->fdeg", decls))
    assert info.value.unsupported[0]["node"] == NODE
    # the same equation with the dims known imports, and matches the reference
    shapes = [(2, 3, 4, 5), (4, 5, 3, 2, 3)]
    model = _model("daec,ecafg->fdeg", shapes)
    with pl.from_onnx(model, device="cpu") as pipe:
        _check(pipe, model, _feeds(rng, shapes, np.float32), "float32")


def test_a_stray_dot_inside_a_subgraph_skips_shape_inference_too():
    """An If whose branch holds the hostile Einsum: shape inference would walk into the branch and never
    return, so the import skips it and lists the If (control flow is not imported) instead of hanging."""
    inner = _model("i.j->ij", [[2, 3]]).graph
    inner.ClearField("input")  # a branch reads the outer scope's x0
    cond = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    x = helper.make_tensor_value_info("x0", TensorProto.FLOAT, [2, 3])
    branch = helper.make_node("If", ["c"], ["y"], name="branch", then_branch=inner, else_branch=inner)
    graph = helper.make_graph(
        [branch], "g", [cond, x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    with pytest.raises(pl.PipeLinkError, match="If") as info:
        import_model(model)
    assert info.value.code.name == "PIPELINK_ERR_INVALID_ARGUMENT"
