"""ONNX LSTM, GRU and RNN imported (unrolled onto gemm, slice, split, activations and elementwise stages by
``pipelink/onnx/recurrent.py``), run on each device and compared with ONNX's ReferenceEvaluator; what the
reference ignores (explicit activations, clip) with a NumPy reference checked against it; a torch export;
and every refusal with its code and message."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import pipelink as pl  # noqa: E402
from pipelink.onnx import import_model  # noqa: E402
from tests.conftest import assert_close  # noqa: E402

F = np.float32
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
OUTPUTS = {"LSTM": ("Y", "Y_h", "Y_c"), "GRU": ("Y", "Y_h"), "RNN": ("Y", "Y_h")}
SEQ, BATCH, INPUT, HIDDEN = 5, 3, 4, 6


def _weights(rng, op, dirs, peepholes=False):
    g = GATES[op]
    w = {
        "W": (0.5 * rng.standard_normal((dirs, g * HIDDEN, INPUT))).astype(F),
        "R": (0.5 * rng.standard_normal((dirs, g * HIDDEN, HIDDEN))).astype(F),
        "B": (0.5 * rng.standard_normal((dirs, 2 * g * HIDDEN))).astype(F),
    }
    if peepholes:
        w["P"] = rng.standard_normal((dirs, 3 * HIDDEN)).astype(F)
    return w


def _model(op, feeds, inits, outputs, opset=21, x_shape=None, **attrs):
    """A one-node model: input names in the spec's order ("" for an absent one), ``outputs`` likewise."""
    order = ["X", "W", "R", "B", "sequence_lens", "initial_h"] + (["initial_c", "P"] if op == "LSTM" else [])
    present = set(feeds) | set(inits)
    names = [n if n in present else "" for n in order]
    while names and not names[-1]:
        names.pop()
    node = helper.make_node(op, names, list(outputs), name="cell", **attrs)
    shapes = {n: (x_shape if n == "X" and x_shape is not None else a.shape) for n, a in feeds.items()}
    graph = helper.make_graph(
        [node],
        op.lower(),
        [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, shapes[n]) for n in feeds],
        [helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, None) for o in outputs if o],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


# -- a NumPy reference with what ONNX's ReferenceEvaluator leaves out (activations, clip) ---------------
_ACT = {
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "tanh": np.tanh,
    "relu": lambda x: np.maximum(x, 0),
    "softsign": lambda x: x / (1 + np.abs(x)),
    "softplus": lambda x: np.log1p(np.exp(x)),
}


def _numpy_cell(op, feeds, inits, attrs):
    """The ONNX spec's recurrence in float64, with activations, clip (the inputs of f and g clipped) and
    sequence_lens (which ReferenceEvaluator ignores)."""
    layout, direction = attrs.get("layout", 0), attrs.get("direction", "forward")
    dirs = 2 if direction == "bidirectional" else 1
    per = {"LSTM": 3, "GRU": 2, "RNN": 1}[op]
    acts = attrs.get(
        "activations",
        {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}[op] * dirs,
    )
    clip = attrs.get("clip")

    def act(name, x):
        return _ACT[name.lower()](np.clip(x, -clip, clip) if clip is not None else x)

    x = feeds["X"].astype(np.float64)
    x = x.swapaxes(0, 1) if layout else x
    seq, batch = x.shape[:2]
    n, g = HIDDEN, GATES[op]
    state0 = {}
    for k in ("initial_h", "initial_c"):
        v = feeds.get(k)
        if v is None:
            state0[k] = np.zeros((dirs, batch, n))
        else:
            state0[k] = (v.swapaxes(0, 1) if layout else v).astype(np.float64)
    lens = inits.get("sequence_lens", feeds.get("sequence_lens"))
    lens = np.full(batch, seq) if lens is None else np.asarray(lens)
    ys, hs, cs = [], [], []
    for d in range(dirs):
        f, gg, hh = (acts[d * per : (d + 1) * per] + [None, None])[:3]
        w, r = inits["W"][d].astype(np.float64), inits["R"][d].astype(np.float64)
        b = inits.get("B", np.zeros((dirs, 2 * g * n), F))[d].astype(np.float64)
        wb, rb = b[: g * n], b[g * n :]
        p = inits.get("P", np.zeros((dirs, 3 * n), F))[d].astype(np.float64)
        h, c = state0["initial_h"][d], state0["initial_c"][d]
        steps = range(seq - 1, -1, -1) if (d == 1 or direction == "reverse") else range(seq)
        out = [None] * seq
        for t in steps:
            xt, h_was, c_was = x[t], h, c
            if op == "LSTM":
                gates = xt @ w.T + h @ r.T + wb + rb
                i, o, fg, cc = np.split(gates, 4, -1)
                i = act(f, i + p[:n] * c)
                fg = act(f, fg + p[2 * n :] * c)
                c = fg * c + i * act(gg, cc)
                o = act(f, o + p[n : 2 * n] * c)
                h = o * _ACT[hh.lower()](c)  # no clip before h, as onnxruntime
            elif op == "GRU":
                zr = xt @ w[: 2 * n].T + h @ r[: 2 * n].T + wb[: 2 * n] + rb[: 2 * n]
                z, rr = act(f, zr[:, :n]), act(f, zr[:, n:])
                if attrs.get("linear_before_reset", 0):
                    cand = xt @ w[2 * n :].T + rr * (h @ r[2 * n :].T + rb[2 * n :]) + wb[2 * n :]
                else:
                    cand = xt @ w[2 * n :].T + (rr * h) @ r[2 * n :].T + rb[2 * n :] + wb[2 * n :]
                cand = act(gg, cand)
                h = (1 - z) * cand + z * h
            else:
                h = act(f, xt @ w.T + h @ r.T + wb + rb)
            active = (lens > t)[:, None]  # rows past their length: state kept, zeros in Y
            out[t] = np.where(active, h, 0.0)
            h, c = np.where(active, h, h_was), np.where(active, c, c_was)
        ys.append(np.stack(out))
        hs.append(h)
        cs.append(c)
    y, y_h, y_c = np.stack(ys, 1), np.stack(hs), np.stack(cs)
    if layout:
        y, y_h, y_c = y.transpose(2, 0, 1, 3), y_h.swapaxes(0, 1), y_c.swapaxes(0, 1)
    return {"Y": y, "Y_h": y_h, "Y_c": y_c}


def _inputs(rng, op, dirs, layout, initial=False, peepholes=False):
    shape = (BATCH, SEQ, INPUT) if layout else (SEQ, BATCH, INPUT)
    feeds = {"X": rng.standard_normal(shape).astype(F)}
    state = (BATCH, dirs, HIDDEN) if layout else (dirs, BATCH, HIDDEN)
    if initial:
        feeds["initial_h"] = rng.standard_normal(state).astype(F)
        if op == "LSTM":
            feeds["initial_c"] = rng.standard_normal(state).astype(F)
    return feeds, _weights(rng, op, dirs, peepholes)


def _run_and_compare(op, feeds, inits, outputs, device, want=None, **attrs):
    model = _model(op, feeds, inits, outputs, **attrs)
    pipe = pl.from_onnx(model, device=device)
    got = pipe.run(feeds)
    present = [o for o in outputs if o]
    if want is None:
        want = dict(zip(present, ReferenceEvaluator(model).run(None, feeds), strict=True))
    for name in present:
        out = np.asarray(got[name].numpy())
        ref = np.asarray(want[name])
        assert out.shape == ref.shape, (name, out.shape, ref.shape)
        assert not np.isnan(out).any(), name
        assert_close(out, ref, "float32", f"{op} {name}")
    return pipe


CASES = [
    (op, direction, layout)
    for op in ("LSTM", "GRU", "RNN")
    for direction in ("forward", "reverse", "bidirectional")
    for layout in (0, 1)
]


@pytest.mark.parametrize(("op", "direction", "layout"), CASES)
def test_recurrent_matches_the_onnx_reference(op, direction, layout, device, rng):
    dirs = 2 if direction == "bidirectional" else 1
    feeds, inits = _inputs(rng, op, dirs, layout, initial=True)
    attrs = {"direction": direction, "hidden_size": HIDDEN, "layout": layout}
    _run_and_compare(op, feeds, inits, OUTPUTS[op], device, **attrs)


@pytest.mark.parametrize("linear_before_reset", [0, 1])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_gru_linear_before_reset(linear_before_reset, direction, device, rng):
    dirs = 2 if direction == "bidirectional" else 1
    for initial in (False, True):  # the zero state's first step skips the recurrent gemm
        feeds, inits = _inputs(rng, "GRU", dirs, 0, initial=initial)
        _run_and_compare(
            "GRU",
            feeds,
            inits,
            OUTPUTS["GRU"],
            device,
            direction=direction,
            hidden_size=HIDDEN,
            linear_before_reset=linear_before_reset,
        )


@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("initial", [False, True])
def test_lstm_peepholes(layout, initial, device, rng):
    feeds, inits = _inputs(rng, "LSTM", 2, layout, initial=initial, peepholes=True)
    _run_and_compare(
        "LSTM",
        feeds,
        inits,
        OUTPUTS["LSTM"],
        device,
        direction="bidirectional",
        layout=layout,
        hidden_size=HIDDEN,
    )


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_zero_initial_state_and_no_bias(op, device, rng):
    feeds, inits = _inputs(rng, op, 1, 0)
    del inits["B"]
    _run_and_compare(op, feeds, inits, OUTPUTS[op], device, hidden_size=HIDDEN)


def test_lstm_initial_c_without_initial_h(device, rng):
    feeds, inits = _inputs(rng, "LSTM", 1, 0, initial=True)
    del feeds["initial_h"]
    _run_and_compare("LSTM", feeds, inits, OUTPUTS["LSTM"], device, hidden_size=HIDDEN)


@pytest.mark.parametrize(
    ("op", "outputs"),
    [
        ("LSTM", ("Y", "", "")),
        ("LSTM", ("", "Y_h")),
        ("LSTM", ("", "", "Y_c")),
        ("GRU", ("", "Y_h")),
        ("RNN", ("Y",)),
    ],
)
def test_absent_outputs(op, outputs, device, rng):
    feeds, inits = _inputs(rng, op, 2, 0, initial=True)
    pipe = _run_and_compare(op, feeds, inits, outputs, device, direction="bidirectional")
    assert pipe.outputs == [o for o in outputs if o]


def test_the_numpy_reference_agrees_with_onnx(rng):
    """The NumPy cell below is what the activation and clip tests trust: it must agree with ONNX's
    ReferenceEvaluator where that one applies (default activations, no clip)."""
    for op in ("LSTM", "GRU", "RNN"):
        for layout in (0, 1):
            feeds, inits = _inputs(rng, op, 2, layout, initial=True, peepholes=op == "LSTM")
            attrs = {"direction": "bidirectional", "layout": layout}
            model = _model(op, feeds, inits, OUTPUTS[op], **attrs)
            want = _numpy_cell(op, feeds, inits, attrs)
            for name, ref in zip(OUTPUTS[op], ReferenceEvaluator(model).run(None, feeds), strict=True):
                np.testing.assert_allclose(ref, want[name], rtol=1e-5, atol=1e-5, err_msg=f"{op} {name}")


@pytest.mark.parametrize(
    ("op", "attrs"),
    [
        ("LSTM", {"activations": ["Relu", "Sigmoid", "Tanh", "Sigmoid", "Relu", "Relu"]}),
        ("LSTM", {"activations": ["sigmoid", "tanh", "tanh"] * 2, "clip": 0.5}),
        ("GRU", {"activations": ["Tanh", "Relu", "Sigmoid", "Sigmoid"], "linear_before_reset": 1}),
        ("GRU", {"activations": ["Sigmoid", "Relu"] * 2, "clip": 0.75}),
        ("RNN", {"activations": ["Relu", "Sigmoid"]}),
        ("RNN", {"activations": ["Softsign", "softplus"]}),
        ("GRU", {"activations": ["Softsign", "Softplus", "Sigmoid", "Softsign"]}),
        ("RNN", {"activations": ["Relu", "Relu"], "clip": 0.3}),
        ("RNN", {"clip": 0.4}),
    ],
)
def test_explicit_activations_and_clip(op, attrs, device, rng):
    feeds, inits = _inputs(rng, op, 2, 0, initial=True)
    attrs = {"direction": "bidirectional", **attrs}
    want = _numpy_cell(op, feeds, inits, attrs)
    _run_and_compare(op, feeds, inits, OUTPUTS[op], device, want=want, **attrs)


def test_sequence_lens_of_full_length_changes_nothing(device, rng):
    feeds, inits = _inputs(rng, "LSTM", 1, 0, initial=True)
    inits["sequence_lens"] = np.full(BATCH, SEQ, np.int32)
    want = _numpy_cell("LSTM", feeds, inits, {})
    _run_and_compare("LSTM", feeds, inits, OUTPUTS["LSTM"], device, want=want)


def test_symbolic_batch_and_one_gemm_per_step(device, rng):
    """batch is a symbol; the weights are transposed once at import; the stages: one projection gemm
    plus one recurrent gemm per step and direction (none on the zero state's first step)."""
    feeds, inits = _inputs(rng, "LSTM", 2, 0)
    model = _model(
        "LSTM", feeds, inits, OUTPUTS["LSTM"], x_shape=[SEQ, "batch", INPUT], direction="bidirectional"
    )
    config, weights = import_model(model)
    assert config["inputs"]["X"]["shape"] == [SEQ, "batch", INPUT]
    gemms = [s for s in config["pipeline"] if s["name"] == "gemm"]
    assert len(gemms) == 1 + 2 * (SEQ - 1)
    assert not {"transpose", "matmul"} & {s["name"] for s in config["pipeline"]}
    pipe = pl.load(config, device=device, weights=weights)
    for batch in (1, 4):
        x = rng.standard_normal((SEQ, batch, INPUT)).astype(F)
        want = ReferenceEvaluator(model).run(None, {"X": x})
        got = pipe.run({"X": x})
        for name, ref in zip(OUTPUTS["LSTM"], want, strict=True):
            assert_close(np.asarray(got[name].numpy()), ref, "float32", name)


def test_long_sequences_concat_in_a_tree(device, rng):
    """More steps than one concat takes (64): Y is joined in levels."""
    x = rng.standard_normal((70, 2, INPUT)).astype(F)
    inits = _weights(rng, "RNN", 1)
    inits = {k: v * 0.3 for k, v in inits.items()}
    _run_and_compare("RNN", {"X": x}, inits, OUTPUTS["RNN"], device, hidden_size=HIDDEN)


# -- torch export -------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_torch_export_two_layers_bidirectional(kind, device, tmp_path):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    module = getattr(torch.nn, kind)(input_size=INPUT, hidden_size=HIDDEN, num_layers=2, bidirectional=True)
    module.eval()
    x = torch.randn(SEQ, BATCH, INPUT)
    path = tmp_path / f"{kind}.onnx"
    torch.onnx.export(module, (x,), str(path), input_names=["x"], output_names=["y"], dynamo=False)
    with torch.no_grad():
        want = module(x)[0].numpy()
    model = onnx.load(str(path))
    assert {n.op_type for n in model.graph.node} & {kind}
    pipe = pl.from_onnx(model, device=device)
    got = np.asarray(pipe.run({"x": x.numpy()})["y"].numpy())
    assert got.shape == want.shape
    assert_close(got, want, "float32", kind)


# -- refusals -----------------------------------------------------------------------------------------
def _refused(op, feeds, inits, why, outputs=("Y",), **attrs):
    model = _model(op, feeds, inits, outputs, **attrs)
    with pytest.raises(pl.PipeLinkError, match=why) as info:
        import_model(model)
    assert info.value.code.name == "PIPELINK_ERR_INVALID_ARGUMENT"
    assert [u["node"] for u in info.value.context["unsupported"]] == ["cell"]
    assert info.value.context["unsupported"][0]["op_type"] == op


def test_refuses_computed_weights(rng):
    feeds, inits = _inputs(rng, "LSTM", 1, 0)
    feeds["R"] = inits.pop("R")
    _refused("LSTM", feeds, inits, r"input 2 \(R, 'R'\) must be a constant")
    feeds, inits = _inputs(rng, "GRU", 1, 0)
    feeds["B"] = inits.pop("B")
    _refused("GRU", feeds, inits, r"input 3 \(B, 'B'\) must be a constant")
    feeds, inits = _inputs(rng, "LSTM", 1, 0, peepholes=True)
    feeds["P"] = inits.pop("P")
    _refused("LSTM", feeds, inits, r"input 7 \(P, 'P'\) must be a constant")


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize(("direction", "layout"), [("forward", 0), ("reverse", 1), ("bidirectional", 0)])
def test_variable_sequence_lengths_mask_the_steps(op, direction, layout, device, rng):
    """Rows shorter than seq_length (one of length 0) keep their state past their end, give zeros in Y,
    and a reverse direction starts at each row's own last step."""
    dirs = 2 if direction == "bidirectional" else 1
    feeds, inits = _inputs(rng, op, dirs, layout, initial=True, peepholes=op == "LSTM")
    inits["sequence_lens"] = np.array([SEQ - 2, SEQ, 0], np.int32)
    attrs = {"direction": direction, "hidden_size": HIDDEN, "layout": layout}
    want = _numpy_cell(op, feeds, inits, attrs)
    _run_and_compare(op, feeds, inits, OUTPUTS[op], device, want=want, **attrs)


def test_the_numpy_cell_with_sequence_lens_agrees_with_onnxruntime(rng):
    """The oracle above against onnxruntime (which implements sequence_lens; ReferenceEvaluator does not)."""
    ort = pytest.importorskip("onnxruntime")
    for op in ("LSTM", "GRU"):
        feeds, inits = _inputs(rng, op, 2, 0, initial=True)
        inits["sequence_lens"] = np.array([2, SEQ, 1], np.int32)
        attrs = {"direction": "bidirectional", "hidden_size": HIDDEN}
        model = _model(op, feeds, inits, OUTPUTS[op], **attrs)
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        got = dict(zip(OUTPUTS[op], session.run(None, feeds), strict=True))
        want = _numpy_cell(op, feeds, inits, attrs)
        for name in OUTPUTS[op]:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-5, err_msg=f"{op} {name}")


def test_refuses_bad_or_computed_sequence_lengths(rng):
    feeds, inits = _inputs(rng, "RNN", 1, 0)
    inits["sequence_lens"] = np.array([SEQ, SEQ + 1, SEQ], np.int32)
    _refused("RNN", feeds, inits, r"sequence_lens \[5, 6, 5\] must lie in \[0, 5\]")
    inits["sequence_lens"] = np.array([SEQ, SEQ], np.int32)
    _refused("RNN", feeds, inits, r"sequence_lens has 2 entries for a batch of 3")
    inits["sequence_lens"] = np.full(BATCH, SEQ, np.float32)
    _refused("RNN", feeds, inits, r"sequence_lens must be a 1-d int32 tensor \(got float32")
    # A computed sequence_lens (a graph input), even of the full length: its value is not known at import.
    feeds["sequence_lens"] = np.full(BATCH, SEQ, np.int32)
    node = helper.make_node(
        "RNN", ["X", "W", "R", "B", "sequence_lens"], ["Y"], name="cell", hidden_size=HIDDEN
    )
    graph = helper.make_graph(
        [node],
        "rnn",
        [
            helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, feeds["X"].shape),
            helper.make_tensor_value_info("sequence_lens", onnx.TensorProto.INT32, [BATCH]),
        ],
        [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items() if k != "sequence_lens"],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    with pytest.raises(pl.PipeLinkError, match="sequence_lens, 'sequence_lens'.* must be a constant") as info:
        import_model(model)
    assert info.value.code.name == "PIPELINK_ERR_INVALID_ARGUMENT"


@pytest.mark.parametrize(
    ("op", "attrs", "why"),
    [
        (
            "RNN",
            {"activations": ["LeakyRelu"], "activation_alpha": [0.1]},
            "attribute activation_alpha is not",
        ),
        ("RNN", {"activations": ["Affine"], "activation_beta": [0.5]}, "attribute activation_beta is not"),
        ("GRU", {"activations": ["Sigmoid", "HardSigmoid"]}, r"activations: 'HardSigmoid' is not supported"),
        (
            "LSTM",
            {"activations": ["Sigmoid", "Tanh"]},
            "activations has 2 names; LSTM with direction 'forward'",
        ),
        ("LSTM", {"input_forget": 1}, "input_forget=1"),
        ("RNN", {"clip": 0.0}, "clip=0.0; the threshold must be positive"),
        ("RNN", {"hidden_size": HIDDEN + 1}, f"hidden_size={HIDDEN + 1} but R gives {HIDDEN}"),
    ],
)
def test_refuses_attributes_it_cannot_build(op, attrs, why, rng):
    feeds, inits = _inputs(rng, op, 1, 0)
    _refused(op, feeds, inits, why, **attrs)


def test_refuses_an_unknown_sequence_length(rng):
    feeds, inits = _inputs(rng, "GRU", 1, 0)
    _refused("GRU", feeds, inits, "seq_length .* known at import", x_shape=["seq", BATCH, INPUT])
    feeds, inits = _inputs(rng, "LSTM", 1, 1)
    _refused("LSTM", feeds, inits, r"seq_length \(dim 1, layout 1\)", x_shape=[BATCH, "seq", INPUT], layout=1)


def test_refuses_weights_that_do_not_fit_the_direction(rng):
    feeds, inits = _inputs(rng, "RNN", 1, 0)
    _refused("RNN", feeds, inits, "do not fit direction 'bidirectional'", direction="bidirectional")


def test_a_sequence_too_long_to_unroll_is_refused_at_import():
    """A hostile seq_length (10**5 steps) would unroll into half a million stages: refused by its size,
    before any stage is made. Wrong if the import grinds through it or the message does not say why."""
    from pipelink.onnx.recurrent import MAX_STEPS

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [MAX_STEPS + 1, 1, 3])
    weights = [
        numpy_helper.from_array(np.ones((1, 2, 3), np.float32), "W"),
        numpy_helper.from_array(np.ones((1, 2, 2), np.float32), "R"),
    ]
    node = helper.make_node("RNN", ["x", "W", "R"], ["y"], hidden_size=2, name="long")
    graph = helper.make_graph(
        [node], "g", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], weights
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    with pytest.raises(
        pl.PipeLinkError, match=f"seq_length {MAX_STEPS + 1}.*at most {MAX_STEPS} steps"
    ) as info:
        import_model(model)
    assert info.value.code.name == "PIPELINK_ERR_INVALID_ARGUMENT"
