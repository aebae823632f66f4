"""``voiceserver onboard`` for a checkpoint no family recognises: a report a person can
act on (the architecture and sizes its config declares, its tensors by prefix, the
shared blocks recognised in them, and the stage layout they suggest)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from voiceserver.onboard.blocks import Block, find_blocks, heads, stage_layout
from voiceserver.onboard.inspect import Inspection

MAX_PATTERNS = 12
"""Key patterns listed per tensor group (then how many more)."""


@dataclass(frozen=True)
class UnknownReport:
    lines: list[str]
    blocks: list[Block]
    layout: list[str]


def _count(n: int) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return str(n)


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _shape(shapes: set[tuple[int, ...]]) -> str:
    if len(shapes) == 1:
        return "(" + ", ".join(str(d) for d in next(iter(shapes))) + ")"
    return f"{len(shapes)} shapes"


def report_unknown(inspection: Inspection) -> UnknownReport:
    lines: list[str] = []
    config: dict = {}
    summary = inspection.config
    if summary is None:
        lines.append("config.json none")
    else:
        config = json.loads(summary.path.read_text(encoding="utf-8"))
        arch = ", ".join(summary.architectures) or "(no architectures)"
        types = ", ".join(f"{where}: {kind}" for where, kind in summary.model_types) or "none"
        lines.append(f"config.json architectures {arch}; model_type {types}")
        if summary.sizes:
            lines.append("  sizes: " + ", ".join(f"{k} {v}" for k, v in summary.sizes))
    if inspection.other_files:
        lines.append("other files " + ", ".join(inspection.other_files))
    blocks: list[Block] = []
    found_heads: list[str] = []
    for f in inspection.files:
        dtypes = sorted({t.dtype for t in f.tensors.values()})
        lines.append(
            f"weights     {f.path}: {len(f.tensors)} tensors, {_count(f.params)} parameters, "
            f"{', '.join(dtypes)}, {f.nbytes / 2**20:.1f} MiB"
        )
        for group in f.groups():
            layers = f", {len(group.layers)} layers" if len(group.layers) > 1 else ""
            lines.append(
                f"  {group.prefix or '(top)'}: {_plural(group.tensors, 'tensor')}{layers}, "
                f"{_count(group.params)} parameters, {', '.join(sorted(group.dtypes))}"
            )
            patterns = list(group.patterns.values())
            for p in patterns[:MAX_PATTERNS]:
                times = f" x{p.count}" if p.count > 1 else ""
                lines.append(f"      {p.pattern} {_shape(p.shapes)}{times}")
            if len(patterns) > MAX_PATTERNS:
                lines.append(f"      ... {len(patterns) - MAX_PATTERNS} more patterns")
        file_config = config if f.path.parent == Path(".") else {}
        blocks += find_blocks(f.tensors, str(f.path), file_config)
        found_heads += heads(f.tensors, str(f.path))
    if not inspection.files:
        lines.append("weights     no .safetensors files")
    lines.append("recognised blocks")
    lines += [f"  {b.describe()}" for b in blocks] or [
        "  none of: Llama/Qwen2/Qwen3 or GPT-2 decoders, Mimi, DAC-style or HiFi-GAN decoders"
    ]
    for b in blocks:
        lines.append(f"      by its keys: {b.evidence}")
    if found_heads:
        lines.append("output heads")
        lines += [f"  {h}" for h in found_heads]
    layout = stage_layout(blocks)
    lines.append("stage layout (a guess)")
    lines += [f"  {line}" for line in layout]
    return UnknownReport(lines, blocks, layout)
