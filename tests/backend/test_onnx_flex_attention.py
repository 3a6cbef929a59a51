"""ONNX FlexAttention (``ai.onnx.preview``) imported as its function body's plain nodes, score_mod and
prob_mod inlined (``pipelink/onnx/flex_attention.py``), run on each device and compared with ONNX's
ReferenceEvaluator; and every refusal with its code and the reason."""

from __future__ import annotations

import re

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import pipelink as pl  # noqa: E402
from pipelink.onnx import import_model  # noqa: E402
from pipelink.onnx.flex_attention import MIN_OPSET  # noqa: E402
from tests.conftest import assert_close  # noqa: E402

F = np.float32
FLOAT, FLOAT16, INT64, BOOL = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT64, TensorProto.BOOL
PREVIEW = "ai.onnx.preview"
ELEM = {"float32": FLOAT, "float16": FLOAT16}


def _info(name, elem=FLOAT, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def _mod(nodes, inits=(), name="mod", x="s", out="o", elem=FLOAT):
    """A modifier subgraph: one tensor ``x`` in, ``out`` out, with ``inits`` its own initializers."""
    return helper.make_graph(
        nodes,
        name,
        [_info(x, elem, ["B", "H", "L", "S"])],
        [_info(out, elem, ["B", "H", "L", "S"])],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in dict(inits).items()],
    )


def _model(q, k, v, dtype="float32", extra=(), inits=(), opset=26, nodes=None, **attrs):
    """A model of one FlexAttention node named "fa" on inputs Q, K, V of the shapes given (``extra``:
    more graph inputs a modifier reads)."""
    elem = ELEM[dtype]
    if nodes is None:
        nodes = [
            helper.make_node("FlexAttention", ["Q", "K", "V"], ["Y"], name="fa", domain=PREVIEW, **attrs)
        ]
    graph = helper.make_graph(
        nodes,
        "flex",
        [_info("Q", elem, list(q)), _info("K", elem, list(k)), _info("V", elem, list(v)), *extra],
        [_info("Y", elem, None)],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in dict(inits).items()],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(PREVIEW, 1)]
    )
    model.ir_version = 10
    return model


def _feeds(model, rng, dtype="float32", **more):
    feeds = {}
    for info in model.graph.input[:3]:
        shape = [d.dim_value for d in info.type.tensor_type.shape.dim]
        feeds[info.name] = rng.standard_normal(shape).astype(dtype)
    feeds.update(more)
    return feeds


def _attention(feeds, score=None, prob=None):
    """FlexAttention in NumPy, as onnx's reference computes it (float32 inputs), for modifiers reading the
    outer scope, which that reference cannot run: ``score`` and ``prob`` map an array to an array."""
    q, k, v = (feeds[n] for n in "QKV")
    repeat = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, repeat, axis=1), np.repeat(v, repeat, axis=1)
    root = np.sqrt(np.float32(1.0 / np.sqrt(q.shape[-1])))
    scores = (q * root) @ np.swapaxes(k * root, -1, -2)
    scores = scores if score is None else score(scores)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    probs = e / e.sum(axis=-1, keepdims=True)
    return (probs if prob is None else prob(probs)) @ v


def _run(model, feeds, device, dtype="float32", want=None):
    """Import ``model``, run it on ``feeds`` and compare Y with ``want`` (by default the
    ReferenceEvaluator's); the config."""
    config, weights = import_model(model)
    pipe = pl.load(config, device=device, weights=weights)
    got = np.asarray(pipe.run(feeds)["Y"].numpy())
    if want is None:
        (want,) = ReferenceEvaluator(model).run(None, feeds)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert not np.isnan(got.astype(np.float64)).any()
    assert_close(got, want, dtype, "Y")
    return config


def _operators(config) -> list[str]:
    return [stage["name"] for stage in config["pipeline"]]


def _refused(model, why, node="fa", op_type="FlexAttention"):
    with pytest.raises(pl.PipeLinkError, match=why) as info:
        import_model(model)
    assert info.value.code.name == "PIPELINK_ERR_INVALID_ARGUMENT"
    listed = info.value.context["unsupported"]
    assert [u["node"] for u in listed] == [node], listed
    assert listed[0]["op_type"] == op_type


# -- the attention itself --------------------------------------------------------------------------------
SHAPES = {
    # name: (Q, K, V) shapes; q_len != kv_len throughout, and a V head size unlike Q's
    "mha": ((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 8)),
    "gqa": ((1, 6, 4, 16), (1, 2, 9, 16), (1, 2, 9, 16)),
    "mqa": ((2, 4, 3, 8), (2, 1, 6, 8), (2, 1, 6, 4)),
    "v_head": ((1, 2, 6, 8), (1, 2, 3, 8), (1, 2, 3, 12)),
}


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("case", sorted(SHAPES))
def test_flex_attention_matches_the_reference(case, dtype, device, rng):
    """Scores, softmax and @ V as the reference computes them, for grouped queries (K/V heads repeated in
    head order), one K/V head, and a V head size unlike Q's. Wrong if a query head reads the wrong K/V
    head, the default scale is not 1/sqrt(head_size), or the half types skip the float32 softmax."""
    model = _model(*SHAPES[case], dtype=dtype)
    config = _run(model, _feeds(model, rng, dtype), device, dtype)
    ops = _operators(config)
    assert "softmax" in ops
    # equal head counts need no repeat; grouped queries expand K and V
    assert ("expand" in ops) == (case in ("gqa", "mqa"))
    # the half types compute the softmax in float32: the scores are cast up, Y down
    assert ("cast" in ops) == (dtype == "float16")


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_scale_attribute(dtype, device, rng):
    """The scale given replaces 1/sqrt(head_size). Wrong if it is ignored or applied twice."""
    model = _model((1, 2, 4, 8), (1, 2, 5, 8), (1, 2, 5, 8), dtype=dtype, scale=0.8)
    _run(model, _feeds(model, rng, dtype), device, dtype)


@pytest.mark.parametrize("precision", [1, 10])
def test_softmax_precision(precision, device, rng):
    """softmax_precision FLOAT on float16 inputs (as the default), FLOAT16 on float32 inputs (the scores
    and V cast down, Y back up)."""
    dtype = "float16" if precision == 1 else "float32"
    model = _model((1, 2, 3, 8), (1, 2, 4, 8), (1, 2, 4, 8), dtype=dtype, softmax_precision=precision)
    _run(model, _feeds(model, rng, dtype), device, "float16")


# -- the modifiers ---------------------------------------------------------------------------------------
def _soft_cap(elem=FLOAT, dtype=F):
    cap = np.array(2.0, dtype)
    nodes = [
        helper.make_node("Div", ["s", "cap"], ["d"]),
        helper.make_node("Tanh", ["d"], ["t"]),
        helper.make_node("Mul", ["t", "cap"], ["o"]),
    ]
    return _mod(nodes, {"cap": cap}, "soft_cap", elem=elem)


def _causal():
    """Where(q_idx >= k_idx, s, -inf), the indices made from the scores' own shape."""
    nodes = [
        helper.make_node("Shape", ["s"], ["shape"]),
        helper.make_node("Gather", ["shape", "two"], ["L"], axis=0),
        helper.make_node("Gather", ["shape", "three"], ["S"], axis=0),
        helper.make_node("Range", ["zero", "L", "one"], ["qr"]),
        helper.make_node("Range", ["zero", "S", "one"], ["kr"]),
        helper.make_node("Unsqueeze", ["qr", "last"], ["qi"]),
        helper.make_node("GreaterOrEqual", ["qi", "kr"], ["keep"]),
        helper.make_node("Where", ["keep", "s", "ninf"], ["o"]),
    ]
    inits = {
        "two": np.array(2, np.int64),
        "three": np.array(3, np.int64),
        "zero": np.array(0, np.int64),
        "one": np.array(1, np.int64),
        "last": np.array([1], np.int64),
        "ninf": np.array(-np.inf, F),
    }
    return _mod(nodes, inits, "causal")


@pytest.mark.parametrize("mod", ["bias", "soft_cap", "causal", "identity"])
def test_score_mod(mod, device, rng):
    """score_mod inlined on the scores (float32): a bias of its own initializer (the softmax fusion
    still takes it: no `add` stage), a soft cap, a causal mask built from the scores' shape, and a
    subgraph that returns its input. Wrong if the mod is skipped or applied after the softmax."""
    graph = {
        "bias": lambda: _mod([helper.make_node("Add", ["s", "b"], ["o"])], {"b": np.array(0.75, F)}),
        "soft_cap": _soft_cap,
        "causal": _causal,
        "identity": lambda: _mod([], x="s", out="s"),
    }[mod]()
    model = _model((2, 2, 5, 8), (2, 2, 5, 8), (2, 2, 5, 8), score_mod=graph)
    config = _run(model, _feeds(model, rng), device)
    ops = _operators(config)
    if mod == "bias":
        assert "add" not in ops, ops
    if mod == "causal":
        assert "where" in ops


def test_score_mod_in_float16_runs_in_float32(device, rng):
    """With float16 inputs the scores reach score_mod in float32 (softmax_precision's default)."""
    model = _model((1, 2, 4, 8), (1, 2, 6, 8), (1, 2, 6, 8), dtype="float16", score_mod=_soft_cap())
    _run(model, _feeds(model, rng, "float16"), device, "float16")


def test_prob_mod_and_score_mod_together(device, rng):
    """prob_mod acts on the probabilities after the softmax (here scaled per key by a graph input the
    subgraph reads from the outer scope, which onnx's reference cannot run: NumPy is the oracle), after
    score_mod."""
    prob = _mod([helper.make_node("Mul", ["p", "w"], ["po"])], x="p", out="po", name="prob")
    w = _info("w", FLOAT, [1, 1, 1, 6])
    model = _model((1, 4, 3, 8), (1, 2, 6, 8), (1, 2, 6, 8), extra=[w], score_mod=_soft_cap(), prob_mod=prob)
    feeds = _feeds(model, rng, w=rng.random((1, 1, 1, 6)).astype(F))
    want = _attention(feeds, lambda s: np.tanh(s / F(2)) * F(2), lambda p: p * feeds["w"])
    _run(model, feeds, device, want=want)


def test_score_mod_reads_an_outer_input_and_nests_an_if(device, rng):
    """score_mod adds a mask fed at run time (an outer-scope name) inside an If whose condition is an
    outer initializer: the If is lowered in the inlined copy too."""
    then = helper.make_graph(
        [helper.make_node("Add", ["s", "mask"], ["t"])], "then", [], [_info("t", FLOAT, None)]
    )
    other = helper.make_graph([helper.make_node("Neg", ["s"], ["e"])], "else", [], [_info("e", FLOAT, None)])
    graph = _mod([helper.make_node("If", ["flag"], ["o"], then_branch=then, else_branch=other)])
    mask = _info("mask", FLOAT, [1, 1, 4, 6])
    model = _model(
        (1, 2, 4, 8),
        (1, 2, 6, 8),
        (1, 2, 6, 8),
        extra=[mask],
        inits={"flag": np.array(True)},
        score_mod=graph,
    )
    feeds = _feeds(model, rng, mask=rng.standard_normal((1, 1, 4, 6)).astype(F))
    config = _run(model, feeds, device, want=_attention(feeds, lambda s: s + feeds["mask"]))
    assert "neg" not in _operators(config)


def test_flex_attention_inside_an_if_branch(device, rng):
    """A FlexAttention node in a branch is lowered where the branch is inlined."""
    inner = helper.make_node("FlexAttention", ["Q", "K", "V"], ["a"], domain=PREVIEW, scale=0.5)
    then = helper.make_graph([inner], "then", [], [_info("a", FLOAT, None)])
    other = helper.make_graph([helper.make_node("Identity", ["Q"], ["b"])], "else", [], [_info("b")])
    node = helper.make_node("If", ["flag"], ["Y"], name="ctl", then_branch=then, else_branch=other)
    model = _model((1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 4), inits={"flag": np.array(True)}, nodes=[node])
    assert "softmax" in _operators(_run(model, _feeds(model, rng), device))


def test_flex_attention_in_a_loop_body(device, rng):
    """A FlexAttention node in a Loop body is lowered in every unrolled copy, reading K and V from the
    outer scope and the carried queries."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["c"], ["c_out"]),
            helper.make_node("FlexAttention", ["q"], ["q_out"], domain=PREVIEW),
        ],
        "body",
        [_info("i", INT64, []), _info("c", BOOL, []), _info("q", FLOAT, [1, 2, 3, 4])],
        [_info("c_out", BOOL, []), _info("q_out", FLOAT, [1, 2, 3, 4])],
    )
    body.node[1].input.extend(["K", "V"])
    # a condition input: onnx's reference runs no iteration of a Loop without one (onnx 1.23)
    node = helper.make_node("Loop", ["trips", "go", "Q"], ["Y"], name="ctl", body=body)
    inits = {"trips": np.array(2, np.int64), "go": np.array(True)}
    model = _model((1, 2, 3, 4), (1, 1, 5, 4), (1, 1, 5, 4), inits=inits, nodes=[node])
    assert _operators(_run(model, _feeds(model, rng), device)).count("softmax") == 2


# -- refusals --------------------------------------------------------------------------------------------
SHAPE = ((1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 4))


def test_refuses_an_old_default_opset():
    """The function body's Shape(start, end) needs opset 15; an older model is refused, not mis-read."""
    _refused(_model(*SHAPE, opset=MIN_OPSET - 1), f"need opset {MIN_OPSET} or later .* opset {MIN_OPSET - 1}")


@pytest.mark.parametrize("version", [None, 2])
def test_refuses_another_preview_opset(version):
    """FlexAttention of ai.onnx.preview's opset 1 only: another version may compute something else."""
    model = _model(*SHAPE)
    if version is None:
        del model.opset_import[1]
    else:
        model.opset_import[1].version = version
    imported = "none" if version is None else re.escape(str([version]))
    _refused(model, f"imports opset {imported} of domain 'ai.onnx.preview'")


def test_refuses_a_modifier_that_changes_the_shape_or_dtype():
    """A modifier must keep its input's shape and dtype; one that reduces an axis, or casts, is refused
    naming the attribute and both types."""
    reduce = _mod([helper.make_node("ReduceMax", ["s", "ax"], ["o"], keepdims=1)], {"ax": np.array([3])})
    _refused(_model(*SHAPE, score_mod=reduce), r"score_mod makes float32 \[1, 2, 3, 1\] from float32")
    cast = _mod([helper.make_node("Cast", ["p"], ["o"], to=FLOAT16)], x="p", elem=FLOAT16)
    _refused(_model(*SHAPE, prob_mod=cast), r"prob_mod makes float16 .* keeps the shape and the dtype")


def test_refuses_a_modifier_of_two_inputs():
    graph = helper.make_graph(
        [helper.make_node("Add", ["s", "t"], ["o"])], "two", [_info("s"), _info("t")], [_info("o")]
    )
    _refused(_model(*SHAPE, score_mod=graph), "score_mod has 2 inputs and 1 outputs; a modifier takes")


def test_a_modifier_reading_an_unknown_name_is_malformed():
    """A name neither the subgraph nor the model defines: the model is refused before lowering, naming
    the inlined node and the name."""
    graph = _mod([helper.make_node("Add", ["s", "nowhere"], ["o"])])
    with pytest.raises(pl.PipeLinkError, match="input 'nowhere' is no graph input") as info:
        import_model(_model(*SHAPE, score_mod=graph))
    assert info.value.code.name == "PIPELINK_ERR_INVALID_ARGUMENT"


def test_refuses_a_modifier_making_a_sequence():
    sequence = helper.make_graph(
        [helper.make_node("SequenceConstruct", ["s"], ["o"])],
        "seq",
        [_info("s")],
        [helper.make_tensor_sequence_value_info("o", FLOAT, None)],
    )
    _refused(
        _model(*SHAPE, score_mod=sequence), "score_mod's output is a sequence; a modifier makes a tensor"
    )


@pytest.mark.parametrize(
    ("shapes", "attrs", "why"),
    [
        (SHAPE, {"softmax_precision": TensorProto.INT64}, r"softmax_precision=7: it is a float element type"),
        (((1, 3, 3, 4), (1, 2, 5, 4), (1, 2, 5, 4)), {}, "Q has 3 heads and K 2; the query heads must be"),
        (((1, 2, 3), (1, 2, 5, 4), (1, 2, 5, 4)), {}, r"Q has shape \[1, 2, 3\]; FlexAttention takes rank-4"),
        (((1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 6, 4)), {}, "the sequence length of K and V must agree"),
        (((1, 2, 3, 4), (1, 2, 5, 8), (1, 2, 5, 4)), {}, "the head size of Q and K must agree"),
        (SHAPE, {"window": 3}, "attribute 'window' is not one of FlexAttention's"),
        (SHAPE, {"scale": "half"}, r"attribute scale must be of type FLOAT \(got STRING\)"),
        (SHAPE, {"softmax_precision": 1.0}, r"attribute softmax_precision must be of type INT \(got FLOAT\)"),
        (SHAPE, {"score_mod": 3}, r"attribute score_mod must be of type GRAPH \(got INT\)"),
    ],
)
def test_refuses_what_it_does_not_compute(shapes, attrs, why):
    """A precision that is no float type, heads that do not group, a rank other than 4, K and V or Q and K
    that do not pair, an attribute the spec lacks: refused, naming what and the values."""
    _refused(_model(*shapes, **attrs), why)


def test_a_symbolic_batch_is_lowered_too(device, rng):
    """The function body's shape arithmetic keeps a batch dim that is a name (grouped queries too)."""
    model = _model(("b", 4, 3, 8), ("b", 2, 5, 8), ("b", 2, 5, 8))
    feeds = {
        "Q": rng.standard_normal((2, 4, 3, 8)).astype(F),
        "K": rng.standard_normal((2, 2, 5, 8)).astype(F),
        "V": rng.standard_normal((2, 2, 5, 8)).astype(F),
    }
    _run(model, feeds, device)
