"""VoxCPM2's text -> token ids, as its reference tokenizes under transformers 5.

transformers 5 rebuilds a Llama tokenizer from ``tokenizer.json``'s vocabulary and merges
(BPE with byte fallback): no normaliser, a ``Metaspace("▁", split=False)`` pre-tokenizer
prepending ``▁`` to the text (``prepend_scheme`` "always" with ``legacy: true`` in
``tokenizer_config.json``, "first" without it, "never" with ``add_prefix_space: false``),
no BOS. The reference then splits every piece that is, without its ``▁``, two or more CJK
characters of the vocabulary into single characters (an unknown one reads as ``<unk>``,
id 0). Done here with the ``tokenizers`` library on the same file.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, pre_tokenizers

from models.checkpoint import CheckpointError

UNK = 0


def _cjk(text: str) -> bool:
    return len(text) >= 2 and all("\u4e00" <= c <= "\u9fff" for c in text)


class VoxCPMText:
    def __init__(self, directory: Path) -> None:
        path = Path(directory) / "tokenizer.json"
        if not path.is_file():
            raise CheckpointError("tokenizer.json is missing", directory)
        self.tokenizer = Tokenizer.from_file(str(path))
        config_path = Path(directory) / "tokenizer_config.json"
        config = json.loads(config_path.read_text()) if config_path.is_file() else {}
        if not config.get("add_prefix_space", True):
            scheme = "never"
        else:
            scheme = "always" if config.get("legacy") else "first"
        self.tokenizer.normalizer = None
        self.tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(
            replacement="▁", prepend_scheme=scheme, split=False
        )
        vocab = self.tokenizer.get_vocab()
        self.vocab = vocab
        self.split = {piece for piece in vocab if _cjk(piece)}
        self.controls = sorted(
            (t.content for t in self.tokenizer.get_added_tokens_decoder().values() if t.special),
            key=len,
            reverse=True,
        )
        """Spellings that tokenize to a control id (``<s>``, ``<|audio_start|>``...)."""

    def control_tokens(self, text: str) -> list[str]:
        """The control tokens spelled out in ``text``."""
        return [c for c in self.controls if c in text]

    def pieces(self, text: str) -> list[str]:
        out: list[str] = []
        for piece in self.tokenizer.encode(text, add_special_tokens=False).tokens:
            bare = piece.replace("▁", "")
            out.extend(list(bare) if bare in self.split else [piece])
        return out

    def ids(self, text: str) -> list[int]:
        return [self.vocab.get(piece, UNK) for piece in self.pieces(text)]
