"""Fish Speech S2 Pro's conversation format, token by token.

The reference (``fish_speech`` on GitHub: ``Conversation`` / ``ContentSequence``)
encodes each part of a message on its own and concatenates the ids:

    <|im_start|>system\\n  convert the provided text to speech  <|im_end|>\\n
    <|im_start|>user\\n  {text}  <|im_end|>\\n
    <|im_start|>assistant\\n<|voice|>   -> semantic tokens ... <|im_end|>

A cloned voice's system message reads ``convert the provided text to speech reference
to the following:\\n\\nText:\\n``, the reference transcript (``<|speaker:0|>`` put in
front when it names no speaker), ``\\n\\nSpeech:\\n`` and the reference's frames as
semantic tokens. Long text goes as one user turn after another, each answered in the
same conversation (the reference's ``generate_long`` batches), so a context speaks
each text unit as a turn whose prompt continues the keys/values of the last one:
``<|im_end|>\\n`` closes the previous answer, then the next user turn.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from models.base import ModelInputError
from models.checkpoint import CheckpointError
from models.fish_speech.config import FishConfig

TOKENIZER_FILE = "tokenizer.json"
SYSTEM = "convert the provided text to speech"
CLONE_SYSTEM = "convert the provided text to speech reference to the following:\n\nText:\n"
CLONE_SPEECH = "\n\nSpeech:\n"
_SPEAKER = re.compile(r"<\|speaker:\d+\|>")
_CONTROL = re.compile(r"<\|[^|>]*\|>")


def check_text(text: str, field: str) -> str:
    """Text as the model reads it: speaker tags (``<|speaker:N|>``, or the older
    ``<speaker:N>``) stay; any other control token is refused (it would steer the
    conversation: end a turn, open another)."""
    text = re.sub(r"<speaker:(\d+)>", r"<|speaker:\1|>", text)
    bad = sorted({t for t in _CONTROL.findall(text) if not _SPEAKER.fullmatch(t)})
    if bad:
        raise ModelInputError(
            f"{field}: control tokens are not allowed in text ({', '.join(bad)}); only "
            "speaker tags <|speaker:N|> are",
            param=field,
            code="invalid_field",
        )
    return text


class Prompts:
    def __init__(self, tokenizer: Tokenizer, cfg: FishConfig) -> None:
        self.tokenizer = tokenizer
        self.cfg = cfg
        self.im_end = self._id("<|im_end|>")
        self._id("<|im_start|>")
        self._id("<|voice|>")
        first = tokenizer.token_to_id("<|semantic:0|>")
        if first is not None and first != cfg.semantic_begin:
            raise CheckpointError(
                f"<|semantic:0|> is token {first} but config.json's semantic_start_token_id "
                f"is {cfg.semantic_begin}"
            )
        self.close = self.encode("<|im_end|>\n")
        self.answer = self.encode("<|im_start|>assistant\n<|voice|>")

    def _id(self, token: str) -> int:
        found = self.tokenizer.token_to_id(token)
        if found is None:
            raise CheckpointError(f"{TOKENIZER_FILE} lacks the control token {token}")
        return int(found)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def system(
        self, ref_text: str | None, ref_codes: np.ndarray | None
    ) -> tuple[list[int], np.ndarray]:
        """The system message's ids and codes [T, num_codebooks] (zeros but at the
        reference's semantic tokens)."""
        head = self.encode("<|im_start|>system\n")
        if ref_codes is None:
            ids = head + self.encode(SYSTEM)
            codes = np.zeros((len(ids), self.cfg.num_codebooks), np.int64)
        else:
            assert ref_text is not None
            tagged = ref_text if _SPEAKER.search(ref_text) else f"<|speaker:0|>{ref_text}"
            text_ids = (
                head + self.encode(CLONE_SYSTEM) + self.encode(tagged) + self.encode(CLONE_SPEECH)
            )
            frames = np.asarray(ref_codes, np.int64)
            ids = text_ids + (frames[:, 0] + self.cfg.semantic_begin).tolist()
            codes = np.zeros((len(ids), self.cfg.num_codebooks), np.int64)
            codes[len(text_ids) :] = frames
        ids += self.close
        return ids, np.concatenate((codes, np.zeros((len(self.close), codes.shape[1]), np.int64)))

    def turn(self, text: str) -> np.ndarray:
        """A user turn and the answer's start: the ids a text unit adds."""
        ids = self.encode("<|im_start|>user\n") + self.encode(text) + self.close + self.answer
        return np.asarray(ids, np.int64)


def load_prompts(directory: Path, cfg: FishConfig) -> Prompts:
    path = Path(directory) / TOKENIZER_FILE
    if not path.is_file():
        raise CheckpointError(f"missing {TOKENIZER_FILE} (the text tokenizer)", directory)
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises its own Exception type
        raise CheckpointError(f"not a tokenizers file ({exc})", path) from exc
    return Prompts(tokenizer, cfg)
