"""ElevenLabs' per-character timing, derived from the engine's word timings (sans-I/O).

The engine times words (``protocol.messages.WordTimestamp``: a run of non-whitespace
characters, ``char_start``/``char_end`` into the context's text, ``start_ms``/
``end_ms`` from its first sample, sent before the audio they describe). ElevenLabs
clients want every character of the text with a start and a duration. Here:

- the characters of a word share its time evenly: the k-th of n starts at
  ``start + (end - start) * k / n``;
- a character outside every word (the spaces between words, or a word the model does
  not speak, such as a lone dash) starts where the word before it ends (0 before the
  first word);
- each character lasts until the next one starts, so the characters tile the audio.

:class:`CharTimeline` releases the characters in order, each once its start is known:
a word's characters once the word is timed, whitespace after a timed word at once, other
characters outside words once a later word is timed, the rest at the context's end.

On the sockets each audio message carries the characters that start within its audio
(:func:`chunk_alignment`); the last one lasts to the end of the message's audio. Their
times count from where the previous message's characters ended (ElevenLabs' times are
"relative to the returned chunk"), so summing each message's span (last start + last
duration) gives the audio's length, which is how Pipecat keeps its clock; a message in
which no character starts (inside a pause) carries none, and the next message's times
count from the end of the last one that did. With ``sync_alignment=true`` (LiveKit's
plugin always asks for it, and reads the times as the context's) they count from the
context's first sample instead; on the text-to-dialogue socket from the message's own
first sample (LiveKit moves its clock by each message's audio there).

How long a message's audio is depends on its format (:class:`SampleClock`,
:class:`CbrClock`, :class:`OggOpusClock`); HTTP's alignment counts seconds from the
start of the response instead (:func:`absolute_alignment`).
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass

from protocol.compat_elevenlabs import Alignment, CharacterAlignment


@dataclass(frozen=True, slots=True)
class _Word:
    char_start: int
    char_end: int
    start_ms: float
    end_ms: float


class CharTimeline:
    """The characters of one context's text and their start times (ms from its first
    sample), released in order as word timings and audio arrive."""

    def __init__(self) -> None:
        self._parts: deque[str] = deque()
        self._offset = 0
        """Characters of ``_parts[0]`` already released."""
        self._length = 0
        """Characters of text received."""
        self._next = 0
        """Index of the next character to release."""
        self._words: deque[_Word] = deque()
        self._prev_end = 0.0
        """End of the last word before the next character."""
        self._last_start = 0.0

    @property
    def pending(self) -> int:
        """Characters received and not released yet."""
        return self._length - self._next

    def add_text(self, text: str) -> None:
        if text:
            self._parts.append(text)
            self._length += len(text)

    def add_word(self, char_start: int, char_end: int, start_ms: float, end_ms: float) -> None:
        """A timed word (in order, never overlapping the ones before it)."""
        if char_end <= char_start or char_end <= self._next:
            return
        self._words.append(_Word(char_start, char_end, start_ms, max(start_ms, end_ms)))

    def take(self, until_ms: float, final: bool = False) -> list[tuple[str, float]]:
        """The next characters whose start is at most ``until_ms`` (``final``: every one
        left, the context has ended), with their starts, never decreasing."""
        out: list[tuple[str, float]] = []
        while self._next < self._length:
            start = self._start_of(self._next, final)
            if start is None or (not final and start > until_ms):
                break
            start = max(start, self._last_start)
            self._last_start = start
            out.append((self._pop_char(), start))
            self._next += 1
        return out

    def _start_of(self, index: int, final: bool) -> float | None:
        words = self._words
        while words and words[0].char_end <= index:
            self._prev_end = words.popleft().end_ms
        if words and words[0].char_start <= index:
            word = words[0]
            share = (index - word.char_start) / (word.char_end - word.char_start)
            return word.start_ms + (word.end_ms - word.start_ms) * share
        if words or final or self._parts[0][self._offset].isspace():
            # Between words (whitespace, or a word the model did not speak: a later word
            # is timed): where the previous word ended.
            return self._prev_end
        return None  # perhaps a word not timed yet

    def _pop_char(self) -> str:
        part = self._parts[0]
        char = part[self._offset]
        self._offset += 1
        if self._offset == len(part):
            self._parts.popleft()
            self._offset = 0
        return char


def chunk_alignment(
    chars: list[tuple[str, float]], clock_ms: int, end_ms: int, *, origin_ms: int | None = None
) -> tuple[Alignment | None, int]:
    """The alignment of one socket audio message ending at ``end_ms`` (ms of the
    context's audio) and the new clock. ``chars`` start no earlier than ``clock_ms``
    (where the previous message's characters ended) and the last one lasts to
    ``end_ms``; their times count from ``origin_ms`` (0: the context's first sample;
    None: ``clock_ms``)."""
    if not chars:
        return None, clock_ms
    end_ms = max(end_ms, clock_ms)
    starts: list[int] = []
    low = clock_ms
    for _, start in chars:
        low = min(max(round(start), low), end_ms)
        starts.append(low)
    ends = [*starts[1:], end_ms]
    origin = clock_ms if origin_ms is None else origin_ms
    alignment = Alignment(
        chars=[char for char, _ in chars],
        charStartTimesMs=[s - origin for s in starts],
        charDurationsMs=[e - s for s, e in zip(starts, ends, strict=True)],
    )
    return alignment, end_ms


def absolute_alignment(chars: list[tuple[str, float]], end_ms: float) -> CharacterAlignment:
    """HTTP's alignment of ``chars`` (seconds from the response's start): each ends where
    the next starts, the last at ``end_ms``."""
    starts: list[float] = []
    low = 0.0
    for _, start in chars:
        low = max(low, min(start, end_ms))
        starts.append(low)
    ends = [*starts[1:], max(end_ms, low)]
    return CharacterAlignment(
        characters=[char for char, _ in chars],
        character_start_times_seconds=[round(s / 1000, 3) for s in starts],
        character_end_times_seconds=[round(e / 1000, 3) for e in ends],
    )


# --- how long an audio payload plays --------------------------------------------------


class SampleClock:
    """Sample-by-sample audio (PCM, mu-law, A-law): its length from its bytes."""

    def __init__(self, sample_rate: int, bytes_per_sample: int) -> None:
        self._rate = sample_rate
        self._width = bytes_per_sample
        self._samples = 0

    def advance(self, payload: bytes) -> int:
        """ms of audio after ``payload``."""
        self._samples += len(payload) // self._width
        return self._samples * 1000 // self._rate


class CbrClock:
    """Constant-bit-rate mp3: ``kbps`` kbit/s is ``kbps`` bits a millisecond."""

    def __init__(self, kbps: int) -> None:
        self._kbps = kbps
        self._bytes = 0

    def advance(self, payload: bytes) -> int:
        self._bytes += len(payload)
        return self._bytes * 8 // self._kbps


class OggOpusClock:
    """Ogg/Opus pages: the last complete page's granule position (48 kHz samples, less
    the pre-skip of the stream's OpusHead) is the audio sent so far."""

    _PAGE = struct.Struct("<4sBBqIIIB")  # capture, version, type, granule, serial, seq, crc, n

    def __init__(self) -> None:
        self._tail = b""
        self._pre_skip = 0
        self._ms = 0

    def advance(self, payload: bytes) -> int:
        data = self._tail + payload
        pos = 0
        while len(data) - pos >= self._PAGE.size:
            capture, _, _, granule, _, _, _, segments = self._PAGE.unpack_from(data, pos)
            header = self._PAGE.size + segments
            if capture != b"OggS":
                pos = len(data)  # not a page boundary: our muxer never writes this
                break
            if len(data) - pos < header:
                break
            body = sum(data[pos + self._PAGE.size : pos + header])
            if len(data) - pos < header + body:
                break
            packet = data[pos + header : pos + header + body]
            if packet.startswith(b"OpusHead") and len(packet) >= 12:
                self._pre_skip = int.from_bytes(packet[10:12], "little")
            elif granule > 0:
                self._ms = max(self._ms, (granule - self._pre_skip) // 48)
            pos += header + body
        self._tail = data[pos:]
        return self._ms


AudioClock = SampleClock | CbrClock | OggOpusClock
