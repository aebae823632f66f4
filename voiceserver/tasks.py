"""vllm-omni's ``task_type`` (CustomVoice | VoiceDesign | Base) against the loaded variant.

What a variant can do is read off the model generically, once at start-up,
from its ``Capabilities`` and its runner's own cheap ``validate``:

- named voices (``CustomVoice``): the runner refuses a voice name it does not
  know, so ``voice`` picks a speaker;
- ``VoiceDesign``: no named voices, and the model takes instructions (the
  instructions describe the voice);
- ``Base``: the model declares a ``ref_audio`` field and its runner accepts a
  request that carries one (a variant that cannot clone refuses it).

The checks on a request follow vllm-omni's ``serving_speech.py``: ``Base``
requires ``ref_audio`` (here also a ``speaker_embedding`` or an uploaded
voice), ``VoiceDesign`` requires ``instructions``, ``ref_text`` and
``x_vector_only_mode`` belong to ``Base`` only, and a task the loaded model
cannot do is refused (vllm-omni's model raises; here it is a 400 naming
``task_type`` and what the model offers). Without a ``task_type`` the request
is the variant's own task and only the model's checks apply.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from models.base import LoadedModel, ModelInputError, SynthParams

log = logging.getLogger(__name__)

TASK_TYPES = ("CustomVoice", "VoiceDesign", "Base")
_PROBE_VOICE = "\x00no such voice"
_CLONE_SOURCES = ("ref_audio", "speaker_embedding", "voice_prompt")
_BASE_ONLY = {"ref_text": "ref_text", "x_vector_only": "x_vector_only_mode"}


@dataclass(frozen=True)
class VariantTasks:
    """The tasks the loaded model can do; the first is what a request without
    ``task_type`` gets."""

    tasks: tuple[str, ...]
    named_voices: bool
    """``voice`` picks one of several speakers (else it is ignored, with a warning)."""

    @classmethod
    def of(cls, model: LoadedModel) -> VariantTasks:
        caps = model.capabilities
        base = SynthParams(voice=caps.default_voice, language=caps.languages[0])
        named = _refuses(model, SynthParams(_PROBE_VOICE, base.language), "voice")
        clones = any(f.name == "ref_audio" for f in caps.request_fields) and not _refuses(
            model,
            SynthParams(base.voice, base.language, extra={"ref_audio": b"", "x_vector_only": True}),
            "ref_audio",
            "x_vector_only",
        )
        tasks = []
        if named:
            tasks.append("CustomVoice")
        elif caps.supports_instructions:
            tasks.append("VoiceDesign")
        if clones:
            tasks.append("Base")
        if not tasks:  # a model with one fixed voice and nothing else
            tasks.append("CustomVoice")
        return cls(tuple(tasks), named)

    def check(
        self,
        task_type: str | None,
        *,
        instructions: str | None,
        extra: Mapping[str, Any],
        stored_voice: bool,
    ) -> None:
        """ModelInputError naming the field when the request cannot be that task here."""
        if task_type is None:
            return
        if task_type not in TASK_TYPES:
            raise ModelInputError(
                f"task_type: {task_type[:40]!r} is not a task type; allowed: "
                + ", ".join(TASK_TYPES),
                param="task_type",
                code="unsupported_value",
            )
        if task_type not in self.tasks:
            raise ModelInputError(
                f"task_type: the loaded model cannot do {task_type}; it offers: "
                + ", ".join(self.tasks),
                param="task_type",
                code="unsupported_value",
            )
        if task_type == "Base":
            if not stored_voice and all(extra.get(k) is None for k in _CLONE_SOURCES):
                raise ModelInputError(
                    "ref_audio: Base task requires 'ref_audio' for voice cloning"
                    " (or a speaker_embedding, or the name of an uploaded voice)",
                    param="ref_audio",
                    code="missing_field",
                )
        else:
            for key, shown in _BASE_ONLY.items():
                if extra.get(key) is not None:
                    raise ModelInputError(
                        f"{shown}: '{shown}' is only valid for Base task",
                        param=shown,
                        code="invalid_field",
                    )
        if task_type == "VoiceDesign" and not instructions:
            raise ModelInputError(
                "instructions: VoiceDesign task requires 'instructions' to describe the voice",
                param="instructions",
                code="missing_field",
            )


def _refuses(model: LoadedModel, params: SynthParams, *fields: str) -> bool:
    """Whether the runner's own validation refuses ``params`` on one of ``fields``."""
    try:
        model.runner.validate(params)
    except ModelInputError as err:
        return err.param in fields
    except Exception:  # noqa: BLE001 - a probe must never stop the server starting
        log.exception("probing the model's validation failed; assuming it refuses")
        return True
    return False
