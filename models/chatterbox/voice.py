"""What T3 and S3Gen need of a voice: the one value the runner, the cloner and the
built-in voices all make or read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Voice:
    """What T3 needs of a voice; ``decoder`` is the vocoder's conditioning."""

    speaker: np.ndarray
    """float32 [256]: the voice encoder's embedding."""
    prompt: np.ndarray
    """int64 [P]: the reference's speech tokens."""
    decoder: Any = None
