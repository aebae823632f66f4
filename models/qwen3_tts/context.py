"""Per-slot host state of the talker: arrays indexed by slot, and the prompt in progress.

:class:`Qwen3Slots` holds what every step reads and writes of every stepped slot -
its phase, talker position, frames and codes made, whether a code 0 or a frame is
pending, its text track - in numpy arrays, so a step decides and updates whole
batches at once. The text track is a window of the next tokens per slot
(``window``, refilled from the slot's overflow queue when it runs low), so the next
item of every stepped slot is one gather. :class:`Qwen3Context` is what a context
holds beside that while its prompt runs (the prompt's rows, its streaming mode) and
for word timing; a step touches it only for contexts in their prompt or with words
to time.
"""

from __future__ import annotations

from collections import deque
from enum import IntEnum

import numpy as np
import torch

from models.qwen3_tts.prompt import PromptSpec
from models.qwen3_tts.sampling import SamplingParams


class Phase(IntEnum):
    PROMPT = 0
    """Prompt positions still to run (some may wait for text)."""
    DECODE = 1
    DONE = 2


PAD_ITEM, EOS_ITEM = -1, -2
"""Text-track items that are not token ids: padding (after EOS), and EOS itself."""
WINDOW = 16
"""Next text-track tokens held per slot in the window (the rest wait in a queue)."""
NO_WORD = np.iinfo(np.int64).max


class Qwen3Slots:
    def __init__(self, slots: int) -> None:
        self.phase = np.full(slots, Phase.DONE, np.int8)
        self.position = np.zeros(slots, np.int64)
        self.frames = np.zeros(slots, np.int64)
        self.max_frames = np.zeros(slots, np.int64)
        self.generated = np.zeros(slots, np.int64)
        """Codes 0 sampled so far (EOS may come only after ``MIN_NEW_TOKENS``)."""
        self.code0_pending = np.zeros(slots, bool)
        """A code 0 was sampled and its frame's residual codes are still to come."""
        self.frame_pending = np.zeros(slots, bool)
        """A frame was emitted and waits for its text-track item (its embedding sum is
        in the runner's ``frame_embed`` table)."""
        self.input_closed = np.zeros(slots, bool)
        self.eos_sent = np.zeros(slots, bool)
        self.hit_limit = np.zeros(slots, bool)
        self.window = np.zeros((slots, WINDOW), np.int64)
        self.window_len = np.zeros(slots, np.int64)
        self.overflow: dict[int, deque[int]] = {}
        """Track tokens beyond a slot's window."""
        self.taken = np.zeros(slots, np.int64)
        """Tokens taken off each slot's track so far."""
        self.next_word = np.full(slots, NO_WORD, np.int64)
        """Track position of the first token of the slot's next word to time."""
        self.contexts: list[Qwen3Context | None] = [None] * slots

    def open(self, ctx: Qwen3Context, max_frames: int) -> None:
        s = ctx.slot
        self.contexts[s] = ctx
        self.phase[s] = Phase.PROMPT
        self.position[s] = self.frames[s] = self.generated[s] = 0
        self.max_frames[s] = max_frames
        self.code0_pending[s] = self.frame_pending[s] = False
        self.input_closed[s] = self.eos_sent[s] = self.hit_limit[s] = False
        self.window_len[s] = self.taken[s] = 0
        self.overflow.pop(s, None)
        self.next_word[s] = NO_WORD

    def close(self, slot: int) -> None:
        self.contexts[slot] = None
        self.phase[slot] = Phase.DONE
        self.code0_pending[slot] = self.frame_pending[slot] = False
        self.overflow.pop(slot, None)
        self.window_len[slot] = 0

    def finish(self, slots: np.ndarray | int, hit_limit: bool | np.ndarray = False) -> None:
        self.phase[slots] = Phase.DONE
        self.hit_limit[slots] = hit_limit
        self.code0_pending[slots] = self.frame_pending[slots] = False

    # -- the text track -------------------------------------------------------------

    def track_ready(self, slots: np.ndarray) -> np.ndarray:
        """The next text-track item is known (a token, or EOS/pad after the input closed)."""
        return (self.window_len[slots] > 0) | self.input_closed[slots]

    def push(self, slot: int, ids: list[int]) -> None:
        """Tokens onto the end of the slot's track."""
        queue = self.overflow.get(slot)
        if queue is None:
            room = WINDOW - int(self.window_len[slot])
            head, ids = ids[:room], ids[room:]
            n = int(self.window_len[slot])
            self.window[slot, n : n + len(head)] = head
            self.window_len[slot] += len(head)
            if not ids:
                return
            queue = self.overflow[slot] = deque()
        queue.extend(ids)

    def push_front(self, slot: int, ids: list[int]) -> None:
        """Tokens ahead of every queued one (before any item was taken)."""
        rest = self.pop_all(slot)
        self.push(slot, [*ids, *rest])

    def pop_all(self, slot: int) -> list[int]:
        n = int(self.window_len[slot])
        out = self.window[slot, :n].tolist()
        out.extend(self.overflow.pop(slot, ()))
        self.window_len[slot] = 0
        return out

    def next_items(self, slots: np.ndarray) -> np.ndarray:
        """Each slot's next text-track item (a token id, ``EOS_ITEM`` once after its
        input closed, then ``PAD_ITEM``), taken off its track; every slot must be
        ``track_ready``. Words whose first token is taken now are timed (``entered``)."""
        has = self.window_len[slots] > 0
        items = np.where(
            has, self.window[slots, 0], np.where(self.eos_sent[slots], PAD_ITEM, EOS_ITEM)
        )
        self.eos_sent[slots[~has]] = True
        if has.any():
            took = slots[has]
            self.window[took, :-1] = self.window[took, 1:]
            self.window_len[took] -= 1
            taken = self.taken[took]
            self.taken[took] += 1
            for slot in took[self.next_word[took] <= taken].tolist():
                ctx = self.contexts[slot]
                assert ctx is not None
                ctx.enter_words(int(self.taken[slot]) - 1, int(self.frames[slot]))
                self.next_word[slot] = ctx.next_word_at()
            for slot in took[self.window_len[took] < WINDOW // 2].tolist():
                self._refill(slot)
        return items

    def _refill(self, slot: int) -> None:
        queue = self.overflow.get(slot)
        if not queue:
            return
        n = int(self.window_len[slot])
        take = min(WINDOW - n, len(queue))
        self.window[slot, n : n + take] = [queue.popleft() for _ in range(take)]
        self.window_len[slot] += take
        if not queue:
            del self.overflow[slot]

    def queued_tokens(self, slot: int) -> int:
        return int(self.window_len[slot]) + len(self.overflow.get(slot, ()))


class Qwen3Context:
    """What a context holds beside its slot's arrays: its prompt while it runs, its
    sampling settings, and the words it has to time."""

    def __init__(
        self,
        slot: int,
        slots: Qwen3Slots,
        spec: PromptSpec,
        sampling: SamplingParams,
        head: torch.Tensor,
        whole_text_streaming: bool | None = None,
    ) -> None:
        self.slot = slot
        self.slots = slots
        self.spec = spec
        self.whole_text_streaming = whole_text_streaming
        """Set while the mode is still open (the client did not choose): the mode for a
        whole text; the first prompt step decides (``choose_mode``)."""
        self.sampling = sampling
        self.head: torch.Tensor | None = head
        """Prompt rows not yet run (all known now)."""
        self.aligned: torch.Tensor | None = None
        """Streaming mode: prompt codec rows that each take the next text-track item."""
        self.aligned_used = 0
        self.text_seen = 0
        self.queued = 0
        """Tokens ever put on the text track (a clone's reference text included)."""
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
            self.slots.push(self.slot, unit)
            self.text_seen += len(unit)
            self.queued += len(unit)
        self.slots.next_word[self.slot] = self.next_word_at()

    def queue_prompt_text(self, ids: list[int]) -> None:
        """Text that goes on the track ahead of the client's (a clone's reference text),
        before any track item was taken."""
        assert self.slots.taken[self.slot] == 0
        self.slots.push_front(self.slot, ids)
        self.queued += len(ids)
        self.words = deque((at + len(ids), tokens, word) for at, tokens, word in self.words)
        self.slots.next_word[self.slot] = self.next_word_at()

    def next_word_at(self) -> int:
        return self.words[0][0] if self.words else int(np.iinfo(np.int64).max)

    def enter_words(self, position: int, frame: int) -> None:
        """The track token at ``position`` was taken while the slot had made ``frame``
        frames: the words starting at or before it entered the talker."""
        while self.words and self.words[0][0] <= position:
            _, tokens, word = self.words.popleft()
            self.entered.append((word, tokens, frame))

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

    # -- the slot's arrays, one context at a time (the prompt path) ------------------

    @property
    def phase(self) -> Phase:
        return Phase(int(self.slots.phase[self.slot]))

    @phase.setter
    def phase(self, value: Phase) -> None:
        self.slots.phase[self.slot] = value

    @property
    def position(self) -> int:
        return int(self.slots.position[self.slot])

    @position.setter
    def position(self, value: int) -> None:
        self.slots.position[self.slot] = value

    @property
    def input_closed(self) -> bool:
        return bool(self.slots.input_closed[self.slot])

    @property
    def track_ready(self) -> bool:
        s = self.slots
        return bool(s.window_len[self.slot] > 0 or s.input_closed[self.slot])

    @property
    def aligned_left(self) -> int:
        return 0 if self.aligned is None else self.aligned.shape[0] - self.aligned_used

    @property
    def has_work(self) -> bool:
        """A prompt context can run some of its prompt now."""
        if self.whole_text_streaming is not None:
            return self.track_ready
        if not self.spec.streaming:
            return self.input_closed
        return self.head is not None or (self.aligned_left > 0 and self.track_ready)

    def finish(self, hit_limit: bool = False) -> None:
        self.slots.finish(self.slot, hit_limit)
