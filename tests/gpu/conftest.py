"""Fixtures of the GPU tests (they run on the lent GPU machine; CI has no GPU)."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def no_tf32():  # type: ignore[no-untyped-def]
    """fp32 on CUDA is only comparable with the CPU when TF32 is off."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved
