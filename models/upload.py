"""Host values onto a device without making the host wait for the device.

``torch.tensor(values, device="cuda")`` and ``tensor.to("cuda")`` from ordinary
(pageable) memory synchronize the stream: the host stops queueing kernels until
the device has run everything queued so far. An eager model step is bound by
the host's kernel launches, so every such copy in the middle of a step costs
the overlap of host and device (the device idles while the host catches up).
Staged through pinned memory the copy is queued like a kernel; PyTorch's pinned
allocator does not hand the staging block out again before the copy has run.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch


def upload(
    values: np.ndarray | Sequence[int] | Sequence[bool] | Sequence[float],
    device: torch.device,
    dtype: torch.dtype = torch.long,
) -> torch.Tensor:
    """``values`` as a ``dtype`` tensor on ``device``: a copy, queued, never waited for."""
    # np.array copies: the caller's array may change right after this returns.
    host = torch.as_tensor(np.array(values), dtype=dtype)
    if device.type != "cuda":
        return host
    return host.pin_memory().to(device, non_blocking=True)
