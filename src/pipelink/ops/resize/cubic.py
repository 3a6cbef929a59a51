"""Keys' cubic convolution kernel, the weights resize's cubic mode (plain and antialiased) and grid_sample's
share.

Pure NumPy on coordinates; it never touches array data.
"""

from __future__ import annotations

import numpy as np

__all__ = ["keys", "keys_weights"]


def keys(d: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel with coefficient ``a`` at signed distances ``d`` (float64): 0 from
    ``|d| >= 2`` on. ``resize.cu`` evaluates the same expressions in the same order."""
    d = np.abs(np.asarray(d, dtype=np.float64))
    near = ((a + 2) * d - (a + 3)) * d * d + 1  # |d| <= 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a  # 1 < |d| < 2
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def keys_weights(t: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution weights of the 4 neighbours ``-1, 0, 1, 2`` of points at fraction ``t``
    (in [0, 1)) past their floor: ``[..., 4]``, float64."""
    return keys(np.array([-1.0, 0.0, 1.0, 2.0]) - np.asarray(t)[..., None], a)  # distance of each neighbour
