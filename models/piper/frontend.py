"""Text -> phoneme ids through piper's own espeak-ng phonemizer."""

from __future__ import annotations

from typing import Any

from piper.config import PiperConfig
from piper.voice import PiperVoice

from models.base import SynthParams, TextFrontend


class PiperFrontend(TextFrontend):
    """One unit per sentence, exactly as ``PiperVoice.synthesize`` splits text."""

    def __init__(self, config: PiperConfig) -> None:
        # PiperVoice's phonemize/phonemes_to_ids need only its config; its ONNX
        # session is never touched here, so none is loaded.
        session: Any = None
        self._voice = PiperVoice(session=session, config=config)

    def encode(self, text: str, params: SynthParams) -> list[list[int]]:
        units: list[list[int]] = []
        for phonemes in self._voice.phonemize(text):
            if phonemes:
                units.append(self._voice.phonemes_to_ids(phonemes))
        return units
