"""The text of one token-level utterance on the vllm-omni socket, fed to its engine
context as it arrives (vllm-omni's ``streaming_mode: "token_level"``).

vllm-omni starts one request from the utterance's first ``input.text`` and extends it
with each later one, so audio begins before the rest of the text is sent. Here the
utterance is one :class:`~voiceserver.session.utterance.Utterance` opened with the
model's own text handling, as the native socket feeds a live context: the segmenter
(or, for a model that reads text as it streams, the word streamer) passes text on at
its boundaries, and its timers release text that waits without one
(``max_delay_ms``/``end_delay_ms``, polled here).

The receive side feeds text (:meth:`LiveText.feed`) and ends it (:meth:`finish`) at any
time; the worker that speaks the utterance attaches its engine context when its turn
comes (:meth:`attach`): text that came before goes in then.
"""

from __future__ import annotations

import asyncio
import time

from voiceserver.session.utterance import Utterance

TITLE_CHARS = 80
"""vllm-omni's ``sentence_text`` of a token-level utterance: its first fragment, cut."""


class LiveText:
    def __init__(self, first: str) -> None:
        self.title = first if len(first) <= TITLE_CHARS else first[:TITLE_CHARS] + "..."
        """What ``audio.start`` names the utterance by (vllm-omni's)."""
        self.fragments = 0
        """Non-empty ``input.text`` messages fed (vllm-omni's ``total_sentences``)."""
        self.chars = 0
        self.ended = False
        self._pending: list[str] = []
        self._utterance: Utterance | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.feed(first)

    def feed(self, text: str) -> None:
        self.fragments += 1
        self.chars += len(text)
        if self._utterance is None:
            self._pending.append(text)
            return
        self._utterance.append(text)
        self._arm()

    def finish(self) -> None:
        """No more text (``input.done``): the context speaks the rest and ends."""
        if self.ended:
            return
        self.ended = True
        self._cancel_timer()
        if self._utterance is not None:
            self._utterance.end()

    def attach(self, utterance: Utterance) -> None:
        """The worker opened the engine context: what came so far goes in."""
        self._utterance = utterance
        for text in self._pending:
            utterance.append(text)
        self._pending = []
        if self.ended:
            utterance.end()
        else:
            self._arm()

    def detach(self) -> None:
        """The context is over (done, failed or cancelled): nothing more goes to it."""
        self._cancel_timer()
        self._utterance = None
        self.ended = True

    def _arm(self) -> None:
        self._cancel_timer()
        if self._utterance is None or self.ended:
            return
        deadline = self._utterance.deadline()
        if deadline is not None:
            delay = max(0.0, deadline - time.monotonic())
            self._timer = asyncio.get_running_loop().call_later(delay, self._fire)

    def _fire(self) -> None:
        self._timer = None
        if self._utterance is not None and not self.ended:
            self._utterance.poll()
            self._arm()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
