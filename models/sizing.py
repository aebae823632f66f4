"""How many streams a model serves at once on a GPU, from the memory free after its weights.

Pure arithmetic over a family's :class:`MemoryProfile` (what the weights, one stream
and one vocoder call cost, read off its checkpoint and options) and a number of free
bytes, so the server's start-up sizing (``voiceserver.sizing``, free memory measured)
and ``voiceserver onboard`` (a memory figure given) give the same answer, and tests
can check it on a CPU.

The memory free after the weights goes, in this order, to:

1. headroom: ``HEADROOM`` of it stays unplanned (allocator fragmentation, cuBLAS and
   Triton workspaces, other processes);
2. a paged KV pool: ``kv_memory_fraction`` of the free memory, as the family's
   loader sizes it; a family without paging reserves ``kv_capacity`` positions per
   stream instead (step 4);
3. the vocoder's calls: the activations of its graphs (one pool per captured chunk
   length) and of its largest eager call, for a batch cap chosen so that they take
   at most ``VOCODER_SHARE`` of what the KV pool leaves;
4. the streams: each takes ``stream_bytes`` (decoder state rows, per-slot tables,
   graph rows) from what is left, and ``kv_positions_per_stream`` positions from the
   pool; the fewer of the two counts wins, capped at the family's ``max_streams``
   (what one device can step in real time) and rounded down to a graph bucket.

The AR batch cap is the stream count (every context steps together); the vocoder
batch cap is the one step 3 chose, at most the stream count. Explicit values win.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1 << 30
MIB = 1 << 20
HEADROOM = 0.10
"""Share of the free memory left unplanned."""
VOCODER_SHARE = 0.25
"""Most of the memory the KV pool leaves that the vocoder's calls may take."""
CUDA_CONTEXT_BYTES = 1 * GIB
"""A process's CUDA context, kernels and library handles: what a card's total memory
loses before anything is allocated (for plans made from a card's size)."""


class SizingError(ValueError):
    """The model does not fit the device: the message gives the figures."""


@dataclass(frozen=True)
class Sizes:
    """The three settings start-up sizing decides."""

    max_contexts: int
    """The runner's slots: contexts generating at once."""
    max_ar_batch: int
    """``EngineConfig.max_ar_batch``."""
    max_vocoder_batch: int
    """``EngineConfig.max_vocoder_batch``."""


@dataclass(frozen=True)
class Explicit:
    """Settings the user gave (None: size it)."""

    max_contexts: int | None = None
    max_ar_batch: int | None = None
    max_vocoder_batch: int | None = None


@dataclass(frozen=True)
class MemoryProfile:
    """What one model costs on a device, from its checkpoint and options (a family's
    ``memory_profile``). Byte figures are at the model's dtype."""

    family: str
    dtype: str
    weights_bytes: int
    """The weights on the device (from the checkpoint's headers)."""
    kv_bytes_per_position: int
    """Keys and values of one position over every layer."""
    kv_positions_per_stream: int
    """Positions one stream is budgeted in a paged pool (a longer one takes blocks
    shorter ones left)."""
    kv_memory_fraction: float | None
    """Share of the free memory the paged KV pool takes; None: not paged, every slot
    reserves ``kv_capacity`` positions."""
    kv_capacity: int
    """Positions one slot may reach."""
    stream_bytes: int
    """One stream's memory besides KV: decoder state rows, per-slot tables, graph rows."""
    vocoder_frame_bytes: int
    """Activations one frame of a vocoder call holds at its peak."""
    vocoder_frames_per_row: int | None = None
    """Frames one row of a vocoder call carries (None: the engine's ``max_chunk_frames``;
    a decoder that takes whole clauses says how long one is)."""
    vocoder_graph_frames: tuple[int, ...] = ()
    """Chunk lengths the vocoder captures graphs for (each graph set has its own pool)."""
    vocoder_graph_max_frames: int = 0
    """Largest call (batch x chunk frames) a vocoder graph covers; larger ones run eagerly."""
    vocoder_batch_cap: int = 256
    """Largest useful vocoder batch (its largest graph bucket)."""
    max_streams: int = 512
    """Most streams worth slots on one device: past what it can step in real time, a
    slot costs memory and graph captures and serves nobody (admission control
    refuses instead)."""
    reserve_bytes: int = 2 * GIB
    """Fixed costs: the AR graphs' shared buffers, prompt prefill bursts, workspaces."""
    notes: tuple[str, ...] = ()
    """Where the estimates come from, for reports."""

    def vocoder_bytes(self, batch: int, chunk_frames: int) -> int:
        """The vocoder's activation memory at batch cap ``batch``."""
        per_row = self.vocoder_frames_per_row or chunk_frames
        frames = sum(
            min(self.vocoder_graph_max_frames, batch * f) for f in self.vocoder_graph_frames
        )
        largest = batch * per_row
        if not self.vocoder_graph_frames or largest > self.vocoder_graph_max_frames:
            frames += largest  # the largest call runs eagerly, beside the graphs' pools
        return frames * self.vocoder_frame_bytes

    @property
    def kv_stream_bytes(self) -> int:
        """KV one stream is budgeted (paged) or reserves (not paged)."""
        positions = self.kv_positions_per_stream if self.paged else self.kv_capacity
        return positions * self.kv_bytes_per_position

    @property
    def paged(self) -> bool:
        return self.kv_memory_fraction is not None


@dataclass(frozen=True)
class Plan:
    """What :func:`plan` decided, and why."""

    sizes: Sizes
    free_bytes: int
    """Memory free after the weights."""
    kv_pool_bytes: int
    vocoder_bytes: int
    fits: int
    """Streams the memory alone holds (before the cap and rounding)."""
    reasons: tuple[str, ...]


def round_streams(n: int) -> int:
    """``n`` rounded down to a batch size the graphs capture exactly."""
    for at_least, step in ((256, 64), (64, 16), (16, 8)):
        if n >= at_least:
            return n - n % step
    return n


def gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def human(n: float) -> str:
    """Bytes in the largest binary unit that keeps them at 1 or more."""
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", 1024)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def plan(
    profile: MemoryProfile,
    free_bytes: int,
    chunk_frames: int,
    explicit: Explicit = Explicit(),
) -> Plan:
    """Size ``profile``'s model for ``free_bytes`` free after its weights load;
    ``chunk_frames`` is the engine's ``max_chunk_frames``."""
    usable = int(free_bytes * (1 - HEADROOM))
    pool = int(free_bytes * profile.kv_memory_fraction) if profile.paged else 0  # type: ignore[operator]
    pool = min(pool, usable)
    left = usable - pool - profile.reserve_bytes
    reasons = [
        f"{gib(free_bytes)} free after the weights ({human(profile.weights_bytes)} at "
        f"{profile.dtype}); {HEADROOM:.0%} kept as headroom, {gib(profile.reserve_bytes)} "
        "for graphs' fixed buffers and workspaces"
    ]

    if explicit.max_vocoder_batch is not None:
        vocoder_batch = explicit.max_vocoder_batch
        why_vocoder = "as set"
    else:
        vocoder_batch = 1
        for batch in _powers_of_two(profile.vocoder_batch_cap):
            if profile.vocoder_bytes(batch, chunk_frames) <= VOCODER_SHARE * max(left, 0):
                vocoder_batch = batch
                break
        why_vocoder = (
            f"its calls' activations within {VOCODER_SHARE:.0%} of the memory the KV pool "
            f"leaves, at most {profile.vocoder_batch_cap}"
        )
    vocoder = profile.vocoder_bytes(vocoder_batch, chunk_frames)
    rest = left - vocoder

    if profile.paged:
        by_kv = pool // profile.kv_stream_bytes
        by_rest = max(rest, 0) // profile.stream_bytes
        fits = min(by_kv, by_rest)
        reasons.append(
            f"KV pool {gib(pool)} ({profile.kv_memory_fraction:g} of the free memory) holds "
            f"{by_kv:,} streams of {profile.kv_positions_per_stream} positions at "
            f"{human(profile.kv_bytes_per_position)}; the remaining "
            f"{gib(max(rest, 0))} after the vocoder's {human(vocoder)} holds {by_rest:,} at "
            f"{human(profile.stream_bytes)} each"
        )
    else:
        per = profile.kv_stream_bytes + profile.stream_bytes
        fits = max(rest, 0) // per
        reasons.append(
            f"{gib(max(rest, 0))} after the vocoder's {human(vocoder)} holds {fits:,} streams at "
            f"{human(per)} each ({profile.kv_capacity} KV positions of "
            f"{human(profile.kv_bytes_per_position)} reserved per slot, "
            f"{human(profile.stream_bytes)} besides)"
        )

    if explicit.max_contexts is not None:
        contexts = explicit.max_contexts
        why_contexts = "as set" + (
            f" (above the {fits:,} the memory holds: expect out-of-memory errors)"
            if contexts > fits
            else ""
        )
    else:
        if fits < 1:
            raise SizingError(
                f"the {profile.family} model does not fit: {gib(free_bytes)} free after its "
                f"{human(profile.weights_bytes)} of weights at {profile.dtype} holds no stream "
                f"(one needs {human(profile.kv_stream_bytes + profile.stream_bytes)} and the "
                f"vocoder {human(vocoder)}); use a smaller dtype or a larger GPU"
            )
        contexts = round_streams(min(fits, profile.max_streams))
        why_contexts = (
            f"capped at {profile.max_streams}, the most one device keeps in real time"
            if fits > profile.max_streams
            else "what the memory holds, rounded down to a graph bucket"
        )
    if explicit.max_ar_batch is not None:
        ar_batch, why_ar = explicit.max_ar_batch, "as set"
    else:
        ar_batch, why_ar = contexts, "every context in one step"
    if explicit.max_vocoder_batch is None and vocoder_batch > contexts:
        vocoder_batch = contexts
        why_vocoder = "no more than the contexts"
    reasons += [
        f"max_contexts {contexts}: {why_contexts}",
        f"max_ar_batch {ar_batch}: {why_ar}",
        f"max_vocoder_batch {vocoder_batch}: {why_vocoder}",
    ]
    if not profile.paged:
        pool = contexts * profile.kv_stream_bytes
    return Plan(
        Sizes(contexts, ar_batch, vocoder_batch),
        free_bytes,
        pool,
        profile.vocoder_bytes(vocoder_batch, chunk_frames),
        int(fits),
        tuple(reasons),
    )


def _powers_of_two(cap: int) -> list[int]:
    out = []
    size = 1
    while size <= cap:
        out.append(size)
        size *= 2
    if out and out[-1] != cap:
        out.append(cap)
    return sorted(out, reverse=True)
