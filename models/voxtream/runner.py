"""VoXtream2 behind the ModelRunner contract: full-stream speech that starts on the
first words.

A context's text arrives word by word (the server releases whole words to a model that
reads text while it speaks); each word is phonemised alone the way the reference's
streaming generator does it (``VoxtreamText.encode_piece``) and queued as a unit. A
slot takes queued words only while its pointer has fewer than ``min_look_ahead`` phones
ahead of it, exactly when the reference's loop pulls its next chunk, so the frames do not
depend on how fast text arrives; it waits when it needs a word that has not come, and
once the input is closed it appends silence and the end token. Each new word re-runs
the phone transformer over the context's whole phone sequence, as the reference does.

A frame is one temporal step (12.5 a second). The first step prefills the voice prompt;
its frame is not spoken (its codes 1.. belong to the prompt's delay). From the second
on, a step's audio frame is the previous step's first code with this step's others,
clamped to Mimi's codes (``models.blocks.mimi_vocoder``). The step after the pointer passes
the last phone is the last.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from models.base import (
    CLONE_VOICE,
    AlignedText,
    Capabilities,
    ClonedVoice,
    Feed,
    ModelInputError,
    Prepared,
    StepResult,
    SynthParams,
    WordFrames,
    word_spans,
)
from models.kit.requests import checked, overridden, voice_source
from models.kit.runner import SlotRunner
from models.random_draws import key_of
from models.voxtream.pointer import PointerRules, Track
from models.voxtream.rates import SpeakingRates
from models.voxtream.sampling import VoxSampling
from models.voxtream.slots import Start, VoxSlots
from models.voxtream.text.frontend import VoxtreamText
from models.voxtream.voice import Voices, VoxVoice


@dataclass(frozen=True)
class Tokens:
    """Ids the generator config names (``generator.json``)."""

    sil: int = 120
    bos: int = 123
    eos: int = 124
    unk: int = 122
    eop: int = 122
    audio_pad: int = 2049
    mimi_vocab: int = 2048


@dataclass
class VoxPrepared(Prepared):
    voice: VoxVoice | None = None
    sampling: VoxSampling = VoxSampling()
    rate: float | None = None
    key: int = 0
    max_frames: int = 749


def pack_unit(tokens: np.ndarray, punctuation: np.ndarray, final: bool = False) -> np.ndarray:
    """A unit of text: ``[n, final, ids (n), punctuation positions]``, int64. ``final``:
    the text ends with it (the reference's whole-text mode: silence and the end token
    are in from the start)."""
    head = [len(tokens), int(final)]
    return np.concatenate((head, tokens, punctuation)).astype(np.int64)


def unpack_unit(unit: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
    n = int(unit[0])
    return unit[2 : 2 + n], unit[2 + n :], bool(unit[1])


class VoxRunner(SlotRunner):
    frame_dtype = np.int64
    max_frames_per_step = 1
    encodes_inline = False

    def __init__(
        self,
        slots: VoxSlots,
        text: VoxtreamText,
        voices: Voices,
        capabilities: Capabilities,
        sampling: VoxSampling,
        rates: SpeakingRates,
        *,
        max_frames: int,
        max_phones: int,
        tokens: Tokens | None = None,
        rules: PointerRules | None = None,
        ignore_eos: bool = False,
    ) -> None:
        """``ignore_eos``: benchmarks only, a context speaks until its frame cap."""
        super().__init__(len(slots.phones) - 1)
        self.ar = slots
        self.text = text
        self.voices = voices
        self.capabilities = capabilities
        self.sampling = sampling
        self.rates = rates
        self.max_frames = max_frames
        self.max_phones = max_phones
        self.ids = tokens or Tokens()
        self.rules = rules or PointerRules()
        self.ignore_eos = ignore_eos
        self.frame_dim = slots.cfg.num_codebooks
        self.tracks: dict[int, Track] = {}
        self._unit_words: dict[int, deque[int]] = {}
        """Per slot, the word (or -1) of each queued unit, in order."""
        self._fields = {f.name: f for f in capabilities.request_fields}
        self.prepares_inline = False

    def kv_usage(self) -> tuple[int, int]:
        return self.ar.cache.usage

    # -- before the first step ---------------------------------------------------

    def validate(self, params: SynthParams) -> None:
        self._settings(params)
        self._voice(params, build=False)

    def _settings(self, params: SynthParams) -> tuple[VoxSampling, float | None, int, int]:
        value = checked(self._fields, params.extra)
        sampling = overridden(self.sampling, value)
        seed = value.get("seed")
        key = key_of(seed if seed is not None else random.getrandbits(64))
        cap = min(value.get("max_new_tokens", self.max_frames), self.max_frames)
        return sampling, value.get("speaking_rate"), key, cap

    def _voice(self, params: SynthParams, build: bool) -> VoxVoice | None:
        stored, cloning = voice_source(params.extra, VoxVoice, "VoXtream", self.voices.can_clone)
        if stored is not None:
            return stored
        if cloning:
            return self.voices.clone(params.extra) if build else None
        return self.voices.named_voice(params.voice)

    def prepare(self, params: SynthParams) -> VoxPrepared:
        sampling, rate, key, cap = self._settings(params)
        voice = self._voice(params, build=True)
        assert voice is not None
        if len(voice.codes) + 2 >= min(self.ar.window, self.max_phones) - 8:
            raise ModelInputError(
                "ref_audio: the voice prompt is too long for this model's window",
                param="ref_audio",
                code="invalid_field",
            )
        return VoxPrepared(voice=voice, sampling=sampling, rate=rate, key=key, max_frames=cap)

    def clone_voice(self, ref_audio: bytes, options: Mapping[str, Any]) -> ClonedVoice:
        voice = self.voices.clone({"ref_audio": ref_audio, **options})
        return ClonedVoice({"codes": voice.codes, "speaker": voice.speaker}, {"family": "voxtream"})

    def voice_settings(self, voice: ClonedVoice) -> tuple[str, dict[str, Any]]:
        return CLONE_VOICE, {"voice_prompt": self.voices.stored(voice.arrays)}

    def encode_text(self, text: str) -> list[np.ndarray]:
        """One unit per word, each phonemised alone as the reference streams words."""
        return [u for u in map(self._word_unit, text.split()) if u is not None]

    def _word_unit(self, word: str) -> np.ndarray | None:
        piece = self.text.encode_piece(word).tokens
        if not len(piece.ids) and not len(piece.punct_ids):
            if any(ch.isalnum() for ch in word):
                raise ModelInputError(
                    f"text: nothing speakable in {word[:40]!r}",
                    param="text",
                    code="invalid_field",
                )
            return None  # emoji, symbols: nothing to say
        return pack_unit(piece.merged(), piece.punct_delete)

    def encode_whole(self, text: str) -> np.ndarray:
        """The reference's whole-text mode: ``text`` phonemised at once (words read
        with their neighbours), one unit that ends the context's text."""
        tokens = self.text.encode(text).tokens
        if not len(tokens.ids):
            raise ModelInputError("text: no speakable phonemes", param="text", code="invalid_field")
        return pack_unit(tokens.merged(), tokens.punct_delete, final=True)

    def aligns_words(self, params: SynthParams) -> bool:
        return True

    def encode_aligned(self, text: str) -> AlignedText:
        """:meth:`encode_text` with each unit's word: one word per unit."""
        units, words = [], []
        for index, word in enumerate(text.split()):
            unit = self._word_unit(word)
            if unit is not None:
                units.append(unit)
                words.append(np.asarray([[index, 0, len(unit)]], np.int64))
        return AlignedText(units, words, word_spans(text))

    # -- the slot runner's hooks ------------------------------------------------------

    def on_free(self, slots: np.ndarray) -> None:
        for slot in slots.tolist():
            self.tracks.pop(slot, None)
            self._unit_words.pop(slot, None)
            self.ar.release(slot)

    def on_feed(self, feed: Feed) -> None:
        super().on_feed(feed)
        if feed.units:
            queue = self._unit_words.setdefault(feed.slot, deque())
            if feed.words:
                queue.extend(int(w[0, 0]) if len(w) else -1 for w in feed.words)
            else:
                queue.extend([-1] * len(feed.units))

    def on_admit(self, slots: np.ndarray, prepared: list[Prepared]) -> None:
        ids = self.ids
        for slot, p in zip(slots.tolist(), prepared, strict=True):
            assert isinstance(p, VoxPrepared) and p.voice is not None
            frames = len(p.voice.codes)
            placeholders = np.full(frames + 1, ids.unk, np.int64)
            placeholders[0], placeholders[-1] = ids.bos, ids.eop
            self.tracks[slot] = Track.new(frames + 1, placeholders, len(self.rules.moves))

    @torch.no_grad()
    def run_step(self, rows: np.ndarray) -> StepResult:
        n = len(rows)
        live = self.active[rows]
        ready = np.zeros(n, bool)
        waiting = np.zeros(n, bool)
        finished = ~live
        grew: list[int] = []
        for i, slot in enumerate(rows.tolist()):
            if not live[i]:
                continue
            track = self.tracks[slot]
            got = self._take_text(slot, track)
            if got:
                grew.append(slot)
            if track.length == track.prompt and self.closed[slot] and self.queued[slot] == 0:
                finished[i] = True  # closed with nothing to say
            elif track.needs_text(self.rules):
                waiting[i] = True
            else:
                ready[i] = True
        if grew:
            tracks = [self.tracks[s] for s in grew]
            self.ar.set_phones(
                grew,
                [t.all_tokens() for t in tracks],
                [t.prompt for t in tracks],
                [np.asarray(t.punctuation, np.int64) for t in tracks],
                self.ids.unk,
            )
        stepping = rows[ready]
        fresh = [s for s in stepping.tolist() if self.tracks[s].steps == 0]
        going = np.asarray([s for s in stepping.tolist() if self.tracks[s].steps > 0], np.int64)
        parts = []
        if fresh:
            parts.append(self.ar.start([self._start(s) for s in fresh]))
        if len(going):
            parts.append(self._advance(going))
        made = torch.cat(parts).cpu().numpy() if parts else np.zeros((0, 17), np.int64)
        order = fresh + going.tolist()
        return self._result(rows, order, made, finished, waiting)

    def _take_text(self, slot: int, track: Track) -> bool:
        """Before each frame, as the reference's loop pulls its text: one queued word if
        there is one (or the end, once the input is closed and every word is in), then
        more while the pointer is short of look-ahead. Whether any came in."""
        got = self._pull(slot, track)
        while got and track.needs_text(self.rules):
            if not self._pull(slot, track):
                break
        return bool(got)

    def _pull(self, slot: int, track: Track) -> bool | None:
        """Take one word, or the end; None when neither is there to take."""
        if track.ended:
            return None
        if self.queued[slot] > 0:
            ids, punctuation, final = unpack_unit(self.take_unit(slot))
            word = self._unit_words[slot].popleft()
            first = track.phone_count
            cut = track.add(ids, punctuation, self.max_phones, [self.ids.sil, self.ids.eos])
            track.add_word(word, first)
            if final and not cut:
                track.finish([self.ids.sil, self.ids.eos])
            return True
        if self.closed[slot] and track.length > track.prompt:
            track.finish([self.ids.sil, self.ids.eos])
            return True
        return None

    def _start(self, slot: int) -> Start:
        p = self.prepared[slot]
        assert isinstance(p, VoxPrepared) and p.voice is not None
        track = self.tracks[slot]
        codes = _delayed(p.voice.codes, self.ids.audio_pad)
        masked = np.where(codes != self.ids.audio_pad, self.ids.mimi_vocab, codes)
        gamma, guidance = self._guidance(p, track)
        return Start(slot, codes, masked, p.voice.speaker, p.sampling, gamma, p.key, guidance)

    def _guidance(self, p: VoxPrepared, track: Track) -> tuple[float, np.ndarray]:
        if p.rate is None:
            return p.sampling.cfg_gamma, np.zeros(len(self.rules.moves), np.float32)
        target, weight, gamma = self.rates.at(p.rate)
        current = track.counts / track.counts.sum()
        bias = weight * np.log(target / target.sum()) - weight * np.log(current)
        return gamma, bias.astype(np.float32)

    def _advance(self, slots: np.ndarray) -> torch.Tensor:
        window = self.ar.window
        positions = np.empty(len(slots), np.int64)
        pairs = np.empty((len(slots), 2), np.int64)
        bias = np.empty((len(slots), len(self.rules.moves)), np.float32)
        for i, slot in enumerate(slots.tolist()):
            track = self.tracks[slot]
            if track.position >= window:
                tail = min(window // 2, max(0, window - track.prompt - 1))
                track.position = self.ar.rebuild(slot, track.prompt, tail)
            positions[i] = track.position
            pairs[i] = track.pair
            p = self.prepared[slot]
            assert isinstance(p, VoxPrepared)
            bias[i] = self._guidance(p, track)[1]
        return self.ar.advance(slots, positions, pairs, bias)

    def _result(
        self,
        rows: np.ndarray,
        order: list[int],
        made: np.ndarray,
        finished: np.ndarray,
        waiting: np.ndarray,
    ) -> StepResult:
        n = len(rows)
        counts = np.zeros(n, np.int64)
        hit = np.zeros(n, bool)
        frames: list[np.ndarray] = []
        timed: list[tuple[int, int, int, int]] = []
        at = {slot: i for i, slot in enumerate(order)}
        vocab = self.ids.mimi_vocab
        for i, slot in enumerate(rows.tolist()):
            j = at.get(slot)
            if j is None:
                continue
            track = self.tracks[slot]
            p = self.prepared[slot]
            move, codes = int(made[j, 0]), made[j, 1:]
            step = track.steps
            if step >= 1:
                frame = np.concatenate(([track.last_code0], codes[1:]))
                frames.append(np.clip(frame, 0, vocab - 1))
                counts[i] = 1
            track.last_code0 = int(codes[0])
            track.count_move(move, self.rules)
            ended = track.eos_step <= step and not self.ignore_eos
            if not ended:
                track.move(move, step, self.rules)
            track.steps += 1
            track.position = track.position + 1 if step else track.prompt
            # Audio frame ``k`` is step k's first code with step k + 1's others; step k
            # read the phones of pair k. After the pointer passes the end, frame
            # ``step`` is the last.
            last = step if track.eos_step <= step else None
            timed.extend((i, *word) for word in track.reached(step + 1, last))
            if ended and not track.cut:
                finished[i] = True
            elif track.steps > p.max_frames or track.cut and ended:  # type: ignore[union-attr]
                # Step 0 speaks nothing: a cap of N frames is N + 1 steps.
                finished[i] = hit[i] = True
        out = np.stack(frames) if frames else np.zeros((0, self.frame_dim), np.int64)
        return StepResult(
            counts, out, finished.copy(), finished, hit, waiting & ~finished, WordFrames.of(timed)
        )


def _delayed(codes: np.ndarray, pad: int) -> np.ndarray:
    """A prompt's codes [T, K] delayed as the model was trained: [T + 1, K], codebook 0
    from frame 1, the others from frame 2 (their last prompt frame dropped), pad before."""
    frames, k = codes.shape
    out = np.full((frames + 1, k), pad, np.int64)
    out[1:, 0] = codes[:, 0]
    out[2:, 1:] = codes[: frames - 1, 1:]
    return out
