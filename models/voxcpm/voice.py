"""VoxCPM2's voices: none (the model's own, or one an instruction describes), or one cloned
from reference audio, with its transcript or without.

As the reference builds its prompt cache: the clip read like ``librosa.load(sr=16000)``
(mono mean, soxr's high quality), zero-padded to whole patches (2,560 samples) and
encoded by the AudioVAE's encoder (the latents' mean), four latents a patch. Audio alone
is the reference's "reference" prompt (padded on the right): the model takes the voice's
timbre. With its transcript it is also the "continuation" prompt (padded on the left):
the model continues the clip, its rhythm and style too; the upstream README calls the
two together, from one clip, the closest clone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from models.base import ModelInputError
from models.blocks.audiovae import AudioVAEEncoder
from models.reference_audio import load_reference_audio


@dataclass(frozen=True)
class CPMVoice:
    reference: np.ndarray
    """float32 [R, patch_size, feat_dim]: the clip's patches, padded on the right."""
    prompt: np.ndarray | None = None
    """float32 [A, patch_size, feat_dim]: the clip's patches, padded on the left (with
    a transcript)."""
    text: str | None = None
    """The clip's transcript (continuation), or None."""

    def arrays(self) -> dict[str, np.ndarray]:
        out = {"reference": self.reference}
        if self.prompt is not None and self.text is not None:
            out["prompt"] = self.prompt
            out["text"] = np.frombuffer(self.text.encode("utf-8"), np.uint8)
        return out


def stored_voice(arrays: Mapping[str, Any], patch: int, feat_dim: int) -> CPMVoice:
    """A voice the server stored (:meth:`CPMVoice.arrays`), checked against this model."""

    def latents(name: str) -> np.ndarray | None:
        value = arrays.get(name)
        if value is None:
            return None
        ok = (
            isinstance(value, np.ndarray)
            and value.dtype.kind == "f"
            and value.ndim == 3
            and value.shape[1:] == (patch, feat_dim)
            and len(value) > 0
            and bool(np.isfinite(value).all())
        )
        if not ok:
            raise ModelInputError(
                "voice: not a VoxCPM2 voice (its latents do not fit this model)",
                param="voice",
                code="unsupported_value",
            )
        return np.asarray(value, np.float32)

    reference = latents("reference")
    prompt = latents("prompt")
    text = arrays.get("text")
    if reference is None or (prompt is None) != (text is None):
        raise ModelInputError("voice: not a VoxCPM2 voice", param="voice", code="unsupported_value")
    transcript = None
    if isinstance(text, np.ndarray) and text.dtype == np.uint8:
        transcript = bytes(text).decode("utf-8", errors="replace")
    elif text is not None:
        raise ModelInputError("voice: not a VoxCPM2 voice", param="voice", code="unsupported_value")
    return CPMVoice(reference, prompt, transcript)


class Cloner:
    def __init__(
        self, encoder: AudioVAEEncoder, patch: int, min_s: float = 1.0, max_s: float = 60.0
    ) -> None:
        self.encoder = encoder
        self.patch = patch
        self.rate = encoder.cfg.sample_rate
        self.span = encoder.hop * patch
        """Samples of 16 kHz audio a patch encodes."""
        self.seconds = (min_s, max_s)

    @torch.inference_mode()
    def __call__(self, extra: Mapping[str, Any], text: str | None) -> CPMVoice:
        """The voice of ``extra["ref_audio"]`` (with ``ref_audio_sample_rate`` for raw
        samples), with its transcript ``text`` or without."""
        wav = load_reference_audio(
            extra["ref_audio"], extra.get("ref_audio_sample_rate"), self.rate, *self.seconds
        )
        pad = -len(wav) % self.span
        reference = self._encode(np.pad(wav, (0, pad)))
        prompt = self._encode(np.pad(wav, (pad, 0))) if text is not None else None
        return CPMVoice(reference, prompt, text)

    def _encode(self, wav: np.ndarray) -> np.ndarray:
        param = next(self.encoder.parameters())
        audio = torch.as_tensor(wav, dtype=param.dtype, device=param.device)[None]
        latents = self.encoder(audio)[0]  # [feat_dim, L]
        feat = latents.shape[0]
        patches = latents.reshape(feat, -1, self.patch).permute(1, 2, 0)
        return patches.float().cpu().numpy()
