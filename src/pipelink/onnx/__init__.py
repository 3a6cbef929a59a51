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
import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ..config.schema_errors import did_you_mean
from ..dtypes import get_dtype
from ..errors import HardwareUnsupportedError, InvalidArgumentError, PipeLinkError
from ..modules.registry import registry
from ..ops import register_builtins
from ..pipeline import Pipeline, load
from .check import check_model, read_tensor
from .control import lower_control
from .convert import CONVERTERS, convert
from .fold import fold
from .fuse import fuse as fuse_nodes
from .graph import Graph, Node, Rejected, Unsupported, dim_symbol, inputs_behind
from .infer import infer_shapes, inferable, known_dtypes, known_shapes, reinfer
from .runtime_dims import read_as_data

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
    try:
        exists, regular = path.exists(), path.is_file()
    except (OSError, ValueError):  # a NUL byte, a name too long
        exists = regular = False
    if not exists:
        raise InvalidArgumentError(f"ONNX model {str(path)!r} not found; give the path of an .onnx file")
    if not regular:
        raise InvalidArgumentError(
            f"ONNX model {str(path)!r} is not a regular file (a folder, a pipe or a device); give the path "
            "of an .onnx file"
        )
    try:
        return onnx.load(str(path))
    except Exception as e:  # the protobuf parser's DecodeError, a missing external-data file, ...
        raise InvalidArgumentError(f"{str(path)!r} is not a readable ONNX model: {e}") from None


def _declared_inputs(graph) -> dict[str, Any]:
    """The graph's inputs by name, the initializers IR < 4 lists among them left out."""
    weights = {t.name for t in graph.initializer}
    return {info.name: info for info in graph.input if info.name not in weights}


def _declared_input(declared: dict[str, Any], name: Any, what: str) -> Any:
    """The input ``name`` of ``declared``, or the refusal of option ``what`` naming it (with a hint)."""
    info = declared.get(name)
    if info is None:
        hint = did_you_mean(str(name), declared)
        raise InvalidArgumentError(
            f"{what}: {name!r} is not an input of the ONNX model{hint} (its inputs: "
            f"{', '.join(declared) or 'none'})"
        )
    return info


#: The largest dim a shape fixed at import may give (an ONNX dim is an int64).
_MAX_DIM = 2**63 - 1


def _fix_shapes(onnx, model, shapes: dict[str, Any]):
    """A copy of ``model`` whose graph inputs named in ``shapes`` have those dims, as if it had been
    exported with them. A ``dim_param`` fixed in one input is fixed by its name in every input that has
    it (``seq`` of the token ids and of the mask); the exporter's annotations of intermediate tensors and
    outputs lose their symbolic dims (shape inference computes them again from the fixed inputs).

    Raises
    ------
    InvalidArgumentError
        A name that is not a graph input (or is also given in ``constants``), a shape that is not a list of
        ints >= 1, of another rank than declared, that disagrees with a dim the model fixes, or that gives
        one ``dim_param`` two values.
    """
    declared = _declared_inputs(model.graph)
    by_name: dict[str, tuple[int, str]] = {}  # dim_param -> (value, the input that fixed it)
    fixed: dict[str, list[int]] = {}
    for name, shape in shapes.items():
        info = _declared_input(declared, name, "shapes")
        dims = list(shape) if isinstance(shape, list | tuple) else None
        if dims is None or not all(
            isinstance(d, int | np.integer) and not isinstance(d, bool) and 1 <= d <= _MAX_DIM for d in dims
        ):
            raise InvalidArgumentError(
                f"shapes: {name!r} must be a list of dims, each an int from 1 to 2**63 - 1 (PipeLink has no "
                f"empty tensors), got {shape!r}"
            )
        dims = [int(d) for d in dims]
        ttype = info.type.tensor_type
        if ttype.HasField("shape"):
            model_dims = list(ttype.shape.dim)
            shown = "x".join(
                str(d.dim_value) if d.HasField("dim_value") else d.dim_param or "?" for d in model_dims
            )
            if len(model_dims) != len(dims):
                raise InvalidArgumentError(
                    f"shapes: {name!r} is given {len(dims)} dims, but the model declares {len(model_dims)} "
                    f"({shown or 'a scalar'})"
                )
            for k, (d, value) in enumerate(zip(model_dims, dims, strict=True)):
                if d.HasField("dim_value") and d.dim_value != value:
                    raise InvalidArgumentError(
                        f"shapes: {name!r} dim {k} is {value}, but the model fixes it to {d.dim_value} "
                        f"({shown})"
                    )
                if d.HasField("dim_param") and d.dim_param:
                    seen = by_name.setdefault(d.dim_param, (value, name))
                    if seen[0] != value:
                        raise InvalidArgumentError(
                            f"shapes: the dim {d.dim_param!r} is {seen[0]} in {seen[1]!r} and {value} in "
                            f"{name!r}; one name is one size"
                        )
        fixed[name] = dims
    out = onnx.ModelProto()
    out.CopyFrom(model)

    def fix(info, dims=None) -> None:
        if not info.type.tensor_type.HasField("shape"):
            if dims is not None:  # declared without a shape (any rank): it has these dims now
                info.type.tensor_type.shape.dim.extend(
                    onnx.TensorShapeProto.Dimension(dim_value=d) for d in dims
                )
            return
        for k, d in enumerate(info.type.tensor_type.shape.dim):
            value = dims[k] if dims is not None else by_name.get(d.dim_param, (None,))[0]
            if value is not None:
                d.dim_value = value  # clears dim_param (a oneof)
            elif d.HasField("dim_param"):
                d.Clear()  # an exporter's expression of the old symbols: unknown, inferred again

    for info in out.graph.input:
        fix(info, fixed.get(info.name))
    for info in [*out.graph.value_info, *out.graph.output]:
        fix(info)
    return out


def _bind_constants(onnx, model, constants: dict[str, Any]):
    """A copy of ``model`` whose graph inputs named in ``constants`` are initializers of those values (a
    model specialised on them: a Resize's scales, a TopK's k given as inputs).

    Raises
    ------
    InvalidArgumentError
        A name that is not a graph input, a value of another shape than the input declares, or one its
        declared element type cannot hold exactly.
    """
    declared = _declared_inputs(model.graph)
    arrays = {}
    for name, value in constants.items():
        info = _declared_input(declared, name, "constants")
        ttype = info.type.tensor_type
        try:
            target = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(ttype.elem_type))
            array = np.asarray(value)
            cast = array.astype(target)
        except (TypeError, ValueError, KeyError) as e:
            raise InvalidArgumentError(f"constants: {name!r} cannot be the model's input: {e}") from None
        # floats round to the declared float type; any other conversion must keep every value
        rounds = array.dtype.kind == "f" and target.kind == "f"
        if (
            array.dtype != target
            and not rounds
            and not (array.dtype.kind in "biuf" and np.array_equal(cast, array))
        ):
            raise InvalidArgumentError(
                f"constants: {name!r} is declared {target.name} and {array.dtype.name} values do not convert "
                "exactly; give an array of the declared type"
            )
        if ttype.HasField("shape"):
            dims = [d.dim_value if d.HasField("dim_value") else None for d in ttype.shape.dim]
            same = len(dims) == cast.ndim and all(
                d is None or d == n for d, n in zip(dims, cast.shape, strict=False)
            )
            if not same:
                shown = "x".join("?" if d is None else str(d) for d in dims) or "a scalar"
                raise InvalidArgumentError(
                    f"constants: {name!r} has shape {list(cast.shape)}, but the model declares {shown}"
                )
        arrays[name] = cast
    bound = onnx.ModelProto()
    bound.CopyFrom(model)
    kept = [info for info in bound.graph.input if info.name not in arrays]
    del bound.graph.input[:]
    bound.graph.input.extend(kept)
    bound.graph.initializer.extend(onnx.numpy_helper.from_array(a, n) for n, a in arrays.items())
    return bound


def _initializers(onnx, graph) -> dict[str, np.ndarray]:
    """The graph's initializers as arrays (check.py has checked each one's data against its dims)."""
    arrays = {}
    for tensor in graph.initializer:
        try:
            arrays[tensor.name] = read_tensor(onnx, tensor)
        except Unsupported as e:
            raise InvalidArgumentError(f"the ONNX model's initializer {tensor.name!r} {e}") from None
    return arrays


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


def _declare_input(onnx, info, rejected: list[Rejected]) -> dict[str, Any] | None:
    ttype = info.type.tensor_type
    if not info.type.HasField("tensor_type") or not ttype.elem_type:
        kind = info.type.WhichOneof("value")
        what = {
            "sequence_type": "a sequence",
            "optional_type": "an optional",
            "map_type": "a map",
            "sparse_tensor_type": "a sparse tensor",
        }.get(kind or "", "a tensor without an element type" if kind == "tensor_type" else "of no type")
        rejected.append(
            Rejected(
                "input",
                info.name,
                f"the graph input is {what}; PipeLink's pipeline inputs are dense tensors with an element "
                "type (export the model with tensor inputs)",
            )
        )
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
    model_or_path: Any,
    out_dir: str | Path | None = None,
    *,
    fuse: bool = True,
    constants: dict[str, Any] | None = None,
    shapes: dict[str, Any] | None = None,
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
    constants : dict of name -> array, optional
        Graph inputs whose values are fixed at import: each becomes a weight, no longer an input of the
        pipeline. For inputs a node needs the value of at import (a Reshape's shape, a TopK's k, a
        Resize's scales given as inputs: the refusal names them, ``unsupported[i]["graph_input"]``);
        the pipeline then computes the model for those values only. The value must have the declared
        shape, in the declared element type or one that converts to it exactly (floats round to a declared
        float type).
    shapes : dict of name -> list of ints, optional
        Graph inputs whose dims are fixed at import, as if the model had been exported with them
        (``{"input_values": [1, 16000]}``): what the model computes from its shapes then folds, so a
        dynamic export whose shape arithmetic PipeLink cannot keep symbolic imports for those sizes (the
        pipeline then takes inputs of those shapes only). A ``dim_param`` fixed in one input is fixed in
        every input that has it. Each list has the declared rank, ints >= 1, and agrees with the dims
        the model fixes.

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
    if out_dir is not None and not isinstance(out_dir, str | os.PathLike):
        raise InvalidArgumentError(
            f"out_dir is a folder path (str or pathlib.Path), got {type(out_dir).__name__}"
        )
    if constants is not None and not isinstance(constants, Mapping):
        raise InvalidArgumentError(
            f"constants is a mapping of graph input names to values, got {type(constants).__name__}"
        )
    if shapes is not None and not isinstance(shapes, Mapping):
        raise InvalidArgumentError(
            f"shapes is a mapping of graph input names to lists of dims, got {type(shapes).__name__}"
        )
    both = sorted(set(constants or ()) & set(shapes or ()))
    if both:
        raise InvalidArgumentError(
            f"{', '.join(map(repr, both))} given in both constants and shapes: a constant's shape is its "
            "value's; give it in one of them"
        )
    onnx = _onnx()
    model = _read_model(onnx, model_or_path)
    if constants:
        model = _bind_constants(onnx, model, dict(constants))
    if shapes:
        model = _fix_shapes(onnx, model, dict(shapes))
    # A malformed model (a node its schema does not allow, data that does not match its dims) is refused
    # before anything reads it: onnx's shape inference, the folds and the converters trust the schemas.
    opset, malformed = check_model(onnx, model)
    if malformed:
        listing = "\n".join(f"  {r}" for r in malformed)
        raise InvalidArgumentError(
            f"the ONNX model is malformed: {len(malformed)} problem{'s' if len(malformed) > 1 else ''} "
            f"(nothing was imported; check it with onnx.checker.check_model and export it again):\n{listing}",
            unsupported=[r.as_dict() for r in malformed],
        )
    # Shape inference only adds dtypes (Pow's exponent) and the shapes fusions check; a model it cannot
    # follow imports without them (and the fusions that need a shape do not match). It runs in a child
    # process (infer.py): onnx's C++ crashes on some hostile models.
    if inferable(model):
        model = infer_shapes(onnx, model) or model
    graph = model.graph
    constants = _initializers(onnx, graph)
    register_builtins(registry)
    g = Graph(
        opset=opset,
        constants=constants,
        dtypes=known_dtypes(onnx, graph),
        operators=registry.get,
        shapes=known_shapes(graph),
        inputs=frozenset(info.name for info in graph.input),
        shape_values=read_as_data,
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
        if not reinfer(onnx, model, g, nodes, protos):
            break
        g.symbolic.clear()
        nodes = fold(g, every_node, graph_outputs)
    if fuse:
        nodes, _ = fuse_nodes(g, nodes, {info.name for info in graph.output})
    copied = _constant_outputs(g, [info.name for info in graph.output], rejected)
    rejected += convert(g, nodes)
    outputs = [copied.get(info.name) or g.name(info.name) for info in graph.output]
    if rejected:
        free = frozenset(info.name for info in graph.input if info.name not in constants)
        # traced through the nodes If, Loop and Scan became too (their outputs come from those nodes)
        lowered = [*graph.node, *protos.values()]
        rejected = [_traced(r, lowered, free) for r in rejected]
        symbolic = _run_time_dims(inputs, rejected)
        listing = "\n".join(f"  {r}" for r in rejected) + _fixed_shapes_hint(symbolic)
        noun = "node" if len(rejected) == 1 else "nodes"
        raise InvalidArgumentError(
            f"the ONNX model cannot be imported: {len(rejected)} {noun} PipeLink does not support "
            f"(nothing was imported):\n{listing}\nsupported op types: {', '.join(sorted(CONVERTERS))}",
            unsupported=[r.as_dict() for r in rejected],
            run_time_dims=list(symbolic) or None,
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


#: What a refusal says when a dim known only at run time is its cause (the converters' and fold's words).
_RUN_TIME_DIMS = ("known only when the model runs", "known only at run time", "fixed shapes")


def _run_time_dims(inputs: dict[str, Any], rejected: list[Rejected]) -> dict[str, list]:
    """The graph inputs with symbolic dims (name -> declared shape) when some refusal comes from dims
    known only at run time (the error's ``run_time_dims``: fixing them at import may lift it); else {}."""
    symbolic = {
        name: decl["shape"]
        for name, decl in inputs.items()
        if any(isinstance(d, str) for d in decl.get("shape") or ())
    }
    # a value needed at import that no graph input's value gives comes from the inputs' shapes
    from_shapes = any(r.needs and not r.graph_input and not r.graph_inputs for r in rejected)
    if not from_shapes and not any(any(w in r.why for w in _RUN_TIME_DIMS) for r in rejected):
        return {}
    return symbolic


def _fixed_shapes_hint(symbolic: dict[str, list]) -> str:
    """The line after a listing whose refusals come from dims known only at run time: fixing the inputs'
    dims at import (``shapes=``, ``--shape``) is the export with fixed shapes."""
    if not symbolic:
        return ""
    listed = ", ".join(f"{n} [{', '.join(map(str, shape))}]" for n, shape in symbolic.items())
    name, shape = next(iter(symbolic.items()))
    sizes = ", ".join(map(str, shape))
    option = "x".join(f"<{d}>" if isinstance(d, str) else str(d) for d in shape)
    return (
        f"\n(the graph inputs {listed} have dims known only at run time: to import the model for fixed "
        f"sizes, as an export with fixed shapes, give them, each name replaced by its size: "
        f"import_model(..., shapes={{{name!r}: [{sizes}]}}), or pipelink import --shape {name}={option})"
    )


def _traced(rejected: Rejected, nodes: Any, inputs: frozenset[str]) -> Rejected:
    """A refusal whose node needs computed values at import, with the graph inputs those come from
    (``graph_inputs``) and what to do about it in its message."""
    if rejected.graph_input or not rejected.needs:
        return rejected
    behind = inputs_behind(nodes, rejected.needs, inputs)
    if not behind:
        return rejected
    names = ", ".join(repr(n) for n in behind)
    why = (
        f"{rejected.why}; the value is computed from the graph input{'s' if len(behind) > 1 else ''} "
        f"{names}: give {'their values' if len(behind) > 1 else 'its value'} (import_model(..., "
        "constants=...), pipelink import --constant NAME=VALUE) and the import evaluates it"
    )
    return replace(rejected, why=why, graph_inputs=behind)


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
    except (OSError, ValueError) as e:  # ValueError: a path NUL bytes make no file name of
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise InvalidArgumentError(f"cannot write the import to {str(out)!r}: {why}") from None
    return written


def from_onnx(
    model_or_path: Any,
    *,
    device: str = "auto",
    fuse: bool = True,
    constants: dict[str, Any] | None = None,
    shapes: dict[str, Any] | None = None,
    **load_options: Any,
) -> Pipeline:
    """Import an ONNX model and load it: ``pl.load`` of the imported config with its weights bound.

    Parameters
    ----------
    model_or_path : onnx.ModelProto, str or Path
    device : str
        As for :func:`pipelink.load`.
    fuse : bool
        As for :func:`import_model`: False imports every node as its own stage.
    constants : dict of name -> array, optional
        As for :func:`import_model`: graph inputs whose values are fixed at import.
    shapes : dict of name -> list of ints, optional
        As for :func:`import_model`: graph inputs whose dims are fixed at import.
    **load_options
        Any other option of :func:`pipelink.load` (``cuda_graph``, ``tuned``, ...).
    """
    if "weights" in load_options:
        raise InvalidArgumentError(
            "from_onnx() binds the model's own initializers as the weights; to give other values, import "
            "with import_model() and load the config with pl.load(config, weights=...)"
        )
    config, weights = import_model(model_or_path, fuse=fuse, constants=constants, shapes=shapes)
    return load(config, device=device, weights=weights, **load_options)
