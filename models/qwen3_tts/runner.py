"""Qwen3-TTS behind the ModelRunner contract: talker + code predictor, batched over slots.

A step advances each stepped slot by at most one frame in three phases:
prompt positions (a context's prefill, possibly waiting for streamed text),
the code predictor for every slot holding a fresh code 0 (which emits the
frame), then one talker position for every slot whose next text-track item
is known (which gives the next code 0). Every code 0 and every residual code
of the step is sampled on the device, batched, with each row's own settings
held in slot-indexed tensors; the frames and the new codes 0 come to the
host in one copy at the end of the step.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from models.attention import without_cudnn_attention
from models.base import (
    CLONE_VOICE,
    AlignedText,
    Capabilities,
    ClonedVoice,
    Feed,
    ModelInputError,
    Prepared,
    StepPlan,
    StepResult,
    SynthParams,
    WordFrames,
    word_spans,
)
from models.kernels.paged_decode import kernel_available
from models.kit.graphed import GraphedRows
from models.kit.runner import SlotRunner
from models.kit.sampler import (
    KEY_COLUMN,
    Rows,
    Settings,
    SlotSampler,
    draw,
    penalize,
    scale,
    top_k,
    top_p,
)
from models.kit.tables import Column, SlotTables
from models.paged_kv import PagedKVCache
from models.qwen3_tts.config import Qwen3TTSConfig
from models.qwen3_tts.context import EOS_ITEM, PAD_ITEM, Phase, Qwen3Context, Qwen3Slots
from models.qwen3_tts.params import WHOLE_TEXT_STREAMING, RequestSettings, settings_from
from models.qwen3_tts.prompt import PromptBuilder, PromptSpec
from models.qwen3_tts.sampling import SamplingParams, talker_mask
from models.qwen3_tts.talker import Talker
from models.qwen3_tts.text_tokenizer import TextTokenizer
from models.qwen3_tts.voice_clone import VoicePrompt
from models.qwen3_tts.voices import VoiceResolver
from models.random_draws import key_of
from models.upload import upload

MIN_NEW_TOKENS = 2
_SUBTALKER_KEY = 0x5BD1E995


def _stored_mismatch(why: str) -> ModelInputError:
    return ModelInputError(
        f"voice: the stored voice does not fit this model ({why}); upload it again",
        param="voice",
        code="invalid_field",
    )


@dataclass(frozen=True)
class ARSettings:
    max_contexts: int
    kv_capacity: int
    max_frames: int
    streaming_text: bool
    sampling: SamplingParams
    word_lag_frames: int = 1
    """Frames from a word's first token entering the talker to its audio, at least."""
    word_frames_per_token: float = 3.75
    """Assumed speaking rate for a word's length (frames per token)."""
    kv_blocks: int = 0
    """KV blocks shared by the slots (0: enough for every slot at full capacity)."""
    kv_block_size: int = 32
    """Positions per KV block."""
    cuda_graphs: bool = True
    """On CUDA, replay the frame step from graphs captured per batch size at start-up."""
    graph_prefill_rows: int = 64
    """With ``cuda_graphs``: a step's prompt positions up to this many run as
    one-position rows of graphs captured for them; more (a burst of arrivals), or 0,
    run eagerly in one padded call."""
    ignore_eos: bool = False
    """Bench only: never sample end-of-speech, so every context runs to its frame cap."""


@dataclass
class Qwen3Prepared(Prepared):
    """A context's host inputs; ``conditioning`` is a clone's decoder stream, primed
    with its reference codes while preparing."""

    instruct_ids: list[int] | None = None
    language_id: int | None = None
    speaker_id: int | None = None
    speaker_embedding: np.ndarray | None = None
    ref_codes: np.ndarray | None = None
    ref_text_ids: list[int] | None = None
    streaming: bool | None = True
    """Streaming-text mode; None: the client did not choose (``RequestSettings``)."""
    sampling: SamplingParams = SamplingParams()
    max_frames: int = 0
    key: int = 0
    """The context's random key: its seed's, or a fresh one."""


class Qwen3Runner(SlotRunner):
    frame_dtype = np.int64
    max_frames_per_step = 1
    encodes_inline = True

    def __init__(
        self,
        cfg: Qwen3TTSConfig,
        talker: Talker,
        tokenizer: TextTokenizer,
        voices: VoiceResolver,
        capabilities: Capabilities,
        settings: ARSettings,
        prime: Callable[[np.ndarray], Any] | None = None,
    ) -> None:
        """``prime(ref_codes)`` makes a clone's decoder conditioning while preparing
        (the vocoder's primed stream); without it the codes themselves are passed."""
        super().__init__(settings.max_contexts)
        self.cfg = cfg
        self._prime = prime
        self.talker = talker
        self.tokenizer = tokenizer
        self.voices = voices
        self.capabilities = capabilities
        self.settings = settings
        self._fields = {f.name: f for f in capabilities.request_fields}
        self.frame_dim = cfg.talker.num_code_groups
        param = talker.codec_head.weight
        self.device, self.dtype = param.device, param.dtype
        stack = cfg.talker.stack
        slots = settings.max_contexts
        block = settings.kv_block_size
        blocks = settings.kv_blocks or slots * -(-settings.kv_capacity // block)
        self.cache = PagedKVCache(
            stack.num_layers,
            slots,
            settings.kv_capacity,
            blocks,
            block,
            stack.num_kv_heads,
            stack.head_dim,
            self.dtype,
            self.device,
        )
        self.state = Qwen3Slots(slots)
        """Each slot's host state, in arrays (``models.qwen3_tts.context``)."""
        role = tokenizer.encode(f"<|im_start|>assistant\n")  # noqa: F541 (the template)
        if len(role) != 3 or role[0] != cfg.im_start_id:
            raise ValueError(
                "the text tokenizer must encode '<|im_start|>assistant\\n' as 3 tokens "
                f"starting with im_start_token_id {cfg.im_start_id}, got {role}"
            )
        self.prompts = PromptBuilder(talker, cfg, role)
        vocab, dev = cfg.talker.vocab_size, self.device
        self.suppress = talker_mask(vocab, cfg.talker.codec_eos_id, dev)
        if settings.ignore_eos:
            self.suppress[cfg.talker.codec_eos_id] = True
        sub_vocab = cfg.talker.predictor_vocab_size
        # Per-slot state, read with one gather per step; its scratch row is the padding
        # rows' (a graph replay's padding reads and writes it).
        self.tables = SlotTables(
            slots,
            dev,
            {
                **KEY_COLUMN,
                **SlotSampler.columns("talker", vocab, penalty=True),
                **SlotSampler.columns("sub", sub_vocab, penalty=False),
                # Each slot's last talker hidden state and code 0 (its next frame's start),
                # and the embedding sum of a frame waiting for its text-track item.
                "hidden": Column(self.dtype, (stack.hidden_size,)),
                "code0": Column(torch.long),
                "frame_embed": Column(self.dtype, (stack.hidden_size,)),
            },
        )
        self.talker_sampler = SlotSampler(self.tables, "talker", vocab, penalty=True)
        self.sub_sampler = SlotSampler(
            self.tables, "sub", sub_vocab, penalty=False, key_xor=_SUBTALKER_KEY
        )
        graphs = settings.cuda_graphs and kernel_available(dev)
        scratch = self.cache.scratch_slot
        self.frames = GraphedRows(self._frame, (scratch, 0, PAD_ITEM, 0), dev, slots, graphs=graphs)
        self.prefill: GraphedRows | None = None
        if graphs and settings.graph_prefill_rows > 0:
            self.prefill = GraphedRows(
                self._prompt_positions,
                (scratch, 0),
                dev,
                settings.graph_prefill_rows,
                graphs=True,
                extra_padding=self._prompt_padding,
                split=False,
            )
        with torch.no_grad(), without_cudnn_attention():
            self.frames.capture()
            if self.prefill is not None:
                self.prefill.capture()

    # -- voices ------------------------------------------------------------------

    def create_voice_prompt(
        self,
        ref_audio: object,
        sample_rate: int | None = None,
        ref_text: str | None = None,
        x_vector_only: bool = False,
    ) -> VoicePrompt:
        """Base model: the reusable prompt of a cloned voice (pass it as ``extra["voice_prompt"]``)."""
        return self.voices.create_prompt(ref_audio, sample_rate, ref_text, x_vector_only)

    def clone_voice(self, ref_audio: bytes, options: Mapping[str, Any]) -> ClonedVoice:
        """Base model: the speaker x-vector (and, unless ``x_vector_only``, the
        reference's codes and its transcript ``ref_text``) as arrays the server
        can store. ``options``: ``ref_text``, ``x_vector_only`` (default: true
        without a transcript)."""
        ref_text = (
            self._fields["ref_text"].check(options["ref_text"]) if options.get("ref_text") else None
        )
        x_only = options.get("x_vector_only")
        x_only = not ref_text if x_only is None else self._fields["x_vector_only"].check(x_only)
        prompt = self.create_voice_prompt(ref_audio, None, ref_text, x_only)
        arrays = {"speaker_embedding": np.asarray(prompt.speaker_embedding, dtype=np.float32)}
        if prompt.ref_codes is not None:
            arrays["ref_codes"] = np.asarray(prompt.ref_codes, dtype=np.int64)
        meta = {"ref_text": prompt.ref_text if prompt.ref_codes is not None else None}
        return ClonedVoice(arrays, meta)

    def voice_settings(self, voice: ClonedVoice) -> tuple[str, dict[str, Any]]:
        """A stored voice -> ``voice="clone"`` with its ``voice_prompt``; a voice
        computed by another checkpoint (other sizes) is refused, not mis-read."""
        if self.cfg.model_type != "base":
            raise ModelInputError(
                f"voice: stored voices need a Base model, this is {self.cfg.model_type}",
                param="voice",
                code="unsupported_value",
            )
        hidden = self.cfg.talker.stack.hidden_size
        embedding = voice.arrays.get("speaker_embedding")
        if (
            embedding is None
            or embedding.shape != (hidden,)
            or not np.issubdtype(embedding.dtype, np.floating)
            or not np.all(np.isfinite(embedding))
        ):
            raise _stored_mismatch(f"its speaker embedding is not {hidden} finite floats")
        codes = voice.arrays.get("ref_codes")
        ref_text = voice.meta.get("ref_text")
        if codes is not None:
            groups, size = self.cfg.talker.num_code_groups, self.cfg.talker.predictor_vocab_size
            if (
                codes.ndim != 2
                or codes.shape[1] != groups
                or not np.issubdtype(codes.dtype, np.integer)
                or codes.size == 0
                or codes.min() < 0
                or codes.max() >= size
            ):
                raise _stored_mismatch(
                    f"its reference codes are not [frames, {groups}] in [0, {size})"
                )
            if not isinstance(ref_text, str) or not ref_text:
                raise _stored_mismatch("it has reference codes but no reference text")
        prompt = VoicePrompt(
            embedding.astype(np.float32, copy=False),
            None if codes is None else codes.astype(np.int64, copy=False),
            ref_text if codes is not None else None,
        )
        return CLONE_VOICE, {"voice_prompt": prompt}

    # -- before the first step ---------------------------------------------------

    def kv_usage(self) -> tuple[int, int]:
        return self.cache.usage

    def validate(self, params: SynthParams) -> None:
        self._settings(params)
        self.voices.check(params)

    def prepare(self, params: SynthParams) -> Qwen3Prepared:
        settings = self._settings(params)
        voice = self.voices.resolve(params)
        seed = settings.sampling.seed
        conditioning = voice.ref_codes
        if conditioning is not None and self._prime is not None:
            conditioning = self._prime(conditioning)
        return Qwen3Prepared(
            conditioning=conditioning,
            instruct_ids=voice.instruct_ids,
            language_id=voice.language_id,
            speaker_id=voice.speaker_id,
            speaker_embedding=voice.speaker_embedding,
            ref_codes=voice.ref_codes,
            ref_text_ids=voice.ref_text_ids,
            streaming=settings.streaming,
            sampling=settings.sampling,
            max_frames=settings.max_frames,
            key=key_of(seed if seed is not None else random.getrandbits(64)),
        )

    def encode_text(self, text: str) -> list[np.ndarray]:
        ids = self.tokenizer.encode(text) if text else []
        return [np.asarray(ids, np.int64)] if ids else []

    def aligns_words(self, params: SynthParams) -> bool:
        """Streaming text only: with all text in the prompt there is no entry frame. A
        context whose client did not choose the mode and asks for word timing streams
        (``Qwen3Context.choose_mode``), so only an explicit ``streaming_text: false``
        (or the server's ``streaming_text: false``) rules timing out."""
        try:
            return self._settings(params).streaming is not False
        except ModelInputError:
            return False

    def encode_aligned(self, text: str) -> AlignedText:
        """Each word owns the tokens whose last character is in it (a BPE token carries
        the space before its word, and a word may be several tokens)."""
        ids, offsets = self.tokenizer.encode_with_offsets(text) if text else ([], [])
        spans = word_spans(text)
        owner = np.full(len(text) + 1, -1, np.int64)
        for word, (start, end) in enumerate(spans.tolist()):
            owner[start:end] = word
        found: dict[int, list[int]] = {}
        for token, (start, end) in enumerate(offsets):
            word = int(owner[max(end - 1, start)]) if end > start else -1
            if word >= 0:
                found.setdefault(word, [token, token + 1])[1] = token + 1
        table = np.asarray(
            [(word, a, b) for word, (a, b) in sorted(found.items())], np.int64
        ).reshape(-1, 3)
        units = [np.asarray(ids, np.int64)] if ids else []
        return AlignedText(units, [table] if units else [], spans)

    def _settings(self, params: SynthParams) -> RequestSettings:
        return settings_from(
            params.extra,
            self.settings.sampling,
            self.settings.streaming_text,
            self.settings.max_frames,
            self._fields,
        )

    # -- stepping ----------------------------------------------------------------

    @torch.no_grad()
    def execute(self, plan: StepPlan) -> StepResult:
        with without_cudnn_attention():
            return super().execute(plan)

    # -- the slot runner's hooks ------------------------------------------------------

    def on_free(self, slots: np.ndarray) -> None:
        for slot in slots.tolist():
            self._release(slot)

    def on_admit(self, slots: np.ndarray, prepared: list[Prepared]) -> None:
        admitted = []
        for slot, p in zip(slots.tolist(), prepared, strict=True):
            assert isinstance(p, Qwen3Prepared)
            self._admit(slot, p)
            admitted.append((slot, p.sampling, p.key))
        self._store_settings(admitted)

    def on_feed(self, feed: Feed) -> None:
        """Tokens go onto the context's text track (with its words' token ranges)."""
        ctx = self.state.contexts[feed.slot]
        if ctx is None:
            return
        words = [w.tolist() for w in feed.words] if feed.words else None
        ctx.feed([unit.tolist() for unit in feed.units], words)
        if feed.close:
            self.state.input_closed[feed.slot] = True

    def run_step(self, rows: np.ndarray) -> StepResult:
        return self._step(rows)

    def _admit(self, slot: int, prepared: Qwen3Prepared) -> None:
        dev = self.device
        emb = None
        if prepared.speaker_embedding is not None:
            emb = upload(prepared.speaker_embedding, dev, self.dtype)
        codes = None
        if prepared.ref_codes is not None:
            codes = upload(prepared.ref_codes, dev)
        streaming = prepared.streaming
        whole_text = WHOLE_TEXT_STREAMING[self.cfg.model_type]
        if streaming is None and whole_text:
            streaming = True  # whole or streamed, the same mode: nothing to wait for
        spec = PromptSpec(
            instruct_ids=prepared.instruct_ids,
            language_id=prepared.language_id,
            speaker_id=prepared.speaker_id,
            speaker_embedding=emb,
            ref_codes=codes,
            ref_text_ids=prepared.ref_text_ids,
            streaming=streaming is not False,
        )
        head = self.prompts.head(spec)
        ctx = Qwen3Context(
            slot,
            self.state,
            spec,
            prepared.sampling,
            head,
            whole_text if streaming is None else None,
        )
        self.state.open(ctx, prepared.max_frames)
        if streaming is not None:
            self._set_mode(ctx, streaming)

    def _store_settings(self, admitted: list[tuple[int, SamplingParams, int]]) -> None:
        """The admitted slots' keys and sampling settings into the slot tables (batched:
        a Python scalar written into a device tensor makes the host wait, per write)."""
        slots = self.tables.slot_index([slot for slot, _, _ in admitted])
        self.tables.store(slots, {"key": [key for _, _, key in admitted]})
        self.talker_sampler.admit(slots, [_talker(p) for _, p, _ in admitted])
        self.sub_sampler.admit(slots, [_sub(p) for _, p, _ in admitted])

    def _set_mode(self, ctx: Qwen3Context, streaming: bool) -> None:
        ctx.spec = replace(ctx.spec, streaming=streaming)
        if streaming:
            ctx.aligned = self.prompts.aligned(ctx.spec)
            if ctx.spec.ref_text_ids:
                ctx.queue_prompt_text(ctx.spec.ref_text_ids)

    def _release(self, slot: int) -> None:
        self.state.close(slot)
        self.cache.release(slot)

    def _reserve(self, slots: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """KV blocks for each slot up to its new end; a context that cannot get them
        (the pool is spent, or past the capacity) ends as if it hit its frame cap.
        Returns the slots that got them."""
        if not len(slots):
            return slots
        failed = self.cache.reserve(list(zip(slots.tolist(), ends.tolist(), strict=True)))
        if not failed:
            return slots
        self.state.finish(np.asarray(failed, np.int64), True)
        return slots[~np.isin(slots, failed)]

    def _step(self, rows: np.ndarray) -> StepResult:
        """One step of ``rows``: prompts that can run, graphed frames for the steady
        decoding slots, and for the others the residual codes and a talker position;
        decisions and updates over the slot arrays, with one device-to-host copy."""
        st = self.state
        active = self.active[rows]
        decoding = rows[active & (st.phase[rows] == Phase.DECODE)]
        prompting = [
            ctx
            for slot in rows[active & (st.phase[rows] == Phase.PROMPT)].tolist()
            if (ctx := st.contexts[slot]) is not None and ctx.has_work
        ]
        steady = self._steady(decoding)
        hidden_rows: list[torch.Tensor] = []
        sampled: list[np.ndarray] = []
        prompted = self._prompts(prompting)
        if prompted is not None:
            done, hidden = prompted
            sampled.append(done)
            hidden_rows.append(hidden)
        replayed, graphed = self._replay(steady)
        predicting = decoding[st.code0_pending[decoding]]
        codes = self._predict(predicting)
        advancing = decoding[st.frame_pending[decoding] & st.track_ready(decoding)]
        advanced, hidden = self._advance(advancing)
        if hidden is not None:
            hidden_rows.append(hidden)
            sampled.append(advanced)
        chosen = np.concatenate(sampled) if sampled else np.zeros(0, np.int64)
        code0 = self._sample_code0(chosen, torch.cat(hidden_rows)) if len(chosen) else None
        # The step's only device-to-host copy: its frames and its new codes 0.
        parts = [t.reshape(-1) for t in (codes, code0, graphed) if t is not None]
        host = torch.cat(parts).cpu().numpy() if parts else np.zeros(0, np.int64)
        groups = self.frame_dim
        frames = host[: len(predicting) * groups].reshape(len(predicting), groups)
        at = len(predicting) * groups
        self._take_code0(chosen, host[at : at + len(chosen)])
        made_slots, made_frames = [predicting], [frames]
        if len(replayed):
            replay_rows = host[at + len(chosen) :].reshape(len(replayed), groups + 1)
            made_slots.append(replayed)
            made_frames.append(replay_rows[:, :groups])
            capped = st.frames[replayed] >= st.max_frames[replayed]
            st.finish(replayed[capped], True)
            self._take_code0(replayed[~capped], replay_rows[~capped, groups])
        return self._result(rows, np.concatenate(made_slots), np.concatenate(made_frames))

    # -- the graphed frame -------------------------------------------------------

    def _steady(self, decoding: np.ndarray) -> np.ndarray:
        """Decoding slots whose whole frame (residual codes, one talker position, the
        next code 0) can run in the captured graph: a code 0 pending, no frame waiting,
        text-track item known, and room in the slot for the position after it. A
        context's last frame (its frame cap) runs there too, the position and code 0
        after it unused: run eagerly, it held every stream for a whole eager frame
        (~100 ms on an H200), once for every context that ends at its cap."""
        if self.frames.graphs is None or not len(decoding):
            return decoding[:0]
        st = self.state
        ok = st.code0_pending[decoding] & ~st.frame_pending[decoding]
        ok &= st.track_ready(decoding)
        ok &= (st.frames[decoding] + 1 < st.max_frames[decoding]) | (
            st.position[decoding] + 1 < self.cache.capacity
        )
        return decoding[ok]

    def _replay(self, steady: np.ndarray) -> tuple[np.ndarray, torch.Tensor | None]:
        """Run the steady slots' frames as graph replays; the host side of each frame is
        done here over arrays, the device's comes back with the step's copy."""
        st = self.state
        steady = self._reserve(steady, st.position[steady] + 1)
        if not len(steady):
            return steady, None
        st.frames[steady] += 1
        st.code0_pending[steady] = False
        rows = np.empty((len(steady), 4), np.int64)
        rows[:, 0] = steady
        rows[:, 1] = st.position[steady]
        rows[:, 2] = st.next_items(steady)
        rows[:, 3] = st.generated[steady] < MIN_NEW_TOKENS
        st.position[steady] += 1
        return steady, self.frames(rows)

    def _frame(self, inputs: torch.Tensor) -> torch.Tensor:
        """One whole frame for each row of ``inputs`` [B, 4] (slot, talker position,
        text-track item, EOS still barred): residual codes from the slot's last hidden
        state and code 0, the frame's talker position, the next code 0. Returns
        [B, groups + 1] (the frame's codes, then the next code 0). Reads no host value:
        this is what the graphs capture."""
        slots, positions, track, early = inputs.unbind(1)
        sub = self.sub_sampler.rows(slots, None)
        hidden, code0 = self.tables["hidden"][slots], self.tables["code0"][slots]
        codes = self._residual_codes(slots, hidden, code0, sub, True)
        embeds = self.talker.frame_embed(codes) + self._track_of(track)
        hidden = self.talker.step(embeds, self.cache, slots, positions)
        code0 = self._choose_code0(
            slots, hidden, early.bool(), self.talker_sampler.rows(slots, None)
        )
        return torch.cat((codes, code0[:, None]), dim=1)

    def _residual_codes(
        self,
        slots: torch.Tensor,
        hidden: torch.Tensor,
        code0: torch.Tensor,
        rows: Rows,
        always_draw: bool,
    ) -> torch.Tensor:
        """Each row's whole frame [B, groups]: code 0 and the predictor's residual codes."""
        groups = self.cfg.talker.num_code_groups - 1
        noise = None
        if always_draw or not rows.all_greedy:  # every group's noise in one go
            noise = self.sub_sampler.noise(slots, groups)

        def choose(k: int, logits: torch.Tensor) -> torch.Tensor:
            scores = top_p(top_k(scale(logits, rows), rows), rows)
            return draw(scores, rows, noise[:, k] if noise is not None else None)

        rest = self.talker.code_predictor.predict(hidden, self.talker.codec_embed(code0), choose)
        return torch.cat((code0[:, None], rest), dim=1)

    def _choose_code0(
        self, slots: torch.Tensor, hidden: torch.Tensor, early: torch.Tensor, rows: Rows
    ) -> torch.Tensor:
        """Code 0 of each row from its talker hidden state [B, H], remembered with the
        hidden state in the slot tables (the next frame starts from both). The
        reference's order: penalty, the control-id mask, EOS barred while too early,
        then temperature, top-k, top-p."""
        scores = penalize(self.talker.logits(hidden), rows)
        scores = scores.masked_fill(self.suppress, float("-inf"))
        eos = self.cfg.talker.codec_eos_id
        scores[:, eos] = torch.where(early, float("-inf"), scores[:, eos])
        noise = None if rows.all_greedy else self.talker_sampler.noise(slots)[:, 0]
        ids = draw(top_p(top_k(scale(scores, rows), rows), rows), rows, noise)
        self.talker_sampler.mark(slots, ids)
        self.tables["hidden"].index_copy_(0, slots, hidden)
        self.tables["code0"].index_copy_(0, slots, ids)
        return ids

    def _prompts(self, contexts: list[Qwen3Context]) -> tuple[np.ndarray, torch.Tensor] | None:
        """Run what can run of each context's prompt, all in one padded talker call;
        the contexts whose prompt is now complete, with their last hidden states [B, H]."""
        batch: list[tuple[Qwen3Context, torch.Tensor, bool]] = []
        for ctx in contexts:
            part = self._prompt_rows(ctx)
            if part is None:
                continue
            rows, complete = part
            if ctx.position + rows.shape[0] > self.cache.capacity:
                ctx.finish(hit_limit=True)
                continue
            batch.append((ctx, rows, complete))
        got = self._reserve(
            np.asarray([ctx.slot for ctx, _, _ in batch], np.int64),
            np.asarray([ctx.position + rows.shape[0] for ctx, rows, _ in batch], np.int64),
        )
        batch = [item for item in batch if item[0].slot in got]
        if not batch:
            return None
        counts = [rows.shape[0] for _, rows, _ in batch]
        if self.prefill is not None and self.prefill.replays(sum(counts)):
            hidden = self._prompt_rows_graphed(batch)
            ends = np.cumsum(counts) - 1
        else:
            hidden = self._prompt_rows_padded(batch, counts)
            ends = np.arange(len(batch)) * max(counts) + np.asarray(counts) - 1
        done: list[int] = []
        last: list[int] = []
        for row, (ctx, _, complete) in enumerate(batch):
            ctx.position += counts[row]
            if complete:
                ctx.phase = Phase.DECODE
                done.append(ctx.slot)
                last.append(int(ends[row]))
        if not done:
            return None
        return np.asarray(done, np.int64), hidden[upload(last, self.device)]

    def _prompt_rows_padded(
        self, batch: list[tuple[Qwen3Context, torch.Tensor, bool]], counts: list[int]
    ) -> torch.Tensor:
        """Prompt positions in one padded talker call: hidden states [B * T, H]."""
        embeds = batch[0][1].new_zeros(len(batch), max(counts), batch[0][1].shape[-1])
        for row, (_, rows, _) in enumerate(batch):
            embeds[row, : rows.shape[0]] = rows
        slots = [ctx.slot for ctx, _, _ in batch]
        starts = [ctx.position for ctx, _, _ in batch]
        hidden = self.talker(embeds, self.cache, slots, starts, counts)
        return hidden.reshape(-1, hidden.shape[-1])

    def _prompt_rows_graphed(
        self, batch: list[tuple[Qwen3Context, torch.Tensor, bool]]
    ) -> torch.Tensor:
        """Prompt positions as one-position rows of a captured graph (each row attends
        to its slot's positions up to its own, which this call writes first): hidden
        states [sum of counts, H]."""
        assert self.prefill is not None
        embeds = torch.cat([rows for _, rows, _ in batch])
        index = np.concatenate(
            [
                np.stack((np.full(len(rows), ctx.slot), ctx.position + np.arange(len(rows))), 1)
                for ctx, rows, _ in batch
            ]
        )
        return self.prefill(index, embeds)

    def _prompt_padding(self, size: int) -> tuple[torch.Tensor]:
        hidden = self.cfg.talker.stack.hidden_size
        return (torch.zeros(size, hidden, dtype=self.dtype, device=self.device),)

    def _prompt_positions(self, index: torch.Tensor, embeds: torch.Tensor) -> torch.Tensor:
        """Talker positions given as rows: (slot, position) [R, 2] and embeddings
        [R, H] -> hidden states [R, H]. What the prefill graphs capture."""
        return self.talker.step(embeds, self.cache, index[:, 0], index[:, 1])

    def _prompt_rows(self, ctx: Qwen3Context) -> tuple[torch.Tensor, bool] | None:
        """The prompt embeddings [n, H] a context can run now, and whether they end its
        prompt; None when it must wait for text (or has ended: nothing to say)."""
        if ctx.whole_text_streaming is not None:
            streaming = ctx.choose_mode()
            if streaming is None:
                return None
            self._set_mode(ctx, streaming)
        if not ctx.spec.streaming and not ctx.input_closed:
            return None
        if ctx.input_closed and ctx.text_seen == 0 and not ctx.spec.ref_text_ids:
            ctx.finish()  # nothing to say
            return None
        rows: list[torch.Tensor] = []
        if ctx.head is not None:
            rows.append(ctx.head)
            ctx.head = None
        if not ctx.spec.streaming:
            text = self.state.pop_all(ctx.slot)
            self.state.eos_sent[ctx.slot] = True
            rows.append(self.prompts.non_streaming_tail(ctx.spec, text))
            complete = True
        else:
            assert ctx.aligned is not None
            one = np.asarray([ctx.slot], np.int64)
            while ctx.aligned_left and ctx.track_ready:
                rows.append((ctx.aligned[ctx.aligned_used] + self._track_rows(one))[None][0])
                ctx.aligned_used += 1
            complete = ctx.aligned_left == 0
        if not rows:
            return None
        return torch.cat(rows), complete

    def _track_rows(self, slots: np.ndarray) -> torch.Tensor:
        """Each slot's next text-track row, [B, H], taken off its track in one batch."""
        items = self.state.next_items(slots)
        if (items == PAD_ITEM).all():
            return self.prompts.tts_pad.expand(len(items), -1)
        return self._track_of(upload(items, self.device))

    def _track_of(self, ids: torch.Tensor) -> torch.Tensor:
        """Text-track rows [B, H] of items [B]: token ids, ``PAD_ITEM`` or ``EOS_ITEM``."""
        text = self.prompts.text_rows(ids.clamp(min=0))
        rows = torch.where((ids == PAD_ITEM)[:, None], self.prompts.tts_pad, text)
        return torch.where((ids == EOS_ITEM)[:, None], self.prompts.tts_eos, rows)

    def _predict(self, slots: np.ndarray) -> torch.Tensor | None:
        """The whole frame of every slot holding a code 0: [B, groups]; the frame's
        embedding sum waits in ``frame_embed`` for its text-track item."""
        if not len(slots):
            return None
        st = self.state
        index = upload(slots, self.device)
        rows = self.sub_sampler.rows(index, self._settings_of(slots, _sub))
        hidden, code0 = self.tables["hidden"][index], self.tables["code0"][index]
        codes = self._residual_codes(index, hidden, code0, rows, False)
        self.tables["frame_embed"].index_copy_(0, index, self.talker.frame_embed(codes))
        st.frames[slots] += 1
        st.code0_pending[slots] = False
        capped = st.frames[slots] >= st.max_frames[slots]
        st.finish(slots[capped], True)
        st.frame_pending[slots[~capped]] = True
        return codes

    def _advance(self, slots: np.ndarray) -> tuple[np.ndarray, torch.Tensor | None]:
        """One talker position for each slot: the slots that ran, their final hidden
        states [B', H]."""
        st = self.state
        live = self._reserve(slots, st.position[slots] + 1)
        if not len(live):
            return live, None
        index = upload(live, self.device)
        embeds = self.tables["frame_embed"][index] + self._track_rows(live)
        positions = st.position[live]
        hidden = self.talker.step(
            embeds, self.cache, index, upload(positions, self.device), int(positions.max()) + 1
        )
        st.position[live] += 1
        st.frame_pending[live] = False
        return live, hidden

    def _settings_of(
        self, slots: np.ndarray, which: Callable[[SamplingParams], Settings]
    ) -> list[Settings]:
        contexts = self.state.contexts
        return [which(contexts[s].sampling) for s in slots.tolist()]  # type: ignore[union-attr]

    def _sample_code0(self, slots: np.ndarray, hidden: torch.Tensor) -> torch.Tensor:
        """Code 0 for each slot from its last talker hidden state [B, H], on the device."""
        index = upload(slots, self.device)
        early = upload(self.state.generated[slots] < MIN_NEW_TOKENS, self.device, torch.bool)
        rows = self.talker_sampler.rows(index, self._settings_of(slots, _talker))
        return self._choose_code0(index, hidden, early, rows)

    def _take_code0(self, slots: np.ndarray, ids: np.ndarray) -> None:
        st = self.state
        st.generated[slots] += 1
        eos = ids == self.cfg.talker.codec_eos_id
        st.finish(slots[eos])
        st.code0_pending[slots[~eos]] = True

    def _result(self, rows: np.ndarray, made: np.ndarray, frames: np.ndarray) -> StepResult:
        """The step's result over arrays: ``made`` slots made one frame each, ``frames``."""
        st = self.state
        at = np.full(len(self.active), -1, np.int64)
        at[made] = np.arange(len(made))
        where = at[rows]
        counts = (where >= 0).astype(np.int64)
        live = self.active[rows]
        done = st.phase[rows] == Phase.DONE
        finished = ~live | done
        decoding = st.phase[rows] == Phase.DECODE
        work = st.code0_pending[rows] | (st.frame_pending[rows] & st.track_ready(rows))
        prompt = live & (st.phase[rows] == Phase.PROMPT)
        for row in np.flatnonzero(prompt).tolist():
            ctx = st.contexts[int(rows[row])]
            work[row] = ctx is not None and ctx.has_work
        waiting = live & ~finished & ~np.where(decoding | prompt, work, True)
        timed: list[tuple[int, int, int, int]] = []
        for row in np.flatnonzero(live).tolist():
            ctx = st.contexts[int(rows[row])]
            if ctx is not None and ctx.entered:
                timed.extend(self._word_frames(row, ctx))
        stacked = (
            frames[where[where >= 0]] if len(made) else np.zeros((0, self.frame_dim), np.int64)
        )
        return StepResult(
            counts,
            stacked,
            finished.copy(),
            finished,
            finished & live & st.hit_limit[rows],
            waiting,
            WordFrames.of(timed),
        )

    def _word_frames(self, row: int, ctx: Qwen3Context) -> list[tuple[int, int, int, int]]:
        """Estimated frames of the words whose first token entered the talker: a word
        starts ``word_lag_frames`` after that, and not before the previous word ends,
        and lasts its tokens at the assumed speaking rate (docs/engine.md)."""
        lag, rate = self.settings.word_lag_frames, self.settings.word_frames_per_token
        out = []
        for word, tokens, frame in ctx.entered:
            start = max(frame + lag, ctx.word_cursor)
            end = start + max(1, round(tokens * rate))
            ctx.word_cursor = end
            out.append((row, word, start, end))
        ctx.entered.clear()
        return out


def _talker(p: SamplingParams) -> Settings:
    """Code 0's settings."""
    return Settings(p.temperature, p.top_k, p.top_p, p.repetition_penalty)


def _sub(p: SamplingParams) -> Settings:
    """The code predictor's settings (no repetition penalty)."""
    return Settings(p.subtalker_temperature, p.subtalker_top_k, p.subtalker_top_p)
