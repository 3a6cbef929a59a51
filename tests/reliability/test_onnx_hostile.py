"""Hostile and malformed ONNX files through the import (``pl.onnx.import_model``, ``pl.from_onnx``, ``pipelink
import``): each is refused with a PipeLinkError whose message names what is wrong, or imports and runs.
Never a crash of the process, a raw exception, a traceback or an unbounded allocation.

One test per class of input that once escaped (a mutation fuzzer over onnx's node tests and the importer's
test models found them), then a bounded, derandomized hypothesis test mutating a handful of models.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from onnx import AttributeProto, TensorProto, helper, numpy_helper  # noqa: E402

import pipelink as pl  # noqa: E402
from pipelink.cli import main  # noqa: E402
from pipelink.onnx import check, infer  # noqa: E402
from tests.backend import onnx_models as om  # noqa: E402

F32 = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=(), opset=18, ir=9):
    graph = helper.make_graph(
        nodes,
        "hostile",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        list(inits),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir
    return model


def _unary(op="Relu", **attrs):
    """y = op(x), x and y float32 [2, 3]."""
    return _model([helper.make_node(op, ["x"], ["y"], **attrs)], [("x", F32, [2, 3])], [("y", F32, [2, 3])])


def _refused(model_or_path, *fragments: str, load: bool = False) -> pl.PipeLinkError:
    """Import ``model_or_path`` (and with ``load``, load it on the CPU): it must be refused with
    PIPELINK_ERR_INVALID_ARGUMENT, naming each of ``fragments`` in the message."""
    with pytest.raises(pl.PipeLinkError) as info:
        if load:
            pl.from_onnx(model_or_path, device="cpu")
        else:
            pl.onnx.import_model(model_or_path)
    error = info.value
    assert error.code.name == "PIPELINK_ERR_INVALID_ARGUMENT", error
    for fragment in fragments:
        assert fragment in str(error), f"{fragment!r} not in: {error}"
    return error


def _set_attr(node, name, **fields):
    """Replace attribute ``name`` of ``node`` by a raw AttributeProto (any type, any fields)."""
    for attr in list(node.attribute):
        if attr.name == name:
            node.attribute.remove(attr)
    node.attribute.append(AttributeProto(name=name, **fields))


# -- onnx's own shape inference crashing -------------------------------------------------------------------
def test_a_model_that_crashes_onnx_shape_inference_does_not_crash_the_process():
    # onnx 1.23's C++ inference segfaults on a LayerNormalization of axis=2**31 with its Mean output (and
    # aborts on a Split with more outputs than num_outputs): run in-process, it took the importing process
    # down.
    ln = _model(
        [helper.make_node("LayerNormalization", ["x", "w", "b"], ["y", "mean", "rstd"], axis=2**31)],
        [("x", F32, [3, 4]), ("w", F32, [3, 4]), ("b", F32, [3, 4])],
        [("y", F32, [3, 4]), ("mean", F32, None), ("rstd", F32, None)],
    )
    assert infer.infer_shapes(onnx, ln) is None  # the child died; the import goes on without it
    _refused(ln, "attribute 'axis' must be in [-2, 2) for a 2-d input (got 2147483648)", load=True)
    # a fresh child takes the next model
    typed = infer.infer_shapes(onnx, _unary())
    assert typed is not None and typed.graph.output[0].type.tensor_type.elem_type == F32


def test_shape_inference_keeps_the_weights_out_of_the_child_and_puts_them_back():
    model, _ = om.mlp_block()
    inferred = infer.infer_shapes(onnx, model)
    assert [t.name for t in inferred.graph.initializer] == [t.name for t in model.graph.initializer]
    assert [i.name for i in inferred.graph.input] == [i.name for i in model.graph.input]
    assert any(v.name == "/act/Gelu_output_0" for v in inferred.graph.value_info)
    np.testing.assert_array_equal(
        numpy_helper.to_array(inferred.graph.initializer[0]),
        numpy_helper.to_array(model.graph.initializer[0]),
    )


# -- attributes against the schema -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "op, attrs, name, fields, why",
    [
        ("Concat", {"axis": 0}, "axis", {"type": 7, "ints": [0, 1]}, "must be of type INT (got INTS)"),
        ("Transpose", {}, "perm", {"type": 1, "f": math.inf}, "must be of type INTS (got FLOAT)"),
        ("Cast", {"to": 1}, "to", {"type": 3, "s": b"NOTSET"}, "must be of type INT (got STRING)"),
        ("Flatten", {}, "axis", {"type": 2}, "of type INT holds no value"),
        ("Flatten", {}, "axis", {"type": 0, "i": 1}, "has type UNDEFINED"),
        ("Flatten", {}, "axis", {"type": 2, "i": 1, "ints": [1]}, "also holds a value in field 'ints'"),
        ("Relu", {}, "bogus", {"type": 2, "i": 1}, "has no attribute 'bogus'"),
        ("LeakyRelu", {}, "alpha", {"type": 1, "f": math.nan}, "is NaN"),
        (
            "Softmax",
            {},
            "axis",
            {"type": 2, "i": 1, "ref_attr_name": "a"},
            "refers to a function's attribute",
        ),
    ],
)
def test_an_attribute_its_schema_does_not_allow_is_refused(op, attrs, name, fields, why):
    inputs = ["x", "x"] if op == "Concat" else ["x"]
    node = helper.make_node(op, inputs, ["y"], **attrs)
    _set_attr(node, name, **fields)
    model = _model([node], [("x", F32, [2, 3])], [("y", F32, None)])
    error = _refused(model, "malformed", f"{op} node '#0'", why)
    assert error.unsupported[0]["op_type"] == op


def test_a_string_attribute_that_is_not_text_and_a_missing_required_one_are_refused():
    node = helper.make_node("Gelu", ["x"], ["y"])
    _set_attr(node, "approximate", type=3, s=b"\xff\xfe")
    _refused(_model([node], [("x", F32, [2])], [("y", F32, [2])], opset=20), "is not UTF-8 text")
    cast = helper.make_node("Cast", ["x"], ["y"])  # 'to' is required
    _refused(_model([cast], [("x", F32, [2])], [("y", F32, [2])]), "required attribute 'to' is missing")


# -- inputs and outputs against the schema ---------------------------------------------------------------
def test_a_node_with_the_wrong_number_of_inputs_or_outputs_is_refused():
    for node, why in [
        (helper.make_node("ReduceL1", [], ["y"]), "takes 1 to 2 inputs (got 0)"),
        (helper.make_node("Relu", ["x", "x"], ["y"]), "takes 1 inputs (got 2)"),
        (helper.make_node("Relu", ["x"], []), "takes 1 outputs (got 0)"),
        (helper.make_node("EyeLike", [""], ["y"]), "input 0 (input) is required, but its name is empty"),
        (helper.make_node("Add", ["x", "x"], [""]), "output 0 (C) is required, but its name is empty"),
    ]:
        graph_out = [("y", F32, None)] if "y" in node.output else [("x", F32, None)]
        _refused(_model([node], [("x", F32, [2, 2])], graph_out), why)


def test_an_operator_the_declared_opset_does_not_have_is_refused():
    model = _unary("Gelu")  # Gelu is from opset 20; the model imports 18
    _refused(model, "Gelu is not an operator of opset 18 of the ONNX domain (it was added in opset 20)")


@pytest.mark.parametrize(
    "versions, why",
    [
        ([10**6], "imports opset 1000000 of the ONNX domain; the onnx package here knows opsets 1 to"),
        ([0], "imports opset 0 of the ONNX domain"),
        ([-3], "imports opset -3"),
        ([], "imports no opset of the ONNX domain"),
        ([7, 18], "imports opsets [7, 18] of the ONNX domain"),
    ],
)
def test_an_opset_the_import_cannot_know_is_refused(versions, why):
    model = _unary()
    del model.opset_import[:]
    model.opset_import.extend(helper.make_opsetid("", v) for v in versions)
    _refused(model, why)


# -- tensors whose data do not match their dims --------------------------------------------------------
def _with_weight(tensor):
    """y = x + w, the weight ``tensor`` (float32 [4] when well formed)."""
    return _model(
        [helper.make_node("Add", ["x", "w"], ["y"])], [("x", F32, [4])], [("y", F32, [4])], [tensor]
    )


def _weight(**fields):
    tensor = TensorProto(name="w", data_type=F32, dims=[4])
    for key, value in fields.items():
        if key in ("dims", "float_data", "int64_data"):
            getattr(tensor, key)[:] = value
        else:
            setattr(tensor, key, value)
    return tensor


@pytest.mark.parametrize(
    "fields, why",
    [
        ({"raw_data": b"\0" * 7}, "declares dims [4] (4 elements) but holds 7 bytes of data, not 16"),
        ({"float_data": [1.0, 2.0, 3.0]}, "holds 3 values in float_data, not 4"),
        ({"dims": [2**40]}, "declares dims [1099511627776] (1099511627776 elements) but holds 0 values"),
        ({"dims": [-4], "raw_data": b"\0" * 16}, "has a negative dim ([-4])"),
        ({"data_type": 0, "raw_data": b"\0" * 16}, "has element type 0, which is no ONNX type"),
        ({"data_type": 99, "raw_data": b"\0" * 16}, "has element type 99"),
        ({"raw_data": b"\0" * 16, "float_data": [1.0] * 4}, "holds its data twice (raw_data and float_data)"),
        ({"int64_data": [1, 2, 3, 4]}, "holds its data in int64_data, not float_data"),
    ],
)
def test_an_initializer_whose_data_does_not_match_its_dims_is_refused_before_it_is_read(fields, why):
    error = _refused(_with_weight(_weight(**fields)), "malformed", "initializer node 'w'", why)
    assert error.unsupported == [{"op_type": "initializer", "node": "w", "why": error.unsupported[0]["why"]}]


def test_packed_and_string_tensors_are_counted_by_their_own_rules():
    int4 = TensorProto(name="w", data_type=TensorProto.INT4, dims=[5], raw_data=b"\x12\x34\x05")  # 3 bytes
    assert check._tensor_problem(onnx, int4) is None
    int4.raw_data = b"\x12\x34"
    assert "holds 2 bytes of data, not 3" in check._tensor_problem(onnx, int4)
    text = TensorProto(name="s", data_type=TensorProto.STRING, dims=[2], string_data=[b"a", b"\xff"])
    assert "holds a string that is not UTF-8" in check._tensor_problem(onnx, text)
    segment = _weight(raw_data=b"\0" * 16)
    segment.segment.begin, segment.segment.end = 0, 2**40
    _refused(_with_weight(segment), "is a segment of a tensor split over several TensorProtos")


def test_external_data_of_an_in_memory_model_is_never_read_from_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "w.bin").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    monkeypatch.chdir(tmp_path)  # onnx's to_array would read ./w.bin from here
    for location in ["w.bin", "/etc/hostname", "../../etc/hostname"]:
        tensor = _weight(data_location=TensorProto.EXTERNAL)
        entry = tensor.external_data.add()
        entry.key, entry.value = "location", location
        _refused(
            _with_weight(tensor), f"keeps its data in an external file ({location!r}) that was not loaded"
        )


@pytest.mark.parametrize(
    "entries, files, why",
    [
        ({"location": "/etc/hostname"}, {}, "should be a relative path"),
        ({"location": "../secret.bin"}, {}, "points outside the directory"),
        ({"location": "missing.bin"}, {}, "is not regular file"),
        ({"location": "w.bin", "offset": str(2**40)}, {"w.bin": b"\0" * 16}, "exceeds file size"),
        ({"location": "w.bin"}, {"w.bin": b"\0" * 3}, "holds 3 bytes of data, not 16"),
    ],
)
def test_external_data_of_a_model_file_is_read_only_from_beside_it(tmp_path, entries, files, why):
    (tmp_path / "secret.bin").write_bytes(b"\1" * 16)
    folder = tmp_path / "model"
    folder.mkdir()
    for name, content in files.items():
        (folder / name).write_bytes(content)
    tensor = _weight(data_location=TensorProto.EXTERNAL)
    for key, value in entries.items():
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    (folder / "m.onnx").write_bytes(_with_weight(tensor).SerializeToString())
    _refused(str(folder / "m.onnx"), why)


def test_a_sparse_initializer_is_refused_not_ignored():
    model = _unary()
    values = helper.make_tensor("s", F32, [1], [1.0])
    indices = helper.make_tensor("i", TensorProto.INT64, [1], [0])
    model.graph.sparse_initializer.append(helper.make_sparse_tensor(values, indices, [4]))
    _refused(model, "initializer node 's': a sparse initializer is not supported")


# -- Constant nodes --------------------------------------------------------------------------------------
def test_a_constant_with_no_value_two_values_or_bad_data_is_refused():
    def with_constant(**attrs):
        const = helper.make_node("Constant", [], ["c"], **attrs)
        add = helper.make_node("Add", ["x", "c"], ["y"])
        return _model([const, add], [("x", F32, [2])], [("y", F32, [2])])

    _refused(with_constant(), "a Constant has exactly one value attribute (got none)")
    _refused(with_constant(value_int=3, value_float=2.0), "exactly one value attribute (got value_f")
    bad = TensorProto(name="v", data_type=F32, dims=[2**40])
    _refused(with_constant(value=bad), "attribute 'value' holds a tensor that declares dims [1099511627776]")


def test_a_float_constant_where_the_spec_wants_integers_is_refused():
    shape = numpy_helper.from_array(np.array([np.nan, 3.0], dtype=np.float32), "shape")
    model = _model(
        [helper.make_node("Reshape", ["x", "shape"], ["y"])],
        [("x", F32, [2, 3])],
        [("y", F32, None)],
        [shape],
    )
    _refused(model, "input 1 (the new shape, 'shape') must be integers (got float32)")


def test_a_fold_whose_output_size_cannot_be_computed_is_refused_with_the_reason():
    start = numpy_helper.from_array(np.array(["s"], dtype=object), "start")
    limit = numpy_helper.from_array(np.array(5, dtype=np.int64), "limit")
    delta = numpy_helper.from_array(np.array(1, dtype=np.int64), "delta")
    model = _model(
        [
            helper.make_node("Range", ["start", "limit", "delta"], ["r"]),
            helper.make_node("Add", ["x", "r"], ["y"]),
        ],
        [("x", TensorProto.INT64, [5])],
        [("y", TensorProto.INT64, [5])],
        [start, limit, delta],
    )
    _refused(model, "Range's output size cannot be computed from these constants")


# -- wiring ----------------------------------------------------------------------------------------------
def test_a_graph_that_is_not_single_assignment_or_not_sorted_is_refused():
    relu = helper.make_node("Relu", ["x"], ["a"])
    undefined = _model([helper.make_node("Add", ["x", "ghost"], ["y"])], [("x", F32, [2])], [("y", F32, [2])])
    _refused(undefined, "input 'ghost' is no graph input, initializer or node output")
    cycle = _model(
        [
            helper.make_node("Relu", ["b"], ["a"], name="first"),
            helper.make_node("Relu", ["a"], ["b"], name="second"),
        ],
        [("x", F32, [2])],
        [("b", F32, [2])],
    )
    _refused(
        cycle, "input 'b' is made by a later node ('second'): the nodes are out of order or form a cycle"
    )
    twice = _model([relu, helper.make_node("Neg", ["x"], ["a"])], [("x", F32, [2])], [("a", F32, [2])])
    _refused(twice, "output 'a' is already made by node '#0'; each tensor is made once")
    overwrite = _model([helper.make_node("Relu", ["x"], ["x"])], [("x", F32, [2])], [("x", F32, [2])])
    _refused(overwrite, "output 'x' is already a graph input")
    ghost_output = _model([relu], [("x", F32, [2])], [("a", F32, [2]), ("ghost", F32, [2])])
    _refused(ghost_output, "output node 'ghost': no node, graph input or initializer makes it")


def test_a_declared_negative_dim_is_refused():
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [("x", F32, [2, -5])], [("y", F32, None)])
    _refused(model, "input node 'x': dim 1 is -5; a dim is a size (0 or more) or a name (dim_param)")


def test_subgraphs_nested_past_the_bound_are_refused_without_recursing():
    # protobuf's parser stops a file near 30 levels; a ModelProto built in memory can nest any depth.
    depth = 3 * check.MAX_NESTING
    model = _unary()
    cond = helper.make_tensor("cond", TensorProto.BOOL, [], [True])
    model.graph.initializer.append(cond)
    graph = model.graph
    for _ in range(depth):
        node = graph.node.add(op_type="If", input=["cond"], output=[f"o{len(graph.node)}"])
        attr = node.attribute.add(name="then_branch", type=AttributeProto.GRAPH)
        node.attribute.add(name="else_branch", type=AttributeProto.GRAPH).g.name = "empty"
        graph = attr.g
    _refused(model, f"nest more than {check.MAX_NESTING} deep")


# -- corrupt files -----------------------------------------------------------------------------------------
def test_a_name_that_is_not_utf8_in_a_corrupt_file_is_refused(tmp_path):
    data = _unary().SerializeToString().replace(b"hostile", b"host\xffle")  # the graph's name
    (tmp_path / "m.onnx").write_bytes(data)
    _refused(
        str(tmp_path / "m.onnx"), "the ONNX model's model.graph.name is not UTF-8 text: the file is corrupt"
    )


def test_truncated_flipped_and_random_files_are_refused(tmp_path):
    data = om.mlp_block()[0].SerializeToString()
    rng = np.random.default_rng(0)
    variants = [b"", b"\0", rng.bytes(64), data[: len(data) // 2], data[:7], data + rng.bytes(9)]
    for _ in range(24):
        flipped = bytearray(data)
        flipped[int(rng.integers(len(data)))] ^= 1 << int(rng.integers(8))
        variants.append(bytes(flipped))
    for k, variant in enumerate(variants):
        path = tmp_path / f"v{k}.onnx"
        path.write_bytes(variant)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                pl.onnx.import_model(str(path))
        except pl.PipeLinkError as e:
            assert e.code.name == "PIPELINK_ERR_INVALID_ARGUMENT", e
    _refused(str(tmp_path / "v0.onnx"), "the ONNX model's graph has no outputs, so it computes nothing")


def test_the_cli_refuses_a_hostile_file_on_one_line_without_a_traceback(tmp_path, capsys):
    node = helper.make_node("Concat", ["x", "x"], ["y"])
    _set_attr(node, "axis", type=7, ints=[0, 1])
    onnx.save(_model([node], [("x", F32, [2])], [("y", F32, None)]), tmp_path / "bad.onnx")
    assert main(["import", str(tmp_path / "bad.onnx"), "-o", str(tmp_path / "out")]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("error[PIPELINK_ERR_INVALID_ARGUMENT]") and "malformed" in captured.err
    assert "Traceback" not in captured.err + captured.out
    (tmp_path / "cut.onnx").write_bytes((tmp_path / "bad.onnx").read_bytes()[:20])
    assert main(["import", str(tmp_path / "cut.onnx"), "-o", str(tmp_path / "out")]) == 2
    assert "Traceback" not in capsys.readouterr().err


# -- converters' bounds on values of the right type ------------------------------------------------------
def test_window_attributes_of_the_wrong_length_are_refused():
    w = numpy_helper.from_array(np.ones((2, 2, 3, 3), np.float32), "w")
    convt = _model(
        [helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2, 2], auto_pad="SAME_UPPER")],
        [("x", F32, [1, 2, 4, 4])],
        [("y", F32, None)],
        [w],
    )
    _refused(convt, "attribute strides=[2, 2, 2] must give the 2 spatial dims")
    pool = _model(
        [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3], pads=[1, 1, 1, 1])],
        [("x", F32, [1, 2, 8])],
        [("y", F32, None)],
    )
    _refused(pool, "attribute pads=[1, 1, 1, 1] does not fit a 1-d window")


# -- constant tables the lowerings build from declared dims ----------------------------------------------
BIG = 2**40
HUGE = "more than the 2.0 GiB of bound weights a plan holds (MAX_CONSTANT_BYTES)"  # the bound, named


def _attention(q, kv, *, mask=None, past=None, nonpad=False, nodes=(), inits=(), opset=23, **attrs):
    """One Attention node named 'the_node' over 4-d Q ``[1, 2, *q]`` and K, V ``[1, 2, *kv]``; ``mask``:
    a bool attn_mask graph input of that shape (``"unranked"``: no shape) or the name a node of ``nodes``
    makes; ``past``: past_key/past_value ``[1, 2, past, 8]``; ``nonpad``: an int64 nonpad_kv_seqlen."""
    inputs = [("q", F32, [1, 2, *q]), ("k", F32, [1, 2, *kv]), ("v", F32, [1, 2, *kv])]
    names = ["q", "k", "v"]
    if isinstance(mask, list) or mask == "unranked":
        inputs.append(("m", TensorProto.BOOL, None if mask == "unranked" else mask))
        mask = "m"
    names.append(mask or "")
    if past is not None:
        inputs += [("pk", F32, [1, 2, past, 8]), ("pv", F32, [1, 2, past, 8])]
    names += ["pk", "pv"] if past is not None else ["", ""]
    if nonpad:
        inputs.append(("n", TensorProto.INT64, [1]))
    names += ["n"] if nonpad else []
    while not names[-1]:
        names.pop()
    node = helper.make_node("Attention", names, ["y"], name="the_node", **attrs)
    return _model([*nodes, node], inputs, [("y", F32, None)], inits, opset=opset, ir=10)


def _refused_node(model, op, *fragments):
    error = _refused(model, f"{op} node 'the_node'", *fragments)
    assert [entry["op_type"] for entry in error.unsupported] == [op], error.unsupported
    return error


def test_an_attn_mask_of_unknown_rank_unknown_dims_or_a_negative_dim_is_refused():
    # An unknown rank raised a TypeError (``*shape`` of None); a negative dim (onnx infers one for a Pad
    # that crops more than the axis holds) was padded by more keys than there are.
    _refused_node(
        _attention([4, 8], [6, 8], mask="unranked"),
        "Attention",
        "attn_mask's last dim (?) must be the keys' 6",
        "got a shape of unknown rank",
    )
    _refused_node(_attention([4, 8], [6, 8], mask=[None, None]), "Attention", "got [?, ?]")
    crop = helper.make_node("Pad", ["m0", "pads"], ["m"])
    pads = numpy_helper.from_array(np.array([0, 0, 0, -5], np.int64), "pads")
    model = _attention([4, 8], [6, 8], mask="m", nodes=[crop], inits=[pads])
    model.graph.input.append(helper.make_tensor_value_info("m0", TensorProto.BOOL, [4, 3]))
    _refused(model, "Attention node 'the_node': attn_mask's shape [4, -2] has a negative dim")


@pytest.mark.parametrize(
    "kwargs, fragments",
    [
        (  # the bottom-right causal frontier of a cache
            {"q": [BIG, 8], "kv": [BIG, 8], "past": BIG, "is_causal": 1},
            ["[S, T] mask of is_causal", f"table of [{BIG}, {2 * BIG}] bool"],
        ),
        (  # a sliding window
            {"q": [BIG, 8], "kv": [BIG, 8], "left_window_size": 3, "opset": 25},
            ["sliding window", f"table of [{BIG}, {BIG}] bool"],
        ),
        (  # the window's additive form, for the explicit lowering: bounded in Q's dtype, not as bool
            {"q": [BIG, 8], "kv": [BIG, 8], "left_window_size": 3, "softcap": 30.0, "opset": 25},
            [f"table of [{BIG}, {BIG}] float32"],
        ),
        (  # nonpad_kv_seqlen alone: one row of key bounds for every query
            {"q": [BIG, 8], "kv": [BIG, 8], "nonpad": True, "opset": 24},
            ["nonpad_kv_seqlen's key bounds", f"table of [1, {BIG}] int64"],
        ),
        (  # a short attn_mask padded to the keys
            {"q": [4, 8], "kv": [6, 8], "mask": [BIG, 4, 3]},
            ["the padding of attn_mask", f"table of [{BIG}, 4, 3] bool: 12.0 TiB ({BIG * 12} bytes)"],
        ),
    ],
)
def test_an_attention_mask_table_past_the_bound_is_refused_naming_its_size(kwargs, fragments):
    # Each was built with NumPy at import from the declared lengths: a MemoryError of terabytes.
    kwargs = dict(kwargs)
    q, kv = kwargs.pop("q"), kwargs.pop("kv")
    _refused_node(_attention(q, kv, **kwargs), "Attention", *fragments, HUGE)


@pytest.mark.parametrize(
    "shape, kernel, fragments",
    [
        ([1, 1, 2, 2**62], [1, 2], [f"has {2**63} elements, more than int64 counts"]),  # overflowed
        ([1, 1, 1, 2**62], [1, 2], ["tap index", f"table of [1, {2**62 - 1}, 2] int64"]),
        ([1, 1, 2**20, 2**20], [2, 2], [f"table of [{2**20 - 1}, {2**20 - 1}, 4] int64: 32.0 TiB"]),
        (
            [2**31, 2**31, 1, 1],
            [1, 1],
            ["plane offsets (one per N, C)", f"table of [{2**31}, {2**31}] int64"],
        ),
    ],
)
def test_maxpool_indices_tables_past_the_bound_are_refused(shape, kernel, fragments):
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], name="the_node", kernel_shape=kernel)
    model = _model([node], [("x", F32, shape)], [("y", F32, None), ("i", TensorProto.INT64, None)])
    _refused_node(model, "MaxPool", *fragments)


def test_tensor_scatter_row_offsets_past_the_bound_are_refused():
    node = helper.make_node("TensorScatter", ["p", "u", "w"], ["y"], name="the_node", axis=1)
    model = _model(
        [node],
        [("p", F32, [1, BIG, 4]), ("u", F32, [1, BIG, 4]), ("w", TensorProto.INT64, [1])],
        [("y", F32, None)],
        opset=24,
        ir=10,
    )
    _refused_node(model, "TensorScatter", "row offsets (one per update row)", f"table of [{BIG}] int64", HUGE)


def test_a_pad_block_and_a_reverse_sequence_permutation_past_the_bound_are_refused():
    pads = numpy_helper.from_array(np.array([0, 1, 0, 1], np.int64), "pads")
    pad = _model(
        [helper.make_node("Pad", ["x", "pads"], ["y"], name="the_node", mode="constant")],
        [("x", F32, [BIG, 2])],
        [("y", F32, None)],
        [pads],
    )
    _refused_node(pad, "Pad", "Pad's constant block", f"table of [{BIG}, 1] float32", HUGE)
    lens = numpy_helper.from_array(np.ones(2, np.int64), "lens")
    reverse = _model(
        [helper.make_node("ReverseSequence", ["x", "lens"], ["y"], name="the_node")],
        [("x", F32, [BIG, 2])],
        [("y", F32, None)],
        [lens],
    )
    _refused_node(reverse, "ReverseSequence", "row permutation", f"table of [{2 * BIG}] int64", HUGE)


# -- mutations -----------------------------------------------------------------------------------------------
_INTS = [-1, 0, 1, 3, -(2**31), 2**31, 2**40, -(2**40), 2**63 - 1, -(2**63)]
_FLOATS = [math.nan, math.inf, -math.inf, 0.0, -1.0, 1e38]


def _seeds() -> list:
    conv = _model(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], strides=[1, 1]),
            helper.make_node("Relu", ["c"], ["r"]),
            helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
            helper.make_node("Reshape", ["p", "shape"], ["f"]),
            helper.make_node("Softmax", ["f"], ["y"], axis=-1),
        ],
        [("x", F32, ["N", 2, 4, 4])],
        [("y", F32, ["N", 12])],
        [
            numpy_helper.from_array(np.full((3, 2, 3, 3), 0.1, np.float32), "w"),
            numpy_helper.from_array(np.array([-1, 12], np.int64), "shape"),
        ],
    )
    return [om.mlp_block()[0], om.causal_attention(t=4, d=8)[0], conv]


SEEDS = [model.SerializeToString() for model in _seeds()]


@st.composite
def _mutated(draw) -> tuple[bytes, str]:
    model = onnx.ModelProto()
    model.ParseFromString(draw(st.sampled_from(SEEDS)))
    graph, done = model.graph, []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["attr", "dim", "elem", "init", "names", "opset", "arity", "bytes"]))
        node = graph.node[draw(st.integers(0, len(graph.node) - 1))]
        if kind == "attr" and node.attribute:
            attr = node.attribute[draw(st.integers(0, len(node.attribute) - 1))]
            value = draw(
                st.one_of(
                    st.sampled_from(_INTS),
                    st.sampled_from(_FLOATS),
                    st.lists(st.sampled_from(_INTS), max_size=5),
                    st.sampled_from([b"", b"NOTSET", b"\xff"]),
                )
            )
            node.attribute.remove(attr)
            if not (isinstance(value, list) and not value):
                node.attribute.append(helper.make_attribute(attr.name, value))
        elif kind == "dim":
            info = draw(st.sampled_from([*graph.input, *graph.output]))
            dims = info.type.tensor_type.shape.dim
            if len(dims):
                dim = dims[draw(st.integers(0, len(dims) - 1))]
                dim.Clear()
                choice = draw(st.sampled_from([0, -1, 2**40, "sym", None]))
                if isinstance(choice, int):
                    dim.dim_value = choice
                elif choice:
                    dim.dim_param = choice
        elif kind == "elem":
            info = draw(st.sampled_from([*graph.input, *graph.output]))
            info.type.tensor_type.elem_type = draw(st.integers(0, 26))
        elif kind == "init" and graph.initializer:
            tensor = graph.initializer[draw(st.integers(0, len(graph.initializer) - 1))]
            how = draw(st.sampled_from(["cut", "dims", "type", "values"]))
            if how == "cut":
                tensor.raw_data = tensor.raw_data[: len(tensor.raw_data) // 2]
            elif how == "dims":
                tensor.dims.append(draw(st.sampled_from([0, 2, 2**40])))
            elif how == "type":
                tensor.data_type = draw(st.integers(0, 26))
            elif tensor.data_type == TensorProto.INT64:
                count = len(numpy_helper.to_array(tensor).reshape(-1))
                values = draw(st.lists(st.sampled_from(_INTS), min_size=count, max_size=count))
                tensor.CopyFrom(numpy_helper.from_array(np.array(values, np.int64), tensor.name))
        elif kind == "names":
            slot = draw(st.sampled_from(["in", "out"]))
            names = node.input if slot == "in" else node.output
            if len(names):
                names[draw(st.integers(0, len(names) - 1))] = draw(st.sampled_from(["", "ghost", "x", "y"]))
        elif kind == "opset":
            model.opset_import[0].version = draw(st.sampled_from([1, 7, 13, 10**6]))
        elif kind == "arity":
            if draw(st.booleans()):
                del node.input[:]
            else:
                node.output.append("extra")
        elif kind == "bytes":
            data = bytearray(model.SerializeToString())
            for _ in range(draw(st.integers(1, 4))):
                data[draw(st.integers(0, len(data) - 1))] ^= 1 << draw(st.integers(0, 7))
            return bytes(data), " ".join([*done, kind])
        done.append(kind)
    return model.SerializeToString(), " ".join(done)


def _feeds(pipe, model: onnx.ModelProto, rng) -> dict | None:
    feeds = {}
    for info in model.graph.input:
        if info.name not in pipe.inputs:
            continue
        shape = [d.dim_value if d.HasField("dim_value") else 2 for d in info.type.tensor_type.shape.dim]
        if math.prod(shape) > 1 << 16:
            return None
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(info.type.tensor_type.elem_type))
        feeds[info.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(_mutated())
def test_mutated_models_import_and_run_or_are_refused_with_a_pipelink_error(tmp_path_factory, case):
    data, _ = case
    path = tmp_path_factory.mktemp("m") / "m.onnx"
    path.write_bytes(data)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            pipe = pl.from_onnx(str(path), device="cpu")
        except pl.PipeLinkError as e:
            assert e.code.name.startswith("PIPELINK_ERR_"), e
            return
        with pipe:
            model = onnx.load(str(path))
            feeds = _feeds(pipe, model, np.random.default_rng(0))
            if feeds is None:
                return
            try:
                pipe.run(**feeds)
            except pl.PipeLinkError as e:  # a run-time refusal: the feeds' shapes are the model's
                assert e.code.name.startswith("PIPELINK_ERR_"), e
