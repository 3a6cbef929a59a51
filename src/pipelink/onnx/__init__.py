"""ONNX import: an ONNX model becomes an ordinary PipeLink config plus its weights (bound constants).

``import_model`` converts: ``fold.py`` first evaluates what the model computes from constants and shapes
(a dynamic batch's Reshape targets), ``fuse.py`` then rewrites the chains one PipeLink stage computes (a
GELU or a LayerNorm written out in elementwise nodes, a MatMul and its bias, a gemm and its activation or
residual, attention's scaled and masked softmax, heads split off by Split, Reshape and Transpose as
strided copies), then ``convert.CONVERTERS`` (the one table of ONNX op types PipeLink imports) turns each node
into a stage; ``from_onnx`` loads the result. The ``onnx`` package is an optional extra (``pip install
'pipelink[onnx]'``), imported only when a model is imported, so ``import pipelink`` works without it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ..dtypes import get_dtype
from ..errors import HardwareUnsupportedError, InvalidArgumentError, PipeLinkError
from ..modules.registry import registry
from ..ops import register_builtins
from ..pipeline import Pipeline, load
from .check import check_model, read_tensor
from .control import lower_control
from .convert import CONVERTERS, Graph, Node, Rejected, Unsupported, convert, dim_symbol
from .einsum import dots_are_ellipses
from .fold import MAX_FOLD_ELEMENTS, fold, resolved_target
from .fuse import fuse as fuse_nodes
from .infer import infer_shapes
from .runtime_dims import broadcast_shape

__all__ = ["import_model", "from_onnx", "write_import", "CONVERTERS", "CONFIG_NAME", "WEIGHTS_NAME"]

CONFIG_NAME = "pipeline.json"
WEIGHTS_NAME = "weights.npz"


def _onnx():
    try:
        import onnx
    except ImportError as e:
        raise HardwareUnsupportedError(
            f"importing ONNX models needs the onnx package ({e}); install it with: "
            "pip install 'pipelink[onnx]'"
        ) from None
    return onnx


def _read_model(onnx, model_or_path: Any):
    if isinstance(model_or_path, onnx.ModelProto):
        return model_or_path
    if not isinstance(model_or_path, str | Path):
        raise InvalidArgumentError(
            f"import_model takes an onnx.ModelProto or the path of an .onnx file, not "
            f"{type(model_or_path).__name__}"
        )
    path = Path(model_or_path).expanduser()
    if not path.is_file():
        raise InvalidArgumentError(f"ONNX model {str(path)!r} not found; give the path of an .onnx file")
    try:
        return onnx.load(str(path))
    except Exception as e:  # the protobuf parser's DecodeError, a missing external-data file, ...
        raise InvalidArgumentError(f"{str(path)!r} is not a readable ONNX model: {e}") from None


def _initializers(onnx, graph) -> dict[str, np.ndarray]:
    """The graph's initializers as arrays (check.py has checked each one's data against its dims)."""
    arrays = {}
    for tensor in graph.initializer:
        try:
            arrays[tensor.name] = read_tensor(onnx, tensor)
        except Unsupported as e:
            raise InvalidArgumentError(f"the ONNX model's initializer {tensor.name!r} {e}") from None
    return arrays


def _known_dtypes(onnx, graph) -> dict[str, str]:
    """ONNX tensor name -> PipeLink dtype name, for every typed value shape inference knows."""
    out: dict[str, str] = {}
    for info in [*graph.input, *graph.value_info, *graph.output]:
        elem = info.type.tensor_type.elem_type
        if elem:
            try:
                out[info.name] = get_dtype(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem))).name
            except (KeyError, TypeError, ValueError, PipeLinkError):
                continue
    return out


def _known_shapes(graph) -> dict[str, tuple]:
    """ONNX tensor name -> shape (ints, ``dim_param`` names, None for an unknown dim), for every value
    shape inference gave a shape."""
    out: dict[str, tuple] = {}
    for info in [*graph.input, *graph.value_info, *graph.output]:
        ttype = info.type.tensor_type
        if info.type.HasField("tensor_type") and ttype.HasField("shape"):
            out[info.name] = tuple(
                int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or None)
                for d in ttype.shape.dim
            )
    return out


def _constant_value(onnx, node) -> np.ndarray:
    """The value of a Constant node (any of its value attributes)."""
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    if len(attrs) != 1:  # the spec: exactly one
        raise Unsupported(f"a Constant has exactly one value attribute (got {', '.join(attrs) or 'none'})")
    if "value" in attrs:
        return read_tensor(onnx, attrs["value"])
    for name, dtype in (
        ("value_float", np.float32),
        ("value_floats", np.float32),
        ("value_int", np.int64),
        ("value_ints", np.int64),
    ):
        if name in attrs:
            return np.asarray(attrs[name], dtype=dtype)
    raise Unsupported(
        f"a Constant with {', '.join(attrs) or 'no value'} is not supported (only numeric values)"
    )


# Rounds of shape inference after folding: each runs only while a shape is still unknown and the last
# one taught something (a chain of Reshapes whose targets the model computes takes one round each).
_REFOLDS = 64


def _unknown(shape: tuple | None) -> bool:
    return shape is None or any(not isinstance(d, int) for d in shape)


def _inferable(model) -> bool:
    """False when onnx's shape inference would never return on ``model``: an Einsum (in the graph, a
    subgraph or a function) whose equation has a stray ``.`` (the converter then refuses that node)."""

    def graphs(graph):
        yield graph
        for node in graph.node:
            for attr in node.attribute:
                for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                    yield from graphs(sub)

    nodes = [n for graph in graphs(model.graph) for n in graph.node]
    nodes += [n for function in model.functions for n in function.node]
    for node in nodes:
        if node.op_type == "Einsum":
            equation = next((a.s for a in node.attribute if a.name == "equation"), b"")
            if not dots_are_ellipses(equation.decode("utf-8", "replace")):
                return False
    return True


def _reinfer(onnx, model, g: Graph, nodes: list[Node], protos: dict[int, Any]) -> bool:
    """Run ONNX shape inference again on the nodes left after folding, the folded values as
    initializers (shape values still symbolic as int64 inputs), and merge what it learned into
    ``g.shapes`` and ``g.dtypes``. True when a shape became better known; False when every output of a
    remaining node was already fully known, or inference fails (the import goes on without it)."""
    outputs = [o for n in nodes for o in n.outputs if o]
    if not any(_unknown(g.shapes.get(o)) for o in outputs):
        return False
    helper = onnx.helper
    # A Reshape or Expand whose target is a shape value goes in with the target the import resolved for it
    # (0 or 1: the input's own dim, -1: the one inferred), so inference keeps the dims it copies; the
    # symbolic target would give every output dim a fresh name (heads merged back at a dynamic batch).
    inits, extra, trial_nodes = [], [], []
    for n in nodes:
        proto, target = protos[id(n)], resolved_target(g, n)
        if target is not None:
            name = f"{n.inputs[1]}::pipelink_target_{len(inits)}"
            inits.append(onnx.numpy_helper.from_array(np.asarray(target, dtype=np.int64), name))
            proto = _with_input(onnx, proto, 1, name)
        trial_nodes.append(proto)
    needed = {i for proto in trial_nodes for i in proto.input if i}
    # Small constants go in with their values (a Reshape's target, a Pad's pads); the weights only as
    # typed inputs of their shape, so a round costs no copy of them. No data propagation: on a hostile
    # file (a Tile by 2**40) onnx's would try to make the data.
    for name in sorted(needed & g.constants.keys()):
        value = np.asarray(g.constants[name])
        if value.size <= MAX_FOLD_ELEMENTS:
            inits.append(onnx.numpy_helper.from_array(value, name))
        else:
            elem = helper.np_dtype_to_tensor_dtype(value.dtype)
            extra.append(helper.make_tensor_value_info(name, elem, list(value.shape)))
    extra += [
        helper.make_tensor_value_info(name, onnx.TensorProto.INT64, [len(v) if isinstance(v, list) else None])
        for name, v in g.symbolic.items()
        if name in needed
    ]
    inputs = [i for i in model.graph.input if i.name not in g.constants] + extra
    # the output of an Expand or ConstantOfShape to a run-time dim its input lacks (runtime_dims.py) has
    # that dim: typed here by the graph input's name for it (``batch``), onnx would give it a fresh one
    params = {d.dim_param for i in inputs for d in i.type.tensor_type.shape.dim if d.dim_param}
    typed = []
    for n in nodes:
        shape = None if resolved_target(g, n) is not None else broadcast_shape(g, n, params)
        dtype = g.dtypes.get(n.outputs[0]) if n.outputs else None
        if shape is not None and dtype is not None:
            elem = helper.np_dtype_to_tensor_dtype(np.dtype(get_dtype(dtype).numpy))
            typed.append(helper.make_tensor_value_info(n.outputs[0], elem, list(shape)))
    graph = helper.make_graph(
        trial_nodes, model.graph.name or "g", inputs, list(model.graph.output), inits, value_info=typed
    )
    trial = helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    if not _inferable(trial):
        return False
    inferred = infer_shapes(onnx, trial)  # a help, never a requirement: None when it fails
    if inferred is None:
        return False
    # onnx names the dims it cannot relate unk__0, unk__1... afresh on every run: this round's get its tag,
    # so two tensors share a dim's name only when one run of inference related them (a Reshape copying
    # a dim of one tensor never copies a dim of another that an earlier round happened to name alike)
    declared = {
        d.dim_param
        for info in [*trial.graph.input, *trial.graph.output]
        for d in info.type.tensor_type.shape.dim
        if d.dim_param
    }

    g.inferences += 1

    def tagged(shape: tuple) -> tuple:
        return tuple(f"{d}~{g.inferences}" if isinstance(d, str) and d not in declared else d for d in shape)

    def known(shape: tuple | None) -> tuple[int, int]:  # the dims known, then those named as declared
        shape = shape or ()
        named = sum(isinstance(d, str) and d in declared for d in shape)
        return sum(isinstance(d, int) for d in shape), named

    # a round that learns a dim replaces every shape it knows as well as before, so that the dims a
    # later Reshape relates come from one run
    better = {}
    for name, shape in _known_shapes(inferred.graph).items():
        old = g.shapes.get(name)
        if _unknown(old) and (old is None or len(old) == len(shape)) and known(shape) >= known(old):
            better[name] = tagged(shape)
    # learning: a dim known, or named as a graph input's (each round adds to the total: the rounds end)
    learned = any(known(shape) > known(g.shapes.get(name)) for name, shape in better.items())
    if learned:
        g.shapes.update(better)
    for name, dtype in _known_dtypes(onnx, inferred.graph).items():
        g.dtypes.setdefault(name, dtype)
    return learned


def _with_input(onnx, proto, index: int, name: str):
    """A copy of the NodeProto ``proto`` whose input ``index`` is ``name``."""
    copy = onnx.NodeProto()
    copy.CopyFrom(proto)
    copy.input[index] = name
    return copy


def _declare_input(onnx, info, rejected: list[Rejected]) -> dict[str, Any] | None:
    ttype = info.type.tensor_type
    if not info.type.HasField("tensor_type") or not ttype.elem_type:
        rejected.append(Rejected("input", info.name, "only tensor inputs with an element type are supported"))
        return None
    try:
        dtype = get_dtype(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(ttype.elem_type))).name
    except (KeyError, TypeError, ValueError, PipeLinkError):
        rejected.append(
            Rejected("input", info.name, f"ONNX element type {ttype.elem_type} has no PipeLink dtype")
        )
        return None
    decl: dict[str, Any] = {"dtype": dtype}
    if ttype.HasField("shape"):
        shape: list[int | str] = []
        for k, dim in enumerate(ttype.shape.dim):
            if dim.HasField("dim_value"):
                shape.append(int(dim.dim_value))
            elif dim.dim_param:
                shape.append(dim_symbol(dim.dim_param))
            else:  # an unnamed free dimension: a symbol of its own
                shape.append(dim_symbol(f"{info.name}_{k}"))
        decl["shape"] = shape
    return decl


def import_model(
    model_or_path: Any, out_dir: str | Path | None = None, *, fuse: bool = True
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Convert an ONNX model into a PipeLink config and its weights.

    Parameters
    ----------
    model_or_path : onnx.ModelProto, str or Path
        The model, or the path of an ``.onnx`` file.
    out_dir : str or Path, optional
        Also write ``out_dir/pipeline.json`` and ``out_dir/weights.npz`` (see :func:`write_import`); the
        returned config then names the weights file.
    fuse : bool
        Rewrite the chains one PipeLink stage computes before converting (``pipelink.onnx.fuse``:
        GELU and LayerNorm chains, MatMul + bias, a gemm's reshapes, activation and residual, no-op
        Casts, Softmax of scaled scores plus a mask, Split parts reshaped and transposed). False
        converts every node into its own stage (what folds at import still leaves none).

    Returns
    -------
    config : dict
        An ordinary config: graph inputs declared with their shapes (``dim_param`` names kept as
        symbols) and dtypes, one stage per node or fused chain (nodes evaluated at import, ``fold.py``,
        leave no stage), the graph outputs as ``outputs``.
        Tensor names that are not valid PipeLink names are made so (``/conv/Conv_output_0`` ->
        ``conv_Conv_output_0``).
    weights : dict of name -> array
        The initializers and folded Constant nodes the stages read: bound constants
        (``pl.load(config, weights=weights)``).

    Raises
    ------
    InvalidArgumentError
        When the model cannot be read, or when any node cannot be imported: the message lists every such
        node (op type, name, why) and ``.unsupported`` holds them as dicts.
    HardwareUnsupportedError
        When the ``onnx`` package is missing.
    """
    onnx = _onnx()
    model = _read_model(onnx, model_or_path)
    # A malformed model (a node its schema does not allow, data that does not match its dims) is refused
    # before anything reads it: onnx's shape inference, the folds and the converters trust the schemas.
    opset, malformed = check_model(onnx, model)
    if malformed:
        listing = "\n".join(f"  {r}" for r in malformed)
        raise InvalidArgumentError(
            f"the ONNX model is malformed: {len(malformed)} problem{'s' if len(malformed) > 1 else ''} "
            f"(nothing was imported; check it with onnx.checker.check_model and export it again):\n{listing}",
            unsupported=[{"op_type": r.op_type, "node": r.node, "why": r.why} for r in malformed],
        )
    # Shape inference only adds dtypes (Pow's exponent) and the shapes fusions check; a model it cannot
    # follow imports without them (and the fusions that need a shape do not match). It runs in a child
    # process (infer.py): onnx's C++ crashes on some hostile models.
    if _inferable(model):
        model = infer_shapes(onnx, model) or model
    graph = model.graph
    constants = _initializers(onnx, graph)
    register_builtins(registry)
    g = Graph(
        opset=opset,
        constants=constants,
        dtypes=_known_dtypes(onnx, graph),
        operators=registry.get,
        shapes=_known_shapes(graph),
        inputs=frozenset(info.name for info in graph.input),
    )
    rejected: list[Rejected] = []
    nodes: list[Node] = []
    protos: dict[int, Any] = {}  # id(Node) -> its NodeProto, for shape inference after folding
    # If, Loop and Scan become the nodes they run (control.py), collected here like the model's own
    for k, node in enumerate(lower_control(onnx, model, g, nodes, rejected)):
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            try:
                constants[node.output[0]] = _constant_value(onnx, node)
            except Unsupported as e:
                rejected.append(Rejected(node.op_type, node.name or f"#{k}", str(e)))
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        nodes.append(Node(node.op_type, node.name, node.domain, list(node.input), list(node.output), attrs))
        protos[id(nodes[-1])] = node
    inputs: dict[str, Any] = {}
    for info in graph.input:
        if info.name in constants:  # IR < 4 lists initializers among the inputs
            continue
        decl = _declare_input(onnx, info, rejected)
        if decl is not None:
            inputs[g.name(info.name)] = decl
    # What the model computes from constants and shapes is evaluated here (Shape, Gather, Concat...);
    # what folding made constant (a Pad's pads, a Reshape's target) lets shape inference see further, and
    # what it then sees may fold in turn: inference and folding alternate until neither learns more.
    # A round that learns a shape folds the whole graph again: a Shape read as symbolic dims before may
    # now be a constant (its shape values are made afresh).
    graph_outputs, every_node = {info.name for info in graph.output}, nodes
    nodes = fold(g, every_node, graph_outputs)
    for _ in range(_REFOLDS):
        if not _reinfer(onnx, model, g, nodes, protos):
            break
        g.symbolic.clear()
        nodes = fold(g, every_node, graph_outputs)
    if fuse:
        nodes, _ = fuse_nodes(g, nodes, {info.name for info in graph.output})
    copied = _constant_outputs(g, [info.name for info in graph.output], rejected)
    rejected += convert(g, nodes)
    outputs = [copied.get(info.name) or g.name(info.name) for info in graph.output]
    if rejected:
        listing = "\n".join(f"  {r}" for r in rejected)
        noun = "node" if len(rejected) == 1 else "nodes"
        raise InvalidArgumentError(
            f"the ONNX model cannot be imported: {len(rejected)} {noun} PipeLink does not support "
            f"(nothing was imported):\n{listing}\nsupported op types: {', '.join(sorted(CONVERTERS))}",
            unsupported=[{"op_type": r.op_type, "node": r.node, "why": r.why} for r in rejected],
        )
    config: dict[str, Any] = {
        "name": _pipeline_name(graph.name),
        "description": f"imported from ONNX (opset {g.opset}, producer {model.producer_name or 'unknown'})",
        "inputs": inputs,
        "outputs": outputs,
        "pipeline": g.stages,
    }
    if out_dir is not None:
        config = write_import(config, g.weights, out_dir)
    return config, dict(g.weights)


def _constant_outputs(g: Graph, names: list[str], rejected: list[Rejected]) -> dict[str, str]:
    """Graph outputs that are constants (an initializer, a Constant node, or what folded): each is copied
    out of its bound weight by an ``identity`` stage, so the output is the pipeline's own tensor. The
    weight is the constant it is another name of (an Identity of a weight), else it takes another name
    (``<output>_value``): the output keeps the model's. Returns the PipeLink output name of each such
    ONNX output."""
    wanted = set(names)
    sources = {id(array): n for n, array in g.constants.items() if n not in wanted}
    copied: dict[str, str] = {}
    for name in dict.fromkeys(n for n in names if n in g.constants):
        output = g.name(name)
        source = sources.get(id(g.constants[name]), name)
        if source == name:
            g.names[name] = g.fresh(f"{output}_value")  # what a stage reading the constant binds
        key = f"\0{name}"  # the output's own entry (no ONNX name starts with a NUL)
        g.names[key] = output
        try:
            g.stage(
                Node("Identity", f"{output}_constant", "", [source], [key], {}), "identity", [source], [key]
            )
        except Unsupported as e:
            rejected.append(Rejected("output", name, str(e)))
            continue
        copied[name] = output
    return copied


def _pipeline_name(name: str) -> str:
    return name or "onnx_model"


def write_import(
    config: dict[str, Any], weights: dict[str, np.ndarray], out_dir: str | Path
) -> dict[str, Any]:
    """Write ``out_dir/pipeline.json`` (naming the weights file) and ``out_dir/weights.npz``; returns
    the config as written.

    Raises
    ------
    InvalidArgumentError
        When ``out_dir`` cannot be created or written.
    """
    out = Path(out_dir).expanduser()
    written = dict(config)
    if weights:
        written = {
            **{k: v for k, v in config.items() if k != "pipeline"},
            "weights": WEIGHTS_NAME,
            "pipeline": config["pipeline"],
        }
    try:
        out.mkdir(parents=True, exist_ok=True)
        if weights:
            np.savez(out / WEIGHTS_NAME, **weights)
        (out / CONFIG_NAME).write_text(json.dumps(written, indent=2) + "\n", encoding="utf-8")
    except OSError as e:
        raise InvalidArgumentError(f"cannot write the import to {str(out)!r}: {e.strerror or e}") from None
    return written


def from_onnx(
    model_or_path: Any, *, device: str = "auto", fuse: bool = True, **load_options: Any
) -> Pipeline:
    """Import an ONNX model and load it: ``pl.load`` of the imported config with its weights bound.

    Parameters
    ----------
    model_or_path : onnx.ModelProto, str or Path
    device : str
        As for :func:`pipelink.load`.
    fuse : bool
        As for :func:`import_model`: False imports every node as its own stage.
    **load_options
        Any other option of :func:`pipelink.load` (``cuda_graph``, ``tuned``, ...).
    """
    config, weights = import_model(model_or_path, fuse=fuse)
    return load(config, device=device, weights=weights, **load_options)
