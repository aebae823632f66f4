"""Which phones each word covers, for word timings.

:func:`phone_spans` is the reference's ``build_text_progress_metadata`` (voxtream 0.2.5):
one span per phonemised word, in compacted phone coordinates (punctuation tokens
excluded, so the span indices are those of :attr:`PhoneTokens.ids`), labelled with the
normalised word of the same index (the phonemised word itself past the last one). The
labels can drift from the phones they sit on where espeak-ng splits or fuses words
(``"Voxtreamtwo"``), as in the reference.

:func:`owners` then ties each phonemised word to the input word it came from, so a span
can be reported against the characters the client sent. Both steps count words: each
normalised word is the product of one input word (the input words, normalised alone,
give the counts), each phonemised word of one normalised word (phonemised alone). Where
the counts add up the assignment is exact; where they do not (normalisation or
espeak-ng joined words across a boundary) words are shared out in proportion to the
counts, in order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from models.voxtream.text.tokens import PUNCTUATION_MARKS


@dataclass(frozen=True)
class WordSpan:
    """One phonemised word: ``text`` (the reference's label), phones ``[start, end)`` in
    :attr:`PhoneTokens.ids` coordinates, and ``[char_start, char_end)``, the input word it
    came from in the text as sent (-1, -1 when it cannot be told)."""

    text: str
    start: int
    end: int
    char_start: int = -1
    char_end: int = -1


def phone_spans(
    normalized: str, phonemes: str, max_phones: int | None = None
) -> list[tuple[str, int, int]]:
    """The reference's (label, start, end) per phonemised word. ``max_phones``: stop once
    that many phones are counted (the reference's ``max_phone_tokens``)."""
    labels = normalized.split()
    words = phonemes.split()
    spans: list[tuple[str, int, int]] = []
    count = 0
    truncated = False
    for index, word in enumerate(words):
        phones = [ph for ph in word.split("|") if ph]
        if phones and phones[-1].endswith(PUNCTUATION_MARKS):
            last = phones.pop()
            if last[:-1]:
                phones.append(last[:-1])
        start = count
        for _ in phones:
            count += 1
            if max_phones is not None and count >= max_phones:
                truncated = True
                break
        spans.append((labels[index] if index < len(labels) else word, start, count))
        if max_phones is not None and count >= max_phones:
            break
    if not truncated:
        spans.extend((label, count, count) for label in labels[len(spans) :])
    return spans


def share_out(counts: Sequence[int], items: int) -> list[int]:
    """The owner of each of ``items`` things, owner ``k`` having made ``counts[k]`` of
    them: exact when the counts add up to ``items``, in proportion otherwise (in order);
    -1 for all when nobody made anything."""
    total = sum(counts)
    if total == 0:
        return [-1] * items
    if total == items:
        return [k for k, n in enumerate(counts) for _ in range(n)]
    bounds: list[int] = []
    running = 0
    for n in counts:
        running += n
        bounds.append(running)
    owner: list[int] = []
    k = 0
    for j in range(items):
        at = (j + 0.5) * total / items
        while bounds[k] <= at:
            k += 1
        owner.append(k)
    return owner


def owners(
    normalized_words: Sequence[Sequence[str]],
    labels: Sequence[str],
    phonemized: int,
    words_of: Callable[[str], int],
) -> tuple[list[int], list[int]]:
    """The input word behind each of ``phonemized`` words, and behind each label.
    ``normalized_words``: each input word normalised alone, split; ``labels``: the whole
    text normalised, split; ``words_of(label)``: how many words espeak-ng makes of one
    normalised word alone (asked only where the whole text's counts do not match)."""
    label_owner = share_out([len(w) for w in normalized_words], len(labels))
    if phonemized == len(labels):
        return label_owner, label_owner
    per_label = share_out([words_of(label) for label in labels], phonemized)
    return [label_owner[k] if k >= 0 else -1 for k in per_label], label_owner
