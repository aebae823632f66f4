"""CUDA graphs of one batched function, captured per batch-size bucket.

A call of ``fn(*inputs)`` launches thousands of small kernels; replaying a
captured graph launches them as one. Each bucket has fixed input buffers (the
caller fills all of each, padding rows included, with one copy) and fixed
outputs. Every bucket is captured at start-up, largest first, from one shared
memory pool: capturing later would stall the live batch that first needs a
bucket. ``fn`` must read its inputs only from the tensors it is given (rows
first) and must not write into them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

import torch

log = logging.getLogger(__name__)


def default_buckets(largest: int) -> list[int]:
    """Batch sizes to capture up to ``largest``: fine steps where padding would cost
    the most (small batches), coarser above."""
    sizes = [1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64]
    size = 64
    for step, until in ((16, 128), (32, 256), (64, 512), (128, 1 << 30)):
        while size < min(until, largest):
            size += step
            sizes.append(size)
    out = sorted({s for s in sizes if s < largest} | {largest})
    return out


class BucketGraphs:
    def __init__(
        self,
        fn: Callable[..., torch.Tensor],
        padding: Callable[[int], tuple[torch.Tensor, ...]],
        buckets: Sequence[int],
    ) -> None:
        """``padding(size)``: inputs of ``size`` rows that change nothing a caller
        relies on (what the graph is captured with; also used to warm up)."""
        self.fn = fn
        self.padding = padding
        self.buckets = sorted(buckets)
        self._graphs: dict[
            int, tuple[torch.cuda.CUDAGraph, tuple[torch.Tensor, ...], torch.Tensor]
        ] = {}

    @property
    def largest(self) -> int:
        return self.buckets[-1]

    def bucket_for(self, rows: int) -> int | None:
        for size in self.buckets:
            if size >= rows:
                return size
        return None

    def capture(self) -> float:
        """Capture every bucket, largest first; returns the seconds it took."""
        t0 = time.perf_counter()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for size in (self.buckets[-1], self.buckets[0]):
                self.fn(*self.padding(size))  # kernels compiled, workspaces made
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        pool = None
        for size in reversed(self.buckets):
            static = self.padding(size)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                out = self.fn(*static)
            pool = graph.pool()
            self._graphs[size] = (graph, static, out)
        torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        log.info(
            "captured %d CUDA graphs (1..%d rows) in %.1f s",
            len(self.buckets),
            self.largest,
            seconds,
        )
        return seconds

    def replay(self, *inputs: torch.Tensor) -> torch.Tensor:
        """Run the graph of ``len(inputs[0])`` rows (a bucket size); returns its output
        buffer, overwritten by the next replay of that bucket."""
        graph, static, out = self._graphs[len(inputs[0])]
        for buffer, value in zip(static, inputs, strict=True):
            buffer.copy_(value, non_blocking=True)
        graph.replay()
        return out
