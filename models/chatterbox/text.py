"""Chatterbox Turbo's text side: the reference's punctuation clean-up and GPT-2's BPE.

The tokenizer is GPT-2's byte-level BPE read from the checkpoint's files
(``tokenizer.json``, or ``vocab.json`` + ``merges.txt``), plus the tags of
``added_tokens.json`` (``[laugh]``, ``[cough]``...) matched whole before BPE.
No start or end token is added: T3 reads the bare ids.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

from models.chatterbox.checkpoint import CheckpointError

EMPTY_TEXT = "You need to add some text for me to talk."
"""What the reference says for an empty text."""

_REPLACEMENTS = (
    ("\u2026", ", "),  # ellipsis
    (":", ","),
    ("\u2014", "-"),  # em dash
    ("\u2013", "-"),  # en dash
    (" ,", ","),
    ("\u201c", '"'),
    ("\u201d", '"'),
    ("\u2018", "'"),
    ("\u2019", "'"),
)
_ENDINGS = (".", "!", "?", "-", ",")


def normalize(text: str) -> str:
    """The reference's clean-up, in its order: capitalise a lowercase first
    character, collapse whitespace, replace the punctuation the model rarely saw,
    and end with a full stop unless the text ends in . ! ? - or a comma."""
    if not text:
        return EMPTY_TEXT
    if text[0].islower():
        text = text[0].upper() + text[1:]
    text = " ".join(text.split())
    for old, new in _REPLACEMENTS:
        text = text.replace(old, new)
    text = text.rstrip(" ")
    if not text.endswith(_ENDINGS):
        text += "."
    return text


class TextTokenizer:
    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer

    def __len__(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids


def load_text_tokenizer(directory: Path) -> TextTokenizer:
    directory = Path(directory)
    full = directory / "tokenizer.json"
    if full.is_file():
        return TextTokenizer(Tokenizer.from_file(str(full)))
    vocab_path, merges_path = directory / "vocab.json", directory / "merges.txt"
    for path in (vocab_path, merges_path):
        if not path.is_file():
            raise CheckpointError(f"{directory}: missing {path.name} (or tokenizer.json)")
    tok = Tokenizer(models.BPE.from_file(str(vocab_path), str(merges_path)))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    added_path = directory / "added_tokens.json"
    if added_path.is_file():
        added = json.loads(added_path.read_text(encoding="utf-8"))
        for content, token_id in sorted(added.items(), key=lambda item: item[1]):
            if tok.token_to_id(content) is not None:
                continue  # already in the vocabulary (e.g. <|endoftext|>)
            tok.add_tokens([AddedToken(content, normalized=False)])
            if tok.token_to_id(content) != token_id:
                raise CheckpointError(
                    f"{added_path}: {content!r} should have id {token_id} "
                    f"but lands on {tok.token_to_id(content)}"
                )
    return TextTokenizer(tok)
