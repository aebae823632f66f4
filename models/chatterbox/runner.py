"""Chatterbox Turbo's T3 behind the ModelRunner contract.

A frame is one speech token (25 a second). Each unit of text a context is fed
(a clause, cut by the server's segmenter) is one T3 utterance with the context's
voice: started when the slot is free of the previous one, stepped until the stop
token or the utterance cap, then closed with the three silence tokens the
reference appends before decoding. A context's first utterance runs the voice
prefix (speaker + prompt tokens); later ones reuse its keys/values.

The turn loop (take a unit, start it, advance, end at the stop token or a cap) is
the kit's (``models.kit.turns``); this module says how T3 starts, steps and ends.
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
from models.chatterbox.clone import VoiceCloner
from models.chatterbox.s3gen import Conditioning
from models.chatterbox.sampling import T3Sampling
from models.chatterbox.t3 import T3
from models.chatterbox.t3_slots import T3Slots, Utterance
from models.chatterbox.text import TextTokenizer, normalize
from models.chatterbox.vocoder import StreamConditioning
from models.chatterbox.voice import Voice
from models.fields import (
    MAX_NEW_TOKENS,
    REF_AUDIO,
    REF_AUDIO_SAMPLE_RATE,
    REPETITION_PENALTY,
    SEED,
    TEMPERATURE,
    TOP_K,
    TOP_P,
)
from models.kit.requests import checked, overridden, voice_source
from models.kit.turns import TurnRunner
from models.random_draws import key_of
from models.reference_audio import load_reference_audio

SILENCE_TOKEN = 4299
"""S3Gen's silence; the reference ends every utterance with three."""
TAIL = (SILENCE_TOKEN,) * 3
MAX_UTTERANCE_TOKENS = 1001
"""The reference's cap: one token from the prompt, then up to 1,000 more."""

REQUEST_FIELDS = (
    TEMPERATURE,
    replace(TOP_K, high=6563),
    TOP_P,
    REPETITION_PENALTY,
    SEED,
    replace(
        MAX_NEW_TOKENS,
        high=MAX_UTTERANCE_TOKENS,
        doc="cap per utterance (25 a second)",
        default=MAX_UTTERANCE_TOKENS,
    ),
    replace(REF_AUDIO, doc="audio of a voice to clone (more than 5 s)"),
    REF_AUDIO_SAMPLE_RATE,
)
CLONE_RATE = 24_000


DEFAULT_SAMPLING = T3Sampling()
SPEECH_TOKENS = 6561
"""S3 speech tokens (the ids below start-of-speech): what a voice's prompts hold."""


def _stored(arrays: Mapping[str, np.ndarray], key: str, shape: tuple[int, ...], kind: type) -> None:
    """Refuse a stored voice whose ``key`` is missing or not ``shape`` (-1: any) of
    finite values of ``kind`` (integers: speech tokens)."""
    value = arrays.get(key)
    ok = (
        value is not None
        and np.issubdtype(value.dtype, kind)
        and value.size > 0
        and value.ndim == len(shape)
        and all(want in (-1, got) for want, got in zip(shape, value.shape, strict=True))
        and bool(np.all(np.isfinite(value)))
    )
    if ok and kind is np.integer:
        ok = bool(value.min() >= 0 and value.max() < SPEECH_TOKENS)
    if not ok:
        raise ModelInputError(
            f"voice: not a Chatterbox voice (its {key} does not fit this model)",
            param="voice",
            code="unsupported_value",
        )


@dataclass
class ChatterboxPrepared(Prepared):
    voice: Voice | None = None
    sampling: T3Sampling = T3Sampling()
    key: int = 0
    max_tokens: int = MAX_UTTERANCE_TOKENS


class ChatterboxRunner(TurnRunner):
    frame_dtype = np.int64
    frame_dim = 1
    max_frames_per_step = 1 + len(TAIL)
    encodes_inline = True

    def __init__(
        self,
        model: T3,
        tokenizer: TextTokenizer,
        voices: Mapping[str, Voice],
        capabilities: Capabilities,
        slots: int,
        capacity: int,
        sampling: T3Sampling = DEFAULT_SAMPLING,
        max_tokens: int = MAX_UTTERANCE_TOKENS,
        ignore_stop: bool = False,
        cloner: VoiceCloner | None = None,
        ref_audio_seconds: tuple[float, float] = (5.0, 60.0),
        cuda_graphs: bool = True,
    ) -> None:
        super().__init__(slots, capacity)
        self.model = model
        self.tokenizer = tokenizer
        self.voices = dict(voices)
        self.capabilities = capabilities
        self.sampling = sampling
        self.max_tokens = max_tokens
        self.t3 = T3Slots(model, slots, capacity, ignore_stop, cuda_graphs)
        self.last = np.zeros(slots, np.int64)
        """The last token (what the next step feeds)."""
        self._stop, self._start = model.cfg.stop_speech, model.cfg.start_speech
        self._fields = {f.name: f for f in capabilities.request_fields}
        self.cloner = cloner
        self.ref_audio_seconds = ref_audio_seconds
        # Cloning decodes audio and runs three encoders: not for the event loop.
        self.prepares_inline = cloner is None

    # -- before the first step ---------------------------------------------------

    def kv_usage(self) -> tuple[int, int]:
        return self.t3.cache.usage

    def validate(self, params: SynthParams) -> None:
        self._sampling(params)
        self._voice(params)

    def _voice(self, params: SynthParams, build: bool = False) -> Voice | None:
        """The context's voice: a stored one (``voice_prompt``), one cloned from
        ``ref_audio`` (only when ``build``: decoding and encoding are slow), else the
        named one. None when a clone is due but not built."""
        extra = params.extra
        stored, cloning = voice_source(extra, Voice, "Chatterbox", self.cloner is not None)
        if stored is not None:
            return stored
        if cloning:
            if not build:
                return None
            low, high = self.ref_audio_seconds
            wav = load_reference_audio(
                extra["ref_audio"], extra.get("ref_audio_sample_rate"), CLONE_RATE, low, high
            )
            return self.cloner.clone(wav)
        if params.voice == CLONE_VOICE:
            raise ModelInputError(
                f"ref_audio: voice {CLONE_VOICE!r} needs reference audio (more than 5 s "
                "of speech, base64) or a stored voice's name",
                param="ref_audio",
                code="missing_field",
            )
        if params.voice not in self.voices:
            known = ", ".join(sorted(self.voices))
            raise ModelInputError(
                f"voice: unknown voice {params.voice!r}; this model has {known}",
                param="voice",
                code="unknown_voice",
            )
        return self.voices[params.voice]

    # -- stored voices -------------------------------------------------------------

    def clone_voice(self, ref_audio: bytes, options: Mapping[str, Any]) -> ClonedVoice:
        """The voice of ``ref_audio`` (an audio file, more than 5 s) as arrays the
        server stores; Chatterbox needs no transcript (``options`` are not used)."""
        voice = self._voice(SynthParams(voice=CLONE_VOICE, extra={"ref_audio": ref_audio}), True)
        assert voice is not None and voice.decoder is not None
        d = voice.decoder
        arrays = {
            "speaker": np.asarray(voice.speaker, np.float32),
            "prompt": np.asarray(voice.prompt, np.int64),
            "decoder_tokens": d.prompt_tokens.reshape(-1).numpy().astype(np.int64),
            "decoder_mel": d.prompt_mel[0].float().numpy(),
            "decoder_embedding": d.embedding.reshape(-1).float().numpy(),
        }
        return ClonedVoice(arrays, {"family": "chatterbox"})

    def voice_settings(self, voice: ClonedVoice) -> tuple[str, dict[str, Any]]:
        """A stored voice -> ``voice="clone"`` with its ``voice_prompt``; arrays of
        another model's making are refused, not mis-read."""
        a = voice.arrays
        for key, shape in (
            ("speaker", (256,)),
            ("decoder_mel", (-1, 80)),
            ("decoder_embedding", (192,)),
        ):
            _stored(a, key, shape, np.floating)
        for key in ("prompt", "decoder_tokens"):
            _stored(a, key, (-1,), np.integer)
        decoder = Conditioning(
            torch.from_numpy(a["decoder_tokens"].astype(np.int64)).reshape(1, -1),
            torch.from_numpy(a["decoder_mel"].astype(np.float32))[None],
            torch.from_numpy(a["decoder_embedding"].astype(np.float32))[None],
        )
        stored = Voice(a["speaker"].astype(np.float32), a["prompt"].astype(np.int64), decoder)
        return CLONE_VOICE, {"voice_prompt": stored}

    def prepare(self, params: SynthParams) -> ChatterboxPrepared:
        sampling, seed, cap = self._sampling(params)
        voice = self._voice(params, build=True)
        assert voice is not None
        key = key_of(seed if seed is not None else random.getrandbits(64))
        return ChatterboxPrepared(
            conditioning=StreamConditioning(voice.decoder, key) if voice.decoder else None,
            voice=voice,
            sampling=sampling,
            key=key,
            max_tokens=cap,
        )

    def _sampling(self, params: SynthParams) -> tuple[T3Sampling, int | None, int]:
        value = checked(self._fields, params.extra)
        out = overridden(self.sampling, value)
        if out.temperature == 0:  # greedy: only the best token survives top-k
            out = replace(out, top_k=1)
        return out, value.get("seed"), value.get("max_new_tokens", self.max_tokens)

    def encode_text(self, text: str) -> list[np.ndarray]:
        """One utterance per segment, cleaned up as the reference does; nothing for blank text."""
        if not text.strip():
            return []
        return [np.asarray(self.tokenizer.encode(normalize(text)), np.int64)]

    # -- the turn runner's hooks ----------------------------------------------------

    def turn_limit(self, prepared: Prepared) -> int:
        assert isinstance(prepared, ChatterboxPrepared)
        return prepared.max_tokens

    def on_admit(self, slots: np.ndarray, prepared: list[Prepared]) -> None:
        super().on_admit(slots, prepared)
        self.last[slots] = 0

    def start_turns(self, units: list[tuple[int, np.ndarray]]) -> tuple[list[int], torch.Tensor]:
        started = [(slot, ids) for slot, ids in units if self._fits(slot, ids)]
        first = self.t3.start([self._utterance(slot, ids) for slot, ids in started])
        return [slot for slot, _ in started], first[:, None]

    def advance(self, slots: np.ndarray) -> torch.Tensor:
        return self.t3.advance(slots.tolist(), self.last[slots])[:, None]

    def ends(self, slots: np.ndarray, made: np.ndarray, started: int) -> np.ndarray:
        tokens = made[:, 0]
        self.last[slots] = tokens
        # The reference never checks an utterance's first token for the stop id.
        return (tokens == self._stop) & (np.arange(len(slots)) >= started)

    def emit(
        self, slots: np.ndarray, made: np.ndarray, ended: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        frames = np.empty((len(slots), 1 + len(TAIL), 1), np.int64)
        frames[:, 0, 0], frames[:, 1:, 0] = made[:, 0], TAIL
        keep = np.zeros(frames.shape[:2], bool)
        keep[:, 0] = made[:, 0] < self._start
        keep[:, 1:] = ended[:, None]
        return frames, keep

    def positions(self, slots: np.ndarray) -> np.ndarray:
        return self.t3.position[slots]

    def release(self, slot: int) -> None:
        self.t3.release(slot)

    def _fits(self, slot: int, ids: np.ndarray) -> bool:
        """Whether an utterance's prompt leaves room for a token in the slot; one that
        does not is skipped and the context reports the limit when it ends."""
        prepared = self.prepared[slot]
        assert isinstance(prepared, ChatterboxPrepared) and prepared.voice is not None
        prefix = 1 + len(prepared.voice.prompt)
        if prefix + len(ids) + 2 <= self.capacity:
            return True
        self.hit_limit[slot] = True
        return False

    def _utterance(self, slot: int, ids: np.ndarray) -> Utterance:
        p = self.prepared[slot]
        assert isinstance(p, ChatterboxPrepared)
        prefix = None
        if self.fresh[slot]:
            assert p.voice is not None
            dev = self.t3.device
            prefix = self.model.prefix(
                torch.as_tensor(p.voice.speaker, dtype=self.t3.dtype, device=dev),
                torch.as_tensor(p.voice.prompt, dtype=torch.long, device=dev),
            )
        return Utterance(slot, prefix, ids, p.sampling, p.key)
