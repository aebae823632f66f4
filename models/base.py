"""The small interfaces every model family implements.

A model is split in stages so one engine can drive every family:

- ``TextFrontend``: text segment -> units of input token ids (phonemes, BPE ids).
- ``ARModel``: input tokens -> frames (codec codes, latent frames), one engine
  step at a time, batched over contexts. A family that produces a whole
  segment per step (Piper's acoustic stage) and one that produces one frame
  per step (Qwen3-TTS's talker) both fit: a step returns 0..N frames per context.
- ``Vocoder``: frames -> waveform, in chunks, batched over contexts.

The server never imports a family directly: ``models.registry`` maps a family
name to an import string, and the engine only sees these interfaces. Nothing
here imports torch.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import UnionType
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

import numpy as np

T = TypeVar("T")


class ModelInputError(ValueError):
    """A request parameter the model cannot honour (unknown voice, bad speed...).

    ``param`` names the offending field, ``code`` is a stable protocol error code.
    """

    def __init__(self, message: str, *, param: str | None = None, code: str = "invalid_param"):
        super().__init__(message)
        self.param = param
        self.code = code


@dataclass(frozen=True)
class VoiceInfo:
    """One voice a model offers."""

    name: str
    language: str = "en"
    description: str = ""


@dataclass(frozen=True)
class Capabilities:
    """What a loaded model can do; the server reads this, never the model class."""

    family: str
    """Registry name of the family, e.g. ``piper``."""
    sample_rate: int
    """Native output sample rate in Hz."""
    samples_per_frame: int
    """Waveform samples one frame decodes to (the vocoder's hop)."""
    voices: tuple[VoiceInfo, ...]
    """Voices offered; the first is the default."""
    languages: tuple[str, ...] = ("en",)
    """Languages accepted in ``language``; the first is the default."""
    streaming_text: bool = False
    """True when the model consumes text token by token while generating
    (so text need not be segmented before synthesis starts)."""
    supports_speed: bool = False
    """True when ``speed`` is honoured natively."""
    supports_instructions: bool = False
    max_frames_per_context: int = 0
    """Safety cap on frames one context may generate (0: none)."""

    @property
    def frame_ms(self) -> float:
        return 1000.0 * self.samples_per_frame / self.sample_rate

    @property
    def default_voice(self) -> str:
        return self.voices[0].name


@dataclass(frozen=True)
class SynthParams:
    """Per-context synthesis settings, already validated against Capabilities."""

    voice: str
    language: str = "en"
    speed: float = 1.0
    instructions: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    """Family-specific settings (sampling, reference audio, ...)."""


class TextFrontend(ABC):
    """Turns a text segment into units of input ids.

    A unit is a run of ids the model synthesises as one piece (Piper: one
    sentence as espeak splits it). Runs on the engine thread, never on the
    event loop.
    """

    @abstractmethod
    def encode(self, text: str, params: SynthParams) -> list[list[int]]:
        """Return the units of ``text`` (possibly none for whitespace)."""


@dataclass
class StepOutput:
    """What one engine step produced for one context."""

    frames: np.ndarray
    """[n, D] new frames (n may be 0); dtype is the model's frame dtype."""
    unit_end: bool = False
    """The last of ``frames`` closes a unit: the vocoder may treat it as a hard
    boundary (no right context across it)."""
    finished: bool = False
    """The context has produced everything it will (EOS after input closed)."""
    hit_limit: bool = False
    """Finished because ``max_frames_per_context`` was reached, not by EOS."""


class ContextState(ABC):
    """Per-context model state (KV slot, pending input, sampling RNG...).

    Created by ``ARModel.open``; fed by the engine; stepped by ``ARModel.step``.
    """

    @abstractmethod
    def feed(self, units: list[list[int]]) -> None:
        """Append input units (text that arrived)."""

    @abstractmethod
    def close_input(self) -> None:
        """No more input will come (``context.end``)."""

    @property
    @abstractmethod
    def has_work(self) -> bool:
        """True when a step would make progress now (input pending, or
        generation under way). False while starved for text or finished."""

    @property
    def decoder_prefix(self) -> np.ndarray | None:
        """Frames the vocoder must run through before this context's own
        (a voice clone's reference codes), or None. Their audio is dropped."""
        return None


@dataclass(frozen=True)
class ClonedVoice:
    """A voice computed once from reference audio, stored by the server.

    ``arrays`` persist as an .npz file and ``meta`` as JSON, so a stored voice
    survives a restart; the model turns it back into request settings with
    ``ARModel.voice_settings``.
    """

    arrays: dict[str, np.ndarray]
    meta: dict[str, Any] = field(default_factory=dict)


class ARModel(ABC):
    """The generating stage, batched over contexts."""

    capabilities: Capabilities
    frontend: TextFrontend

    @property
    @abstractmethod
    def max_contexts(self) -> int:
        """How many contexts can hold state at once (KV slots)."""

    @abstractmethod
    def validate(self, params: SynthParams) -> None:
        """Raise ModelInputError when ``params`` cannot be served."""

    @abstractmethod
    def open(self, params: SynthParams) -> ContextState:
        """Allocate state for a new context (a free slot is guaranteed)."""

    @abstractmethod
    def close(self, state: ContextState) -> None:
        """Free the state's resources (slot) at once."""

    @abstractmethod
    def step(self, states: list[ContextState]) -> list[StepOutput]:
        """Advance every given context (each has ``has_work``) by one step."""

    def clone_voice(
        self, ref_audio: bytes, ref_text: str | None = None, x_vector_only: bool = False
    ) -> ClonedVoice:
        """Compute a reusable voice from reference audio (an audio file's bytes).

        Raises ModelInputError naming the bad field; models that cannot clone
        keep this default. May be slow: call it off the event loop."""
        raise ModelInputError(
            f"model family {self.capabilities.family!r} cannot clone voices",
            param="audio_sample",
            code="unsupported_value",
        )

    def voice_settings(self, voice: ClonedVoice) -> tuple[str, dict[str, Any]]:
        """The (voice name, SynthParams.extra entries) that speak with a stored voice."""
        raise ModelInputError(
            f"model family {self.capabilities.family!r} cannot use stored voices",
            param="voice",
            code="unknown_voice",
        )


@dataclass
class DecodeItem:
    """One context's chunk for one batched vocoder call.

    ``frames`` holds the current unit's frames so far (from frame 0 of the
    unit, or from ``frames_offset`` when old frames were trimmed); the chunk
    to emit is ``[start, end)`` in unit frame indices.
    """

    stream: Any
    frames: np.ndarray
    start: int
    end: int
    unit_closed: bool
    frames_offset: int = 0


class Vocoder(ABC):
    """Frames -> waveform, in chunks, exact across chunk boundaries."""

    sample_rate: int
    samples_per_frame: int
    right_context: int = 0
    """Frames after a chunk that must exist before the chunk is decoded
    (unless the unit is closed). 0 for causal decoders."""
    left_context: int = 0
    """Frames before a chunk the decoder looks at (window decoders); the
    engine keeps at least this many old frames."""

    @abstractmethod
    def new_stream(self) -> Any:
        """Per-context decoder state (conv histories...), or None if stateless."""

    @abstractmethod
    def decode(self, items: list[DecodeItem]) -> list[np.ndarray]:
        """Decode every item's chunk; return float32 mono samples in [-1, 1],
        ``(end - start) * samples_per_frame`` samples per item."""

    def prime(self, stream: Any, frames: np.ndarray) -> None:
        """Run ``frames`` through a fresh stream, discarding their audio.

        Called once, before any decode, for a context whose state has a
        ``decoder_prefix``; only vocoders of models that set one implement it."""
        raise NotImplementedError(f"{type(self).__name__} cannot be primed")


@dataclass
class LoadedModel:
    """What a family's ``load`` returns to the server."""

    ar: ARModel
    vocoder: Vocoder

    @property
    def capabilities(self) -> Capabilities:
        return self.ar.capabilities


def parse_options(cls: type[T], data: Mapping[str, Any] | None, where: str) -> T:
    """Build dataclass ``cls`` from a YAML mapping, strictly.

    An unknown key or a wrongly typed value raises ValueError naming
    ``where.key`` and what is allowed, so a typo in a config file is caught at
    start-up instead of silently ignored.
    """
    data = dict(data or {})
    known = {f.name: f for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ValueError(
            f"unknown key {where}.{unknown[0]}; allowed keys: {', '.join(sorted(known))}"
        )
    hints = get_type_hints(cls)
    for key, value in data.items():
        expected = hints[key]
        if not _type_ok(value, expected):
            raise ValueError(f"{where}.{key} must be {_type_name(expected)}, got {value!r}")
        if expected is float and isinstance(value, int):
            data[key] = float(value)
    return cls(**data)


def _type_ok(value: Any, expected: Any) -> bool:
    origin = get_origin(expected)
    if origin in (Union, UnionType):
        return any(_type_ok(value, arg) for arg in get_args(expected))
    if origin is Literal:
        return value in get_args(expected)
    if expected is type(None):
        return value is None
    if expected is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin in (list, tuple):
        return isinstance(value, list | tuple)
    if origin is dict:
        return isinstance(value, dict)
    if isinstance(expected, type):
        return isinstance(value, expected)
    return True


def _type_name(expected: Any) -> str:
    origin = get_origin(expected)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(expected))
    if origin in (Union, UnionType):
        return " or ".join(_type_name(a) for a in get_args(expected))
    return getattr(expected, "__name__", str(expected))
