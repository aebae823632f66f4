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

import difflib
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


def label_owners(alone: Sequence[Sequence[str]], labels: Sequence[str]) -> list[int]:
    """The input word behind each of ``labels`` (the whole text normalised, split), given
    each input word normalised alone (``alone``). Normalising in context mostly gives the
    same words; where it does not (``"9:00 AM."`` is three words together, four apart),
    the differing stretch is shared out in proportion among the input words in it."""
    flat = [word for words in alone for word in words]
    tags = [k for k, words in enumerate(alone) for _ in words]
    if flat == list(labels):
        return tags
    owner = [-1] * len(labels)
    matcher = difflib.SequenceMatcher(a=flat, b=list(labels), autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            owner[j1:j2] = tags[i1:i2]
        elif j2 > j1 and i2 > i1:
            makers = sorted(set(tags[i1:i2]))
            counts = [tags[i1:i2].count(k) for k in makers]
            owner[j1:j2] = [makers[k] for k in share_out(counts, j2 - j1)]
        elif j2 > j1:  # words only the whole text has: the input word before them
            near = tags[i1 - 1] if i1 > 0 else (tags[i1] if i1 < len(tags) else -1)
            owner[j1:j2] = [near] * (j2 - j1)
    return owner


def _stretches(words: Sequence[str]) -> list[tuple[int, int, str]]:
    """``words`` cut after each word ending with a mark: (start, end, the mark or "")."""
    stretches: list[tuple[int, int, str]] = []
    start = 0
    for end, word in enumerate(words, 1):
        if word.endswith(PUNCTUATION_MARKS):
            stretches.append((start, end, word[-1]))
            start = end
    if start < len(words):
        stretches.append((start, len(words), ""))
    return stretches


def phonemized_owners(
    labels: Sequence[str], phonemized: Sequence[str], words_of: Callable[[str], int]
) -> list[int]:
    """The label (normalised word) behind each phonemised word, -1 if none.

    The phonemizer puts each punctuation mark back on the word it followed, so both
    sides are cut into stretches after their marks and the stretches matched by their
    marks; in a pair of stretches of equal length words map one to one, otherwise
    ``words_of`` (an espeak-ng call per label: how many words it makes of the label
    alone) shares the stretch's words out. Errors stay inside a stretch."""
    if len(phonemized) == len(labels):
        return list(range(len(labels)))
    owner = [-1] * len(phonemized)

    def pair(first: int, last: int, start: int, end: int) -> None:
        if end == start:
            return
        if last == first:  # words without a label: the label before them
            owner[start:end] = [first - 1] * (end - start)
        elif last - first == end - start:
            owner[start:end] = range(first, last)
        else:
            counts = [words_of(label) for label in labels[first:last]]
            shared = share_out(counts, end - start)
            owner[start:end] = [first + k if k >= 0 else -1 for k in shared]

    ours, theirs = _stretches(labels), _stretches(phonemized)
    matcher = difflib.SequenceMatcher(
        a=[m for *_, m in ours], b=[m for *_, m in theirs], autojunk=False
    )
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            for (first, last, _), (start, end, _) in zip(ours[i1:i2], theirs[j1:j2], strict=True):
                pair(first, last, start, end)
        else:
            first = ours[i1][0] if i2 > i1 else (ours[i1 - 1][1] if i1 else 0)
            last = ours[i2 - 1][1] if i2 > i1 else first
            start = theirs[j1][0] if j2 > j1 else 0
            end = theirs[j2 - 1][1] if j2 > j1 else start
            pair(first, last, start, end)
    return owner


def owners(
    alone: Sequence[Sequence[str]],
    labels: Sequence[str],
    phonemized: Sequence[str],
    words_of: Callable[[str], int],
) -> tuple[list[int], list[int]]:
    """The input word behind each phonemised word, and behind each label.
    ``alone``: each input word normalised alone, split; ``labels``: the whole text
    normalised, split; ``phonemized``: its phonemes, split; ``words_of(label)``: how many
    words espeak-ng makes of one normalised word alone."""
    label_owner = label_owners(alone, labels)
    per_word = phonemized_owners(labels, phonemized, words_of)
    return [label_owner[k] if k >= 0 else -1 for k in per_word], label_owner
