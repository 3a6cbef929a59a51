"""Helpers of the CUDA tests (not a test module). Operator-versus-reference tests live in tests/backend and
run on every device; these are for the GPU-only tests."""

from __future__ import annotations

__all__ = ["one_stage"]


def one_stage(op: str, inputs: dict, outputs: list[str], attrs: dict | None = None) -> dict:
    """A config with one stage of ``op`` whose inputs are all external."""
    stage = {"name": op, "id": "s", "inputs": list(inputs), "outputs": outputs}
    if attrs:
        stage["attrs"] = attrs
    return {"name": f"test_{op}", "outputs": outputs, "pipeline": [stage]}
