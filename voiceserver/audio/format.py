"""The client-chosen output format of one context (`output_format` on the wire)."""

from __future__ import annotations

from dataclasses import dataclass, replace

PCM_ENCODINGS = ("pcm_s16le", "pcm_f32le", "pcm_mulaw", "pcm_alaw")
ENCODINGS = (*PCM_ENCODINGS, "opus")
CONTAINERS = ("raw", "ogg")
PCM_SAMPLE_RATES = (8000, 16000, 22050, 24000, 44100, 48000)
OPUS_SAMPLE_RATES = (8000, 12000, 16000, 24000, 48000)
FRAME_MS = (10, 20, 40, 60)
DEFAULT_OPUS_FRAME_MS = 20
# Opus' own limits for a mono stream, in bits/s.
OPUS_BITRATE_RANGE = (6000, 510000)
# Enough for clean synthetic speech at each bandwidth; higher buys little.
DEFAULT_OPUS_BITRATE = {8000: 16000, 12000: 20000, 16000: 24000, 24000: 32000, 48000: 48000}


class AudioFormatError(ValueError):
    """An invalid output format; `field` names the offending `output_format` key."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"output_format.{field}: {message}")
        self.field = field


def _allowed(values: tuple[object, ...]) -> str:
    return ", ".join(str(v) for v in values)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class AudioFormat:
    """Encoding, rate and framing of the audio sent for one context (mono).

    `bitrate` (bits/s) and `frame_ms` left as None mean "the encoder's default";
    `normalized()` fills them in.
    """

    encoding: str = "pcm_s16le"
    sample_rate: int = 24000
    container: str = "raw"
    bitrate: int | None = None
    frame_ms: int | None = None

    @property
    def is_opus(self) -> bool:
        return self.encoding == "opus"

    def validate(self) -> AudioFormat:
        """Raise AudioFormatError naming the first bad field; return self when valid."""
        if self.encoding not in ENCODINGS:
            raise AudioFormatError(
                "encoding", f"{self.encoding!r} is not supported; allowed: {_allowed(ENCODINGS)}"
            )
        rates = OPUS_SAMPLE_RATES if self.is_opus else PCM_SAMPLE_RATES
        if not _is_int(self.sample_rate) or self.sample_rate not in rates:
            raise AudioFormatError(
                "sample_rate",
                f"{self.sample_rate!r} is not allowed for {self.encoding}; allowed: {_allowed(rates)}",
            )
        if self.container not in CONTAINERS:
            raise AudioFormatError(
                "container",
                f"{self.container!r} is not supported; allowed: {_allowed(CONTAINERS)}",
            )
        if self.container == "ogg" and not self.is_opus:
            raise AudioFormatError(
                "container", f"'ogg' needs encoding 'opus', not {self.encoding!r}; allowed: raw"
            )
        if self.frame_ms is not None and (
            not _is_int(self.frame_ms) or self.frame_ms not in FRAME_MS
        ):
            raise AudioFormatError(
                "frame_ms", f"{self.frame_ms!r} is not allowed; allowed: {_allowed(FRAME_MS)}"
            )
        if self.frame_ms is not None and self.sample_rate * self.frame_ms % 1000:
            raise AudioFormatError(
                "frame_ms",
                f"{self.frame_ms} ms is not a whole number of samples at {self.sample_rate} Hz;"
                f" allowed: {_allowed(tuple(ms for ms in FRAME_MS if self.sample_rate * ms % 1000 == 0))}",
            )
        if self.bitrate is not None:
            if not self.is_opus:
                raise AudioFormatError(
                    "bitrate", f"applies only to encoding 'opus', not {self.encoding!r}"
                )
            low, high = OPUS_BITRATE_RANGE
            if not _is_int(self.bitrate) or not low <= self.bitrate <= high:
                raise AudioFormatError(
                    "bitrate", f"{self.bitrate!r} is out of range; allowed: {low} to {high} bits/s"
                )
        return self

    def normalized(self) -> AudioFormat:
        """Validated copy with the Opus defaults (frame_ms, bitrate) filled in."""
        self.validate()
        if not self.is_opus:
            return self
        return replace(
            self,
            frame_ms=self.frame_ms or DEFAULT_OPUS_FRAME_MS,
            bitrate=self.bitrate or DEFAULT_OPUS_BITRATE[self.sample_rate],
        )
