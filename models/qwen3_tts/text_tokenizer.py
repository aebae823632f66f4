"""The Qwen2 byte-level BPE tokenizer, built from the checkpoint's files.

``tokenizer.json`` is used when present; otherwise ``vocab.json`` +
``merges.txt`` + the added tokens of ``tokenizer_config.json`` are assembled
the way Hugging Face converts a slow Qwen2 tokenizer.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

from models.qwen3_tts.checkpoint import read_json
from models.qwen3_tts.config import CheckpointError

QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# The pattern transformers 4.57.3 swaps in when a tokenizer is loaded with
# fix_mistral_regex=True (as qwen-tts does) and the checkpoint's config.json
# declares a transformers version after 4.57.2 and before 5.0 (or none).
MISTRAL_FIXED_PATTERN = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


def uses_mistral_pattern(transformers_version: str) -> bool:
    if not transformers_version:
        return True
    v = _version(transformers_version)
    return not (v <= (4, 57, 2) or v >= (5, 0, 0))


def _split(pattern: str) -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False)


class TextTokenizer:
    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Ids and each token's ``[start, end)`` characters in ``text``."""
        encoding = self.tokenizer.encode(text, add_special_tokens=False)
        return encoding.ids, encoding.offsets

    def token_id(self, token: str) -> int | None:
        return self.tokenizer.token_to_id(token)


def load_text_tokenizer(directory: Path, transformers_version: str) -> TextTokenizer:
    pattern = MISTRAL_FIXED_PATTERN if uses_mistral_pattern(transformers_version) else None
    full = directory / "tokenizer.json"
    if full.is_file():
        tok = Tokenizer.from_file(str(full))
        if pattern is not None and isinstance(tok.pre_tokenizer, pre_tokenizers.Sequence):
            tok.pre_tokenizer[0] = _split(pattern)
        return TextTokenizer(tok)

    vocab_path, merges_path = directory / "vocab.json", directory / "merges.txt"
    for path in (vocab_path, merges_path):
        if not path.is_file():
            raise CheckpointError(
                f"checkpoint file missing: {path} (or {full.name}) for the text tokenizer"
            )
    vocab = json.loads(vocab_path.read_text(encoding="utf-8"))
    merges = []
    for line in merges_path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#version") or not line.strip():
            continue
        left, right = line.split(" ")
        merges.append((left, right))
    bpe = models.BPE(
        vocab=vocab,
        merges=merges,
        dropout=None,
        unk_token=None,
        continuing_subword_prefix="",
        end_of_word_suffix="",
        fuse_unk=False,
        byte_fallback=False,
    )
    tok = Tokenizer(bpe)
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            _split(pattern or QWEN2_PATTERN),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    config = read_json(directory / "tokenizer_config.json")
    added = config.get("added_tokens_decoder", {})
    for token_id, spec in sorted(added.items(), key=lambda item: int(item[0])):
        token = AddedToken(
            spec["content"],
            single_word=bool(spec.get("single_word", False)),
            lstrip=bool(spec.get("lstrip", False)),
            rstrip=bool(spec.get("rstrip", False)),
            normalized=bool(spec.get("normalized", not spec.get("special", False))),
            special=bool(spec.get("special", False)),
        )
        if token.special:
            tok.add_special_tokens([token])
        else:
            tok.add_tokens([token])
        if tok.token_to_id(spec["content"]) != int(token_id):
            raise CheckpointError(
                f"{directory / 'tokenizer_config.json'}: added token {spec['content']!r} "
                f"should have id {token_id} but lands on {tok.token_to_id(spec['content'])}"
            )
    return TextTokenizer(tok)
