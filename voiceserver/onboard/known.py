"""``voiceserver onboard`` for a checkpoint a family recognises: what it is, whether its
weights match (the strict check), what it costs and how many streams fit on a device
(the start-up sizing's own arithmetic, ``voiceserver.sizing``), a config that serves it,
and the command that does."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from models.recognition import Recognized
from models.registry import check_weights, sizing_of
from models.sizing import CUDA_CONTEXT_BYTES, GIB, gib, human
from voiceserver.config import CONFIG_DIR, model_config_from_mapping
from voiceserver.sizing import Sized, size_model


@dataclass(frozen=True)
class Target:
    """The device a config is planned for."""

    device: str = "cpu"
    dtype: str | None = None
    """None: the shipped config's (float32); GPU plans default to bfloat16."""
    gpu_memory_gib: float | None = None
    """A card's total memory to plan for (None: measure the device, on CUDA)."""

    @property
    def gpu(self) -> bool:
        return self.device.startswith("cuda")

    def free_bytes(self) -> int | None:
        """Memory free before the weights: the card's size less a CUDA context, or
        None to measure it."""
        if self.gpu_memory_gib is None:
            return None
        return int(self.gpu_memory_gib * GIB) - CUDA_CONTEXT_BYTES


@dataclass(frozen=True)
class KnownReport:
    lines: list[str]
    config: dict[str, Any] | None
    """The config to write (None when the weights do not match)."""
    ok: bool
    sized: Sized | None = None
    """The GPU plan's outcome (None on a CPU)."""


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-.") or "model"


def default_name(found: Recognized) -> str:
    return slug(found.variant if found.family == "piper" else found.path.resolve().name)


def shipped_config(found: Recognized) -> tuple[str, dict[str, Any]]:
    known = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))
    name = found.pick_config(known)
    if name is None:
        raise ValueError(f"no shipped config serves it: configs/{found.config}.yaml is missing")
    return name, yaml.safe_load((CONFIG_DIR / f"{name}.yaml").read_text(encoding="utf-8"))


def report_known(found: Recognized, target: Target, name: str) -> KnownReport:
    lines = [
        f"family      {found.family}, variant {found.variant}"
        + "".join(f", {k} {v}" for k, v in found.details),
        f"            recognised by {found.why}",
    ]
    reports = check_weights(found.family, found.path) or []
    ok = all(r.ok for r in reports)
    lines.append(
        "weights     "
        + (
            "match the model (strict: none missing, unexpected or misshapen)"
            if ok
            else "DO NOT MATCH the model"
        )
    )
    for r in reports:
        lines.append(f"  {'ok ' if r.ok else 'BAD'} {r.describe()}  [{r.file}]")
    base_name, data = shipped_config(found)
    if not ok:
        lines.append("config      none written: fix the weights first")
        return KnownReport(lines, None, False)
    model = dict(data.get("model") or {})
    if target.gpu:
        model["device"] = target.device
        model["dtype"] = target.dtype or "bfloat16"
    elif target.dtype:
        model["dtype"] = target.dtype
    if found.family == "piper":
        model["voice_name"] = _piper_voice_name(found.variant)
    model.pop("checkpoint", None)  # the top-level checkpoint says it
    data = {**data, "name": name, "model": model, "checkpoint": str(found.path.resolve())}
    lines += _memory(found, target, data)
    config = model_config_from_mapping(data, f"configs/{name}.yaml")
    sized = None
    if target.gpu and sizing_of(found.family) is not None:
        sized = size_model(config, target.free_bytes())
        data = _with_sizes(data, sized)
        lines += plan_lines(sized)
    first = ("name", "family", "checkpoint")
    data = {**{k: data[k] for k in first}, **{k: v for k, v in data.items() if k not in first}}
    lines.append(f"based on    configs/{base_name}.yaml")
    return KnownReport(lines, data, True, sized)


def _piper_voice_name(stem: str) -> str:
    """``en_US-joe-medium`` -> ``joe`` (Piper's ``<language>-<name>-<quality>``)."""
    parts = stem.split("-")
    return parts[1] if len(parts) == 3 else stem


def _memory(found: Recognized, target: Target, data: dict[str, Any]) -> list[str]:
    sizing = sizing_of(found.family)
    model = data["model"]
    if sizing is None:
        return ["memory      runs on the CPU (onnxruntime): nothing to size for a GPU"]
    profile = sizing.memory_profile(found.path, model)
    lines = [
        f"memory      weights {human(profile.weights_bytes)} at {profile.dtype}; KV "
        f"{human(profile.kv_bytes_per_position)} a position"
        + (
            f" (budget {profile.kv_positions_per_stream} positions a stream, "
            f"{human(profile.kv_stream_bytes)})"
            if profile.paged
            else f" ({profile.kv_capacity} reserved per slot, {human(profile.kv_stream_bytes)})"
        )
        + f"; {human(profile.stream_bytes)} more a stream",
    ]
    if not target.gpu:
        cpu = sizing.CPU
        lines.append(
            f"streams     on the CPU: {cpu.max_contexts} at once (the family's CPU default; "
            "plan for a GPU with --device cuda or --gpu-memory GIB)"
        )
    return lines


def _with_sizes(data: dict[str, Any], sized: Sized) -> dict[str, Any]:
    config = sized.config
    model = {**data["model"], "max_contexts": config.model["max_contexts"]}
    engine = {
        **(data.get("engine") or {}),
        "max_ar_batch": config.engine.max_ar_batch,
        "max_vocoder_batch": config.engine.max_vocoder_batch,
    }
    return {**data, "model": model, "engine": engine}


def plan_lines(sized: Sized) -> list[str]:
    """The GPU plan's lines (empty when nothing was sized)."""
    if sized.plan is None:
        return []
    p = sized.plan
    return [
        f"streams     {p.sizes.max_contexts} at once on this GPU (max_contexts); AR batch "
        f"{p.sizes.max_ar_batch}, vocoder batch {p.sizes.max_vocoder_batch}; KV pool "
        f"{gib(p.kv_pool_bytes)}, vocoder activations {gib(p.vocoder_bytes)}",
        *(f"            {line.strip()}" for line in sized.lines[1:]),
    ]


def config_text(report: KnownReport, found: Recognized, target: Target) -> str:
    assert report.config is not None
    sized = report.sized
    head = [
        f"# Written by voiceserver onboard for {found.path.resolve()}",
        f"# ({found.family}, {found.variant}: {found.why}).",
    ]
    if sized is not None and sized.plan is not None:
        where = f"a {target.gpu_memory_gib:g} GiB GPU" if target.gpu_memory_gib else target.device
        head.append(
            f"# Sized for {where}: {sized.plan.sizes.max_contexts} contexts; set max_contexts,"
            " max_ar_batch and max_vocoder_batch to auto to size them at start-up instead."
        )
    return "\n".join(head) + "\n" + yaml.safe_dump(report.config, sort_keys=False)


def write_config(path: Path, text: str, force: bool) -> None:
    if path.exists() and not force:
        raise FileExistsError(f"{path} exists: pass --force to replace it, or --name")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
