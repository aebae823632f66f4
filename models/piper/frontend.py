"""Text -> phoneme ids through piper's own espeak-ng phonemizer."""

from __future__ import annotations

import math
import threading
from typing import Any

from piper.config import PiperConfig
from piper.voice import PiperVoice

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
