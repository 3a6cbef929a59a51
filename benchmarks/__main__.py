"""``python -m benchmarks``: run the benchmark suite."""

from __future__ import annotations

from .suite import main

if __name__ == "__main__":
    raise SystemExit(main())
