"""Streaming text segmenter: decides when buffered LLM text is complete enough to synthesize.

Text arrives in pieces of any size and is joined exactly as sent. Cuts are made at sentence ends,
at newlines, at a hard length cap, and (through ``poll``) when text has waited too long. A clause
mark (``, ; : — –``) cuts, once the segment is long enough, only a sentence that is streaming in:
its end (a sentence end or newline) did not come in the piece that brought the mark, and a later
piece has been pushed. That buys latency while an LLM's tokens stream in, whereas a sentence that
arrives with its end, or a text pushed in one piece, is spoken whole, as the model's own one-shot
synthesis would: a text pushed whole is cut at its sentence ends only (and at ``max_chars``), the
same text streamed token by token also at some clause marks. Every decision is final once made.

Segments carry no surrounding whitespace: ``text == whole[char_start:char_end]`` and everything
between two segments (and before the first) is whitespace, which is dropped.

Sentence-end rules (auto mode), for a run of ``. ! ? …`` plus optional closing quotes/brackets:

- it must be followed by whitespace; ``3.14``, ``example.com``, ``1.2.3`` never are;
- whitespace with nothing after it yet ends the sentence at once (a voice agent's sentence
  is spoken as soon as its end arrives); when the next word is there, a lowercase one means
  the sentence goes on (``Well... maybe``, ``"Really?" she asked``), a newline always ends it;
- a single ``.`` after a known abbreviation (``ABBREVIATIONS``), a single capital initial
  (``J. K. Rowling``), dotted initials (``U.S.A.``) or a bare number that opens the segment
  (an enumeration, ``1. Boil water``) does not end a sentence, except for the abbreviations
  marked as able to end one, which do when the next word is capitalised (``etc. The``).

CJK full stops ``。！？`` end a sentence without needing whitespace after them, and the full-width
clause marks ``，；：`` likewise. Segments without a letter or digit are not emitted by ``push``
or ``poll``; they stay buffered and join the next segment (``max_chars`` overrides this).

No segment is longer than ``max_chars``, whatever the mode: ``flush`` and ``poll`` cut a long
buffer at its last sentence end, else clause mark, else whitespace within the cap (a hard cut
only when there is none), so one segment is a bounded amount of work for a model. Pushing is
linear in the text pushed, so a client that streams a long text one character at a time
costs no more than one that sends it whole.
"""

import bisect
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal

# Abbreviation (lowercase, without its last dot) -> whether it may end a sentence, which it does
# only when the next word is capitalised ("etc. The" ends, "etc. and" and "No. 5" do not).
ABBREVIATIONS: Mapping[str, bool] = {
    "mr": False,
    "mrs": False,
    "ms": False,
    "dr": False,
    "prof": False,
    "sr": False,
    "st": False,
    "mt": False,
    "vs": False,
    "cf": False,
    "e.g": False,
    "i.e": False,
    "u.s": False,
    "u.k": False,
    "jr": True,
    "etc": True,
    "a.m": True,
    "p.m": True,
    "inc": True,
    "ltd": True,
    "co": True,
    "corp": True,
    "no": True,
    "vol": True,
    "fig": True,
    "approx": True,
}

_WESTERN_ENDS = ".!?…"
_CJK_ENDS = "。！？｡"
_SENTENCE_ENDS = _WESTERN_ENDS + _CJK_ENDS
_CLAUSE_MARKS = ",;:—–"
_CJK_CLAUSE_MARKS = "，；："
_CLOSERS = "\"'”’)]}»›」』】〉》）"
_OPENERS = "\"'“‘([{«‹「『【〈《（"
_DOTTED_INITIALS = re.compile(r"(?:[^\W\d_]\.)+[^\W\d_]")
# Boundaries for cutting an over-long buffer (flush/poll): a mark (plus closers) followed by
# whitespace, or a CJK mark, which needs none.
_CLOSERS_RE = "[" + re.escape(_CLOSERS) + "]*"
_SENTENCE_BOUNDARY = re.compile(
    f"[{re.escape(_WESTERN_ENDS)}]+{_CLOSERS_RE}(?=\\s)|[{re.escape(_CJK_ENDS)}]+{_CLOSERS_RE}"
)
_CLAUSE_BOUNDARY = re.compile(
    f"[{re.escape(_CLAUSE_MARKS)}]{_CLOSERS_RE}(?=\\s)|[{re.escape(_CJK_CLAUSE_MARKS)}]{_CLOSERS_RE}"
)
_ENDING = re.compile(f"[{re.escape(_SENTENCE_ENDS)}]+{_CLOSERS_RE}$")
# How far past a mark a decision may look: a longer run of closers or spaces decides by default.
_LOOKAHEAD = 32


@dataclass(frozen=True)
class SegmenterConfig:
    """How a context's text is cut into segments."""

    mode: Literal["auto", "manual"] = "auto"
    """auto: cut at boundaries as text streams in; manual: only ``flush()`` emits."""
    max_delay_ms: int | None = 1000
    """auto: once the oldest buffered text has waited this long, ``poll`` cuts at the last word
    boundary (everything when there is no space); 0 cuts as soon as a word is complete; None
    disables the timer. 1000: at 50 LLM tokens/s and faster it never cuts inside a clause, and
    it bounds how long text sent without a boundary waits (``bench/segmenter_delay.py``)."""
    end_delay_ms: int | None = 200
    """auto: text that ends in a sentence mark (``today?``, nothing after it yet) is spoken
    once nothing has arrived for this long, rather than when the next word shows it ended;
    a pause that long between an LLM's tokens is rare above 10 tokens/s. None: wait for
    the next character or ``max_delay_ms``."""
    first_min_chars: int = 12
    """The first segment of a context may end at a clause mark once it has this many chars."""
    min_clause_chars: int = 40
    """Later segments end at a clause mark (, ; : — –) only when at least this long."""
    max_chars: int = 400
    """Hard cap on a segment's length: cut at the last word boundary within it."""

    def __post_init__(self) -> None:
        if self.mode not in ("auto", "manual"):
            raise ValueError(f"mode must be 'auto' or 'manual', not {self.mode!r}")
        for name in ("max_delay_ms", "end_delay_ms"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must be >= 0")
        if not 0 < self.first_min_chars <= self.max_chars:
            raise ValueError("first_min_chars must be in 1..max_chars")
        if not 0 < self.min_clause_chars <= self.max_chars:
            raise ValueError("min_clause_chars must be in 1..max_chars")

    def with_split(self, split: Literal["auto", "sentence", "none"]) -> "SegmenterConfig":
        """The same config cut more coarsely: ``sentence`` ignores clause marks,
        ``none`` waits for flush/end; ``auto`` is this config."""
        if split == "none":
            return replace(self, mode="manual")
        if split == "sentence":
            return replace(self, first_min_chars=self.max_chars, min_clause_chars=self.max_chars)
        return self


@dataclass(frozen=True)
class Segment:
    """A piece of a context's text, ready to synthesize."""

    text: str
    """The input characters, without surrounding whitespace."""
    char_start: int
    """Offset of ``text`` in the context's whole text."""
    char_end: int
    """``char_start + len(text)``."""
    flush: bool
    """True when produced by an explicit flush (the caller attaches its flush id)."""


def _speakable(text: str) -> bool:
    return any(ch.isalnum() for ch in text)


def _run(buf: str, i: int, limit: int, chars: str | None) -> int:
    """Index after the run starting at i of `chars` (of whitespace when None), stopping at limit."""
    while i < limit and (buf[i].isspace() if chars is None else buf[i] in chars):
        i += 1
    return i


def _period_rule(buf: str, i: int) -> Literal["never", "capital", "normal"]:
    """How the single '.' at buf[i] may end a sentence, judged by the word it closes."""
    start = i
    while start > 0 and not buf[start - 1].isspace():
        start -= 1
    word = buf[start:i].lstrip(_OPENERS)
    if word.lower() in ABBREVIATIONS:
        return "capital" if ABBREVIATIONS[word.lower()] else "never"
    if (len(word) == 1 and word.isupper()) or _DOTTED_INITIALS.fullmatch(word):
        return "never"
    if start == 0 and word.isdigit():
        return "never"
    return "normal"


def _sentence_end(buf: str, i: int) -> tuple[bool | None, int]:
    """Whether the terminator run at buf[i] ends a sentence (None: not known yet) and its end."""
    limit = min(len(buf), i + _LOOKAHEAD)
    more = len(buf) < i + _LOOKAHEAD
    j = _run(buf, i, limit, _SENTENCE_ENDS)
    end = _run(buf, j, limit, _CLOSERS)
    if any(ch in _CJK_ENDS for ch in buf[i:j]):
        return (None if end == limit and more else True), end
    gap = _run(buf, end, limit, None)
    if gap == end:
        return (None if end == limit and more else False), end
    if "\n" in buf[end:gap]:
        return True, end
    rule = _period_rule(buf, i) if buf[i:j] == "." else "normal"
    if rule == "never":
        return False, end
    if gap == limit:
        # Whitespace after the mark and nothing yet: the sentence is complete unless
        # an abbreviation needs the next word to tell.
        return (None if more and rule == "capital" else True), end
    nxt = buf[gap]
    if rule == "capital":
        return nxt.isupper(), end
    return not nxt.islower(), end


def _ends_sentence(buf: str) -> bool:
    """Whether ``buf`` ends in a sentence mark (and closers): its last word is whole."""
    return bool(_ENDING.search(buf))


def may_end_sentence(buf: str) -> bool:
    """Whether ``buf`` ends in a sentence mark that whitespace after it would make a
    sentence end: not a decimal point (``3.`` may become ``3.5``), an abbreviation or
    an initial."""
    found = _ENDING.search(buf)
    if found is None:
        return False
    i = found.start()
    if buf[i] != "." or buf[i + 1 : i + 2] == ".":
        return True
    return not buf[i - 1 : i].isdigit() and _period_rule(buf, i) == "normal"


def _clause_end(buf: str, i: int) -> tuple[bool | None, int]:
    """Whether the clause mark at buf[i] is a boundary (None: not known yet) and its end."""
    limit = min(len(buf), i + _LOOKAHEAD)
    more = len(buf) < i + _LOOKAHEAD
    end = _run(buf, i + 1, limit, _CLOSERS)
    if end == limit and more:
        return None, end
    return (buf[i] in _CJK_CLAUSE_MARKS or (end < limit and buf[end].isspace())), end


class TextSegmenter:
    """Buffers one context's streamed text and cuts it into segments.

    Pure: no I/O and no clock; callers pass ``now`` (monotonic seconds) and call ``poll`` at
    ``deadline()``. Not thread-safe; one instance per context.
    """

    def __init__(self, config: SegmenterConfig) -> None:
        self._config = config
        self._buf = ""  # pending text; never starts with whitespace
        self._offset = 0  # offset of _buf in the context's whole text
        self._first = True  # no segment emitted yet
        self._arrivals: list[tuple[int, float]] = []  # (end offset of a pushed piece, its time)
        self._scanned = 0  # buffer index up to which _next_cut found no cut (decisions are final)
        self._held: list[str] = []  # manual mode: pushed pieces not yet joined into _buf
        self._held_chars = 0
        self._push_ends: list[int] = []  # offsets in the whole text where pushes ended
        self._skipped_clause = 0  # end of the last clause cut passed over for a sentence end
        self._end_at: int | None = None  # a possible sentence end found by _sentence_follows
        self._end_searched = 0  # buffer index up to which _sentence_follows found no other

    @property
    def buffered_chars(self) -> int:
        """``len(buffered)``, without joining held pieces (cheap to ask on every push);
        it may count leading whitespace that ``buffered`` would drop."""
        return len(self._buf) + self._held_chars

    @property
    def buffered(self) -> str:
        """Text waiting to be emitted (leading whitespace already dropped)."""
        self._join_held()
        return self._buf

    def push(self, text: str, now: float) -> list[Segment]:
        """Append streamed text; return the segments it completes (never any in manual mode)."""
        if not text:
            return []
        if self._config.mode == "manual":
            # Nothing is cut before flush() and no timer runs: keep the pieces, join them once.
            self._held.append(text)
            self._held_chars += len(text)
            return []
        self._buf += text
        self._push_ends.append(self._offset + len(self._buf))
        if self._config.max_delay_ms is not None or self._config.end_delay_ms is not None:
            self._arrivals.append((self._offset + len(self._buf), now))
        self._drop_leading_space()
        out: list[Segment] = []
        while (cut := self._next_cut()) is not None:
            out.append(self._emit(cut, flush=False))
        return out

    def flush(self) -> list[Segment]:
        """Emit everything buffered as flush segments (several when the buffer is over
        ``max_chars``); none when nothing but whitespace is buffered."""
        self._join_held()
        out: list[Segment] = []
        while self._buf:
            out.append(self._emit(self._bounded_cut(len(self._buf)), flush=True))
        return out

    def _join_held(self) -> None:
        if self._held:
            self._buf += "".join(self._held)
            self._held = []
            self._held_chars = 0
            self._drop_leading_space()

    def poll(self, now: float) -> list[Segment]:
        """Timer-driven cut: once the oldest buffered text waited max_delay_ms, cut at the last
        word boundary, since the trailing word may still be streaming; take everything when the
        buffer ends in a sentence mark or no word boundary leaves something speakable before
        it. The rest waits afresh."""
        due = self.deadline()
        if due is None or now < due:
            return []
        buf = self._buf
        cut = len(buf)
        if not buf[-1].isspace() and not _ends_sentence(buf):
            cut = next((k for k in range(len(buf) - 1, 0, -1) if buf[k].isspace()), len(buf))
            cut = cut if _speakable(buf[:cut]) else len(buf)
        out: list[Segment] = []
        if _speakable(buf[:cut]):
            end = self._offset + cut
            while self._buf and self._offset < end:
                out.append(self._emit(self._bounded_cut(end - self._offset), flush=False))
        self._arrivals = [(end, max(t, now)) for end, t in self._arrivals]
        return out

    def deadline(self) -> float | None:
        """When ``poll`` should next be called; None when no timer is needed."""
        config = self._config
        if config.mode != "auto" or not self._buf or not self._arrivals:
            return None
        due = None
        if config.max_delay_ms is not None:
            oldest = next(t for end, t in self._arrivals if end > self._offset)
            due = oldest + config.max_delay_ms / 1000.0
        if config.end_delay_ms is not None and may_end_sentence(self._buf):
            latest = self._arrivals[-1][1] + config.end_delay_ms / 1000.0
            due = latest if due is None else min(due, latest)
        return due

    def _next_cut(self) -> int | None:
        """End index in the buffer of the next complete segment, or None to wait for more."""
        buf, cap = self._buf, self._config.max_chars
        min_clause = self._config.first_min_chars if self._first else self._config.min_clause_chars
        i = self._scanned
        while i < len(buf):
            if i >= cap:
                if self._skipped_clause and _speakable(buf[: self._skipped_clause]):
                    return self._skipped_clause
                return next((k for k in range(cap, 0, -1) if buf[k].isspace()), cap)
            ch, verdict, end = buf[i], False, i + 1
            if ch == "\n":
                verdict, end = True, i
            elif ch in _SENTENCE_ENDS:
                verdict, end = _sentence_end(buf, i)
            elif ch in _CLAUSE_MARKS or ch in _CJK_CLAUSE_MARKS:
                verdict, end = _clause_end(buf, i)
                verdict = False if verdict is not None and end < min_clause else verdict
                if verdict and end <= cap:
                    verdict = self._clause_cuts(i, end)
            if verdict is None:
                self._scanned = i
                return None
            if verdict and end <= cap and _speakable(buf[:end]):
                return end
            i = max(end, i + 1)
        self._scanned = i
        return None

    def _clause_cuts(self, i: int, end: int) -> bool | None:
        """Whether the clause mark at ``i`` (ending at ``end``), otherwise a cut, cuts a
        sentence still arriving; None: not known until more text is pushed."""
        came_with = self._arrived_with(i)
        if self._sentence_follows(end, came_with):
            # The sentence came with its end: speak it whole, as one-shot synthesis would.
            self._skipped_clause = end
            return False
        # Text pushed after the mark's piece shows the sentence is streaming in; until
        # then this may be the whole text.
        return None if came_with >= len(self._buf) else True

    def _arrived_with(self, i: int) -> int:
        """End (buffer index) of the push that brought buffer index ``i``."""
        at = self._offset + i
        return self._push_ends[bisect.bisect_right(self._push_ends, at)] - self._offset

    def _sentence_follows(self, start: int, stop: int) -> bool:
        """Whether the buffer holds a newline or a sentence end (one not known yet counts)
        from ``start`` to before ``stop``. ``stop`` never decreases between calls on the
        same buffer, so the search resumes where it stopped: amortised linear."""
        buf = self._buf
        if self._end_at is not None and self._end_at >= start:
            return True
        i = max(start, self._end_searched)
        while i < stop:
            ch, nxt = buf[i], i + 1
            if ch == "\n":
                self._end_at = i
            elif ch in _SENTENCE_ENDS:
                verdict, end = _sentence_end(buf, i)
                nxt = max(end, nxt)
                if verdict is not False:
                    self._end_at = i
            if self._end_at == i:
                self._end_searched = nxt
                return True
            i = nxt
        self._end_searched = i
        return False

    def _rescan(self) -> None:
        """The buffer's start moved: every index kept into it is void."""
        self._scanned = 0
        self._skipped_clause = 0
        self._end_at = None
        self._end_searched = 0

    def _bounded_cut(self, limit: int) -> int:
        """Where to cut the first ``limit`` chars of the buffer so the piece fits in
        ``max_chars``: all of it if it fits, else the best boundary within the cap."""
        cap = self._config.max_chars
        if limit <= cap:
            return limit
        window = self._buf[: cap + 1]
        for boundary in (_SENTENCE_BOUNDARY, _CLAUSE_BOUNDARY):
            cuts = [m.end() for m in boundary.finditer(window) if m.end() <= cap]
            if cuts and _speakable(window[: cuts[-1]]):
                return cuts[-1]
        space = max(window.rfind(ch, 1, cap + 1) for ch in " \n\t")
        return space if space > 0 else cap

    def _emit(self, cut: int, *, flush: bool) -> Segment:
        text = self._buf[:cut].rstrip()
        segment = Segment(text, self._offset, self._offset + len(text), flush)
        self._buf = self._buf[cut:]
        self._offset += cut
        self._first = False
        self._rescan()
        self._arrivals = [(end, t) for end, t in self._arrivals if end > self._offset]
        self._push_ends = [end for end in self._push_ends if end > self._offset]
        self._drop_leading_space()
        return segment

    def _drop_leading_space(self) -> None:
        stripped = self._buf.lstrip()
        if len(stripped) == len(self._buf):
            return
        self._rescan()
        self._offset += len(self._buf) - len(stripped)
        self._buf = stripped
        self._arrivals = [(end, t) for end, t in self._arrivals if end > self._offset]
        self._push_ends = [end for end in self._push_ends if end > self._offset]
