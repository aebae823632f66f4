"""The names a client may give the served model, and OpenAI's names for models and voices.

A model answers to its served names (``--served-model-name``), its config
name, its family and its checkpoint directory's name. A Hugging Face id
(``Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice``) answers when its last part is the
checkpoint directory's name, as clients of vLLM send the id the model was
downloaded by; a Hugging Face cache snapshot folder answers to its repository id.
Names compare without regard to case.

On the OpenAI endpoint, OpenAI's own model names (``OPENAI_MODELS``) mean the
served model, and OpenAI's voice names (``OPENAI_VOICES``) mean a voice of the
model (``ModelConfig.openai_voices``, by default its default voice), so OpenAI
clients and agent frameworks that only let OpenAI's names through work unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from voiceserver.config import ModelConfig

OPENAI_MODELS = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")
OPENAI_VOICES = (
    "alloy",
    "ash",
    "ballad",
    "cedar",
    "coral",
    "echo",
    "fable",
    "marin",
    "nova",
    "onyx",
    "sage",
    "shimmer",
    "verse",
)
"""OpenAI's thirteen speech voices (as of gpt-4o-mini-tts)."""

_HF_CACHE = re.compile(r"models--([^/]+?)--([^/]+)$")


def checkpoint_names(checkpoint: Path | None) -> tuple[str, ...]:
    """What a checkpoint folder is called: its own name, or for a Hugging Face
    cache snapshot (``models--Org--Name/snapshots/<hash>``) ``Org/Name`` and ``Name``."""
    if checkpoint is None:
        return ()
    path = Path(checkpoint).expanduser()
    for part in (path, *path.parents):
        match = _HF_CACHE.search(part.name)
        if match:
            return (f"{match[1]}/{match[2]}", match[2])
    return (path.name,) if path.name else ()


class ModelNames:
    """Every name the served model answers to, in the order /v1/models lists them."""

    def __init__(self, config: ModelConfig) -> None:
        names = (
            *config.served_model_names,
            config.name,
            *checkpoint_names(config.checkpoint),
            config.family,
        )
        self.names = tuple(dict.fromkeys(names))
        self._keys = {name.lower() for name in self.names}
        self._leaves = {name.lower() for name in checkpoint_names(config.checkpoint)}

    @property
    def primary(self) -> str:
        return self.names[0]

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        key = name.strip().lower()
        if key in self._keys:
            return True
        owner, sep, leaf = key.rpartition("/")
        return bool(sep and owner and leaf in self._leaves)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)


def is_openai_model(name: str | None) -> bool:
    return name is not None and name.strip().lower() in OPENAI_MODELS


def openai_voice(
    name: str, model_voices: tuple[str, ...], aliases: dict[str, str] | None
) -> str | None:
    """The model voice an OpenAI voice name stands for (None: the model's default);
    ``name`` itself when the model has a voice of that name or it is not OpenAI's."""
    key = name.strip().lower()
    if key in (v.lower() for v in model_voices) or key not in OPENAI_VOICES:
        return name
    return (aliases or {}).get(key)
