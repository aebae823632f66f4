"""Fish Speech S2 Pro behind the ModelRunner contract.

A frame is one slow-transformer position: a semantic token and the codes of its
codebooks (~21.5 a second). Each unit of text a context is fed (a sentence or clause,
cut by the server's segmenter) is one turn of the model's conversation
(``models.kit.turns``): a user message, then the assistant's speech, generated until
``<|im_end|>`` or the turn's cap. A context's first turn carries the system message
(and a cloned voice's reference); later ones continue its keys/values
(``models.fish_speech.prompt``).
"""

from __future__ import annotations

import random
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
    SynthParams,
)
from models.fields import (
    MAX_NEW_TOKENS,
    REF_AUDIO,
    REF_AUDIO_SAMPLE_RATE,
    REF_TEXT,
    SEED,
    TEMPERATURE,
    TOP_K,
    TOP_P,
)
from models.fish_speech.prompt import Prompts, check_text
from models.fish_speech.sampling import FishSampling
from models.fish_speech.slots import FishSlots, Turn
from models.kit.requests import checked, overridden, voice_source
from models.kit.turns import TurnRunner
from models.random_draws import key_of
from models.reference_audio import load_reference_audio

DEFAULT_VOICE = "default"
MAX_TURN_FRAMES = 1024
"""Frames one turn may make (the reference server's max_new_tokens; ~48 s)."""

REQUEST_FIELDS = (
    TEMPERATURE,
    replace(TOP_K, doc="0 keeps every code"),
    TOP_P,
    SEED,
    replace(MAX_NEW_TOKENS, doc="cap per text unit (~21.5 frames a second)"),
    replace(REF_AUDIO, doc="audio of a voice to clone (with ref_text)"),
    REF_AUDIO_SAMPLE_RATE,
    replace(REF_TEXT, doc="the reference audio's transcript (cloning needs it)"),
)


@dataclass(frozen=True)
class FishVoice:
    """A cloned voice: its transcript and its frames [T, num_codebooks]."""

    text: str
    codes: np.ndarray


@dataclass
class FishPrepared(Prepared):
    system: tuple[np.ndarray, np.ndarray] | None = None
    """The system message's ids [T] and codes [T, num_codebooks]."""
    sampling: FishSampling = FishSampling()
    key: int = 0
    max_frames: int = MAX_TURN_FRAMES


class FishRunner(TurnRunner):
    frame_dtype = np.int64
    max_frames_per_step = 1
    encodes_inline = True

    def __init__(
        self,
        slots: FishSlots,
        prompts: Prompts,
        capabilities: Capabilities,
        capacity: int,
        sampling: FishSampling,
        max_frames: int,
        encoder: Any = None,
        ref_audio_seconds: tuple[float, float] = (1.0, 60.0),
    ) -> None:
        """``encoder``: the codec (``encode(wav [1, samples]) -> codes [1, N, T]`` at
        ``sample_rate``) that clones voices; None: no cloning."""
        super().__init__(len(slots.position) - 1, capacity)
        self.ar = slots
        self.prompts = prompts
        self.capabilities = capabilities
        self.sampling = sampling
        self.max_frames = max_frames
        self.encoder = encoder
        self.ref_audio_seconds = ref_audio_seconds
        self.frame_dim = slots.slow.cfg.num_codebooks
        self._fields = {f.name: f for f in capabilities.request_fields}
        self.prepares_inline = encoder is None

    # -- before the first step ---------------------------------------------------

    def kv_usage(self) -> tuple[int, int]:
        return self.ar.cache.usage

    def validate(self, params: SynthParams) -> None:
        self._sampling(params)
        self._voice(params)

    def _voice(self, params: SynthParams, build: bool = False) -> FishVoice | None:
        """A stored voice, one cloned from ``ref_audio`` (only when ``build``), or
        None: the default voice (the system message without a reference)."""
        extra = params.extra
        stored, cloning = voice_source(extra, FishVoice, "Fish Speech", self.encoder is not None)
        if stored is not None:
            return stored
        if cloning:
            text = extra.get("ref_text")
            if not isinstance(text, str) or not text.strip():
                raise ModelInputError(
                    "ref_text: cloning a voice needs the reference audio's transcript",
                    param="ref_text",
                    code="missing_field",
                )
            text = check_text(text.strip(), "ref_text")
            if not build:
                return None
            return FishVoice(text, self._encode(extra["ref_audio"], extra))
        if params.voice == CLONE_VOICE:
            raise ModelInputError(
                f"ref_audio: voice {CLONE_VOICE!r} needs reference audio (base64) and its "
                "transcript (ref_text), or a stored voice's name",
                param="ref_audio",
                code="missing_field",
            )
        if params.voice != DEFAULT_VOICE:
            raise ModelInputError(
                f"voice: unknown voice {params.voice!r}; this model has {DEFAULT_VOICE!r} "
                f"and {CLONE_VOICE!r} (with ref_audio and ref_text)",
                param="voice",
                code="unknown_voice",
            )
        return None

    def _encode(self, audio: Any, extra: Mapping[str, Any]) -> np.ndarray:
        low, high = self.ref_audio_seconds
        rate = self.encoder.sample_rate
        wav = load_reference_audio(audio, extra.get("ref_audio_sample_rate"), rate, low, high)
        with torch.no_grad():
            codes = self.encoder.encode(torch.as_tensor(np.asarray(wav, np.float32))[None])
        return codes[0].T.cpu().numpy().astype(np.int64)

    def clone_voice(self, ref_audio: bytes, options: Mapping[str, Any]) -> ClonedVoice:
        """Reference audio and its transcript (``options["ref_text"]``) as arrays the
        server stores: the transcript and the codec's frames (encoded once)."""
        params = SynthParams(
            voice=CLONE_VOICE, extra={"ref_audio": ref_audio, "ref_text": options.get("ref_text")}
        )
        voice = self._voice(params, build=True)
        assert voice is not None
        text = np.frombuffer(voice.text.encode("utf-8"), np.uint8)
        return ClonedVoice({"codes": voice.codes, "text": text}, {"family": "fish_speech"})

    def voice_settings(self, voice: ClonedVoice) -> tuple[str, dict[str, Any]]:
        codes, text = voice.arrays.get("codes"), voice.arrays.get("text")
        n = self.frame_dim
        ok = (
            isinstance(codes, np.ndarray)
            and isinstance(text, np.ndarray)
            and np.issubdtype(codes.dtype, np.integer)
            and codes.ndim == 2
            and codes.shape[1] == n
            and len(codes) > 0
            and text.dtype == np.uint8
        )
        if ok:
            assert isinstance(codes, np.ndarray) and isinstance(text, np.ndarray)
            ok = bool(codes.min() >= 0 and codes.max() < self.ar.slow.cfg.codebook_size)
        if not ok:
            raise ModelInputError(
                "voice: not a Fish Speech voice (its codes do not fit this model)",
                param="voice",
                code="unsupported_value",
            )
        assert isinstance(codes, np.ndarray) and isinstance(text, np.ndarray)
        stored = FishVoice(bytes(text).decode("utf-8"), codes.astype(np.int64))
        return CLONE_VOICE, {"voice_prompt": stored}

    def prepare(self, params: SynthParams) -> FishPrepared:
        sampling, seed, cap = self._sampling(params)
        voice = self._voice(params, build=True)
        system = self.prompts.system(voice.text if voice else None, voice.codes if voice else None)
        if len(system[0]) + 8 > self.capacity:
            raise ModelInputError(
                f"ref_audio: the reference ({len(system[0])} positions with its transcript) "
                f"leaves no room in a context of {self.capacity}; use a shorter one",
                param="ref_audio",
                code="invalid_field",
            )
        key = key_of(seed if seed is not None else random.getrandbits(64))
        ids, codes = system
        return FishPrepared(
            system=(np.asarray(ids, np.int64), codes), sampling=sampling, key=key, max_frames=cap
        )

    def _sampling(self, params: SynthParams) -> tuple[FishSampling, int | None, int]:
        value = checked(self._fields, params.extra)
        return (
            overridden(self.sampling, value),
            value.get("seed"),
            min(value.get("max_new_tokens", self.max_frames), self.max_frames),
        )

    def encode_text(self, text: str) -> list[np.ndarray]:
        """One turn per text unit; nothing for blank text."""
        if not text.strip():
            return []
        return [self.prompts.turn(check_text(text.strip(), "input"))]

    # -- the turn runner's hooks ----------------------------------------------------

    def start_turns(self, units: list[tuple[int, np.ndarray]]) -> tuple[list[int], torch.Tensor]:
        turns = [t for t in (self._turn(slot, ids) for slot, ids in units) if t is not None]
        return [t.slot for t in turns], self.ar.start(turns)

    def advance(self, slots: np.ndarray) -> torch.Tensor:
        return self.ar.advance(slots.tolist())

    def ends(self, slots: np.ndarray, made: np.ndarray, started: int) -> np.ndarray:
        return made[:, 0] == self.ar.semantic

    def emit(
        self, slots: np.ndarray, made: np.ndarray, ended: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        return made[:, None, 1:], (made[:, 0] < self.ar.semantic)[:, None]

    def positions(self, slots: np.ndarray) -> np.ndarray:
        return self.ar.position[slots]

    def release(self, slot: int) -> None:
        self.ar.release(slot)

    def _turn(self, slot: int, ids: np.ndarray) -> Turn | None:
        """The slot's next turn, or None when its prompt leaves no room (the context
        reports the limit when it ends)."""
        p = self.prepared[slot]
        assert isinstance(p, FishPrepared) and p.system is not None
        n = self.frame_dim
        if self.fresh[slot]:
            tokens = np.concatenate((p.system[0], ids))
            codes = np.concatenate((p.system[1], np.zeros((len(ids), n), np.int64)))
            start = 0
        else:
            tokens = np.concatenate((np.asarray(self.prompts.close, np.int64), ids))
            codes = np.zeros((len(tokens), n), np.int64)
            start = int(self.ar.position[slot])
        if start + len(tokens) + 2 > self.capacity:
            self.hit_limit[slot] = True
            return None
        return Turn(slot, tokens, codes, p.sampling, bool(self.fresh[slot]), p.key)
