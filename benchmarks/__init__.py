"""PipeLink's benchmark suite: PipeLink (eager and CUDA graph) vs PyTorch eager, torch.compile and the
hardware roofline measured in the same run. Run it with ``python -m benchmarks`` (see ``suite.py``).
The model race (three real models imported from ONNX vs onnxruntime and PyTorch) is
``python -m benchmarks.models`` (see ``models.py`` and docs/onnx-import.md).

Importing this package never imports torch: on a machine without it the suite runs PipeLink alone.
"""

from __future__ import annotations

__all__ = ["main"]


def main(argv=None) -> int:
    """Run the suite with command-line ``argv`` (``sys.argv[1:]`` when None); returns the exit status."""
    from .suite import main as _main

    return _main(argv)
