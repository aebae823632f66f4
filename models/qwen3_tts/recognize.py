"""Is a directory a Hugging Face Qwen3-TTS checkpoint? Read from ``config.json`` alone."""

from __future__ import annotations

from pathlib import Path

from models.recognition import Recognized, config_of

LOOKS_FOR = "a Qwen3-TTS checkpoint (config.json with model_type qwen3_tts)"
SIZES = {"0b6": "0.6b", "1b7": "1.7b"}
SHIPPED = (
    "qwen3-tts-1.7b-customvoice",
    "qwen3-tts-1.7b-voicedesign",
    "qwen3-tts-1.7b-base",
    "qwen3-tts-0.6b-customvoice",
    "qwen3-tts-0.6b-base",
)


def recognize(path: Path) -> Recognized | None:
    data = config_of(path, "qwen3_tts")
    if data is None:
        return None
    variant = str(data.get("tts_model_type", "custom_voice"))
    size_code = str(data.get("tts_model_size", ""))
    size = SIZES.get(size_code, "1.7b")
    slug = variant.replace("_", "")
    exact = f"qwen3-tts-{size}-{slug}"
    same_variant = tuple(
        sorted((k for k in SHIPPED if k.endswith(slug) and k != exact), reverse=True)
    )
    return Recognized(
        family="qwen3_tts",
        variant=variant,
        config=exact,
        why=f"config.json: model_type qwen3_tts, tts_model_type {variant}, "
        f"tts_model_size {size_code or '(none)'}",
        path=path,
        alternatives=same_variant,
        details=(("size", size.upper()),),
    )
