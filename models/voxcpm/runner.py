"""VoxCPM2 behind the ModelRunner contract.

A frame is one patch: 4 latents of the AudioVAE, 160 ms of 48 kHz audio, made by one
step (the language models, then the DiT's flow-matching solve). The model reads a whole
text before it speaks it (the reference takes no streaming text), so each unit of text
(a sentence or clause, cut by the server's segmenter) is one generation of the
reference's, a turn (``models.kit.turns``): the voice's prompt and the unit's text
prefilled from position 0, then patches until the stop head says so after ``min_len``
steps, or until the reference's cap for that text (``int(6 * tokens + 10)`` patches) or
the request's. A context's random draws go on across its turns. Each turn's audio
decodes from its own first patch (the engine keeps a vocoder window inside its unit),
as the reference's streaming decoder starts each generation from a fresh state.

Instructions are the reference's style control: ``(instructions)`` before the text, in
every turn. A cloned voice with a transcript tokenizes transcript + text as one string,
as the reference does.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from models.base import (
    CLONE_VOICE,
    Capabilities,
    ClonedVoice,
    ModelInputError,
    Prepared,
    RequestField,
    SynthParams,
)
from models.fields import MAX_NEW_TOKENS, REF_AUDIO, REF_AUDIO_SAMPLE_RATE, REF_TEXT, SEED
from models.kit.requests import checked, voice_source
from models.kit.turns import TurnRunner
from models.random_draws import key_of
from models.voxcpm.prompt import build_prefill
from models.voxcpm.slots import Turn, VoxCPMSlots
from models.voxcpm.text import VoxCPMText
from models.voxcpm.voice import Cloner, CPMVoice, stored_voice

DEFAULT_VOICE = "default"
MAX_TURN_PATCHES = 2000
"""Patches one turn may make (the reference model's ``max_len`` default; 320 s)."""
TOKEN_RATIO = 6.0
"""The reference caps a text's patches at ``int(tokens * 6 + 10)``."""
CFG_VALUE = RequestField(
    "cfg_value",
    "number",
    0.0,
    10.0,
    doc="classifier-free guidance of the diffusion step",
    default=2.0,
)
REQUEST_FIELDS = (
    CFG_VALUE,
    SEED,
    replace(MAX_NEW_TOKENS, doc="cap on patches per text unit (6.25 a second)"),
    replace(REF_AUDIO, doc="audio of a voice to clone"),
    REF_AUDIO_SAMPLE_RATE,
    replace(REF_TEXT, doc="the reference audio's transcript (optional: a closer clone)"),
)


@dataclass
class CPMPrepared(Prepared):
    voice: CPMVoice | None = None
    style: str = ""
    """``(instructions)``, put before every unit's text."""
    cfg: float = 2.0
    key: int = 0
    max_frames: int = MAX_TURN_PATCHES


def fold_space(text: str) -> str:
    """The reference's text clean-up: newlines to spaces, runs of space to one."""
    return re.sub(r"\s+", " ", text.replace("\n", " "))


class VoxCPMRunner(TurnRunner):
    frame_dtype = np.float32
    max_frames_per_step = 1
    encodes_inline = True

    def __init__(
        self,
        slots: VoxCPMSlots,
        text: VoxCPMText,
        capabilities: Capabilities,
        capacity: int,
        *,
        cfg: float,
        max_frames: int,
        min_len: int = 2,
        cloner: Cloner | None = None,
        ignore_eos: bool = False,
    ) -> None:
        """``ignore_eos``: benchmarks only, a turn speaks until its cap."""
        super().__init__(len(slots.position) - 1, capacity)
        self.ar = slots
        self.text = text
        self.capabilities = capabilities
        self.cfg = cfg
        self.max_frames = max_frames
        self.min_len = min_len
        self.cloner = cloner
        self.ignore_eos = ignore_eos
        self.frame_dim = slots.patch * slots.feat_dim
        self._fields = {f.name: f for f in capabilities.request_fields}
        self.prepares_inline = cloner is None

    def kv_usage(self) -> tuple[int, int]:
        return self.ar.usage

    # -- before the first step ---------------------------------------------------

    def validate(self, params: SynthParams) -> None:
        self._settings(params)
        self._voice(params, build=False)

    def _settings(self, params: SynthParams) -> tuple[float, int, int]:
        value = checked(self._fields, params.extra)
        seed = value.get("seed")
        key = key_of(seed if seed is not None else random.getrandbits(64))
        cap = min(value.get("max_new_tokens", self.max_frames), self.max_frames)
        return value.get("cfg_value", self.cfg), key, cap

    def _voice(self, params: SynthParams, build: bool) -> CPMVoice | None:
        extra = params.extra
        stored, cloning = voice_source(extra, CPMVoice, "VoxCPM2", self.cloner is not None)
        if stored is not None:
            return stored
        if cloning:
            text = extra.get("ref_text")
            if text is not None and (not isinstance(text, str) or not text.strip()):
                raise ModelInputError(
                    "ref_text: the reference audio's transcript must be non-empty text",
                    param="ref_text",
                    code="invalid_field",
                )
            transcript = self._checked_text(text, "ref_text") if text is not None else None
            if not build:
                return None
            assert self.cloner is not None
            return self.cloner(extra, transcript)
        if params.voice == CLONE_VOICE:
            raise ModelInputError(
                f"ref_audio: voice {CLONE_VOICE!r} needs reference audio (base64), with or "
                "without its transcript (ref_text), or a stored voice's name",
                param="ref_audio",
                code="missing_field",
            )
        if params.voice != DEFAULT_VOICE:
            offered = ", ".join(repr(v.name) for v in self.capabilities.voices)
            raise ModelInputError(
                f"voice: unknown voice {params.voice!r}; this model has {offered}",
                param="voice",
                code="unknown_voice",
            )
        return None

    def _checked_text(self, text: str, field: str) -> str:
        folded = fold_space(text).strip()
        controls = self.text.control_tokens(folded)
        if controls:
            # They would steer the model (open an audio prompt, end the text).
            raise ModelInputError(
                f"{field}: control tokens are not allowed in text ({', '.join(controls)})",
                param=field,
                code="invalid_field",
            )
        if not folded or not any(i != 0 for i in self.text.ids(folded)):
            raise ModelInputError(
                f"{field}: nothing this model can read in {text[:40]!r}",
                param=field,
                code="invalid_field",
            )
        return folded

    def prepare(self, params: SynthParams) -> CPMPrepared:
        cfg, key, cap = self._settings(params)
        voice = self._voice(params, build=True)
        style = ""
        if params.instructions:
            style = f"({self._checked_text(params.instructions, 'instructions')})"
        self._check_room(voice, style)
        return CPMPrepared(voice=voice, style=style, cfg=cfg, key=key, max_frames=cap)

    def _check_room(self, voice: CPMVoice | None, style: str) -> None:
        """Every unit's prompt carries the voice (its patches and transcript) and the
        style: what leaves no room for a unit's text and patches is refused here, naming
        the field, not skipped unit by unit (a request answered with no audio)."""
        used = 0
        if voice is not None:
            used = len(voice.reference) + (len(voice.prompt) if voice.prompt is not None else 0)
            if used + 64 > self.capacity:
                raise ModelInputError(
                    f"ref_audio: the reference ({used} patches) leaves no room in a context "
                    f"of {self.capacity} positions; use a shorter one",
                    param="ref_audio",
                    code="invalid_field",
                )
            if voice.text is not None:
                words = len(self.text.ids(voice.text))
                if used + words + 64 > self.capacity:
                    raise ModelInputError(
                        f"ref_text: the transcript ({words} tokens) with the reference's "
                        f"{used} patches leaves no room in a context of {self.capacity} "
                        "positions; use a shorter clip and its transcript",
                        param="ref_text",
                        code="invalid_field",
                    )
                used += words
        if style:
            styled = len(self.text.ids(style))
            if used + styled + 64 > self.capacity:
                raise ModelInputError(
                    f"instructions: {styled} tokens"
                    + (f" with the voice's {used} positions" if used else "")
                    + f" leave no room in a context of {self.capacity} positions; "
                    "shorten them",
                    param="instructions",
                    code="invalid_field",
                )

    def clone_voice(self, ref_audio: bytes, options: Mapping[str, Any]) -> ClonedVoice:
        """Reference audio (and its transcript, ``options["ref_text"]``, if given) as
        the arrays the server stores: the clip's encoded patches."""
        params = SynthParams(
            voice=CLONE_VOICE, extra={"ref_audio": ref_audio, "ref_text": options.get("ref_text")}
        )
        voice = self._voice(params, build=True)
        assert voice is not None
        self._check_room(voice, "")
        return ClonedVoice(voice.arrays(), {"family": "voxcpm"})

    def voice_settings(self, voice: ClonedVoice) -> tuple[str, dict[str, Any]]:
        stored = stored_voice(voice.arrays, self.ar.patch, self.ar.feat_dim)
        return CLONE_VOICE, {"voice_prompt": stored}

    def encode_text(self, text: str) -> list[np.ndarray]:
        """One turn per text unit (its UTF-8 bytes: a turn tokenizes it with the voice's
        transcript); nothing for blank text."""
        folded = fold_space(text).strip()
        if not folded:
            return []
        self._checked_text(folded, "input")
        return [np.frombuffer(folded.encode("utf-8"), np.uint8).astype(np.int64)]

    # -- the turn runner's hooks ----------------------------------------------------

    def start_turns(self, units: list[tuple[int, np.ndarray]]) -> tuple[list[int], torch.Tensor]:
        turns = [t for t in (self._turn(slot, unit) for slot, unit in units) if t is not None]
        self.ar.start(turns)
        started = np.asarray([t.slot for t in turns], np.int64)
        if not len(started):
            return [], torch.zeros((0, self.ar.frame_width), device=self.ar.device)
        return started.tolist(), self.ar.advance(started)

    def _turn(self, slot: int, unit: np.ndarray) -> Turn | None:
        p = self.prepared[slot]
        assert isinstance(p, CPMPrepared)
        target = p.style + bytes(unit.astype(np.uint8)).decode("utf-8")
        voice = p.voice
        target_ids = self.text.ids(target)
        if voice is not None and voice.text is not None:
            ids = self.text.ids(voice.text + target)
        else:
            ids = target_ids
        prefill = build_prefill(
            ids,
            self.ar.patch,
            self.ar.feat_dim,
            reference=voice.reference if voice is not None else None,
            prompt=voice.prompt if voice is not None and voice.text is not None else None,
        )
        if len(prefill.tokens) + 8 > self.capacity:
            self.hit_limit[slot] = True
            return None
        cap = int(len(target_ids) * TOKEN_RATIO + 10)
        self.turn_cap[slot] = min(p.max_frames, cap)
        return Turn(slot, prefill, p.cfg, bool(self.fresh[slot]), p.key)

    def advance(self, slots: np.ndarray) -> torch.Tensor:
        return self.ar.advance(slots)

    def ends(self, slots: np.ndarray, made: np.ndarray, started: int) -> np.ndarray:
        if self.ignore_eos:
            return np.zeros(len(slots), bool)
        # The stop head counts from the turn's step ``min_len + 1`` on.
        return (made[:, 0] > 0.5) & (self.made[slots] > self.min_len)

    def emit(
        self, slots: np.ndarray, made: np.ndarray, ended: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        # Every patch is spoken, the one that stops its turn too.
        return made[:, None, 1:], np.ones((len(made), 1), bool)

    def positions(self, slots: np.ndarray) -> np.ndarray:
        return self.ar.position[slots]

    def release(self, slot: int) -> None:
        self.ar.release(slot)
