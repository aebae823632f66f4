"""IPA string -> phone ids, as VoXtream2's ``text_to_phone_tokens`` reads it (voxtream 0.2.5).

Words are split at whitespace, phones at ``|`` (empty ones skipped). When, after a word,
the last phone so far ends with one of the punctuation marks ``. , ? !``, that mark is cut
off it (a phone left empty is dropped) and becomes a punctuation token inserted after the
word. A phone the checkpoint's table lacks reads as ``unk``.

The model sees the phone ids with the punctuation tokens put in (:meth:`PhoneTokens.merged`)
and then takes the punctuation rows out again after its phone encoder, so positions come
in two coordinates: ``punct_insert`` into the phone ids (``numpy.insert`` positions) and
``punct_delete``, the same tokens' indices in the merged sequence.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

PUNCTUATION_MARKS = (".", ",", "?", "!")
"""The reference's ``punct_map`` keys: the marks that become tokens."""
UNKNOWN = "unk"


class PhoneTableError(ValueError):
    """The phone -> id table lacks an entry the front end needs."""


def _ids(values: Sequence[int]) -> np.ndarray:
    return np.asarray(values, dtype=np.int64).reshape(-1)


@dataclass(frozen=True)
class PhoneTokens:
    """One text's (or streamed piece's) phone ids and punctuation tokens.

    ``ids``: int64 [N], the phones (punctuation excluded) — the reference's
    ``phone_tokens``. ``punct_insert``: int64 [P], where each punctuation token goes into
    ``ids`` (``punct_ins_indices``). ``punct_delete``: int64 [P], each punctuation token's
    index in :meth:`merged` (``punct_del_indices`` = ``punct_insert + arange(P)``).
    ``punct_ids``: int64 [P], the tokens (``punct_tokens``). ``phones``: the N phone
    strings, as read (before the ``unk`` mapping)."""

    ids: np.ndarray
    punct_insert: np.ndarray
    punct_delete: np.ndarray
    punct_ids: np.ndarray
    phones: tuple[str, ...]

    def merged(self) -> np.ndarray:
        """int64 [N + P]: the phone ids with the punctuation tokens in place."""
        return np.insert(self.ids, self.punct_insert, self.punct_ids).astype(np.int64)

    @staticmethod
    def empty() -> PhoneTokens:
        none = _ids([])
        return PhoneTokens(none, none, none, none, ())

    @staticmethod
    def concat(parts: Sequence[PhoneTokens]) -> PhoneTokens:
        """Pieces one after another, positions shifted: how the reference's streaming
        generator appends each piece's merged tokens (and its deletions, offset by what
        came before) to the sequence."""
        ids: list[np.ndarray] = []
        insert: list[np.ndarray] = []
        delete: list[np.ndarray] = []
        phones = 0
        merged = 0
        for part in parts:
            ids.append(part.ids)
            insert.append(part.punct_insert + phones)
            delete.append(part.punct_delete + merged)
            phones += len(part.ids)
            merged += len(part.ids) + len(part.punct_ids)
        return PhoneTokens(
            ids=_ids(np.concatenate([_ids([]), *ids])),
            punct_insert=_ids(np.concatenate([_ids([]), *insert])),
            punct_delete=_ids(np.concatenate([_ids([]), *delete])),
            punct_ids=_ids(np.concatenate([_ids([]), *(p.punct_ids for p in parts)])),
            phones=tuple(ph for p in parts for ph in p.phones),
        )


class PhoneTable:
    """The checkpoint's phone -> id table (``phoneme_to_token.json``), checked once."""

    def __init__(self, table: Mapping[str, int]) -> None:
        missing = [k for k in (UNKNOWN, *PUNCTUATION_MARKS) if k not in table]
        if missing:
            raise PhoneTableError(
                f"phoneme_to_token.json lacks {missing}: it needs every phone plus "
                f"{[UNKNOWN, *PUNCTUATION_MARKS]}"
            )
        bad = [k for k, v in table.items() if not isinstance(v, int) or isinstance(v, bool)]
        if bad:
            raise PhoneTableError(f"phoneme_to_token.json: ids must be integers, not for {bad[:5]}")
        self._table = dict(table)
        self.unknown = self._table[UNKNOWN]

    def __getitem__(self, phone: str) -> int:
        return self._table[phone]

    def id(self, phone: str) -> int:
        """``phone``'s id, or ``unk``'s."""
        return self._table.get(phone, self.unknown)


def phone_tokens(phonemes: str, table: PhoneTable) -> PhoneTokens:
    """The reference's tokens for a phonemised text (see the module doc).

    Where the reference fails (a first word with no phone at all: its ``phones[-1]`` of
    an empty list), the word is skipped."""
    phones: list[str] = []
    insert: list[int] = []
    marks: list[int] = []
    for word in phonemes.split():
        phones.extend(ph for ph in word.split("|") if ph)
        if phones and phones[-1].endswith(PUNCTUATION_MARKS):
            last = phones.pop()
            if last[:-1]:
                phones.append(last[:-1])
            marks.append(table[last[-1]])
            insert.append(len(phones))
    punct_insert = _ids(insert)
    return PhoneTokens(
        ids=_ids([table.id(ph) for ph in phones]),
        punct_insert=punct_insert,
        punct_delete=punct_insert + np.arange(len(insert), dtype=np.int64),
        punct_ids=_ids(marks),
        phones=tuple(phones),
    )
