"""Shared test helpers: the relative-error check at the package's per-dtype tolerance, the gpu marker's
skip."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from pipelink.dtypes import tolerance


def rel_error(got, ref) -> float:
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if np.isnan(got).any():
        return float("inf")
    denom = np.linalg.norm(ref.ravel())
    return float(np.linalg.norm((got - ref).ravel()) / (denom if denom else 1.0))


def assert_close(got, ref, dtype: str, what: str = "") -> None:
    err = rel_error(got, ref)
    tol = tolerance(dtype)[0]
    assert err <= tol, f"{what}: relative error {err:.3g} above {tol:g} for {dtype}"


def run_in_threads(work, count: int) -> None:
    """Run ``work(k)`` for k in range(count) on that many threads at once; raise the first failure."""
    errors = []

    def guarded(k):
        try:
            work(k)
        except BaseException as e:  # noqa: BLE001 - reported below, on the caller's thread
            errors.append(e)

    threads = [threading.Thread(target=guarded, args=(k,)) for k in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def pytest_collection_modifyitems(config, items):
    from pipelink.backends import cuda_unavailable_reason

    reason = None
    for item in items:
        if "gpu" in item.keywords:
            if reason is None:
                reason = cuda_unavailable_reason() or ""
            if reason:
                item.add_marker(pytest.mark.skip(reason=f"needs a CUDA GPU: {reason}"))
