"""VoXtream2's network over slots: prompts prefilled and frames stepped together, batched.

Each context holds two rows of the temporal transformer's paged KV cache (the
conditional one, and the unconditional one classifier-free guidance subtracts), cache
slots ``2s`` and ``2s + 1``. What a slot carries between steps lives on the device in
tables indexed by slot (``models.kit.tables``): its phone features (both rows, as the
phone transformer last computed them, punctuation taken out), its last frame's codes,
its projected speaker embedding, its guidance strength, the inputs its cache was built
from (to rebuild it past the window), sampling settings and random keys.

:meth:`VoxSlots.start` prefills new contexts' prompts and makes each one's first frame;
:meth:`VoxSlots.advance` steps running contexts at the phones their pointers stand on.
A step returns ``[move, code 0, ..., code 15]`` per context on the device (one copy for
the whole step). :meth:`VoxSlots.rebuild` restarts a context's cache from its prompt and
most recent frames once it reaches ``audio_window_size`` positions (the reference's
sink attention: until then its mask is plain causal).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from models.kit.graphed import GraphedRows
from models.kit.sampler import KEY_COLUMN, SlotSampler
from models.kit.tables import Column, SlotTables
from models.paged_kv import PagedKVCache
from models.upload import upload
from models.voxtream.model import VoxModel, compacted
from models.voxtream.sampling import VoxSampling, guided, sample

BLOCK = 32
"""Positions per KV block."""
_CODE_KEY = 0x51ED270B
SPK_PROJ_WEIGHT = 1.5
"""How much of the projected speaker embedding the depth transformer's input gets
(voxtream2's ``spk_proj_weight``)."""


@dataclass(frozen=True)
class Start:
    """A context's first step."""

    slot: int
    codes: np.ndarray
    """The prompt's codes [P, num_codebooks], delayed as the reference delays them
    (codebook 0 one frame, the others two; pad code before)."""
    masked: np.ndarray
    """The unconditional row's prompt codes [P, num_codebooks]."""
    speaker: np.ndarray
    """float32 [spk_embedding_dim]: the normalised speaker embedding."""
    sampling: VoxSampling
    gamma: float
    """Guidance of the first code (``cfg_gamma``, or the speaking rate's)."""
    key: int
    guidance: np.ndarray
    """float32 [num_phone_states]: the speaking rate's bias on the first move."""


class VoxSlots:
    def __init__(
        self,
        model: VoxModel,
        slots: int,
        max_phones: int,
        *,
        blocks: int = 0,
        cuda_graphs: bool = True,
        speaker_weight: float = SPK_PROJ_WEIGHT,
    ) -> None:
        cfg = model.cfg
        self.model = model
        self.cfg = cfg
        self.speaker_weight = speaker_weight
        param = model.audio_embeddings.weight
        self.device, self.dtype = param.device, param.dtype
        self.window = cfg.audio_window_size
        self.max_phones = max_phones
        t = cfg.temporal
        self.cache = PagedKVCache(
            t.num_layers,
            2 * (slots + 1),
            self.window,
            blocks or 2 * slots * -(-self.window // BLOCK),
            BLOCK,
            t.num_kv_heads,
            t.head_dim,
            self.dtype,
            self.device,
        )
        dim, k = cfg.embedding_dim, cfg.num_codebooks
        self.tables = SlotTables(
            slots,
            self.device,
            {
                **KEY_COLUMN,
                **SlotSampler.columns("move", cfg.num_phone_states, penalty=False),
                **SlotSampler.columns("code", cfg.audio_vocab_size, penalty=False),
                "codes": Column(torch.long, (k,)),
                "speaker": Column(self.dtype, (2, dim)),
                "gamma": Column(torch.float32, ()),
                "ac_gamma": Column(torch.float32, ()),
            },
        )
        self.phones = torch.zeros(
            slots + 1, 2, max_phones, dim, dtype=self.dtype, device=self.device
        )
        """Each slot's phone features [2, max_phones, D] (rows: conditional, unconditional)."""
        self.inputs = torch.zeros(
            slots + 1, 2, self.window, dim, dtype=self.dtype, device=self.device
        )
        """The inputs each slot's cache was built from, by position."""
        self.move_sampler = SlotSampler(self.tables, "move", cfg.num_phone_states, penalty=False)
        self.code_sampler = SlotSampler(
            self.tables, "code", cfg.audio_vocab_size, penalty=False, key_xor=_CODE_KEY
        )
        self.scratch = slots
        graphs = cuda_graphs and self.device.type == "cuda"
        moves = cfg.num_phone_states
        self.steps = GraphedRows(
            self._step,
            (slots, 0, 0, 0),
            self.device,
            slots,
            graphs=graphs,
            split=False,
            extra_padding=lambda size: (
                torch.zeros(size, moves, dtype=torch.float32, device=self.device),
            ),
        )
        # A context's first frame, from its prompt's last hidden states: the same sampling
        # and depth transformer as a step (~1,000 small kernels), replayed too.
        dim = cfg.embedding_dim
        self.firsts = GraphedRows(
            self._first,
            (slots,),
            self.device,
            slots,
            graphs=graphs,
            extra_padding=lambda size: (
                torch.zeros(size, 2, dim, dtype=self.dtype, device=self.device),
                torch.zeros(size, moves, dtype=torch.float32, device=self.device),
            ),
        )
        with torch.no_grad():
            self.steps.capture()
            self.firsts.capture()

    @property
    def frame_width(self) -> int:
        """Ints per row a step returns: the move, then the frame's codes."""
        return 1 + self.cfg.num_codebooks

    def _cache_slots(self, slots: torch.Tensor) -> torch.Tensor:
        return torch.stack((2 * slots, 2 * slots + 1), dim=1).reshape(-1)

    def release(self, slot: int) -> None:
        """The slot's context is gone: its KV blocks go back to the pool."""
        self.cache.release(2 * slot)
        self.cache.release(2 * slot + 1)

    # -- phone features ---------------------------------------------------------------

    @torch.no_grad()
    def set_phones(
        self,
        slots: list[int],
        tokens: list[np.ndarray],
        prompt_lengths: list[int],
        punctuation: list[np.ndarray],
        unk: int,
    ) -> None:
        """Run the phone transformer over each slot's whole token sequence (conditional
        row: ``tokens``; unconditional: the prompt's, then ``unk`` for every text token)
        and keep its features with punctuation taken out."""
        lengths = [len(t) for t in tokens]
        longest = max(lengths)
        rows = np.zeros((2 * len(slots), longest), np.int64)
        look = []
        for i, (ids, prompt) in enumerate(zip(tokens, prompt_lengths, strict=True)):
            rows[2 * i, : len(ids)] = ids
            rows[2 * i + 1, :prompt] = ids[:prompt]
            rows[2 * i + 1, prompt : len(ids)] = unk
            look += [self.model.look_ahead(len(ids) - prompt)] * 2
        features = self.model.phone_features(
            upload(rows, self.device), [n for n in lengths for _ in (0, 1)], look
        )
        for i, slot in enumerate(slots):
            order = upload(compacted(lengths[i], punctuation[i]), self.device)
            self.phones[slot, :, : lengths[i]] = features[2 * i : 2 * i + 2, order]

    # -- steps --------------------------------------------------------------------

    @torch.no_grad()
    def start(self, starts: list[Start]) -> torch.Tensor:
        """First frame of each context (its prompt prefilled): int64 [n, frame_width]."""
        if not starts:
            return torch.zeros((0, self.frame_width), dtype=torch.long, device=self.device)
        slots = [s.slot for s in starts]
        ids = upload(slots, self.device)
        self.tables.store(slots, {"key": [s.key for s in starts]})
        self.tables.reset(ids, "move.draws", "code.draws")
        self.move_sampler.set(ids, [s.sampling.move() for s in starts])
        self.code_sampler.set(ids, [s.sampling.code() for s in starts])
        self.tables.store(
            slots,
            {
                "gamma": [s.gamma for s in starts],
                "ac_gamma": [s.sampling.cfg_ac_gamma for s in starts],
            },
        )
        speaker = torch.as_tensor(np.stack([s.speaker for s in starts]), device=self.device)
        projected = self.model.spk_emb_proj(speaker.to(self.dtype))
        both = torch.stack((projected, torch.zeros_like(projected)), dim=1)
        self.tables["speaker"][ids] = both
        counts = [len(s.codes) for s in starts]
        longest = max(counts)
        embeds = torch.zeros(
            2 * len(starts), longest, self.cfg.embedding_dim, dtype=self.dtype, device=self.device
        )
        for i, s in enumerate(starts):
            n = counts[i]
            at = torch.arange(n, device=self.device)
            phones = self.phones[s.slot][:, at][:, :, None].expand(2, n, 2, -1)
            codes = upload(np.stack((s.codes, s.masked)), self.device)
            x = self.model.frame_input(phones.reshape(2 * n, 2, -1), codes.reshape(2 * n, -1))
            x = x.view(2, n, -1)
            self.inputs[s.slot, :, :n] = x
            embeds[2 * i : 2 * i + 2, :n] = x
        cache_slots = [c for slot in slots for c in (2 * slot, 2 * slot + 1)]
        self._reserve(cache_slots, np.repeat(counts, 2))
        hidden = self.model.temp_former.prefill(
            embeds, self.cache, cache_slots, [0] * len(cache_slots), list(np.repeat(counts, 2))
        )
        last = hidden[
            upload(range(2 * len(starts)), self.device),
            upload(np.repeat(counts, 2) - 1, self.device),
        ]
        guidance = upload(np.stack([s.guidance for s in starts]), self.device, torch.float32)
        pairs = last.view(len(starts), 2, -1)
        return self.firsts(np.asarray(slots, np.int64)[:, None], pairs, guidance)

    @torch.no_grad()
    def advance(
        self, slots: np.ndarray, positions: np.ndarray, pairs: np.ndarray, guidance: np.ndarray
    ) -> torch.Tensor:
        """Each slot's next frame [n, frame_width]: at cache position ``positions`` (below
        the window), its pointer on phones ``pairs`` [n, 2]."""
        cache_slots = np.stack((2 * slots, 2 * slots + 1), axis=1).reshape(-1)
        self._reserve(cache_slots.tolist(), np.repeat(positions + 1, 2))
        rows = np.concatenate((slots[:, None], positions[:, None], pairs), axis=1)
        bias = upload(np.asarray(guidance, np.float32), self.device, torch.float32)
        return self.steps(rows, bias, max_length=int(positions.max()) + 1)

    def _step(
        self, rows: torch.Tensor, guidance: torch.Tensor, max_length: int | None = None
    ) -> torch.Tensor:
        """(slot, position, phone, phone) rows [B, 4] -> each row's next frame. What the
        graphs capture: device inputs only, the slot tables updated in place."""
        slots, positions = rows[:, 0], rows[:, 1]
        b = rows.shape[0]
        phones = self.phones[slots[:, None], :, rows[:, 2:4]]  # [B, 2 phones, 2 rows, D]
        phones = phones.transpose(1, 2).reshape(2 * b, 2, -1)
        codes = self.tables["codes"][slots].repeat_interleave(2, dim=0)
        x = self.model.frame_input(phones, codes)
        both = x.view(b, 2, -1)
        self.inputs[slots, :, positions] = both
        hidden = self.model.temp_former.step(
            x,
            self.cache,
            self._cache_slots(slots),
            positions.repeat_interleave(2),
            max_length,
        )
        return self._frame(slots, hidden, guidance)

    def _first(
        self, rows: torch.Tensor, pairs: torch.Tensor, guidance: torch.Tensor
    ) -> torch.Tensor:
        """(slot,) rows [B, 1] and their prompts' last hidden states [B, 2, D] -> each
        context's first frame (what the graphs capture: device inputs only)."""
        return self._frame(rows[:, 0], pairs.reshape(-1, pairs.shape[-1]), guidance)

    def _frame(
        self, slots: torch.Tensor, hidden: torch.Tensor, guidance: torch.Tensor
    ) -> torch.Tensor:
        cfg = self.cfg
        moves, vocab = cfg.num_phone_states, cfg.audio_vocab_size
        scores = self.model.sem_head(hidden).float()
        b = scores.shape[0] // 2
        cond = scores[0::2].view(b, moves, vocab)
        move_scores = torch.logsumexp(cond, dim=-1) + guidance
        move = sample(move_scores, self.move_sampler, slots)
        mixed = guided(scores, self.tables["gamma"][slots]).view(b, moves, vocab)
        code0 = sample(mixed[torch.arange(b, device=slots.device), move], self.code_sampler, slots)
        speaker = self.tables["speaker"][slots].reshape(2 * b, -1)
        temperature = self.tables["code.temperature"][slots]
        ac = self.tables["ac_gamma"][slots]

        def choose(pair_scores: torch.Tensor) -> torch.Tensor:
            cond, uncond = pair_scores[0::2].float(), pair_scores[1::2].float()
            mixed = cond * ac[:, None] + (1 - ac[:, None]) * uncond
            return torch.softmax(mixed / temperature[:, None], dim=-1).argmax(-1)

        rest = self.model.depth(hidden + speaker * self.speaker_weight, code0, choose)
        codes = torch.cat((code0[:, None], rest), dim=1)
        self.tables["codes"][slots] = codes
        return torch.cat((move[:, None], codes), dim=1)

    # -- past the window ----------------------------------------------------------

    @torch.no_grad()
    def rebuild(self, slot: int, prompt: int, tail: int) -> int:
        """Restart the slot's cache (at ``window`` positions) from its prompt's ``prompt``
        inputs and the ``tail`` most recent frames'; the next position."""
        keep = torch.cat(
            (self.inputs[slot, :, :prompt], self.inputs[slot, :, self.window - tail :]), dim=1
        )
        n = prompt + tail
        self.inputs[slot, :, :n] = keep
        self.release(slot)
        pair = [2 * slot, 2 * slot + 1]
        self._reserve(pair, np.asarray([n, n]))
        self.model.temp_former.prefill(keep, self.cache, pair, [0, 0], [n, n])
        return n

    def _reserve(self, slots: list[int], ends: np.ndarray) -> None:
        failed = self.cache.reserve(list(zip(slots, np.asarray(ends).tolist(), strict=True)))
        if failed:  # blocks cover every slot's window, and callers stay within it
            raise RuntimeError(f"VoXtream KV blocks unavailable for cache slots {failed}")
