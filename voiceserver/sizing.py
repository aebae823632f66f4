"""Start-up sizing: a model config's ``auto`` settings made numbers before the model loads.

``model.max_contexts`` (the runner's slots) and the engine's ``max_ar_batch`` and
``max_vocoder_batch`` may be ``auto`` (the shipped GPU-capable configs say so). On a
CPU they take the family's CPU defaults (what they were before sizing existed). On
CUDA they come from ``models.sizing.plan`` over the family's memory profile of the
checkpoint and the memory free after the weights: measured free memory now, less the
weights' bytes (known from the checkpoint's headers before they load). A value the
user set (YAML, ``--option``, ``--engine``) is kept. Families without a sizing module
take no ``auto``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models.registry import sizing_of
from models.sizing import Explicit, Plan, Sizes, SizingError, gib, plan
from voiceserver.config import ModelConfig

AUTO = "auto"


@dataclass(frozen=True)
class Sized:
    """A config with numbers where it said ``auto``, and what was decided and why."""

    config: ModelConfig
    lines: tuple[str, ...]
    """For the start-up log: one line each."""
    plan: Plan | None = None
    """The GPU plan (None on a CPU, or when nothing was left to size)."""


def device_of(config: ModelConfig) -> str:
    return str(config.model.get("device", "cpu"))


def checkpoint_of(config: ModelConfig) -> Path | None:
    path = config.checkpoint or config.model.get("checkpoint")
    return Path(path) if path else None


def explicit(config: ModelConfig) -> Explicit:
    """What the config fixes (everything but its ``auto`` settings)."""
    contexts = config.model.get("max_contexts", AUTO)
    if contexts != AUTO and (not isinstance(contexts, int) or isinstance(contexts, bool)):
        raise ValueError(f"model.max_contexts must be a whole number or auto, got {contexts!r}")
    return Explicit(
        max_contexts=None if contexts == AUTO else contexts,
        max_ar_batch=None if "max_ar_batch" in config.sized_engine else config.engine.max_ar_batch,
        max_vocoder_batch=None
        if "max_vocoder_batch" in config.sized_engine
        else config.engine.max_vocoder_batch,
    )


def size_model(config: ModelConfig, free_bytes: int | None = None) -> Sized:
    """Resolve ``config``'s ``auto`` settings. ``free_bytes``: the device memory free
    before the weights load (None: measured, on CUDA); the CPU ignores it."""
    sizing = sizing_of(config.family)
    fixed = explicit(config)
    auto = [k for k, v in dataclasses.asdict(fixed).items() if v is None]
    if sizing is None:
        if config.sized_engine:
            raise ValueError(
                f"engine.{config.sized_engine[0]}: auto needs a family that sizes itself "
                f"(the {config.family} family does not); give a number"
            )
        return Sized(config, ())
    if not auto:
        return Sized(config, ())
    device = device_of(config)
    if not device.startswith("cuda"):
        sizes = _filled(fixed, sizing.CPU)
        lines = (
            f"sized on the CPU: {_listed(sizes, auto)} (the family's CPU defaults;"
            " on CUDA they are sized from the memory free after the weights)",
        )
        return Sized(_apply(config, sizes), lines)
    checkpoint = checkpoint_of(config)
    if checkpoint is None:
        raise ValueError("sizing for CUDA needs the checkpoint directory: pass --model DIR")
    profile = sizing.memory_profile(checkpoint, config.model)
    if free_bytes is None:
        free_bytes = measured_free_bytes(device)
    after = free_bytes - profile.weights_bytes
    result = plan(profile, after, config.engine.max_chunk_frames, fixed)
    lines = (
        f"sized for {device} ({gib(free_bytes)} free before the weights): "
        f"{_listed(result.sizes, auto)}",
        *(f"  {reason}" for reason in result.reasons),
        *(f"  {note}" for note in profile.notes),
    )
    return Sized(_apply(config, result.sizes), lines, result)


def measured_free_bytes(device: str) -> int:
    """Free memory of a CUDA device now (the CUDA context is made first)."""
    import torch

    if not torch.cuda.is_available():
        raise SizingError(
            f"device {device}: no CUDA device here (torch {torch.__version__}); plan for one "
            "with voiceserver onboard --gpu-memory GIB, or serve with --device cpu"
        )
    free, _total = torch.cuda.mem_get_info(torch.device(device))
    return int(free)


def memory_line(config: ModelConfig) -> str | None:
    """On CUDA, the device's free and total memory now (after start-up), for the log."""
    device = device_of(config)
    if not device.startswith("cuda"):
        return None
    import torch

    free, total = torch.cuda.mem_get_info(torch.device(device))
    used = torch.cuda.max_memory_reserved(torch.device(device))
    return (
        f"{device} after start-up: {gib(free)} free of {gib(total)} "
        f"(this process reserved at most {gib(used)})"
    )


def _filled(fixed: Explicit, defaults: Sizes) -> Sizes:
    return Sizes(
        fixed.max_contexts if fixed.max_contexts is not None else defaults.max_contexts,
        fixed.max_ar_batch if fixed.max_ar_batch is not None else defaults.max_ar_batch,
        fixed.max_vocoder_batch
        if fixed.max_vocoder_batch is not None
        else defaults.max_vocoder_batch,
    )


def _listed(sizes: Sizes, keys: list[str]) -> str:
    return ", ".join(f"{k} {getattr(sizes, k)}" for k in keys)


def _apply(config: ModelConfig, sizes: Sizes) -> ModelConfig:
    model: Mapping[str, Any] = {**config.model, "max_contexts": sizes.max_contexts}
    engine = dataclasses.replace(
        config.engine, max_ar_batch=sizes.max_ar_batch, max_vocoder_batch=sizes.max_vocoder_batch
    )
    return dataclasses.replace(config, model=model, engine=engine, sized_engine=())
