"""VoXtream2's voices: a prompt (Mimi codes of a voice's audio) and a speaker embedding.

The model has no voice of its own: every context speaks in the voice of an audio prompt.
Named voices are prompts the server loads at start-up, from a checkpoint's ``voices/``
folder or the config: ``<name>.npz`` (``codes`` int [T, 16], ``speaker`` float [192]) or
the reference's prompt cache ``<name>.prompt.npy`` (``audio_tokens`` [1, 16, T] and
``spk_embedding`` [1, 192], saved by ``np.save`` of a dict). A request may instead bring
reference audio (``ref_audio``), encoded once per request (or once for good through
``POST /v1/audio/voices``) when the checkpoint has the encoders.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from models.base import CLONE_VOICE, ModelInputError


@dataclass(frozen=True)
class VoxVoice:
    codes: np.ndarray
    """int64 [T, num_codebooks]: the prompt's Mimi codes (not yet delayed)."""
    speaker: np.ndarray
    """float32 [spk_embedding_dim]: the speaker embedding, L2-normalised."""


def checked_voice(
    codes: Any, speaker: Any, codebooks: int, vocab: int, speaker_dim: int, where: str
) -> VoxVoice:
    """A voice from arrays, or ModelInputError (param ``voice``) saying what is wrong."""
    ok = (
        isinstance(codes, np.ndarray)
        and isinstance(speaker, np.ndarray)
        and np.issubdtype(codes.dtype, np.integer)
        and codes.ndim == 2
        and codes.shape[1] == codebooks
        and len(codes) >= 1
        and np.issubdtype(speaker.dtype, np.floating)
        and speaker.shape == (speaker_dim,)
        and bool(np.isfinite(speaker).all())
    )
    if ok and (codes.min() < 0 or codes.max() >= vocab):
        ok = False
    if not ok:
        raise ModelInputError(
            f"voice: {where} is not a VoXtream voice (codes int [T, {codebooks}] below "
            f"{vocab}, speaker float [{speaker_dim}])",
            param="voice",
            code="unsupported_value",
        )
    return VoxVoice(codes.astype(np.int64), speaker.astype(np.float32))


def read_prompt(path: Path, codebooks: int, vocab: int, speaker_dim: int) -> VoxVoice:
    """A voice file: ``.npz`` (ours) or ``.prompt.npy`` (the reference's cache)."""
    if path.name.endswith(".prompt.npy"):
        data = np.load(path, allow_pickle=True).item()
        codes = np.asarray(data["audio_tokens"])[0].T
        speaker = np.asarray(data["spk_embedding"], np.float32).reshape(-1)
    else:
        with np.load(path) as data:
            codes, speaker = data["codes"], data["speaker"]
    return checked_voice(codes, speaker, codebooks, vocab, speaker_dim, path.name)


def voice_files(folder: Path) -> dict[str, Path]:
    """Voice name -> file of a ``voices/`` folder (sorted by name)."""
    found: dict[str, Path] = {}
    if folder.is_dir():
        for path in sorted(folder.iterdir()):
            if path.name.endswith(".prompt.npy"):
                found[path.name[: -len(".prompt.npy")]] = path
            elif path.suffix == ".npz":
                found[path.stem] = path
    return found


class Voices:
    def __init__(
        self,
        named: Mapping[str, VoxVoice],
        codebooks: int,
        vocab: int,
        speaker_dim: int,
        cloner: Callable[[Mapping[str, Any]], VoxVoice] | None = None,
    ) -> None:
        """``cloner(extra)``: a voice from a request's ``ref_audio`` (and its sample rate);
        None: this checkpoint cannot clone."""
        self.named = dict(named)
        self.codebooks, self.vocab, self.speaker_dim = codebooks, vocab, speaker_dim
        self.cloner = cloner

    @property
    def can_clone(self) -> bool:
        return self.cloner is not None

    def voice(self, name: str) -> VoxVoice:
        return self.named[name]

    def named_voice(self, name: str) -> VoxVoice:
        """The voice called ``name``; ModelInputError naming what there is otherwise."""
        if name in self.named:
            return self.named[name]
        if name == CLONE_VOICE:
            raise ModelInputError(
                f"ref_audio: voice {CLONE_VOICE!r} needs reference audio (ref_audio) or a "
                "stored voice's name",
                param="ref_audio",
                code="missing_field",
            )
        offered = ", ".join(repr(n) for n in self.named) or "none"
        raise ModelInputError(
            f"voice: unknown voice {name!r}; this model's voices: {offered}"
            + (f", or {CLONE_VOICE!r} with ref_audio" if self.can_clone else ""),
            param="voice",
            code="unknown_voice",
        )

    def clone(self, extra: Mapping[str, Any]) -> VoxVoice:
        if self.cloner is None:
            raise ModelInputError(
                "ref_audio: this checkpoint cannot clone voices (its speaker encoder or "
                "Mimi weights are not configured)",
                param="ref_audio",
                code="unsupported_value",
            )
        return self.cloner(extra)

    def stored(self, arrays: Mapping[str, np.ndarray]) -> VoxVoice:
        return checked_voice(
            arrays.get("codes"),
            arrays.get("speaker"),
            self.codebooks,
            self.vocab,
            self.speaker_dim,
            "the stored voice",
        )
