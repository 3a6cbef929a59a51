"""Which node of an imported ONNX model first differs from the reference, on each device: every float
output of every node is made a graph output, the model is imported and run on each device, and each
output is compared with the reference (onnxruntime on the CPU where it is installed, else onnx's
ReferenceEvaluator) as the largest error relative to the reference's largest magnitude. Then, for each
device whose final output differs, a bisection over the graph cut after node k (that node's first output
the only graph output, so the fusions the import makes of the whole graph are made of each prefix) names
the first node whose prefix differs.

Made to find where a model that matches on the CPU goes wrong on CUDA (docs/onnx-import.md, Real
models). A diagnosis, not a check: exit 0 when no node differs past ``--threshold``, 1 when one does.

python scripts/onnx_node_diff.py MODEL.onnx [--inputs FEEDS.npz] [--devices cpu,cuda] [--threshold 1e-4]
                                 [--show 25] [--no-bisect]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

import pipelink as pl


def _reference(onnx, model):
    """``run(feeds) -> {name: array}`` of the model's outputs by the reference."""
    names = [o.name for o in model.graph.output]
    try:
        import onnxruntime as ort

        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return lambda feeds: dict(zip(names, session.run(None, feeds), strict=True))
    except ImportError:
        from onnx.reference import ReferenceEvaluator

        evaluator = ReferenceEvaluator(model)
        return lambda feeds: dict(zip(names, evaluator.run(None, feeds), strict=True))


def _error(got: np.ndarray, want: np.ndarray) -> float:
    if got.shape != want.shape:
        return float("inf")
    got, want = got.astype(np.float64), want.astype(np.float64)
    return float(
        np.max(np.abs(got - want), initial=0.0) / max(1e-6, float(np.max(np.abs(want), initial=0.0)))
    )


def _feeds(model, path: Path | None, rng) -> dict[str, np.ndarray]:
    """The inputs from ``path`` (an .npz by input name, or in the inputs' order), else random ones of
    the declared shapes and types (every dim must then be known)."""
    from onnx import helper

    weights = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in weights]
    if path is not None:
        arrays = dict(np.load(path))
        if set(arrays) >= {i.name for i in inputs}:
            return {i.name: arrays[i.name] for i in inputs}
        return {i.name: a for i, a in zip(inputs, arrays.values(), strict=False)}
    feeds = {}
    for info in inputs:
        dims = [d.dim_value if d.HasField("dim_value") else None for d in info.type.tensor_type.shape.dim]
        if None in dims:
            raise ValueError(f"input {info.name!r} has dims known only at run time; give --inputs")
        dtype = helper.tensor_dtype_to_np_dtype(info.type.tensor_type.elem_type)
        value = rng.standard_normal(dims) if dtype.kind == "f" else rng.integers(0, 4, dims)
        feeds[info.name] = value.astype(dtype)
    return feeds


def _run(model, device: str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    with pl.from_onnx(model, device=device) as pipe:
        got = pipe.run({n: v for n, v in feeds.items() if n in pipe.inputs})
        return {name: np.asarray(t.numpy()) for name, t in got.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path, help="the .onnx file")
    parser.add_argument("--inputs", type=Path, default=None, help="an .npz of the inputs (default: random)")
    parser.add_argument("--devices", default="cpu,cuda", help="comma-separated devices (default cpu,cuda)")
    parser.add_argument("--threshold", type=float, default=1e-4, help="relative error that differs")
    parser.add_argument("--show", type=int, default=25, help="how many differing outputs to list")
    parser.add_argument("--no-bisect", action="store_true", help="skip the bisection over graph prefixes")
    args = parser.parse_args()
    if not args.model.is_file():
        parser.error(f"{args.model}: no such file")
    if args.inputs is not None and not args.inputs.is_file():
        parser.error(f"--inputs {args.inputs}: no such file")
    try:
        import onnx
    except ImportError as e:
        parser.error(f"needs onnx: {e}")
    model = onnx.shape_inference.infer_shapes(onnx.load(str(args.model)))
    try:
        feeds = _feeds(model, args.inputs, np.random.default_rng(0))
    except ValueError as e:
        parser.error(str(e))
    typed = {v.name: v for v in model.graph.value_info}
    producer = {o: n for n in model.graph.node for o in n.output if o}
    outputs = {o.name for o in model.graph.output}
    every = onnx.ModelProto()
    every.CopyFrom(model)
    for node in model.graph.node:
        for name in node.output:
            info = typed.get(name)
            if (
                info is not None
                and name not in outputs
                and info.type.tensor_type.elem_type in (1, 10, 11, 16)
            ):
                every.graph.output.append(info)
    want = _reference(onnx, every)(feeds)
    final = model.graph.output[0].name
    differs = False
    for device in args.devices.split(","):
        try:
            got = _run(every, device, feeds)
        except pl.PipeLinkError as e:
            print(f"[{device}] every node's output: {e.code.name}: {e.message[:500]}")
            differs = True
            continue
        order = [o for n in model.graph.node for o in n.output if o in want and o in got]  # graph order
        bad = [(n, _error(got[n], want[n])) for n in order]
        bad = [(n, e) for n, e in bad if e > args.threshold]
        for name, err in bad[: args.show]:
            node = producer[name]
            print(f"[{device}] {name} ({node.op_type} {node.name!r}): {err:.2e}")
        print(f"[{device}] {len(bad)} of {len(order)} node outputs differ by more than {args.threshold:g}")
        differs |= bool(bad)
        if args.no_bisect or _error(got[final], want[final]) <= args.threshold:
            continue
        cuts = [k for k, n in enumerate(model.graph.node) if n.output and n.output[0] in want]

        def prefix_differs(k: int, device: str = device) -> float:
            cut = onnx.ModelProto()
            cut.CopyFrom(model)
            out = model.graph.node[k].output[0]
            del cut.graph.output[:]
            cut.graph.output.append(typed.get(out) or next(o for o in model.graph.output if o.name == out))
            del cut.graph.node[k + 1 :]
            try:
                return _error(_run(cut, device, feeds)[out], want[out])
            except pl.PipeLinkError:  # a prefix the import refuses (a cut inside a fused chain): not it
                return 0.0

        lo, hi = 0, len(cuts) - 1
        while lo < hi:
            mid = (lo + hi) // 2
            if prefix_differs(cuts[mid]) > args.threshold:
                hi = mid
            else:
                lo = mid + 1
        node = model.graph.node[cuts[lo]]
        print(
            f"[{device}] bisection: the first prefix that differs ends at node {cuts[lo]} ({node.op_type} "
            f"{node.name!r}, inputs {list(node.input)}): {prefix_differs(cuts[lo]):.2e}"
        )
    return 1 if differs else 0


if __name__ == "__main__":
    sys.exit(main())
