"""``voiceserver onboard DIR --scaffold NAME``: the files of a new family, to be filled in.

Writes, under a target folder (the repository by default, ``--into`` elsewhere):
``models/NAME/`` (a loader with a strict key map read off the checkpoint, a runner
and a vocoder that are marked skeletons: every method raises NotImplementedError
saying what to write), ``configs/NAME.yaml``, and ``tests/models/NAME/`` (tests that
run now and skip, saying why, until the model code and the reference are there).
"""

from __future__ import annotations

import json
import keyword
import re
from collections import defaultdict
from pathlib import Path
from string import Template

from voiceserver.onboard import templates
from voiceserver.onboard.blocks import BACKBONE, Block
from voiceserver.onboard.inspect import Inspection, group_tensors

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def check_name(name: str) -> str:
    if not _NAME.match(name) or keyword.iskeyword(name):
        raise ValueError(
            f"--scaffold {name!r}: a family name is lowercase letters, digits and "
            "underscores, starting with a letter (it becomes models/NAME/)"
        )
    return name


def key_map(inspection: Inspection, blocks: list[Block]) -> dict[str, dict[str, str]]:
    """Per weight file, its prefixes -> module prefixes: a recognised block's prefix goes
    to a module named for its kind (``backbone.``, ``codec.``), every other top-level
    name keeps its own (longest prefix wins, so nested blocks map inside their parent)."""
    out: dict[str, dict[str, str]] = {}
    for f in inspection.files:
        name = str(f.path)
        prefixes: dict[str, str] = {}
        counts: dict[str, int] = defaultdict(int)
        for block in blocks:
            if block.file != name or not block.prefix:
                continue
            kind = "backbone" if block.kind == BACKBONE else "codec"
            counts[kind] += 1
            prefixes[block.prefix] = kind + (f"_{counts[kind]}" if counts[kind] > 1 else "") + "."
        for group in group_tensors(f.tensors):
            head, dot, _ = group.prefix.partition(".")
            prefixes.setdefault(head + dot, head + dot)
        out[name] = dict(sorted(prefixes.items()))
    return out


def scaffold(
    name: str,
    inspection: Inspection,
    blocks: list[Block],
    layout: list[str],
    into: Path,
    reference: str | None,
    force: bool = False,
) -> list[Path]:
    """Write the family's files under ``into``; returns them. Refuses to replace a file
    unless ``force``."""
    check_name(name)
    codecs = [b for b in blocks if b.kind != BACKBONE]
    source = str(inspection.path.resolve())
    values = {
        "name": name,
        "camel": "".join(part.capitalize() for part in name.split("_")),
        "title": name.replace("_", " ").title(),
        "source": source,
        "checkpoint": source,
        "key_map": _pretty(key_map(inspection, blocks)),
        "layout": "\n".join(f"- {line.strip()}" for line in layout),
        "codec": codecs[0].describe() if codecs else "No codec decoder was recognised.",
        "reference": "None" if reference is None else json.dumps(reference),
        "reference_text": reference or "(none named yet)",
    }
    package = into / "models" / name
    files = {
        package / "__init__.py": templates.INIT,
        package / "loader.py": templates.LOADER,
        package / "runner.py": templates.RUNNER,
        package / "vocoder.py": templates.VOCODER,
        into / "configs" / f"{name}.yaml": templates.CONFIG,
        into / "tests" / "models" / name / f"test_{name}_parity.py": templates.TEST,
    }
    existing = [p for p in files if p.exists()]
    if existing and not force:
        raise FileExistsError(
            f"{existing[0]} exists: pick another name, or pass --force to replace the scaffold"
        )
    for path, template in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(Template(template).substitute(values), encoding="utf-8")
    return list(files)


def _pretty(mapping: dict[str, dict[str, str]]) -> str:
    lines = ["{"]
    for file, prefixes in mapping.items():
        lines.append(f"    {json.dumps(file)}: {{")
        lines += [f"        {json.dumps(k)}: {json.dumps(v)}," for k, v in prefixes.items()]
        lines.append("    },")
    lines.append("}")
    return "\n".join(lines)
