"""What a family says about a checkpoint it recognises as its own.

Each family with checkpoints exposes ``recognize(path) -> Recognized | None`` in its
``recognize`` module (cheap: file names and JSON, no tensors, no torch), and a
``LOOKS_FOR`` line saying what it looks for; ``models.registry`` asks each in turn.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Recognized:
    """A checkpoint a family can serve."""

    family: str
    """Registry name of the family."""
    variant: str
    """What kind of the family's checkpoints it is (``custom_voice``, ``turbo``...)."""
    config: str
    """The shipped config (``configs/<config>.yaml``) that serves it."""
    why: str
    """What identified it, for people: the file and the value that decided."""
    path: Path
    """The checkpoint directory (or file) recognised."""
    alternatives: tuple[str, ...] = ()
    """Other configs that serve it when ``config`` is not there, the closest first."""
    details: tuple[tuple[str, str], ...] = ()
    """Further facts for reports (``("size", "1.7B")``)."""

    def pick_config(self, known: list[str]) -> str | None:
        """``config``, else the first alternative among ``known`` config names."""
        for name in (self.config, *self.alternatives):
            if name in known:
                return name
        return None


def read_config(path: Path) -> dict | None:
    """``path/config.json`` as a dict when it is there and readable JSON; None otherwise."""
    import json

    config = path / "config.json"
    if not config.is_file():
        return None
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def config_of(path: Path, model_type: str) -> dict | None:
    """``path/config.json`` as a dict when it is readable JSON naming ``model_type``
    (a recogniser's first question); None otherwise."""
    data = read_config(path)
    return data if data is not None and data.get("model_type") == model_type else None
