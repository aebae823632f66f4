"""The audio output stage of one context: model-rate PCM in, wire payloads out.

Every endpoint builds one: the WebSocket ones from an `AudioFormat`
(`make_output`), HTTP from a `response_format` file (`make_file_output`).
"""

from __future__ import annotations

import numpy as np

from voiceserver.audio.containers import make_file_encoder
from voiceserver.audio.encoders import Encoder, make_encoder
from voiceserver.audio.format import AudioFormat, AudioFormatError
from voiceserver.audio.resample import StreamResampler, as_mono_float32


class OutputStage:
    """Resampler + encoder for one continuous context.

    Audio held back before it is sent, in audio time (at a real-time factor of
    0.1 the wall-clock cost is a tenth): the resampler's block, about 40 ms
    (80-90 ms when converting down to 8 or 12 kHz; none at equal rates); a
    partial frame for Opus or for PCM with `frame_ms`; and one page for Ogg.
    `finish()` emits all of it.

    Not thread-safe, but free of thread affinity: any one thread at a time may
    call it (e.g. a worker of a thread pool).
    """

    def __init__(self, encoder: Encoder, input_rate: int) -> None:
        self.input_rate = input_rate
        self._resampler = StreamResampler(input_rate, encoder.sample_rate)
        self._encoder = encoder
        self._finished = False

    @property
    def cheap(self) -> bool:
        """A chunk costs about what copying its samples does (no resampling, a
        sample-by-sample encoding): cheaper than handing it to a worker thread
        and back, so it is worth doing in place, on the event loop."""
        return self._resampler.passthrough and self._encoder.cheap

    @property
    def content_type(self) -> str:
        return self._encoder.content_type

    @property
    def sample_rate(self) -> int:
        return self._encoder.sample_rate

    @property
    def samples_emitted(self) -> int:
        """Output-rate samples that the payloads returned so far play for."""
        return self._encoder.samples_emitted

    @property
    def audio_ms(self) -> int:
        return self.samples_emitted * 1000 // self.sample_rate

    @property
    def finished(self) -> bool:
        return self._finished

    def feed(self, pcm: np.ndarray, *, drain: bool = False, final: bool = False) -> list[bytes]:
        """One engine chunk: `push` its samples, then `drain` at a flush point or
        `finish` at the context's end. Nothing once finished or closed."""
        if self._finished:
            return []
        payloads = self.push(pcm) if len(pcm) else []
        if final:
            return payloads + self.finish()
        return payloads + self.drain() if drain else payloads

    def push(self, pcm: np.ndarray) -> list[bytes]:
        """Feed float32 mono PCM in [-1, 1] at `input_rate`; return the payloads ready now."""
        if self._finished:
            raise RuntimeError("OutputStage.push() after finish()")
        # One NaN would smear across the resampler's filter and poison the Opus state.
        pcm = np.nan_to_num(as_mono_float32(pcm), nan=0.0, posinf=1.0, neginf=-1.0)
        return self._encoder.encode(self._resampler.process(pcm))

    def drain(self) -> list[bytes]:
        """At a flush point: payloads for every sample received so far, including
        what the resampler holds and a framed encoder's partial frame (Ogg keeps
        its newest page until more audio or the end)."""
        if self._finished:
            return []
        payloads = self._encoder.encode(self._resampler.drain())
        emit_partial = getattr(self._encoder, "emit_partial", None)
        return payloads + (emit_partial() if emit_partial is not None else [])

    def finish(self) -> list[bytes]:
        """End of the context: everything still buffered, with the container's end marker."""
        if self._finished:
            raise RuntimeError("OutputStage.finish() called twice")
        self._finished = True
        return self._encoder.encode(self._resampler.flush()) + self._encoder.flush()

    def close(self) -> None:
        """Abandon the context (cancel): free the encoder, emit nothing."""
        if not self._finished:
            self._finished = True
            self._encoder.close()


def make_output(
    fmt: AudioFormat, input_rate: int, *, opus_complexity: int | None = None
) -> OutputStage:
    """The stage for a WebSocket `output_format`; raises AudioFormatError (a
    ValueError) naming a bad field."""
    fmt = fmt.normalized()
    return OutputStage(make_encoder(fmt, opus_complexity=opus_complexity), input_rate)


def make_file_output(
    response_format: str, input_rate: int, sample_rate: int, *, whole: bool = False
) -> OutputStage:
    """The stage for one HTTP `response_format` file at `sample_rate` (`whole`: the
    file comes out at the end, with its true length); raises ValueError for a
    format or rate the file format does not allow."""
    return OutputStage(make_file_encoder(response_format, sample_rate, whole), input_rate)


__all__ = ["AudioFormat", "AudioFormatError", "OutputStage", "make_file_output", "make_output"]
