"""Text -> phoneme ids through piper's own espeak-ng phonemizer.

Word alignment: espeak-ng separates the words it speaks with a space phoneme,
so a sentence's phonemes fall into groups, one per spoken word. A text word
(a run of non-whitespace) may be spoken as several (``1990``, ``Dr.`` are not
one-to-one), so each text word is phonemized alone, with the same voice, to
learn how many groups it makes; when those counts add up to the groups of the
whole text (the usual case) words map onto groups exactly, otherwise the
groups are shared out in proportion to the counts, keeping the order.
"""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np
from piper.config import PhonemeType, PiperConfig
from piper.voice import PiperVoice

from models.base import AlignedText, word_spans

PUNCTUATION = frozenset(",;:.!?，；：。！？")
"""Phonemes after which a long sentence is best cut (espeak keeps the ASCII
terminators; the CJK forms are here for phonemizers that keep theirs)."""
WORD_BREAK = " "

_PUNCTUATION, _WORD, _ANYWHERE = range(3)
_ESPEAK = threading.Lock()


class PiperFrontend:
    """One unit per sentence, exactly as ``PiperVoice.synthesize`` splits text,
    except that a sentence over ``max_unit_ids`` ids is cut into several units."""

    def __init__(self, config: PiperConfig, max_unit_ids: int) -> None:
        # PiperVoice's phonemize/phonemes_to_ids need only its config; its ONNX
        # session is never touched here, so none is loaded.
        session: Any = None
        self._voice = PiperVoice(session=session, config=config)
        self._overhead = len(self._voice.phonemes_to_ids([]))
        self._prefix = self._overhead - len(config.phoneme_id_map.get("$", []))
        """Ids before the first phoneme's (BOS and its pad)."""
        self.aligns_words = config.phoneme_type == PhonemeType.ESPEAK
        self._costs: dict[str, int] = {}
        self._budget = max_unit_ids - self._overhead
        minimum = self._overhead + max(self._cost(p) for p in config.phoneme_id_map)
        if max_unit_ids < minimum:
            raise ValueError(f"model.max_unit_ids must be at least {minimum}, got {max_unit_ids}")

    def encode(self, text: str) -> list[list[int]]:
        units: list[list[int]] = []
        with _ESPEAK:  # espeak-ng keeps global state: one phonemizer call at a time
            sentences = self._voice.phonemize(text)
        for phonemes in sentences:
            if phonemes:
                for piece in self.split(phonemes):
                    units.append(self._voice.phonemes_to_ids(piece))
        return units

    def encode_aligned(self, text: str) -> AlignedText:
        """:meth:`encode` plus each word's ids in its units (see the module doc)."""
        spans = word_spans(text)
        with _ESPEAK:
            sentences = [p for p in self._voice.phonemize(text) if p]
            alone = [self._voice.phonemize(text[a:b]) for a, b in spans.tolist()]
        groups = sum(_groups(p) for p in sentences)
        owner = _owners([sum(_groups(p) for p in word) for word in alone], groups)
        units: list[np.ndarray] = []
        tables: list[np.ndarray] = []
        group = 0  # the group of the next phoneme that is not a word break
        for phonemes in sentences:
            in_word = False
            for piece in self.split(phonemes):
                units.append(np.asarray(self._voice.phonemes_to_ids(piece), np.int64))
                group_ids: dict[int, list[int]] = {}  # group -> its ids in this unit
                at = self._prefix
                for phoneme in piece:
                    cost = self._cost(phoneme)
                    if phoneme == WORD_BREAK:
                        if in_word:
                            group += 1
                        in_word = False
                    else:
                        in_word = True
                        if cost:
                            span = group_ids.setdefault(group, [at, at + cost])
                            span[1] = at + cost
                    at += cost
                tables.append(_word_rows(group_ids, owner))
            if in_word:
                group += 1
        return AlignedText(units, tables, spans)

    def split(self, phonemes: list[str]) -> list[list[str]]:
        """Cut one sentence's phonemes into pieces whose ids fit the cap.

        A sentence that fits is returned whole, so its audio is piper's own.
        Otherwise each cut aims at equal pieces and lands after punctuation
        if there is one between half that size and the cap, else after a
        word, else anywhere."""
        costs = [self._cost(p) for p in phonemes]
        remaining = sum(costs)
        pieces: list[list[str]] = []
        start = 0
        while remaining > self._budget:
            target = remaining / math.ceil(remaining / self._budget)
            end = self._cut(phonemes, costs, start, target)
            pieces.append(phonemes[start:end])
            remaining -= sum(costs[start:end])
            start = end
        pieces.append(phonemes[start:])
        return pieces

    def _cut(self, phonemes: list[str], costs: list[int], start: int, target: float) -> int:
        """End (exclusive) of the piece starting at ``start``."""
        best: list[tuple[float, int] | None] = [None, None, None]
        size = 0
        for end in range(start + 1, len(phonemes) + 1):
            size += costs[end - 1]
            if size > self._budget and end > start + 1:
                break
            # A boundary far short of the target would leave a needlessly small
            # piece (and one more call); a hard cut, the last resort, may land anywhere.
            kind = self._boundary(phonemes, end) if size >= target / 2 else _ANYWHERE
            candidate = (abs(size - target), end)
            for k in {kind, _ANYWHERE}:
                current = best[k]
                if current is None or candidate < current:
                    best[k] = candidate
        return next(choice[1] for choice in best if choice is not None)

    @staticmethod
    def _boundary(phonemes: list[str], end: int) -> int:
        """How good a cut just before ``phonemes[end]`` is."""
        last = phonemes[end - 1]
        after = phonemes[end] if end < len(phonemes) else WORD_BREAK
        if last in PUNCTUATION and after != WORD_BREAK:
            return _PUNCTUATION
        if last == WORD_BREAK:
            before = phonemes[end - 2] if end >= 2 else ""
            return _PUNCTUATION if before in PUNCTUATION else _WORD
        return _ANYWHERE

    def _cost(self, phoneme: str) -> int:
        """Ids one phoneme adds to a unit (with its padding; 0 when unknown)."""
        cost = self._costs.get(phoneme)
        if cost is None:
            cost = len(self._voice.phonemes_to_ids([phoneme])) - self._overhead
            self._costs[phoneme] = cost
        return cost


def _groups(phonemes: list[str]) -> int:
    """Spoken words in one sentence's phonemes (runs between word breaks)."""
    return len("".join(WORD_BREAK if p == WORD_BREAK else "x" for p in phonemes).split())


def _owners(counts: list[int], groups: int) -> list[list[int]]:
    """The text words (indices) each phoneme group belongs to, one list per group and
    an empty one past the end.

    Word ``i`` takes ``counts[i]`` groups when the counts add up to ``groups``,
    else a share of the groups in proportion to its count, in order. A spoken word
    whose share rounds to nothing (espeak ran it into a neighbour: ``as it`` said
    as one group) shares the group before it; a word that speaks nothing owns none."""
    owners: list[list[int]] = [[] for _ in range(groups + 1)]
    total = sum(counts)
    if not total or not groups:
        return owners
    ends = np.round(np.cumsum(counts) * groups / total).astype(np.int64).tolist()
    start = 0
    for word, (count, end) in enumerate(zip(counts, ends, strict=True)):
        if count == 0:
            continue
        if end > start:
            for g in range(start, end):
                owners[g].append(word)
            start = end
        else:
            owners[max(0, start - 1)].append(word)
    return owners


def _word_rows(spans: dict[int, list[int]], owners: list[list[int]]) -> np.ndarray:
    """``(word, first id, end id)`` rows of one unit from its groups' id spans; a group
    shared by several words is cut into equal consecutive parts, one each."""
    found: dict[int, list[int]] = {}
    for group, (a, b) in spans.items():
        words = owners[group] if group < len(owners) else []
        for j, word in enumerate(words):
            lo = a + (b - a) * j // len(words)
            hi = a + (b - a) * (j + 1) // len(words)
            span = found.setdefault(word, [lo, hi])
            span[0], span[1] = min(span[0], lo), max(span[1], hi)
    rows = [(word, a, b) for word, (a, b) in sorted(found.items())]
    return np.asarray(rows, np.int64).reshape(-1, 3)
