"""VoxCPM2's prefill sequence: text ids, the two masks and the patches at audio positions.

As the reference builds it, in four modes:

- zero-shot: the target's ids, then ``<|audio_start|>``;
- reference (a voice from audio alone): ``<|audio_prompt_start|>``, one position per
  reference patch (id 0, its patch), ``<|audio_prompt_end|>``, then the zero-shot part;
- continuation (audio and its transcript): the ids of transcript + target (joined with
  no separator), ``<|audio_start|>``, then one position per prompt patch;
- both: the reference part, then the continuation part.

Text positions carry zero patches; audio positions carry id 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

AUDIO_START, AUDIO_END, REF_START, REF_END = 101, 102, 103, 104


@dataclass(frozen=True)
class Prefill:
    tokens: np.ndarray
    """int64 [S]."""
    text_mask: np.ndarray
    """int64 [S]: 1 at text positions."""
    audio_mask: np.ndarray
    """int64 [S]: 1 at audio positions."""
    feats: np.ndarray
    """float32 [S, patch, feat_dim]: the patches at audio positions, zeros elsewhere."""


def build_prefill(
    target: list[int],
    patch: int,
    feat_dim: int,
    *,
    reference: np.ndarray | None = None,
    prompt: np.ndarray | None = None,
) -> Prefill:
    """``target``: the ids of the transcript + target text in continuation modes (the
    caller tokenizes the joined string), else of the target; ``reference`` [R, patch,
    feat_dim]: a reference voice's patches; ``prompt`` [A, patch, feat_dim]: a
    continuation prompt's patches."""
    parts: list[tuple[list[int], np.ndarray, int, int]] = []  # ids, feats, text, audio
    zeros = np.zeros((0, patch, feat_dim), np.float32)

    def text(ids: list[int]) -> None:
        parts.append((ids, np.zeros((len(ids), patch, feat_dim), np.float32), 1, 0))

    if reference is not None:
        text([REF_START])
        parts.append(([0] * len(reference), reference.astype(np.float32), 0, 1))
        text([REF_END])
    text([*target, AUDIO_START])
    if prompt is not None:
        parts.append(([0] * len(prompt), prompt.astype(np.float32), 0, 1))
    tokens = np.concatenate([np.asarray(ids, np.int64) for ids, *_ in parts])
    feats = np.concatenate([f for _, f, *_ in parts] or [zeros])
    text_mask = np.concatenate([np.full(len(ids), t, np.int64) for ids, _, t, _ in parts])
    audio_mask = np.concatenate([np.full(len(ids), a, np.int64) for ids, _, _, a in parts])
    return Prefill(tokens, text_mask, audio_mask, feats)
