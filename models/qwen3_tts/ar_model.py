"""Qwen3-TTS behind the ARModel interface: talker + code predictor, batched over slots.

One ``step`` advances each context by at most one frame in three batched
phases: prompt positions (per context, possibly waiting for streamed text),
the code predictor for every context holding a fresh code 0 (which emits the
frame), then one talker position for every context whose next text-track
item is known (which samples the next code 0).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from models.base import (
    ARModel,
    Capabilities,
    ClonedVoice,
    ContextState,
    ModelInputError,
    StepOutput,
    SynthParams,
    TextFrontend,
)
from models.qwen3_tts.config import Qwen3TTSConfig
from models.qwen3_tts.context import Phase, Qwen3Context
from models.qwen3_tts.kv_cache import SlotKVCache
from models.qwen3_tts.params import settings_from
from models.qwen3_tts.prompt import PromptBuilder, PromptSpec
from models.qwen3_tts.sampling import (
    SamplingParams,
    apply_repetition_penalty,
    talker_mask,
    warp_and_sample,
)
from models.qwen3_tts.talker import Talker
from models.qwen3_tts.text_tokenizer import TextTokenizer
from models.qwen3_tts.voice_clone import VoicePrompt
from models.qwen3_tts.voices import CLONE_VOICE, VoiceResolver

MIN_NEW_TOKENS = 2


def _stored_mismatch(why: str) -> ModelInputError:
    return ModelInputError(
        f"voice: the stored voice does not fit this model ({why}); upload it again",
        param="voice",
        code="invalid_field",
    )


class Qwen3Frontend(TextFrontend):
    def __init__(self, tokenizer: TextTokenizer) -> None:
        self.tokenizer = tokenizer

    def encode(self, text: str, params: SynthParams) -> list[list[int]]:
        ids = self.tokenizer.encode(text) if text else []
        return [ids] if ids else []


@dataclass(frozen=True)
class ARSettings:
    max_contexts: int
    kv_capacity: int
    max_frames: int
    streaming_text: bool
    sampling: SamplingParams


class Qwen3AR(ARModel):
    def __init__(
        self,
        cfg: Qwen3TTSConfig,
        talker: Talker,
        tokenizer: TextTokenizer,
        voices: VoiceResolver,
        capabilities: Capabilities,
        settings: ARSettings,
    ) -> None:
        self.cfg = cfg
        self.talker = talker
        self.tokenizer = tokenizer
        self.voices = voices
        self.capabilities = capabilities
        self.settings = settings
        self.frontend = Qwen3Frontend(tokenizer)
        param = talker.codec_head.weight
        self.device, self.dtype = param.device, param.dtype
        stack = cfg.talker.stack
        self.cache = SlotKVCache(
            stack.num_layers,
            settings.max_contexts,
            settings.kv_capacity,
            stack.num_kv_heads,
            stack.head_dim,
            self.dtype,
            self.device,
        )
        self.free = list(range(settings.max_contexts - 1, -1, -1))
        role = tokenizer.encode(f"<|im_start|>assistant\n")  # noqa: F541 (the template)
        if len(role) != 3 or role[0] != cfg.im_start_id:
            raise ValueError(
                "the text tokenizer must encode '<|im_start|>assistant\\n' as 3 tokens "
                f"starting with im_start_token_id {cfg.im_start_id}, got {role}"
            )
        self.prompts = PromptBuilder(talker, cfg, role)
        # Sampling runs on the host: per-context generators are CPU generators.
        self.suppress = talker_mask(
            cfg.talker.vocab_size, cfg.talker.codec_eos_id, torch.device("cpu")
        )

    @property
    def max_contexts(self) -> int:
        return self.settings.max_contexts

    def create_voice_prompt(
        self,
        ref_audio: object,
        sample_rate: int | None = None,
        ref_text: str | None = None,
        x_vector_only: bool = False,
    ) -> VoicePrompt:
        """Base model: the reusable prompt of a cloned voice (pass it as ``extra["voice_prompt"]``)."""
        return self.voices.create_prompt(ref_audio, sample_rate, ref_text, x_vector_only)

    def clone_voice(
        self, ref_audio: bytes, ref_text: str | None = None, x_vector_only: bool = False
    ) -> ClonedVoice:
        """Base model: the speaker x-vector (and, unless ``x_vector_only``, the
        reference's codes and text) as arrays the server can store."""
        prompt = self.create_voice_prompt(ref_audio, None, ref_text, x_vector_only)
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

    def validate(self, params: SynthParams) -> None:
        settings_from(
            params.extra,
            self.settings.sampling,
            self.settings.streaming_text,
            self.settings.max_frames,
        )
        self.voices.check(params)

    def open(self, params: SynthParams) -> Qwen3Context:
        settings = settings_from(
            params.extra,
            self.settings.sampling,
            self.settings.streaming_text,
            self.settings.max_frames,
        )
        voice = self.voices.resolve(params)
        spec = PromptSpec(
            instruct_ids=voice.instruct_ids,
            language_id=voice.language_id,
            speaker_id=voice.speaker_id,
            speaker_embedding=voice.speaker_embedding,
            ref_codes=voice.ref_codes,
            ref_text_ids=voice.ref_text_ids,
            streaming=settings.streaming,
        )
        if not self.free:
            raise ModelInputError("no free context slot", code="overloaded")
        head = self.prompts.head(spec)
        aligned = self.prompts.aligned(spec) if spec.streaming else None
        prefix = voice.ref_codes.cpu().numpy() if voice.ref_codes is not None else None
        state = Qwen3Context(
            self.free.pop(), spec, settings.sampling, settings.max_frames, head, aligned, prefix
        )
        if spec.streaming and spec.ref_text_ids:
            state.text.extend(spec.ref_text_ids)
        return state

    def close(self, state: ContextState) -> None:
        assert isinstance(state, Qwen3Context)
        if state.slot >= 0:
            self.free.append(state.slot)
            state.slot = -1
        state.finish(state.hit_limit)

    # -- stepping --------------------------------------------------------------

    @torch.no_grad()
    def step(self, states: list[ContextState]) -> list[StepOutput]:
        contexts = [s for s in states if isinstance(s, Qwen3Context)]
        assert len(contexts) == len(states)
        frames: dict[int, np.ndarray] = {}
        for ctx in contexts:
            if ctx.phase is Phase.PROMPT:
                self._prompt(ctx)
        self._predict([c for c in contexts if c.pending_code0 is not None], frames)
        self._advance([c for c in contexts if c.pending_frame is not None and c.track_ready])
        empty = np.zeros((0, self.cfg.talker.num_code_groups), dtype=np.int64)
        outputs = []
        for ctx in contexts:
            done = ctx.phase is Phase.DONE
            outputs.append(
                StepOutput(
                    frames=frames.get(id(ctx), empty),
                    unit_end=done,
                    finished=done,
                    hit_limit=done and ctx.hit_limit,
                )
            )
        return outputs

    def _track_row(self, ctx: Qwen3Context) -> torch.Tensor:
        item = ctx.next_track()
        if item == "eos":
            return self.prompts.tts_eos
        if item == "pad":
            return self.prompts.tts_pad
        return self.prompts.text_rows([int(item)])[0]

    def _prompt(self, ctx: Qwen3Context) -> None:
        if not ctx.spec.streaming and not ctx.input_closed:
            return
        if ctx.input_closed and ctx.text_seen == 0 and not ctx.spec.ref_text_ids:
            ctx.finish()  # nothing to say
            return
        rows: list[torch.Tensor] = []
        if ctx.head is not None:
            rows.append(ctx.head)
            ctx.head = None
        if not ctx.spec.streaming:
            text = list(ctx.text)
            ctx.text.clear()
            ctx.eos_sent = True
            rows.append(self.prompts.non_streaming_tail(ctx.spec, text))
            complete = True
        else:
            assert ctx.aligned is not None
            while ctx.aligned_left and ctx.track_ready:
                rows.append((ctx.aligned[ctx.aligned_used] + self._track_row(ctx))[None])
                ctx.aligned_used += 1
            complete = ctx.aligned_left == 0
        if not rows:
            return
        embeds = torch.cat(rows)[None]
        if ctx.position + embeds.shape[1] > self.cache.capacity:
            ctx.finish(hit_limit=True)
            return
        slot = torch.tensor([ctx.slot], device=self.device)
        start = torch.tensor([ctx.position], device=self.device)
        hidden = self.talker(embeds, self.cache, slot, start)[0]
        ctx.position += embeds.shape[1]
        if complete:
            ctx.phase = Phase.DECODE
            self._sample([ctx], hidden[-1:])

    def _predict(self, contexts: list[Qwen3Context], frames: dict[int, np.ndarray]) -> None:
        if not contexts:
            return
        code0 = torch.tensor([c.pending_code0 for c in contexts], device=self.device)
        hidden = torch.stack([c.last_hidden for c in contexts])  # type: ignore[misc]
        rest = self.talker.code_predictor.predict(
            hidden, self.talker.codec_embed(code0), self._chooser(contexts)
        )
        codes = torch.cat((code0[:, None], rest), dim=1)
        embeds = self.talker.frame_embed(codes)
        host = codes.cpu().numpy().astype(np.int64)
        for row, ctx in enumerate(contexts):
            frames[id(ctx)] = host[row : row + 1]
            ctx.frames += 1
            ctx.pending_code0 = None
            if ctx.frames >= ctx.max_frames:
                ctx.finish(hit_limit=True)
                continue
            ctx.pending_frame = embeds[row]

    def _advance(self, contexts: list[Qwen3Context]) -> None:
        live = []
        for ctx in contexts:
            if ctx.position + 1 > self.cache.capacity:
                ctx.finish(hit_limit=True)
            else:
                live.append(ctx)
        if not live:
            return
        embeds = torch.stack([c.pending_frame + self._track_row(c) for c in live])[:, None]  # type: ignore[operator]
        slots = torch.tensor([c.slot for c in live], device=self.device)
        starts = torch.tensor([c.position for c in live], device=self.device)
        hidden = self.talker(embeds, self.cache, slots, starts)[:, 0]
        for ctx in live:
            ctx.position += 1
            ctx.pending_frame = None
        self._sample(live, hidden)

    def _sample(self, contexts: list[Qwen3Context], hidden: torch.Tensor) -> None:
        """Pick code 0 for each context from its last talker hidden state [B, H]."""
        logits = self.talker.logits(hidden).cpu()
        eos = self.cfg.talker.codec_eos_id
        for row, ctx in enumerate(contexts):
            p = ctx.sampling
            scores = apply_repetition_penalty(
                logits[row],
                torch.tensor(ctx.history, dtype=torch.long),
                p.repetition_penalty,
            )
            scores = scores.masked_fill(self.suppress, float("-inf"))
            if len(ctx.history) < MIN_NEW_TOKENS:
                scores[eos] = float("-inf")
            code = warp_and_sample(scores, p.temperature, p.top_k, p.top_p, ctx.generator)
            ctx.history.append(code)
            ctx.last_hidden = hidden[row]
            if code == eos:
                ctx.finish()
            else:
                ctx.pending_code0 = code

    def _chooser(self, contexts: list[Qwen3Context]) -> Callable[[int, torch.Tensor], torch.Tensor]:
        greedy = all(c.sampling.subtalker_temperature <= 0 for c in contexts)

        def choose(k: int, logits: torch.Tensor) -> torch.Tensor:
            if greedy:
                return logits.argmax(-1)
            host = logits.cpu()
            ids = [
                warp_and_sample(
                    host[row],
                    c.sampling.subtalker_temperature,
                    c.sampling.subtalker_top_k,
                    c.sampling.subtalker_top_p,
                    c.generator,
                )
                for row, c in enumerate(contexts)
            ]
            return torch.tensor(ids, device=logits.device)

        return choose
