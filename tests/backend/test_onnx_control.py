"""ONNX If, Loop and Scan imported (branches inlined, loops unrolled by ``pipelink/onnx/control.py``), run
on each device and compared with ONNX's ReferenceEvaluator (with a NumPy rewrite of the inputs and outputs
where the reference implements less than the spec: Scan's axes and directions, Loop's stacking of
scan outputs of rank 2); and every refusal with its code and the reason."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import pipelink as pl  # noqa: E402
from pipelink.onnx import import_model  # noqa: E402
from pipelink.onnx.control import MAX_DEPTH, MAX_INLINED  # noqa: E402
from pipelink.onnx.recurrent import MAX_STEPS  # noqa: E402
from tests.conftest import assert_close  # noqa: E402

F = np.float32
FLOAT, INT64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _info(name, elem=FLOAT, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(
        nodes,
        "control",
        inputs,
        outputs,
        [numpy_helper.from_array(np.asarray(v), k) for k, v in dict(inits).items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _run(model, feeds, device, want=None):
    """Import ``model``, run it on ``feeds`` and compare every output with ``want`` (by default the
    ReferenceEvaluator's outputs of the same model); returns the imported config."""
    config, weights = import_model(model)
    pipe = pl.load(config, device=device, weights=weights)
    got = pipe.run(feeds)
    names = [o.name for o in model.graph.output]
    if want is None:
        want = dict(zip(names, ReferenceEvaluator(model).run(None, feeds), strict=True))
    for name in names:
        out, ref = np.asarray(got[name].numpy()), np.asarray(want[name])
        assert out.shape == ref.shape, (name, out.shape, ref.shape)
        assert out.dtype == ref.dtype, (name, out.dtype, ref.dtype)
        assert not np.isnan(out.astype(np.float64)).any(), name
        assert_close(out, ref, "float32", name)
    return config


def _operators(config) -> list[str]:
    return [stage["name"] for stage in config["pipeline"]]


def _refused(model, why, node="ctl", op_type=None):
    with pytest.raises(pl.PipeLinkError, match=why) as info:
        import_model(model)
    assert info.value.code.name == "PIPELINK_ERR_INVALID_ARGUMENT"
    listed = info.value.context["unsupported"]
    assert [u["node"] for u in listed] == [node], listed
    if op_type is not None:
        assert listed[0]["op_type"] == op_type


# -- If --------------------------------------------------------------------------------------------------
def _branches(shape_then=(2, 3), shape_else=(2, 3)):
    """then: tanh(x) * w (an outer input and an outer initializer); else: x + 1 reshaped (its own
    initializer), or x as it is (an outer name as the branch output) when the shapes differ."""
    then = helper.make_graph(
        [helper.make_node("Tanh", ["x"], ["t"]), helper.make_node("Mul", ["t", "w"], ["then_out"])],
        "then",
        [],
        [_info("then_out", FLOAT, list(shape_then))],
    )
    if shape_else == shape_then:
        nodes = [helper.make_node("Add", ["x", "one"], ["else_out"])]
        inits = [numpy_helper.from_array(np.array(1.0, F), "one")]
        out = "else_out"
    else:
        nodes, inits, out = [], [], "x"
    other = helper.make_graph(nodes, "else", [], [_info(out, FLOAT, list(shape_else))], inits)
    return then, other


@pytest.mark.parametrize("taken", [True, False])
def test_if_of_a_constant_condition_inlines_the_taken_branch_only(taken, device, rng):
    """A condition that is an initializer: the other branch leaves no stage (no `where`), even where its
    output's shape differs. Wrong if the branch is mixed up, or both run."""
    then, other = _branches(shape_else=(2, 3))
    node = helper.make_node("If", ["c"], ["y"], name="ctl", then_branch=then, else_branch=other)
    model = _model(
        [node],
        [_info("x", FLOAT, [2, 3])],
        [_info("y", FLOAT, [2, 3])],
        {"c": np.array(taken), "w": rng.random(3, F)},
    )
    config = _run(model, {"x": rng.standard_normal((2, 3)).astype(F)}, device)
    ops = _operators(config)
    assert "where" not in ops
    assert ("tanh" in ops) == taken and ("add" in ops) != taken


def test_if_of_shape_arithmetic_folds_and_branches_may_differ_in_shape(device, rng):
    """The condition ``x.shape[0] == 4`` folds at import, so the branches may make different shapes; the
    taken branch's own shape arithmetic (a Reshape target from Shape) folds too."""
    shape = helper.make_node("Shape", ["x"], ["s"])
    first = helper.make_node("Gather", ["s", "zero"], ["n"], axis=0)
    cond = helper.make_node("Equal", ["n", "four"], ["c"])
    then = helper.make_graph(
        [
            helper.make_node("Shape", ["x"], ["xs"]),
            helper.make_node("ReduceProd", ["xs"], ["count"], keepdims=1),
            helper.make_node("Reshape", ["x", "count"], ["flat"]),
            helper.make_node("Relu", ["flat"], ["then_out"]),
        ],
        "then",
        [],
        [_info("then_out", FLOAT, None)],
    )
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["else_out"])], "else", [], [_info("else_out")])
    node = helper.make_node("If", ["c"], ["y"], name="ctl", then_branch=then, else_branch=other)
    after = helper.make_node("Mul", ["y", "y"], ["z"])
    model = _model(
        [shape, first, cond, node, after],
        [_info("x", FLOAT, [4, 3])],
        [_info("z", FLOAT, None)],
        {"zero": np.array(0, np.int64), "four": np.array(4, np.int64)},
    )
    config = _run(model, {"x": rng.standard_normal((4, 3)).astype(F)}, device)
    ops = _operators(config)
    assert "neg" not in ops and "where" not in ops and "reshape" in ops
    assert next(s for s in config["pipeline"] if s["name"] == "reshape")["attrs"]["shape"] == [12]


@pytest.mark.parametrize("cond_shape", [[], [1]])
def test_if_of_a_run_time_condition_runs_both_and_selects(cond_shape, device, rng):
    """A condition the graph computes (a graph input): both branches run and `where` picks each output,
    for either value of the condition; a [1] condition is squeezed first (where would broadcast it)."""
    then, other = _branches()
    node = helper.make_node("If", ["c"], ["y"], name="ctl", then_branch=then, else_branch=other)
    model = _model(
        [node],
        [_info("x", FLOAT, [2, 3]), _info("c", BOOL, cond_shape)],
        [_info("y", FLOAT, [2, 3])],
        {"w": rng.random(3, F)},
    )
    x = rng.standard_normal((2, 3)).astype(F)
    for value in (True, False):
        config = _run(model, {"x": x, "c": np.full(cond_shape, value)}, device)
    assert "where" in _operators(config)


def test_nested_if_reads_names_of_every_enclosing_scope(device, rng):
    """An If inside a branch reads the outer graph's input and the enclosing branch's value by name."""
    inner_then = helper.make_graph(
        [helper.make_node("Mul", ["x", "mid"], ["it"])], "it", [], [_info("it", FLOAT, [3])]
    )
    inner_else = helper.make_graph(
        [helper.make_node("Sub", ["mid", "x"], ["ie"])], "ie", [], [_info("ie", FLOAT, [3])]
    )
    outer_then = helper.make_graph(
        [
            helper.make_node("Exp", ["x"], ["mid"]),
            helper.make_node("If", ["d"], ["ot"], then_branch=inner_then, else_branch=inner_else),
        ],
        "ot",
        [],
        [_info("ot", FLOAT, [3])],
    )
    outer_else = helper.make_graph(
        [helper.make_node("Abs", ["x"], ["oe"])], "oe", [], [_info("oe", FLOAT, [3])]
    )
    node = helper.make_node("If", ["c"], ["y"], name="ctl", then_branch=outer_then, else_branch=outer_else)
    model = _model(
        [node], [_info("x", FLOAT, [3]), _info("c", BOOL, []), _info("d", BOOL, [])], [_info("y", FLOAT, [3])]
    )
    x = rng.standard_normal(3).astype(F)
    for c in (True, False):
        for d in (True, False):
            _run(model, {"x": x, "c": np.array(c), "d": np.array(d)}, device)


def test_if_refusals():
    """A run-time condition needs both branches' outputs of one dtype and shape, tensors, and a bool
    condition of one element; each refusal names the output and what differs."""
    inputs = [_info("x", FLOAT, [2, 3]), _info("c", BOOL, [])]
    # different shapes
    then, _ = _branches()
    other = helper.make_graph(
        [helper.make_node("ReduceSum", ["x"], ["e"], keepdims=0)], "else", [], [_info("e", FLOAT, None)]
    )
    node = helper.make_node("If", ["c"], ["y"], name="ctl", then_branch=then, else_branch=other)
    model = _model([node], inputs, [_info("y")], {"w": np.ones(3, F)})
    _refused(
        model, r"then_branch makes float32 \[2, 3\], else_branch float32 \[\]; .*must agree", op_type="If"
    )
    # different dtypes
    other = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["e"], to=TensorProto.INT32)], "else", [], [_info("e", 0, None)]
    )
    node = helper.make_node("If", ["c"], ["y"], name="ctl", then_branch=then, else_branch=other)
    _refused(_model([node], inputs, [_info("y")], {"w": np.ones(3, F)}), "else_branch int32 \\[2, 3\\]")
    # a sequence output
    seq = helper.make_graph(
        [helper.make_node("SequenceConstruct", ["x"], ["s"])],
        "seq",
        [],
        [helper.make_tensor_sequence_value_info("s", FLOAT, None)],
    )
    node = helper.make_node("If", ["c"], ["y"], name="ctl", then_branch=seq, else_branch=seq)
    _refused(
        _model([node], inputs, [_info("y")]), r"output 0 \('s'\) is a sequence; PipeLink selects tensors"
    )
    # a condition that is not a bool of one element
    node = helper.make_node("If", ["c"], ["y"], name="ctl", then_branch=then, else_branch=then)
    model = _model(
        [node], [_info("x", FLOAT, [2, 3]), _info("c", BOOL, [2])], [_info("y")], {"w": np.ones(3, F)}
    )
    _refused(model, r"bool of one element known at import \(got bool, shape \[2\]\)")
    # branches of another output count
    node = helper.make_node("If", ["c"], ["y", "z"], name="ctl", then_branch=then, else_branch=then)
    _refused(
        _model([node], inputs, [_info("y"), _info("z")], {"w": np.ones(3, F)}), "then_branch has 1 outputs"
    )


# -- Loop ------------------------------------------------------------------------------------------------
def _loop_body(scan_shape=(3,)):
    """v' = tanh(v * w) + i (the iteration number, cast); scan output v' (reshaped to ``scan_shape``);
    the condition ``i < stop`` (an outer tensor)."""
    return helper.make_graph(
        [
            helper.make_node("Less", ["i", "stop"], ["cond_out"]),
            helper.make_node("Mul", ["v", "w"], ["m"], name="mul"),
            helper.make_node("Tanh", ["m"], ["h"], name="tanh"),
            helper.make_node("Cast", ["i"], ["fi"], to=FLOAT),
            helper.make_node("Add", ["h", "fi"], ["v_out"], name="add"),
            helper.make_node("Reshape", ["v_out", "scan_shape"], ["scan_out"]),
        ],
        "body",
        [_info("i", INT64, []), _info("cond_in", BOOL, []), _info("v", FLOAT, [3])],
        [_info("cond_out", BOOL, []), _info("v_out", FLOAT, [3]), _info("scan_out", FLOAT, list(scan_shape))],
        [numpy_helper.from_array(np.array(scan_shape, np.int64), "scan_shape")],
    )


def _loop_model(trips, stop, cond=True, scan_shape=(3,), w=None):
    node = helper.make_node(
        "Loop",
        ["M" if trips is not None else "", "cond" if cond is not None else "", "x"],
        ["y", "z"],
        name="ctl",
        body=_loop_body(scan_shape),
    )
    inits = {"stop": np.array(stop, np.int64), "w": np.full(3, 0.5, F) if w is None else w}
    if trips is not None:
        inits["M"] = np.array(trips, np.int64)
    if cond is not None:
        inits["cond"] = np.array(cond)
    return _model([node], [_info("x", FLOAT, [3])], [_info("y"), _info("z")], inits)


@pytest.mark.parametrize(("trips", "stop"), [(5, 100), (6, 2), (None, 3), (1, 100)])
def test_loop_of_a_constant_trip_count_unrolls(trips, stop, device, rng):
    """A trip count, a condition (i < stop, folding iteration by iteration: the loop ends early at stop),
    or both: the body once per iteration, the value carried, the scan outputs stacked on a new axis 0."""
    model = _loop_model(trips, stop, w=rng.random(3, F))
    config = _run(model, {"x": rng.standard_normal(3).astype(F)}, device)
    runs = min(trips if trips is not None else 10**9, stop + 1)
    assert _operators(config).count("tanh") == runs


def test_loop_without_a_condition_input_ignores_the_bodys(device, rng):
    """Without input 1 the body's condition is ignored (the spec's for-loop; onnx's reference runs no
    iteration then, so the reference here is the same loop with a true condition it never changes)."""
    model = _loop_model(4, 0, cond=None, w=rng.random(3, F))
    oracle = _loop_model(4, 100, w=numpy_helper.to_array(model.graph.initializer[1]))
    x = rng.standard_normal(3).astype(F)
    want = dict(zip(["y", "z"], ReferenceEvaluator(oracle).run(None, {"x": x}), strict=True))
    _run(model, {"x": x}, device, want)


def test_loop_stacks_scan_outputs_of_rank_two_on_a_new_axis(device, rng):
    """Scan outputs [1, 3] stack into [T, 1, 3] (the spec; ORT). onnx's reference concatenates them with
    vstack into [T, 3], so the reference here is its result reshaped."""
    model = _loop_model(4, 100, scan_shape=(1, 3), w=rng.random(3, F))
    x = rng.standard_normal(3).astype(F)
    y, z = ReferenceEvaluator(model).run(None, {"x": x})
    _run(model, {"x": x}, device, {"y": y, "z": z.reshape(4, 1, 3)})


def test_loop_inside_a_scan_and_an_if_on_the_iteration_number(device, rng):
    """Nested: a Scan whose body runs a Loop, whose body picks by ``If(i == 1)`` (constant once
    unrolled). Every copy gets its own names."""
    pick = helper.make_graph([helper.make_node("Neg", ["u"], ["p"])], "p", [], [_info("p", FLOAT, [2])])
    keep = helper.make_graph([helper.make_node("Exp", ["u"], ["q"])], "q", [], [_info("q", FLOAT, [2])])
    loop_body = helper.make_graph(
        [
            helper.make_node("Equal", ["j", "one"], ["is_one"]),
            helper.make_node("If", ["is_one"], ["r"], then_branch=pick, else_branch=keep),
            helper.make_node("Add", ["r", "elem"], ["u_out"]),
            helper.make_node("Identity", ["c"], ["c_out"]),
        ],
        "loop_body",
        [_info("j", INT64, []), _info("c", BOOL, []), _info("u", FLOAT, [2])],
        [_info("c_out", BOOL, []), _info("u_out", FLOAT, [2])],
    )
    scan_body = helper.make_graph(
        [
            helper.make_node("Loop", ["three", "", "state"], ["after"], body=loop_body),
            helper.make_node("Tanh", ["after"], ["state_out"]),
            helper.make_node("Identity", ["state_out"], ["each"]),
        ],
        "scan_body",
        [_info("state", FLOAT, [2]), _info("elem", FLOAT, [2])],
        [_info("state_out", FLOAT, [2]), _info("each", FLOAT, [2])],
    )
    node = helper.make_node(
        "Scan", ["s0", "xs"], ["final", "all"], name="ctl", body=scan_body, num_scan_inputs=1
    )
    model = _model(
        [node],
        [_info("s0", FLOAT, [2]), _info("xs", FLOAT, [4, 2])],
        [_info("final"), _info("all")],
        {"three": np.array(3, np.int64), "one": np.array(1, np.int64)},
    )
    # onnx's reference runs the Loop without a condition input not at all: give the oracle one
    oracle = onnx.ModelProto()
    oracle.CopyFrom(model)
    loop = oracle.graph.node[0].attribute[0].g.node[0]
    loop.input[1] = "yes"
    oracle.graph.initializer.append(numpy_helper.from_array(np.array(True), "yes"))
    feeds = {"s0": rng.standard_normal(2).astype(F), "xs": rng.standard_normal((4, 2)).astype(F)}
    want = dict(zip(["final", "all"], ReferenceEvaluator(oracle).run(None, feeds), strict=True))
    config = _run(model, feeds, device, want)
    assert _operators(config).count("neg") == 4 and _operators(config).count("exp") == 8


def test_loop_refusals():
    """What is not known at import, or too big to unroll, is refused naming the input and the bound."""
    _refused(_loop_model(10**6, 0), f"trip count 1000000; .* at most {MAX_STEPS} iterations")
    model = _loop_model(5, 100)
    model.graph.initializer.pop(0)  # stop becomes a graph input: the body's condition is computed
    model.graph.input.append(_info("stop", INT64, []))
    _refused(
        model,
        r"the body's condition \(output 0, 'cond_out'\) \('ctl/iter0/cond_out'\) is computed at run "
        "time in iteration 0",
    )
    node = helper.make_node("Loop", ["M", "", "x"], ["y", "z"], name="ctl", body=_loop_body())
    model = _model(
        [node],
        [_info("x", FLOAT, [3]), _info("M", INT64, [])],
        [_info("y"), _info("z")],
        {"stop": np.array(1, np.int64), "w": np.ones(3, F)},
    )
    _refused(model, r"the trip count M \('M'\) is computed at run time")
    node = helper.make_node("Loop", ["", "c", "x"], ["y", "z"], name="ctl", body=_loop_body())
    model = _model(
        [node],
        [_info("x", FLOAT, [3]), _info("c", BOOL, [])],
        [_info("y"), _info("z")],
        {"stop": np.array(1, np.int64), "w": np.ones(3, F)},
    )
    _refused(model, r"the condition input \(input 1\) \('c'\) is computed at run time")
    node = helper.make_node("Loop", ["", "", "x"], ["y", "z"], name="ctl", body=_loop_body())
    model = _model(
        [node],
        [_info("x", FLOAT, [3])],
        [_info("y"), _info("z")],
        {"stop": np.array(1, np.int64), "w": np.ones(3, F)},
    )
    _refused(model, "neither a trip count nor a condition never ends")
    _refused(_loop_model(None, 10**6), f"still true after {MAX_STEPS} iterations")
    _refused(_loop_model(0, 5), "the loop runs no iteration, so scan output 'z' would be empty")


def test_nested_loops_are_bounded_by_the_node_budget():
    """Two loops of MAX_STEPS iterations nested: each alone is allowed, the product is not; refused
    before the budget runs out, naming it. Wrong if the import unrolls a million copies."""
    inner = helper.make_graph(
        [helper.make_node("Identity", ["c2"], ["co2"]), helper.make_node("Tanh", ["u"], ["uo"])],
        "inner",
        [_info("j", INT64, []), _info("c2", BOOL, []), _info("u", FLOAT, [3])],
        [_info("co2", BOOL, []), _info("uo", FLOAT, [3])],
    )
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["c"], ["co"]),
            helper.make_node("Loop", ["M", "", "v"], ["vo"], body=inner, name="inner"),
        ],
        "body",
        [_info("i", INT64, []), _info("c", BOOL, []), _info("v", FLOAT, [3])],
        [_info("co", BOOL, []), _info("vo", FLOAT, [3])],
    )
    node = helper.make_node("Loop", ["M", "", "x"], ["y"], name="ctl", body=body)
    model = _model([node], [_info("x", FLOAT, [3])], [_info("y")], {"M": np.array(MAX_STEPS, np.int64)})
    _refused(model, rf"Loop 'ctl/iter\d+/inner': {MAX_STEPS} iterations .* at most {MAX_INLINED} in all")


# -- Scan ------------------------------------------------------------------------------------------------
def _scan_model(in_axes=None, in_dirs=None, out_axes=None, out_dirs=None, opset=17, x_shape=(5, 2, 3)):
    """State s' = s * w + x_t (x_t an element of xs), scan outputs tanh(s') and x_t - 1 (both [2, 3])."""
    body = helper.make_graph(
        [
            helper.make_node("Mul", ["s", "w"], ["sw"]),
            helper.make_node("Add", ["sw", "x_t"], ["s_out"]),
            helper.make_node("Tanh", ["s_out"], ["a"]),
            helper.make_node("Sub", ["x_t", "one"], ["b"]),
        ],
        "body",
        [_info("s", FLOAT, [2, 3]), _info("x_t", FLOAT, [2, 3])],
        [_info("s_out", FLOAT, [2, 3]), _info("a", FLOAT, [2, 3]), _info("b", FLOAT, [2, 3])],
        [numpy_helper.from_array(np.array(1.0, F), "one")],
    )
    attrs = {"num_scan_inputs": 1}
    for name, value in (
        ("scan_input_axes", in_axes),
        ("scan_input_directions", in_dirs),
        ("scan_output_axes", out_axes),
        ("scan_output_directions", out_dirs),
    ):
        if value is not None:
            attrs[name] = value
    node = helper.make_node("Scan", ["s0", "xs"], ["s_final", "as", "bs"], name="ctl", body=body, **attrs)
    return _model(
        [node],
        [_info("s0", FLOAT, [2, 3]), _info("xs", FLOAT, list(x_shape))],
        [_info("s_final"), _info("as"), _info("bs")],
        {"w": np.array([0.5, -0.25, 0.75], F)},
        opset=opset,
    )


@pytest.mark.parametrize("opset", [9, 11, 17])
def test_scan_unrolls_over_its_axis(opset, device, rng):
    model = _scan_model(opset=opset)
    feeds = {"s0": rng.standard_normal((2, 3)).astype(F), "xs": rng.standard_normal((5, 2, 3)).astype(F)}
    config = _run(model, feeds, device)
    assert _operators(config).count("tanh") == 5


@pytest.mark.parametrize(
    ("in_axis", "in_dir", "out_axes", "out_dirs"),
    [(1, 0, [1, 2], [0, 0]), (0, 1, [0, 0], [1, 0]), (-1, 1, [-1, 1], [0, 1]), (2, 0, [0, -3], [1, 1])],
)
def test_scan_axes_and_directions(in_axis, in_dir, out_axes, out_dirs, device, rng):
    """Scan axes and directions, against the reference of the axis-0 forward Scan (all onnx's reference
    runs) on the input moved and flipped as the spec says, its outputs moved and flipped back."""
    length = 4
    x = rng.standard_normal((length, 2, 3)).astype(F)  # the elements in scan order, axis 0
    s0 = rng.standard_normal((2, 3)).astype(F)
    s_final, a, b = ReferenceEvaluator(_scan_model(x_shape=x.shape)).run(None, {"s0": s0, "xs": x})
    fed = np.moveaxis(x[::-1] if in_dir else x, 0, in_axis)
    want = {"s_final": s_final}
    for name, out, axis, direction in (
        ("as", a, out_axes[0], out_dirs[0]),
        ("bs", b, out_axes[1], out_dirs[1]),
    ):
        want[name] = np.moveaxis(out[::-1] if direction else out, 0, axis)
    model = _scan_model([in_axis], [in_dir], out_axes, out_dirs, x_shape=fed.shape)
    _run(model, {"s0": s0, "xs": fed}, device, want)


def test_scan_refusals():
    _refused(_scan_model(x_shape=("seq", 2, 3)), r"scan axis 0 of size seq, known only when the model runs")
    _refused(
        _scan_model(x_shape=(MAX_STEPS + 1, 2, 3)), f"sequence length {MAX_STEPS + 1}; .* at most {MAX_STEPS}"
    )
    _refused(_scan_model(in_axes=[3]), r"scan_input_axes\[0\]=3 is out of range for rank 3")
    _refused(_scan_model(in_dirs=[2]), r"scan_input_directions=\[2\]: a direction is 0 \(forward\) or 1")
    _refused(_scan_model(out_axes=[0]), "scan_output_axes has 1 entries; it needs 2")


def _scan8_model(batch, seq, directions=None, lens=None):
    """Scan-8: the running sum of x's rows per batch entry (a state [2]) and each step's sum (a scan
    output), over x [batch, seq, 2] with the batch axis first and sequence_lens the first input."""
    body = helper.make_graph(
        [
            helper.make_node("Add", ["s_in", "v"], ["s_out"]),
            helper.make_node("Identity", ["s_out"], ["scan"]),
        ],
        "body",
        [_info("s_in", FLOAT, [2]), _info("v", FLOAT, [2])],
        [_info("s_out", FLOAT, [2]), _info("scan", FLOAT, [2])],
    )
    attrs = {"num_scan_inputs": 1, "body": body} | ({"directions": directions} if directions else {})
    inits = {} if lens is None else {"lens": np.array(lens, np.int32)}
    node = helper.make_node(
        "Scan", ["lens" if lens is not None else "", "init", "x"], ["y", "z"], name="ctl", **attrs
    )
    return _model(
        [node],
        [_info("init", FLOAT, [batch, 2]), _info("x", FLOAT, [batch, seq, 2])],
        [_info("y", FLOAT, [batch, 2]), _info("z", FLOAT, [batch, seq, 2])],
        inits,
        opset=8,
    )


@pytest.mark.parametrize(("directions", "lens"), [(None, None), ([1], None), (None, [4, 4, 4])])
def test_scan8_scans_each_batch_entry(rng, device, directions, lens):
    batch, seq = 3, 4
    feeds = {
        "init": rng.standard_normal((batch, 2)).astype(F),
        "x": rng.standard_normal((batch, seq, 2)).astype(F),
    }
    xs = feeds["x"][:, ::-1] if directions == [1] else feeds["x"]
    steps = feeds["init"][:, None, :] + np.cumsum(xs, axis=1)
    want = {"y": steps[:, -1], "z": steps}
    _run(_scan8_model(batch, seq, directions, lens), feeds, device, want=want)


def test_scan8_refusals():
    _refused(
        _scan8_model(2, 3, lens=[3, 2]), r"sequence_lens \('lens'\) must be absent or a constant of the full"
    )
    unknown = _scan8_model(2, 3)
    for info in unknown.graph.input:
        info.type.tensor_type.shape.dim[0].dim_param = "B"
    _refused(unknown, r"Scan-8 input 'init' has its batch axis unknown at import")


# -- hostile subgraphs ---------------------------------------------------------------------------------
def _if_of(branch, cond_value=True):
    node = helper.make_node("If", ["c"], ["y"], name="ctl", then_branch=branch, else_branch=branch)
    return _model([node], [_info("x", FLOAT, [3])], [_info("y", FLOAT, [3])], {"c": np.array(cond_value)})


def _lowered(model) -> list:
    """What control.py alone refuses in ``model`` (the import checks the model first, check.py, and
    refuses these there too): the lowering run without that check, its rejections."""
    from pipelink.onnx.control import lower_control
    from pipelink.onnx.convert import Graph

    constants = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    g = Graph(opset=17, constants=constants, dtypes={}, operators=lambda name: None)
    nodes, rejected = [], []
    for _ in lower_control(onnx, model, g, nodes, rejected):
        pass
    return [(r.op_type, r.node, r.why) for r in rejected]


def test_a_subgraph_reading_an_undefined_name_is_refused():
    branch = helper.make_graph(
        [helper.make_node("Add", ["x", "nowhere"], ["o"])], "b", [], [_info("o", FLOAT, [3])]
    )
    with pytest.raises(pl.PipeLinkError, match="'nowhere'") as info:
        import_model(_if_of(branch))
    assert info.value.code.name == "PIPELINK_ERR_INVALID_ARGUMENT"
    ((op_type, node, why),) = _lowered(_if_of(branch))
    assert (op_type, node) == ("If", "ctl")
    assert "reads 'nowhere', which neither it nor an enclosing graph defines before this node" in why
    # a name the model's graph defines only after the If: not yet defined where the branch runs
    late = _if_of(helper.make_graph([helper.make_node("Neg", ["later"], ["o"])], "b", [], [_info("o")]))
    late.graph.node.append(helper.make_node("Abs", ["x"], ["later"]))
    assert "reads 'later', which neither it nor an enclosing graph defines" in _lowered(late)[0][2]


def test_a_subgraph_with_a_cycle_is_refused():
    """Two nodes reading each other's output (a cycle; equally, nodes out of topological order), and a
    tensor made twice."""
    branch = helper.make_graph(
        [helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Neg", ["a"], ["b"])],
        "b",
        [],
        [_info("b", FLOAT, [3])],
    )
    with pytest.raises(pl.PipeLinkError, match="cycle") as info:
        import_model(_if_of(branch))
    assert info.value.code.name == "PIPELINK_ERR_INVALID_ARGUMENT"
    assert "subgraph value 'b' is read before the node making it (a cycle" in _lowered(_if_of(branch))[0][2]
    twice = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["a"]), helper.make_node("Abs", ["x"], ["a"])], "t", [], [_info("a")]
    )
    with pytest.raises(pl.PipeLinkError, match="'a'") as info:
        import_model(_if_of(twice))
    assert info.value.code.name == "PIPELINK_ERR_INVALID_ARGUMENT"
    assert "makes 'a' twice" in _lowered(_if_of(twice))[0][2]


def test_nesting_deeper_than_the_bound_is_refused():
    """MAX_DEPTH + 1 Ifs nested (each taking its then branch): refused naming the bound; MAX_DEPTH
    nested import."""

    def nested(depth):
        leaf = helper.make_graph(
            [helper.make_node("Neg", ["x"], ["o0"])], "b0", [], [_info("o0", FLOAT, [3])]
        )
        branch = leaf
        for level in range(1, depth):
            node = helper.make_node("If", ["c"], [f"o{level}"], then_branch=branch, else_branch=leaf)
            branch = helper.make_graph([node], f"b{level}", [], [_info(f"o{level}", FLOAT, [3])])
        node = helper.make_node("If", ["c"], ["y"], name="ctl", then_branch=branch, else_branch=leaf)
        return _model([node], [_info("x", FLOAT, [3])], [_info("y", FLOAT, [3])], {"c": np.array(True)})

    config, _ = import_model(nested(MAX_DEPTH))
    assert _operators(config) == ["neg"]
    _refused(nested(MAX_DEPTH + 1), f"nested more than {MAX_DEPTH} deep")
