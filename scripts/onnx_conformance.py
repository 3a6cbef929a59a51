"""onnx's own node test cases through PipeLink's import on one device: how many run and match, how many
are refused, by op type and reason (the first line of each refusal). ``--write`` records the cases that
run on the CPU in ``tests/backend/onnx_conformance_runs.txt``, which the conformance test then holds the
import to (a case in that list that is refused fails the test).

python scripts/onnx_conformance.py [--device cpu|cuda] [--write] [--reasons N]
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for tests/

from tests.backend.test_onnx_node_conformance import CASES, RUNS_FILE, run_case  # noqa: E402


def _reason(message: str) -> str:
    """The refusal's first specific line, names and numbers elided (so alike refusals count together)."""
    lines = [line.strip() for line in message.splitlines()[1:] if not line.startswith("supported op types")]
    line = lines[0] if lines else message.splitlines()[0]
    return re.sub(r"#\d+", "#", re.sub(r"'[^']*'", "'*'", line))[:160]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu", help="the device the cases run on (default cpu)")
    parser.add_argument("--write", action="store_true", help=f"write the cases that run to {RUNS_FILE.name}")
    parser.add_argument("--reasons", type=int, default=25, help="how many refusal reasons to list")
    args = parser.parse_args()
    if args.write and args.device != "cpu":
        parser.error("--write records the CPU's runs: use --device cpu")
    ran, reasons, examples = [], collections.Counter(), {}
    for case in CASES:
        refusal = run_case(case, args.device)
        if refusal is None:
            ran.append(case.name)
            continue
        ops = ",".join(sorted({n.op_type for n in case.model.graph.node}))
        key = f"{ops[:40]}: {_reason(refusal)}"
        reasons[key] += 1
        examples.setdefault(key, case.name)
    print(f"{len(CASES)} cases on {args.device}: {len(ran)} run and match, {len(CASES) - len(ran)} refused")
    for key, count in reasons.most_common(args.reasons):
        print(f"{count:5d}  {key}  (e.g. {examples[key]})")
    if args.write:
        RUNS_FILE.write_text("".join(f"{name}\n" for name in sorted(ran)), encoding="utf-8")
        print(f"wrote {len(ran)} names to {RUNS_FILE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
