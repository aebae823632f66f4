"""The audio of one vllm-omni socket sentence: bytes, frames and ``audio.chunk`` messages.

- ``SentenceEncoder`` turns model-rate PCM into the bytes of a sentence.
- ``binary_frames`` cuts those bytes into WebSocket frames of at most 1 MiB: the
  ``websockets`` library (which vllm-omni's example clients use) refuses larger
  messages by default and closes with 1009. Those clients join every binary frame
  between ``audio.start`` and ``audio.done`` into the sentence's file, so several
  frames carry the same file as one would.
- ``ChunkMessages`` makes vllm-omni's ``audio.chunk`` messages (word timestamps on):
  base64 PCM with its place in the sentence, then a trailing empty chunk whose
  ``timestamps`` are the sentence's word timings from ``WordTimings``.
- ``WordTimings.info`` is the same timings in Baseten's ``timestamp_info`` shape.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator

import numpy as np

from protocol.compat_vllm import TimestampInfo, VllmAudioChunk, VllmWordTimestamp, WordAlignment
from voiceserver.audio import OutputStage, make_output, wav_header
from voiceserver.audio.containers import encode_whole_file
from voiceserver.transport.compat_settings import AudioSpec

MAX_FRAME_BYTES = 1 << 20
"""Largest binary frame sent: the default ``max_size`` of the ``websockets`` client."""
MAX_CHUNK_PCM_BYTES = 512 * 1024
"""Largest PCM payload of one ``audio.chunk``: its base64 (4/3 of it) and the JSON
around it stay far below ``MAX_FRAME_BYTES``."""
CHANNELS = 1


def binary_frames(data: bytes, limit: int = MAX_FRAME_BYTES) -> Iterator[bytes]:
    """``data`` in frames of at most ``limit`` bytes (an even limit keeps s16 samples whole)."""
    for start in range(0, len(data), limit):
        yield data[start : start + limit]


class SentenceEncoder:
    """Model-rate float32 PCM of one sentence -> the bytes sent for it (a
    ``voiceserver.session.output.Stage``, so a ContextOutput runs it).

    Streamed, ``feed`` returns what is ready, as one payload; otherwise it returns
    nothing until the final chunk, then the whole file.
    """

    def __init__(self, spec: AudioSpec, input_rate: int) -> None:
        self.spec = spec
        self._stage: OutputStage = make_output(spec.wire_format, input_rate)
        self._body = bytearray()
        self._header_due = spec.stream and spec.response_format == "wav"

    @property
    def cheap(self) -> bool:
        # An mp3 or flac sentence is encoded whole at its end: that is codec work.
        whole_file_codec = not self.spec.stream and self.spec.response_format in ("mp3", "flac")
        return self._stage.cheap and not whole_file_codec

    @property
    def finished(self) -> bool:
        return self._stage.finished

    def feed(self, pcm: np.ndarray, *, drain: bool = False, final: bool = False) -> list[bytes]:
        # A sentence has no flush points (input.done ends it): `drain` never comes.
        data = b"".join(self._stage.push(pcm))
        if final:
            data += b"".join(self._stage.finish())
        if self.spec.stream:
            if self._header_due and (data or final):
                self._header_due = False
                data = wav_header(self.spec.sample_rate) + data
            return [data] if data else []
        self._body += data
        return [self._file()] if final else []

    def close(self) -> None:
        self._stage.close()

    def _file(self) -> bytes:
        fmt, rate = self.spec.response_format, self.spec.sample_rate
        if fmt == "wav":
            return wav_header(rate, data_bytes=len(self._body)) + self._body
        if fmt in ("mp3", "flac"):
            return encode_whole_file(bytes(self._body), rate, fmt)
        return bytes(self._body)


class WordTimings:
    """The word timings of one sentence, in ms from its start, as they become known.

    ``words`` is None unless the sentence's context times its words: vllm-omni's "no
    alignment", which every sentence gets while the engine gives none.
    """

    def __init__(self) -> None:
        self._words: list[tuple[str, float, float]] | None = None

    def aligned(self) -> None:
        """The context times its words: ``words`` is a list from now on, empty for a
        sentence with no word spoken (vllm-omni's ``[]``: silence)."""
        if self._words is None:
            self._words = []

    def add(self, word: str, start_s: float, end_s: float) -> None:
        """One word, its start and end in seconds from the start of the sentence."""
        if self._words is None:
            self._words = []
        self._words.append((word, start_s, end_s))

    @property
    def words(self) -> list[VllmWordTimestamp] | None:
        if self._words is None:
            return None
        return [
            VllmWordTimestamp(word=word, start_ms=round(start * 1000), end_ms=round(end * 1000))
            for word, start, end in self._words
        ]

    def info(self) -> TimestampInfo | None:
        """Baseten's ``timestamp_info`` (seconds, to the millisecond), or None when the
        context does not time its words (Baseten's server then leaves it out)."""
        if self._words is None:
            return None
        return TimestampInfo(
            word_alignment=WordAlignment(
                words=[word for word, _, _ in self._words],
                word_start_times_seconds=[round(start, 3) for _, start, _ in self._words],
                word_end_times_seconds=[round(end, 3) for _, _, end in self._words],
            )
        )


class ChunkMessages:
    """vllm-omni's ``audio.chunk`` messages of one sentence (s16le PCM, mono)."""

    def __init__(self, utterance_index: int, sentence_index: int, sample_rate: int) -> None:
        self.utterance_index = utterance_index
        self.sentence_index = sentence_index
        self.sample_rate = sample_rate
        self._next_id = 0
        self._bytes = 0

    def _ms(self, nbytes: int) -> int:
        return round(nbytes / (2 * CHANNELS) / self.sample_rate * 1000)

    def _message(
        self,
        pcm: bytes,
        start_ms: int,
        end_ms: int,
        timestamps: list[VllmWordTimestamp] | None,
    ) -> VllmAudioChunk:
        msg = VllmAudioChunk(
            utterance_index=self.utterance_index,
            sentence_index=self.sentence_index,
            chunk_id=self._next_id,
            chunk_start_ms=start_ms,
            chunk_end_ms=end_ms,
            sample_rate=self.sample_rate,
            channels=CHANNELS,
            audio_b64=base64.b64encode(pcm).decode("ascii"),
            timestamps=timestamps,
        )
        self._next_id += 1
        return msg

    def audio(self, pcm: bytes) -> list[VllmAudioChunk]:
        """The chunks carrying ``pcm`` (more than one only for a very large payload)."""
        out = []
        for piece in binary_frames(pcm, MAX_CHUNK_PCM_BYTES):
            start = self._ms(self._bytes)
            self._bytes += len(piece)
            out.append(self._message(piece, start, self._ms(self._bytes), None))
        return out

    def trailer(self, timings: WordTimings) -> VllmAudioChunk:
        """The sentence's last chunk: no audio, the whole sentence's span and timings."""
        return self._message(b"", 0, self._ms(self._bytes), timings.words)
