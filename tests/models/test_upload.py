"""upload: a copy of the host values, in the asked dtype, that the caller may reuse at once."""

from __future__ import annotations

import numpy as np
import torch

from models.upload import upload


def test_upload_copies_and_converts() -> None:
    cpu = torch.device("cpu")
    source = np.array([3, 1, 2], np.int64)
    ids = upload(source, cpu)
    source[:] = 0  # the caller reuses its array right away
    assert ids.dtype == torch.long and ids.tolist() == [3, 1, 2]
    assert upload([True, False], cpu, torch.bool).tolist() == [True, False]
    half = upload(np.array([0.5, -2.0], np.float32), cpu, torch.bfloat16)
    assert half.dtype == torch.bfloat16 and half.tolist() == [0.5, -2.0]
    assert upload([], cpu).shape == (0,)
    assert upload(np.arange(6).reshape(2, 3), cpu).shape == (2, 3)
