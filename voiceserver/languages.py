"""Language names and ISO codes, mapped onto the languages a model declares.

Clients name a language many ways: ``en``, ``EN``, ``en-US``, ``English``,
``english``; vllm-omni's clients send ``English`` and ``Auto``. A model
declares its languages in ``Capabilities.languages`` in its own spelling (an
ISO 639-1 code, a name, or ``auto``). Both sides are reduced to one key (the
ISO code when the table knows the language, else the lowercased name) and
the request gets the model's spelling. ``auto`` means "let the model decide":
the model's own ``auto`` when it declares one, else its default language.
"""

from __future__ import annotations

from models.base import ModelInputError

AUTO = "auto"

ISO_639_1 = {
    "ar": "arabic",
    "bg": "bulgarian",
    "ca": "catalan",
    "cs": "czech",
    "cy": "welsh",
    "da": "danish",
    "de": "german",
    "el": "greek",
    "en": "english",
    "es": "spanish",
    "fa": "persian",
    "fi": "finnish",
    "fr": "french",
    "he": "hebrew",
    "hi": "hindi",
    "hu": "hungarian",
    "id": "indonesian",
    "is": "icelandic",
    "it": "italian",
    "ja": "japanese",
    "ka": "georgian",
    "kk": "kazakh",
    "ko": "korean",
    "lb": "luxembourgish",
    "lv": "latvian",
    "ms": "malay",
    "ne": "nepali",
    "nl": "dutch",
    "no": "norwegian",
    "pl": "polish",
    "pt": "portuguese",
    "ro": "romanian",
    "ru": "russian",
    "sk": "slovak",
    "sl": "slovenian",
    "sr": "serbian",
    "sv": "swedish",
    "sw": "swahili",
    "te": "telugu",
    "th": "thai",
    "tr": "turkish",
    "uk": "ukrainian",
    "ur": "urdu",
    "vi": "vietnamese",
    "zh": "chinese",
}
"""ISO 639-1 code -> English name, lowercased."""
_BY_NAME = {name: code for code, name in ISO_639_1.items()}
_OTHER_NAMES = {"mandarin": "zh", "farsi": "fa", "norwegian bokmal": "no", "nb": "no"}


def language_key(value: str) -> str:
    """One key for every spelling of a language: its ISO code when known."""
    text = value.strip().lower().replace("_", "-")
    if text in ISO_639_1 or text == AUTO:
        return text
    if text in _BY_NAME:
        return _BY_NAME[text]
    if text in _OTHER_NAMES:
        return _OTHER_NAMES[text]
    base = text.split("-", 1)[0]  # en-us, zh-hans, pt-br
    if base in ISO_639_1:
        return base
    return text


def _shown(declared: str) -> str:
    key = language_key(declared)
    if key in ISO_639_1 and ISO_639_1[key] != declared.lower():
        return f"{ISO_639_1[key].title()} ({declared})"
    return declared


def resolve_language(value: str | None, declared: tuple[str, ...]) -> str:
    """The model's spelling of the language ``value`` names (None: its default);
    ModelInputError naming ``language`` and what is allowed otherwise."""
    if value is None:
        return declared[0]
    by_key = {language_key(lang): lang for lang in declared}
    key = language_key(value)
    if key in by_key:
        return by_key[key]
    if key == AUTO:
        return declared[0]
    allowed = ", ".join(_shown(lang) for lang in declared)
    auto = "" if AUTO in by_key else ", auto"
    raise ModelInputError(
        f"language: {value[:64]!r} is not a language this model speaks; allowed: {allowed}"
        f"{auto} (names or ISO codes, any case)",
        param="language",
        code="unsupported_language",
    )
