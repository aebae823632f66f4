"""VoXtream2's text front end (normaliser, espeak-ng phonemizer, phone ids), equal to the
reference package voxtream 0.2.5's.

    text = VoxtreamText(json.load(open(ckpt / "phoneme_to_token.json")))
    whole = text.encode("Mr. Smith's 3rd car costs $4.50.")   # TextTokens
    whole.tokens.ids, whole.tokens.punct_delete, whole.spans
    piece = text.encode_piece("costs")                       # full-streaming mode
    stream = IncrementalText(text)                           # deltas -> word pieces
    for piece in stream.push("Hel") + stream.push("lo wor") + stream.flush(): ...
"""

from models.voxtream.text.espeak import EspeakError
from models.voxtream.text.frontend import (
    TEXT_CONTEXT,
    TEXT_CONTEXT_LENGTH,
    TextTokens,
    VoxtreamText,
)
from models.voxtream.text.incremental import IncrementalText, Piece
from models.voxtream.text.normalize import normalize
from models.voxtream.text.phonemize import Phonemizer
from models.voxtream.text.spans import WordSpan
from models.voxtream.text.tokens import (
    PUNCTUATION_MARKS,
    UNKNOWN,
    PhoneTable,
    PhoneTableError,
    PhoneTokens,
)

__all__ = [
    "PUNCTUATION_MARKS",
    "TEXT_CONTEXT",
    "TEXT_CONTEXT_LENGTH",
    "UNKNOWN",
    "EspeakError",
    "IncrementalText",
    "PhoneTable",
    "PhoneTableError",
    "PhoneTokens",
    "Phonemizer",
    "Piece",
    "TextTokens",
    "VoxtreamText",
    "WordSpan",
    "normalize",
]
