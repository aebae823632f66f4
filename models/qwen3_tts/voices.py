"""Who speaks, in which language: request params -> the prompt's voice inputs.

CustomVoice: a named speaker from config.json (optional instructions on 1.7B).
VoiceDesign: instructions. Base: a cloned voice from reference audio (+ text
for ICL), a raw x-vector, or a precomputed ``VoicePrompt``. Every rejection is
a ``ModelInputError`` whose ``param`` names the offending field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from models.base import CLONE_VOICE, ModelInputError, SynthParams, VoiceInfo
from models.qwen3_tts.config import Qwen3TTSConfig
from models.qwen3_tts.text_tokenizer import TextTokenizer
from models.qwen3_tts.voice_clone import VoiceCloner, VoicePrompt
from models.reference_audio import load_reference_audio

ISO_LANGUAGES = {
    "en": "english",
    "zh": "chinese",
    "de": "german",
    "es": "spanish",
    "ja": "japanese",
    "fr": "french",
    "ko": "korean",
    "ru": "russian",
    "it": "italian",
    "pt": "portuguese",
}
CLONE_KEYS = ("ref_audio", "ref_text", "x_vector_only", "speaker_embedding", "voice_prompt")
DESIGN_VOICE = "design"


@dataclass(frozen=True)
class ResolvedVoice:
    """A context's voice inputs, as host data (the runner moves them to the device)."""

    instruct_ids: list[int] | None
    language_id: int | None
    speaker_id: int | None = None
    speaker_embedding: np.ndarray | None = None
    ref_codes: np.ndarray | None = None
    ref_text_ids: list[int] | None = None


def _unsupported(param: str, message: str) -> ModelInputError:
    return ModelInputError(f"{param}: {message}", param=param, code="unsupported_value")


class VoiceResolver:
    def __init__(
        self,
        cfg: Qwen3TTSConfig,
        tokenizer: TextTokenizer,
        cloner: VoiceCloner | None,
        ref_audio_min_s: float,
        ref_audio_max_s: float,
    ) -> None:
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.cloner = cloner
        self.ref_audio_min_s = ref_audio_min_s
        self.ref_audio_max_s = ref_audio_max_s
        self.languages = {
            name: code for name, code in cfg.talker.language_ids.items() if "dialect" not in name
        }

    # -- what the capabilities advertise ------------------------------------

    def voice_infos(self) -> tuple[VoiceInfo, ...]:
        if self.cfg.model_type == "custom_voice":
            return tuple(VoiceInfo(name, "auto", "built-in speaker") for name in self.speakers)
        if self.cfg.model_type == "voice_design":
            return (VoiceInfo(DESIGN_VOICE, "auto", "voice described by the instructions"),)
        return (VoiceInfo(CLONE_VOICE, "auto", "voice cloned from ref_audio"),)

    @property
    def speakers(self) -> list[str]:
        return list(self.cfg.talker.speaker_ids)

    def language_codes(self) -> tuple[str, ...]:
        names = {v: k for k, v in ISO_LANGUAGES.items()}
        return ("auto", *(names.get(name, name) for name in self.languages))

    # -- validation and resolution --------------------------------------------

    def check(self, params: SynthParams) -> None:
        """Cheap checks of everything but the reference audio's content (no decoding,
        no tokenizing): what ``resolve`` would refuse by the request's shape."""
        self._common(params, tokenize=False)
        if self.cfg.model_type == "base":
            self._clone_source(params.extra, build=False)

    def resolve(self, params: SynthParams) -> ResolvedVoice:
        """The voice inputs, decoding and encoding reference audio (slow: off the
        engine thread and the event loop)."""
        language_id, speaker_id, instruct_ids = self._common(params, tokenize=True)
        if self.cfg.model_type != "base":
            return ResolvedVoice(instruct_ids, language_id, speaker_id=speaker_id)
        prompt = self._clone_source(params.extra, build=True)
        assert prompt is not None
        emb = np.asarray(prompt.speaker_embedding, dtype=np.float32)
        codes = ref_ids = None
        if prompt.ref_codes is not None:
            codes = np.asarray(prompt.ref_codes, dtype=np.int64)
            ids = self.tokenizer.encode(f"<|im_start|>assistant\n{prompt.ref_text}<|im_end|>\n")
            ref_ids = ids[3:-2]
        return ResolvedVoice(instruct_ids, language_id, None, emb, codes, ref_ids)

    def create_prompt(
        self,
        ref_audio: Any,
        sample_rate: int | None = None,
        ref_text: str | None = None,
        x_vector_only: bool = False,
    ) -> VoicePrompt:
        """Compute a reusable voice prompt from reference audio (Base model only)."""
        if self.cloner is None:
            raise _unsupported(
                "ref_audio", f"the {self.cfg.model_type} model does not clone voices"
            )
        if not x_vector_only and not ref_text:
            raise ModelInputError(
                "ref_text: required with ref_audio unless x_vector_only is true",
                param="ref_text",
                code="missing_field",
            )
        wav = load_reference_audio(
            ref_audio, sample_rate, 24000, self.ref_audio_min_s, self.ref_audio_max_s
        )
        return self.cloner.prompt(wav, ref_text, x_vector_only)

    def _common(
        self, params: SynthParams, tokenize: bool
    ) -> tuple[int | None, int | None, list[int] | None]:
        kind = self.cfg.model_type
        extra = params.extra
        if kind != "base":
            for key in CLONE_KEYS:
                if extra.get(key) is not None:
                    raise _unsupported(key, f"voice cloning needs a Base model, this is {kind}")
        language = (params.language or "auto").lower()
        language = ISO_LANGUAGES.get(language, language)
        if language == "auto":
            language_id = None
        elif language in self.languages:
            language_id = self.languages[language]
        else:
            raise ModelInputError(
                f"unsupported language {params.language!r}; supported: "
                + ", ".join(self.language_codes()),
                param="language",
                code="unsupported_language",
            )
        speaker_id = None
        if kind == "custom_voice":
            name = (params.voice or "").lower()
            if name not in self.cfg.talker.speaker_ids:
                raise ModelInputError(
                    f"unknown voice {params.voice!r}; available: {', '.join(self.speakers)}",
                    param="voice",
                    code="unknown_voice",
                )
            speaker_id = self.cfg.talker.speaker_ids[name]
            dialect = self.cfg.talker.speaker_dialects.get(name)
            if dialect and language in ("chinese", "auto"):
                if dialect not in self.cfg.talker.language_ids:
                    raise ModelInputError(
                        f"speaker {name!r} names an unknown dialect {dialect!r}",
                        param="voice",
                        code="unknown_voice",
                    )
                language_id = self.cfg.talker.language_ids[dialect]
        instruct_ids = None
        if params.instructions:
            if not self.cfg.supports_instructions:
                raise _unsupported(
                    "instructions",
                    f"the {self.cfg.model_size or ''} {kind} model takes no instructions",
                )
            if tokenize:
                instruct_ids = self.tokenizer.encode(
                    f"<|im_start|>user\n{params.instructions}<|im_end|>\n"
                )
        return language_id, speaker_id, instruct_ids

    def _clone_source(self, extra: dict[str, Any], build: bool) -> VoicePrompt | None:
        """Base: the voice prompt the request names (checked; built when ``build``)."""
        given = extra.get("voice_prompt")
        if given is not None:
            if not isinstance(given, VoicePrompt):
                raise ModelInputError(
                    "voice_prompt: must be a VoicePrompt",
                    param="voice_prompt",
                    code="invalid_field",
                )
            if given.ref_codes is not None and not given.ref_text:
                raise ModelInputError(
                    "ref_text: the voice prompt has reference codes but no text",
                    param="ref_text",
                    code="missing_field",
                )
            return given
        embedding = extra.get("speaker_embedding")
        if embedding is not None:
            vec = np.asarray(embedding, dtype=np.float32)
            hidden = self.cfg.talker.stack.hidden_size
            if vec.shape != (hidden,) or not np.all(np.isfinite(vec)):
                raise ModelInputError(
                    f"speaker_embedding: must be {hidden} finite floats",
                    param="speaker_embedding",
                    code="invalid_field",
                )
            return VoicePrompt(vec)
        audio = extra.get("ref_audio")
        if audio is None:
            raise ModelInputError(
                "ref_audio: the Base model clones a voice: give ref_audio (+ ref_text), "
                "speaker_embedding or voice_prompt",
                param="ref_audio",
                code="missing_field",
            )
        x_only = extra.get("x_vector_only", False)
        if not isinstance(x_only, bool):
            raise ModelInputError(
                "x_vector_only: must be true or false", param="x_vector_only", code="invalid_field"
            )
        ref_text = extra.get("ref_text")
        if ref_text is not None and not isinstance(ref_text, str):
            raise ModelInputError(
                "ref_text: must be a string", param="ref_text", code="invalid_field"
            )
        if not x_only and not ref_text:
            raise ModelInputError(
                "ref_text: required with ref_audio unless x_vector_only is true",
                param="ref_text",
                code="missing_field",
            )
        if not build:
            return None
        return self.create_prompt(audio, extra.get("ref_audio_sample_rate"), ref_text, x_only)
