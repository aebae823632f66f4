"""Per-context host state of the talker: KV slot, text track, prompt progress.

The runner keeps one per busy slot; sampling state lives in the runner's
slot-indexed device tensors.
"""

from __future__ import annotations

from collections import deque
from enum import Enum

import torch

from models.qwen3_tts.prompt import PromptSpec
from models.qwen3_tts.sampling import SamplingParams


class Phase(Enum):
    PROMPT = "prompt"
    """Prompt positions still to run (some may wait for text)."""
    DECODE = "decode"
    DONE = "done"


class Qwen3Context:
    def __init__(
        self,
        slot: int,
        spec: PromptSpec,
        sampling: SamplingParams,
        max_frames: int,
        head: torch.Tensor,
        aligned: torch.Tensor | None,
        whole_text_streaming: bool | None = None,
    ) -> None:
        self.slot = slot
        self.spec = spec
        self.whole_text_streaming = whole_text_streaming
        """Set while the mode is still open (the client did not choose): the mode for a
        whole text; the first prompt step decides (``choose_mode``)."""
        self.sampling = sampling
        self.max_frames = max_frames
        self.head: torch.Tensor | None = head
        """Prompt rows not yet run (all known now)."""
        self.aligned = aligned
        """Streaming mode: prompt codec rows that each take the next text-track item."""
        self.aligned_used = 0
        self.text: deque[int] = deque()
        self.text_seen = 0
        self.input_closed = False
        self.eos_sent = False
        self.phase = Phase.PROMPT
        self.position = 0
        self.pending_code0: int | None = None
        self.pending_frame: torch.Tensor | None = None
        """Embedding sum of the last emitted frame, waiting for its text-track item."""
        self.generated = 0
        """Codes 0 sampled so far (EOS may come only after MIN_NEW_TOKENS)."""
        self.frames = 0
        self.hit_limit = False
        self.queued = 0
        """Tokens ever put on the text track (a clone's reference text included)."""
        self.taken = 0
        """Tokens taken off the text track so far."""
        self.words: deque[tuple[int, int, int]] = deque()
        """Words fed and not yet reached: (track position of the first token, tokens,
        the word's index in the context)."""
        self.word_cursor = 0
        """Frame where the last timed word ends (the next starts no earlier)."""
        self.entered: list[tuple[int, int, int]] = []
        """Words whose first token entered the talker since the last step result:
        (word index, tokens, frame the token conditions)."""
        self.timed = False
        """Word timing was asked for (text came with word tables)."""

    # -- input -------------------------------------------------------------

    def feed(self, units: list[list[int]], words: list[list[list[int]]] | None = None) -> None:
        """Tokens for the text track; ``words``: per unit, ``(word, first, end)`` token
        ranges to time (``models.base.Feed.words``)."""
        self.timed = self.timed or words is not None
        for i, unit in enumerate(units):
            if words is not None:
                for word, first, end in words[i]:
                    self.words.append((self.queued + first, end - first, word))
            self.text.extend(unit)
            self.text_seen += len(unit)
            self.queued += len(unit)

    def queue_prompt_text(self, ids: list[int]) -> None:
        """Text that goes on the track ahead of the client's (a clone's reference text),
        before any track item was taken."""
        assert self.taken == 0
        self.text.extendleft(reversed(ids))
        self.queued += len(ids)
        self.words = deque((at + len(ids), tokens, word) for at, tokens, word in self.words)

    def choose_mode(self) -> bool | None:
        """Streaming-text mode for a context whose client did not choose, decided once its
        text can start: a whole text (input closed) takes the variant's default, text
        still arriving (or text to be word-timed) streams. None: not decidable yet, or
        decided already."""
        if self.whole_text_streaming is None or not self.track_ready:
            return None
        streaming = self.whole_text_streaming or not self.input_closed or self.timed
        self.whole_text_streaming = None
        return streaming

    def close_input(self) -> None:
        self.input_closed = True

    @property
    def has_work(self) -> bool:
        if self.phase is Phase.DONE:
            return False
        if self.phase is Phase.PROMPT:
            if self.whole_text_streaming is not None:
                return self.track_ready
            if not self.spec.streaming:
                return self.input_closed
            return self.head is not None or (self.aligned_left > 0 and self.track_ready)
        return self.pending_code0 is not None or (
            self.pending_frame is not None and self.track_ready
        )

    # -- text track --------------------------------------------------------

    @property
    def track_ready(self) -> bool:
        """The next text-track item is known (a token, or EOS/pad after the input closed)."""
        return bool(self.text) or self.input_closed

    @property
    def aligned_left(self) -> int:
        return 0 if self.aligned is None else self.aligned.shape[0] - self.aligned_used

    def next_track(self) -> int | str:
        """The next text-track item: a token id, ``"eos"`` once, then ``"pad"``."""
        if self.text:
            position = self.taken
            self.taken += 1
            while self.words and self.words[0][0] <= position:
                _, tokens, word = self.words.popleft()
                self.entered.append((word, tokens, self.frames))
            return self.text.popleft()
        if not self.eos_sent:
            self.eos_sent = True
            return "eos"
        return "pad"

    def finish(self, hit_limit: bool = False) -> None:
        self.phase = Phase.DONE
        self.hit_limit = hit_limit
        self.pending_code0 = None
        self.pending_frame = None
