"""Speaking rate (syllables a second) as the reference steers it.

Each configured rate gives a target share of the pointer's moves (``duration_state``
counts), a guidance weight and a ``cfg_gamma``; a rate between two configured ones
interpolates them (the shares and their total linearly, rounded, at least 1 each; the
weight and gamma linearly), as ``interpolate_speaking_rate_params`` does. The defaults
are voxtream 0.2.5's ``configs/speaking_rate.json`` (rates 2 to 6).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

DEFAULT_RATES: dict[float, tuple[tuple[int, ...], float, float]] = {
    2.0: ((52, 15, 1, 2, 1, 3), 2.0, 1.25),
    3.0: ((29, 24, 2, 3, 1, 1), 2.0, 1.5),
    4.0: ((40, 59, 5, 12, 1, 2), 2.0, 2.0),
    5.0: ((27, 69, 6, 30, 2, 7), 2.0, 2.5),
    6.0: ((24, 83, 6, 41, 1, 15), 2.0, 3.0),
}
"""rate -> (move counts, weight, cfg_gamma)."""


@dataclass(frozen=True)
class SpeakingRates:
    table: Mapping[float, tuple[Sequence[int], float, float]]

    @property
    def low(self) -> float:
        return min(self.table)

    @property
    def high(self) -> float:
        return max(self.table)

    def at(self, rate: float) -> tuple[np.ndarray, float, float]:
        """(target move counts, weight, cfg_gamma) for ``rate``, clamped into the table."""
        keys = sorted(self.table)
        if rate <= keys[0] or rate >= keys[-1]:
            counts, weight, gamma = self.table[keys[0] if rate <= keys[0] else keys[-1]]
            return np.asarray(counts, np.float64), float(weight), float(gamma)
        upper = next(k for k in keys if k > rate)
        lower = keys[keys.index(upper) - 1]
        (lc, lw, lg), (uc, uw, ug) = self.table[lower], self.table[upper]
        alpha = (rate - lower) / (upper - lower)
        low_total, high_total = float(sum(lc)), float(sum(uc))
        total = low_total + alpha * (high_total - low_total)
        counts = [
            max(1, int(round(total * (a / low_total + alpha * (b / high_total - a / low_total)))))
            for a, b in zip(lc, uc, strict=True)
        ]
        return (
            np.asarray(counts, np.float64),
            float(lw + alpha * (uw - lw)),
            float(lg + alpha * (ug - lg)),
        )
