"""S3Gen as a whole: speech tokens -> 24 kHz audio (the flow, then HiFT).

``Conditioning`` is what a voice gives the decoder: its prompt's speech tokens,
their mel (two frames a token) and its CAM++ x-vector. A whole utterance
decodes as the reference decodes it, the first 20 ms silenced and the next
20 ms faded in (the reference's guard against the prompt spilling over).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from models.blocks.flow import MELS, Flow, FlowRow
from models.blocks.hift import SAMPLE_RATE, HiFT, SourceNoise, draw_source_noise

FADE_SAMPLES = SAMPLE_RATE // 50
"""20 ms: silenced at the start of an utterance, then as long a fade-in."""


def fade_in(device: torch.device | None = None) -> torch.Tensor:
    """[2 * FADE_SAMPLES]: zeros, then a raised-cosine rise from 0 to 1."""
    fade = torch.zeros(2 * FADE_SAMPLES, device=device)
    rise = torch.linspace(torch.pi, 0, FADE_SAMPLES, device=device)
    fade[FADE_SAMPLES:] = (torch.cos(rise) + 1) / 2
    return fade


@dataclass(frozen=True)
class Conditioning:
    """A voice's decoder conditioning."""

    prompt_tokens: torch.Tensor
    """int64 [1, P]."""
    prompt_mel: torch.Tensor
    """float [1, 2P, 80]: natural-log mel of the prompt at 24 kHz."""
    embedding: torch.Tensor
    """float [1, 192]: the prompt's CAM++ x-vector."""


@dataclass(frozen=True)
class UtteranceNoise:
    """Every random input of one utterance: the flow's starting point and HiFT's source."""

    flow: torch.Tensor
    """[1, 80, 2 (P + N)]."""
    source: SourceNoise

    def to(self, device: torch.device, dtype: torch.dtype) -> UtteranceNoise:
        return UtteranceNoise(self.flow.to(device, dtype), self.source.to(device, dtype))


def draw_utterance_noise(
    tokens: int, prompt_tokens: int, generator: torch.Generator | None = None
) -> UtteranceNoise:
    """The reference's draws for one utterance, in its order: the new frames' noise,
    the whole call's (whose prompt part is kept), then HiFT's source."""
    new = torch.randn(1, MELS, 2 * tokens, generator=generator)
    flow = torch.randn(1, MELS, 2 * (tokens + prompt_tokens), generator=generator)
    flow[:, :, 2 * prompt_tokens :] = new
    return UtteranceNoise(flow, draw_source_noise(2 * tokens, generator=generator))


@dataclass(frozen=True)
class Prefix:
    """One decoder call over a unit's tokens so far (or all of them)."""

    tokens: torch.Tensor
    """int64 [N]: the unit's tokens from its first, on the decoder's device."""
    voice: Conditioning
    noise: UtteranceNoise
    """Drawn for the N - ``held_back`` tokens that get audio."""
    held_back: int = 0
    """Last tokens read only as look-ahead (the reference's ``finalize=False``: 3)."""
    played: torch.Tensor | None = None
    """[1, 1, S]: HiFT's excitation of the samples earlier calls already gave."""


class S3Gen:
    def __init__(self, flow: Flow, hift: HiFT) -> None:
        self.flow = flow.eval()
        self.hift = hift.eval()

    @torch.no_grad()
    def utterance(
        self, tokens: torch.Tensor, voice: Conditioning, noise: UtteranceNoise
    ) -> torch.Tensor:
        """Audio [1, 960 N] of ``tokens`` [1, N], faded in as the reference fades it."""
        return self.utterances([(tokens[0], voice, noise)])[0][None]

    @torch.no_grad()
    def utterances(
        self, items: list[tuple[torch.Tensor, Conditioning, UtteranceNoise]]
    ) -> list[torch.Tensor]:
        """Audio [960 N] of each whole utterance (tokens [N], voice, noise)."""
        calls = [Prefix(tokens, voice, noise) for tokens, voice, noise in items]
        return [audio for audio, _ in self.prefixes(calls)]

    @torch.no_grad()
    def prefixes(self, calls: list[Prefix]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Audio [960 (N - held_back)] and HiFT's excitation of each call, as the
        reference's ``S3Gen.forward(..., finalize=held_back == 0)`` makes it with
        HiFT resumed from ``played``: the flow of all calls in one padded call (each
        row as it would be alone), then HiFT call by call (its convolutions and STFT
        read past a row's end, so padding would leak in). Every call's first 40 ms
        are faded in, as every reference call's are."""
        rows = [
            FlowRow(
                call.tokens,
                call.voice.prompt_tokens[0],
                call.voice.prompt_mel[0],
                call.voice.embedding[0],
                call.noise.flow[0],
                call.held_back,
            )
            for call in calls
        ]
        mels = self.flow.inference_rows(rows)
        out = []
        for mel, call in zip(mels, calls, strict=True):
            audio, source = self.hift.resume(mel[None], call.noise.source, call.played)
            audio = audio[0]
            fade = fade_in(audio.device)
            n = min(len(fade), audio.shape[-1])
            audio[:n] = audio[:n] * fade[:n]
            out.append((audio, source))
        return out
