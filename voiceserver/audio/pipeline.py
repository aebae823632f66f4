"""The audio output stage of one context: model-rate PCM in, wire payloads out."""

from __future__ import annotations

import numpy as np

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

    def __init__(
        self, fmt: AudioFormat, input_rate: int, *, opus_complexity: int | None = None
    ) -> None:
        self.format = fmt.normalized()
        self.input_rate = input_rate
        self._resampler = StreamResampler(input_rate, self.format.sample_rate)
        self._encoder: Encoder = make_encoder(self.format, opus_complexity=opus_complexity)
        self._finished = False

    @property
    def content_type(self) -> str:
        return self._encoder.content_type

    @property
    def sample_rate(self) -> int:
        return self.format.sample_rate

    @property
    def samples_emitted(self) -> int:
        """Output-rate samples that the payloads returned so far play for."""
        return self._encoder.samples_emitted

    @property
    def audio_ms(self) -> int:
        return self.samples_emitted * 1000 // self.format.sample_rate

    @property
    def finished(self) -> bool:
        return self._finished

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
    """Build the output stage; raises AudioFormatError (a ValueError) naming a bad field."""
    return OutputStage(fmt, input_rate, opus_complexity=opus_complexity)


__all__ = ["AudioFormat", "AudioFormatError", "OutputStage", "make_output"]
