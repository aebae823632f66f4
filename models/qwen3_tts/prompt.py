"""The talker's prompt: which embedding goes at which position.

Each position is a text-track embedding plus a codec-track embedding. In
streaming-text mode the last prompt positions pair codec rows with text that
is still arriving (the first text token; in voice-clone ICL mode the whole
reference), so they are split off as ``aligned`` and filled as text comes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from models.qwen3_tts.config import Qwen3TTSConfig
from models.qwen3_tts.talker import Talker
from models.upload import upload


@dataclass(frozen=True)
class PromptSpec:
    """Everything about a context's prompt that is fixed when it opens."""

    instruct_ids: list[int] | None
    language_id: int | None
    speaker_id: int | None
    """CustomVoice: the speaker's codec id."""
    speaker_embedding: torch.Tensor | None
    """Base: the x-vector [hidden]."""
    ref_codes: torch.Tensor | None
    """Base ICL: the reference's codes [T, groups]."""
    ref_text_ids: list[int] | None
    streaming: bool


class PromptBuilder:
    def __init__(self, talker: Talker, cfg: Qwen3TTSConfig, role_ids: list[int]) -> None:
        self.talker = talker
        self.cfg = cfg
        t = cfg.talker
        dev = talker.codec_head.weight.device
        self.device = dev
        with torch.no_grad():
            specials = torch.tensor([cfg.tts_bos_id, cfg.tts_eos_id, cfg.tts_pad_id], device=dev)
            self.tts_bos, self.tts_eos, self.tts_pad = talker.text_embed(specials)
            self.role = talker.text_embed(torch.tensor(role_ids, device=dev))
        self.codec_pad_id = t.codec_pad_id
        self.codec_bos_id = t.codec_bos_id

    def _codec(self, ids: list[int]) -> torch.Tensor:
        return self.talker.codec_embed(upload(ids, self.device))

    def _text(self, ids: list[int]) -> torch.Tensor:
        return self.talker.text_embed(upload(ids, self.device))

    def text_rows(self, ids: torch.Tensor) -> torch.Tensor:
        """Text-track rows of token ids already on the device: [len(ids), H]."""
        return self.talker.text_embed(ids)

    @torch.no_grad()
    def head(self, spec: PromptSpec) -> torch.Tensor:
        """Instruction, role and codec control positions: [P, hidden]."""
        t = self.cfg.talker
        if spec.language_id is None:
            control = [t.codec_nothink_id, t.codec_think_bos_id, t.codec_think_eos_id]
        else:
            control = [
                t.codec_think_id,
                t.codec_think_bos_id,
                spec.language_id,
                t.codec_think_eos_id,
            ]
        codec = [self._codec(control)]
        if spec.speaker_id is not None:
            codec.append(self._codec([spec.speaker_id]))
        elif spec.speaker_embedding is not None:
            codec.append(spec.speaker_embedding.to(self.tts_pad.dtype)[None])
        codec.append(self._codec([self.codec_pad_id]))
        codec_rows = torch.cat(codec)
        # The codec bos that closes the control run sits under the first text position.
        text_rows = torch.cat(
            (self.tts_pad[None].expand(codec_rows.shape[0] - 1, -1), self.tts_bos[None])
        )
        parts = []
        if spec.instruct_ids:
            parts.append(self._text(spec.instruct_ids))
        parts += [self.role, text_rows + codec_rows]
        return torch.cat(parts)

    @torch.no_grad()
    def icl_codec(self, ref_codes: torch.Tensor) -> torch.Tensor:
        """Codec bos then one summed embedding per reference frame: [1 + T, hidden]."""
        frames = self.talker.frame_embed(ref_codes.to(self.device))
        return torch.cat((self._codec([self.codec_bos_id]), frames))

    @torch.no_grad()
    def aligned(self, spec: PromptSpec) -> torch.Tensor:
        """Streaming mode: codec rows that each wait for the next text-track item."""
        if spec.ref_codes is not None:
            return self.icl_codec(spec.ref_codes)
        return self._codec([self.codec_bos_id])

    @torch.no_grad()
    def non_streaming_tail(self, spec: PromptSpec, text_ids: list[int]) -> torch.Tensor:
        """All text up front, then the codec starts: the rows after ``head``."""
        ids = (spec.ref_text_ids or []) + text_ids
        text = torch.cat((self._text(ids), self.tts_eos[None])) if ids else self.tts_eos[None]
        pads = self._codec([self.codec_pad_id] * text.shape[0])
        if spec.ref_codes is not None:
            return torch.cat((text + pads, self.icl_codec(spec.ref_codes) + self.tts_pad))
        bos = self.tts_pad + self._codec([self.codec_bos_id])[0]
        return torch.cat((text + pads, bos[None]))
