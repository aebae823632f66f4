"""A batched step over int64 rows, replayed from CUDA graphs per batch bucket.

A step function takes rows ``[B, W]`` of int64 (the slot first: ``(slot, position,
...)``) and perhaps further per-row inputs, reads nothing from the host, and returns
one output row per input row. :class:`GraphedRows` captures it per batch bucket at
start-up (largest first, one memory pool: ``models.cuda_graphs.BucketGraphs``); a
call pads the rows up to the nearest bucket with a padding row that sits on the
runner's scratch slot, uploads them once, replays, and returns the real rows'
outputs. Batches past the largest bucket run in pieces of it, or eagerly (the
family's choice: ``split``). Off CUDA, or with graphs off, the step runs eagerly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from models.cuda_graphs import BucketGraphs, default_buckets
from models.upload import upload


class GraphedRows:
    def __init__(
        self,
        fn: Callable[..., torch.Tensor],
        pad_row: Sequence[int],
        device: torch.device,
        largest: int,
        *,
        graphs: bool,
        extra_padding: Callable[[int], tuple[torch.Tensor, ...]] | None = None,
        split: bool = True,
    ) -> None:
        """``fn(rows, *extra, **eager)``: the step; ``pad_row``: a row that changes
        nothing a caller relies on (on the scratch slot); ``largest``: the biggest
        bucket; ``extra_padding(size)``: padding for ``fn``'s further inputs;
        ``split``: batches past the largest bucket replay in pieces (else they run
        eagerly, in one call)."""
        self.fn = fn
        self.pad_row = np.asarray(pad_row, np.int64)
        self.device = device
        self.split = split
        self._extra_padding = extra_padding or (lambda size: ())
        self.graphs: BucketGraphs | None = None
        if graphs:
            self.graphs = BucketGraphs(fn, self._padding, default_buckets(largest))

    @property
    def largest(self) -> int | None:
        return self.graphs.largest if self.graphs is not None else None

    def _padding(self, size: int) -> tuple[torch.Tensor, ...]:
        rows = np.broadcast_to(self.pad_row, (size, len(self.pad_row)))
        return (upload(rows, self.device), *self._extra_padding(size))

    def capture(self) -> None:
        if self.graphs is not None:
            self.graphs.capture()

    def replays(self, count: int) -> bool:
        """Whether ``count`` rows would run from graphs (not eagerly)."""
        graphs = self.graphs
        return graphs is not None and (self.split or count <= graphs.largest)

    def __call__(self, rows: np.ndarray, *extra: torch.Tensor, **eager: Any) -> torch.Tensor:
        """The step for ``rows`` [B, W] (and ``extra`` inputs of B rows each); ``eager``
        keyword arguments reach ``fn`` only when it runs eagerly."""
        graphs = self.graphs
        if graphs is None or not self.replays(len(rows)):
            return self.fn(upload(rows, self.device), *extra, **eager)
        outs = []
        for first in range(0, len(rows), graphs.largest):
            part = rows[first : first + graphs.largest]
            size = graphs.bucket_for(len(part))
            assert size is not None
            padded = np.empty((size, rows.shape[1]), np.int64)
            padded[:] = self.pad_row
            padded[: len(part)] = part
            inputs = []
            for tensor, pad in zip(
                (e[first : first + len(part)] for e in extra),
                self._extra_padding(size),
                strict=True,
            ):
                full = pad.clone()
                full[: len(part)] = tensor
                inputs.append(full)
            outs.append(graphs.replay(upload(padded, self.device), *inputs)[: len(part)])
        # A replay's output lives in the graph's own buffer, which the bucket's next
        # replay overwrites: a caller may hold it across two calls in one step.
        return outs[0].clone() if len(outs) == 1 else torch.cat(outs)
