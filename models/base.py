"""The small interfaces every model family implements.

A model is two stages the engine drives, batched over contexts:

- ``ModelRunner``: input ids -> frames (codec codes, latent frames). The engine
  hands it a :class:`StepPlan` of slot arrays (free these, admit these with their
  prepared inputs, feed these their new text, step these) and gets a
  :class:`StepResult` of arrays back: one step of every listed slot, in one call.
  What runs before a context's first step (voice resolution, reference audio,
  clone encoding, tokenizing instructions) is :meth:`ModelRunner.prepare`, and
  text -> ids is :meth:`ModelRunner.encode_text`; both run in worker threads,
  never on the engine thread or the event loop. Per-slot state (KV caches,
  sampling settings, pending text) lives inside the runner, indexed by slot.
- ``Vocoder``: frames -> waveform, in chunks, batched over contexts; a context's
  decoder conditioning goes in through ``new_stream(conditioning)``, and
  ``close_stream`` gives a finished context's decoder state back.

The server never imports a family directly: ``models.registry`` maps a family
name to an import string, and the engine only sees these interfaces. Nothing
here imports torch.
"""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import UnionType
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

import numpy as np

T = TypeVar("T")

_WORD = re.compile(r"\S+")


def word_spans(text: str) -> np.ndarray:
    """int64 ``[n, 2]``: the ``[start, end)`` characters of each word of ``text``
    (a word is a run of non-whitespace characters, punctuation included)."""
    spans = [m.span() for m in _WORD.finditer(text)]
    return np.asarray(spans, np.int64).reshape(-1, 2)


class ModelInputError(ValueError):
    """A request parameter the model cannot honour (unknown voice, bad speed...).

    ``param`` names the offending field, ``code`` is a stable protocol error code.
    """

    def __init__(self, message: str, *, param: str | None = None, code: str = "invalid_param"):
        super().__init__(message)
        self.param = param
        self.code = code


INT64 = (-(1 << 63), (1 << 63) - 1)
"""The range of a 64-bit integer field (seeds)."""
CLONE_VOICE = "clone"
"""The voice name of a context that brings its own reference audio (or a stored voice)."""


@dataclass(frozen=True)
class RequestField:
    """A per-request setting a model takes (it arrives as ``SynthParams.extra[name]``).

    This is the one declaration of a model option: every endpoint takes it in its
    ``options`` map (and under the top-level names clients already send) through
    one mapper (``voiceserver.params``), which checks each value here, and
    ``session.created`` and ``GET /v1/models`` list it. A name, type, range or
    default is written once, by the model, and holds everywhere.
    """

    name: str
    kind: Literal["number", "integer", "boolean", "string", "numbers", "audio"]
    """``numbers``: an array of numbers; ``audio``: reference audio, sent as the
    endpoints' own ``ref_audio`` field (never in ``options``)."""
    low: float | None = None
    high: float | None = None
    low_exclusive: bool = False
    doc: str = ""
    """One line for clients (listed with the field)."""
    default: Any = None
    """What the model uses when a request leaves the field out, as clients see it
    (None: nothing, or decided per request; ``doc`` then says how)."""

    @property
    def allowed(self) -> str:
        """What the field takes, in words: ``an integer from 0 to 100``."""
        kinds = {
            "boolean": "true or false",
            "string": "a string",
            "numbers": "an array of finite numbers",
            "audio": "audio (base64, a data: URI, or a path or URL where allowed)",
            "integer": "an integer",
            "number": "a number",
        }
        return kinds[self.kind] + self._range()

    def check(self, value: Any) -> Any:
        """``value`` as the model takes it; ModelInputError naming the field and what
        it takes (:attr:`allowed`) otherwise."""
        if self.kind == "audio":
            return value  # decoded (and checked) while the context is prepared
        if self.kind == "boolean":
            ok = isinstance(value, bool)
        elif self.kind == "string":
            ok = isinstance(value, str)
        elif self.kind == "numbers":
            ok = isinstance(value, list | tuple) and all(_finite(x) for x in value)
            if ok:
                return [float(x) for x in value]
        else:
            integer = self.kind == "integer"
            ok = _finite(value) and (not integer or isinstance(value, int)) and self._within(value)
            if ok:
                return int(value) if integer else float(value)
        if not ok:
            raise ModelInputError(
                f"{self.name}: must be {self.allowed}, got {_shown(value)}",
                param=self.name,
                code="invalid_field",
            )
        return value

    def _within(self, value: float) -> bool:
        if self.low is not None and (value <= self.low if self.low_exclusive else value < self.low):
            return False
        return self.high is None or value <= self.high

    def _range(self) -> str:
        low = high = ""
        if self.low is not None:
            low = f" {'over' if self.low_exclusive else 'from'} {self._bound(self.low)}"
        if self.high is not None:
            joint = " and at most" if self.low_exclusive else " to" if low else " up to"
            high = f"{joint} {self._bound(self.high)}"
        return low + high

    def _bound(self, value: float) -> str:
        return str(int(value)) if self.kind == "integer" else f"{value:g}"


def _finite(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and (isinstance(value, int) or math.isfinite(value))
    )


def _shown(value: Any) -> str:
    """What a rejected value was, short: a number as itself (at most 32 characters)."""
    if _finite(value) or isinstance(value, float):
        text = str(value)
        return text if len(text) <= 32 else text[:32] + "..."
    names = {dict: "an object", list: "an array", bool: "a boolean", str: "a string"}
    return names.get(type(value), "null" if value is None else type(value).__name__)


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
    speed_range: tuple[float, float] = (1.0, 1.0)
    """The speeds the model makes itself, its audio's length in proportion to
    ``1 / speed``. A request's speed (0.25 to 4.0 on every endpoint) is clamped into
    this range for the model, and the server time-stretches the model's audio, at
    the same pitch, by the rest (:meth:`split_speed`). ``(1, 1)``: none natively."""
    supports_instructions: bool = False
    """True when the model uses ``instructions``; elsewhere they are dropped with a
    warning to the client."""
    max_frames_per_context: int = 0
    """Safety cap on frames one context may generate (0: none)."""
    max_context_chars: int = 0
    """The most text one context speaks whole (a model whose context holds all its text
    and audio in one KV cache); a whole text longer than this is spoken as several
    contexts, one after another, cut at sentence ends where it can be. 0: no limit
    (the model starts afresh at each piece of text)."""
    request_fields: tuple[RequestField, ...] = ()
    """Per-request settings the model takes (sampling, voice cloning...); endpoints
    pass these through, checked, and drop the ones a model does not declare."""

    @property
    def frame_ms(self) -> float:
        return 1000.0 * self.samples_per_frame / self.sample_rate

    def split_speed(self, speed: float) -> tuple[float, float]:
        """``speed`` as ``(native, stretch)``: the speed the model makes (within
        :attr:`speed_range`) and the factor its audio is then time-stretched by;
        ``native * stretch == speed``."""
        low, high = self.speed_range
        native = min(max(speed, low), high)
        return native, speed / native

    @property
    def default_voice(self) -> str:
        return self.voices[0].name


@dataclass(frozen=True)
class SynthParams:
    """Per-context synthesis settings, already validated against Capabilities."""

    voice: str
    language: str = "en"
    speed: float = 1.0
    """The speed the client asked for; the model makes the native part of it
    (``Capabilities.split_speed``) and the server stretches its audio by the rest."""
    instructions: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    """Family-specific settings (sampling, reference audio, ...)."""


@dataclass
class Prepared:
    """Everything a context needs before its first step, made by
    :meth:`ModelRunner.prepare` off the engine thread. Families subclass it
    with their own inputs (host data: ids, arrays, settings)."""

    conditioning: Any = None
    """Handed to ``Vocoder.new_stream``: the context's decoder conditioning
    (a clone's reference codes, a speaker embedding...), or None."""


@dataclass(frozen=True)
class Admit:
    """Start a context in a free slot."""

    slot: int
    prepared: Prepared


@dataclass(frozen=True)
class Feed:
    """New input of a running slot: units of ids (text that arrived), and
    ``close`` when no more will come (``context.end``)."""

    slot: int
    units: tuple[np.ndarray, ...] = ()
    close: bool = False
    words: tuple[np.ndarray, ...] = ()
    """Empty unless the context asked for word timing; then one int64 ``[k, 3]``
    array per unit, ``(word, first id, end id)`` as in ``AlignedText.words``
    but with ``word`` counted over the whole context (the engine client
    renumbers), which is the index the runner reports in ``WordFrames``."""


@dataclass(frozen=True)
class AlignedText:
    """:meth:`ModelRunner.encode_aligned`: units of ids and where each word is in them.

    A word is a run of non-whitespace characters of the text. A word cut across
    two units (a sentence too long for one call, cut mid-word) is listed in each
    unit holding part of it; ``spans`` lists it once.
    """

    units: list[np.ndarray]
    words: list[np.ndarray]
    """One int64 ``[k, 3]`` array per unit: ``(word, first id, end id)`` of each
    word in the unit, ``word`` counting the text's words from 0 and ids
    ``[first, end)`` indexing the unit."""
    spans: np.ndarray
    """int64 ``[n, 2]``: each word's characters ``[start, end)`` in the text given."""


@dataclass(frozen=True)
class WordFrames:
    """Word timing a step found, one entry per word (rows may repeat).

    Word ``index`` of row ``row`` (the index-th word fed to that slot, counting
    from 0 over the whole context) is spoken over the context's frames
    ``[start, end)``, frames counted from the context's first. Reported once per
    word, no later than the step that makes its first frame, in the order the
    words were fed.
    """

    row: np.ndarray
    index: np.ndarray
    start: np.ndarray
    end: np.ndarray
    """int64 arrays of one length."""

    @classmethod
    def of(cls, entries: list[tuple[int, int, int, int]]) -> WordFrames | None:
        """From ``(row, index, start, end)`` tuples; None when there are none."""
        if not entries:
            return None
        table = np.asarray(entries, np.int64).reshape(-1, 4)
        return cls(table[:, 0], table[:, 1], table[:, 2], table[:, 3])


@dataclass(frozen=True)
class StepPlan:
    """One engine step, applied in this order: ``free``, ``admit``, ``feed``, ``step``."""

    free: np.ndarray
    """int64 slots whose contexts ended or were cancelled: forget them."""
    admit: tuple[Admit, ...]
    feed: tuple[Feed, ...]
    step: np.ndarray
    """int64 slots to advance by one step (slots admitted in this plan may be here)."""


@dataclass(frozen=True)
class StepResult:
    """What one step made, one row per slot of ``StepPlan.step``, in its order.

    ``frames`` holds every row's new frames back to back (``counts`` per row),
    copied to the host once for the whole step.
    """

    counts: np.ndarray
    """int64 frames each row made (0 when it could not progress)."""
    frames: np.ndarray
    """[counts.sum(), frame_dim] of the runner's ``frame_dtype``."""
    unit_end: np.ndarray
    """bool: the row's last frame closes a unit (the vocoder gets no right
    context across it)."""
    finished: np.ndarray
    """bool: the context has made everything it will (EOS after the input
    closed, or a limit); its slot is freed by a later plan."""
    hit_limit: np.ndarray
    """bool: finished by a frame or capacity limit, not by its natural end."""
    waiting: np.ndarray
    """bool: the row cannot progress until it is fed (or its input closes)."""
    words: WordFrames | None = None
    """Word timing found by this step (only for slots fed ``Feed.words``)."""

    @classmethod
    def empty(cls, frame_dim: int, dtype: Any) -> StepResult:
        no = np.zeros(0, dtype=bool)
        return cls(np.zeros(0, np.int64), np.zeros((0, frame_dim), dtype), no, no, no, no)


@dataclass(frozen=True)
class ClonedVoice:
    """A voice computed once from reference audio, stored by the server.

    ``arrays`` persist as an .npz file and ``meta`` as JSON, so a stored voice
    survives a restart; the model turns it back into request settings with
    ``ARModel.voice_settings``.
    """

    arrays: dict[str, np.ndarray]
    meta: dict[str, Any] = field(default_factory=dict)


class ModelRunner(ABC):
    """The generating stage of a family, batched over slots."""

    capabilities: Capabilities
    frame_dim: int
    """Width of one frame row."""
    frame_dtype: Any
    """numpy dtype of frames (int64 codes, float32 latents)."""
    max_frames_per_step: int = 1
    """Most frames one row of a step makes (the engine's frame buffers hold this
    much more than its vocoder needs); a runner with more keeps the rest for
    the next steps."""
    prepares_inline: bool = False
    """``prepare`` takes microseconds (no audio, no encoders): call it in place
    rather than hop to a worker thread."""
    encodes_inline: bool = False
    """``encode_text`` takes microseconds (a tokenizer call): call it in place."""

    @property
    @abstractmethod
    def max_slots(self) -> int:
        """How many contexts can hold state at once (KV slots)."""

    @abstractmethod
    def validate(self, params: SynthParams) -> None:
        """Raise ModelInputError when ``params`` cannot be served. Cheap and pure:
        it may run on the event loop (no decoding, no tokenizing)."""

    @abstractmethod
    def prepare(self, params: SynthParams) -> Prepared:
        """Everything a context needs before its first step (may be slow: decode
        reference audio, encode a clone, tokenize instructions). Runs in a worker
        thread; raises ModelInputError naming the field."""

    @abstractmethod
    def encode_text(self, text: str) -> list[np.ndarray]:
        """Units of input ids for a text segment (possibly none for whitespace).
        Runs in a worker thread, in the order the text arrived; raises
        ModelInputError for text the model cannot take."""

    def aligns_words(self, params: SynthParams) -> bool:
        """True when a context with ``params`` can report word timing (then its
        text goes through :meth:`encode_aligned` and its step results carry
        ``words``). Cheap and pure, like :meth:`validate`."""
        return False

    def encode_aligned(self, text: str) -> AlignedText:
        """:meth:`encode_text` plus where each word of ``text`` lies in the units;
        called instead of it for contexts that asked for word timing (only when
        :meth:`aligns_words` said so). Same thread and errors as encode_text."""
        raise NotImplementedError(f"{type(self).__name__} does not align words")

    @abstractmethod
    def execute(self, plan: StepPlan) -> StepResult:
        """Apply ``plan`` and step its ``step`` slots once, batched."""

    def kv_usage(self) -> tuple[int, int]:
        """(paged KV blocks in use, blocks in the pool) for metrics, read from any
        thread; (0, 0) for a model without a paged KV cache."""
        return 0, 0

    def clone_voice(self, ref_audio: bytes, options: Mapping[str, Any]) -> ClonedVoice:
        """Compute a reusable voice from reference audio (an audio file's bytes) and
        the model's own clone options (its request fields, e.g. a transcript).

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


@dataclass(frozen=True)
class DecodeItem:
    """One context's chunk for one batched vocoder call.

    ``frames`` is the chunk with ``left`` frames of context before it and
    ``right`` after it (never across a unit boundary); the audio of
    ``frames[left : len(frames) - right]`` is wanted.
    """

    stream: Any
    frames: np.ndarray
    left: int = 0
    right: int = 0

    @property
    def chunk_frames(self) -> int:
        return len(self.frames) - self.left - self.right


class Vocoder(ABC):
    """Frames -> waveform, in chunks, exact across chunk boundaries."""

    sample_rate: int
    samples_per_frame: int
    right_context: int = 0
    """Frames after a chunk that must exist before the chunk is decoded
    (unless its unit is closed). 0 for causal decoders."""
    left_context: int = 0
    """Frames before a chunk the decoder looks at (window decoders)."""
    whole_units: int = 0
    """Not 0: the decoder needs every frame of a unit at once (its attention spans the
    unit), so a unit is decoded only once it is closed, all of it in view; the value
    is the most frames a unit holds (the engine's frame buffers hold two)."""

    @abstractmethod
    def new_stream(self, conditioning: Any = None) -> Any:
        """Per-context decoder state (conv histories...), or None if stateless.
        ``conditioning`` is the context's ``Prepared.conditioning``: a family's
        decoder may be primed with it here (a clone's reference codes)."""

    def close_stream(self, stream: Any) -> None:  # noqa: B027 (optional: most hold nothing)
        """``stream`` (a :meth:`new_stream` result) is done and is never decoded
        again: a family that pools decoder state frees its share here."""

    @abstractmethod
    def decode(self, items: list[DecodeItem]) -> list[np.ndarray]:
        """Decode every item's chunk; return float32 mono samples in [-1, 1],
        ``item.chunk_frames * samples_per_frame`` samples per item."""


@dataclass
class LoadedModel:
    """What a family's ``load`` returns to the server."""

    runner: ModelRunner
    vocoder: Vocoder

    @property
    def capabilities(self) -> Capabilities:
        return self.runner.capabilities


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
