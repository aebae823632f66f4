"""VoxCPM2's network over slots: prompts prefilled and patches stepped together, batched.

A slot holds one context's turn: the base language model's keys and values and the
residual model's (two paged caches, one position each per prompt token or patch), and
in tables indexed by slot (``models.kit.tables``) what a step reads: the two models'
last states, the previous patch (the DiT's prefix), the guidance strength, the random
key and draw counter.

:meth:`VoxCPMSlots.start` prefills new turns' prompts (the local encoder at audio
positions, the base model, the quantizer at audio positions, the fusion, the residual
model) and leaves their states in the tables; :meth:`VoxCPMSlots.advance` steps slots
once. A step is the reference's, for the whole batch at once: the DiT's condition from
the two states, initial noise from the slot's counter-based draws, the Euler solve with
guidance (a fixed number of estimator calls, so it replays from CUDA graphs per batch
bucket), the stop head on the base state that conditioned the patch, then the patch
encoded and fed to both models. It returns ``[stop, patch (patch_size x feat_dim)]``
per row, float32 on the device (one copy for the whole step).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from models.attention import without_cudnn_attention
from models.kit.graphed import GraphedRows
from models.kit.sampler import KEY_COLUMN
from models.kit.tables import Column, SlotTables
from models.paged_kv import PagedKVCache
from models.random_draws import gaussian, vocab_hash
from models.upload import upload
from models.voxcpm.locdit import solve
from models.voxcpm.model import VoxCPMModel
from models.voxcpm.prompt import Prefill

BLOCK = 32
"""Positions per KV block."""


@dataclass(frozen=True)
class Turn:
    slot: int
    prefill: Prefill
    cfg: float
    """Guidance strength (the reference's ``cfg_value``)."""
    fresh: bool
    """The context's first turn: its random draws restart."""
    key: int


class VoxCPMSlots:
    def __init__(
        self,
        model: VoxCPMModel,
        slots: int,
        capacity: int,
        *,
        blocks: int = 0,
        steps: int = 10,
        cuda_graphs: bool = True,
    ) -> None:
        """``capacity``: positions one turn may hold (prompt and patches); ``blocks``:
        KV blocks of each cache (default: every slot at its capacity); ``steps``: the
        flow-matching solve's steps (the reference's ``inference_timesteps``)."""
        self.model = model
        self.steps = steps
        param = model.stop_head.weight
        self.device, self.dtype = param.device, param.dtype
        self.patch, self.feat_dim = model.patch_size, model.feat_dim
        blocks = blocks or slots * -(-capacity // BLOCK)
        self.caches = [
            PagedKVCache(
                c.num_layers,
                slots,
                capacity,
                blocks,
                BLOCK,
                c.num_kv_heads,
                c.head_dim,
                self.dtype,
                self.device,
            )
            for c in (model.base_lm.cfg, model.residual_lm.cfg)
        ]
        self.position = np.zeros(slots + 1, np.int64)
        """The next position each slot's turn writes (its length)."""
        width = model.base_lm.cfg.hidden_size
        self.tables = SlotTables(
            slots,
            self.device,
            {
                **KEY_COLUMN,
                "draws": Column(torch.long, ()),
                "lm": Column(self.dtype, (width,)),
                "residual": Column(self.dtype, (width,)),
                "prefix": Column(self.dtype, (self.patch, self.feat_dim)),
                "cfg": Column(self.dtype, (), 2.0),
            },
        )
        self._pair_hash = vocab_hash(2 * self.patch * self.feat_dim, self.device)
        graphs = cuda_graphs and self.device.type == "cuda"
        self.stepper = GraphedRows(
            self._step, (slots, 0), self.device, slots, graphs=graphs, split=False
        )
        with torch.no_grad(), without_cudnn_attention():
            self.stepper.capture()

    @property
    def frame_width(self) -> int:
        """Floats per row a step returns: the stop flag, then the patch."""
        return 1 + self.patch * self.feat_dim

    @property
    def usage(self) -> tuple[int, int]:
        return self.caches[0].usage

    def release(self, slot: int) -> None:
        """The slot's turn is over: its KV blocks go back to the pools."""
        for cache in self.caches:
            cache.release(slot)
        self.position[slot] = 0

    def noise(self, key: int, draws: int) -> torch.Tensor:
        """The initial noise of a context's first ``draws`` patches [draws, feat_dim, patch]
        (channel-major, as the reference draws it), as its steps draw them."""
        keys = torch.full((draws,), key, dtype=torch.long, device=self.device)
        counter = torch.arange(draws, device=self.device)
        flat = gaussian(keys, counter, self._pair_hash)
        return flat.view(draws, self.feat_dim, self.patch)

    # -- turns ----------------------------------------------------------------------

    @torch.no_grad()
    def start(self, turns: list[Turn]) -> None:
        """Prefill each turn's prompt from position 0 (what its slot held is released)
        and leave the states its first step reads in the tables."""
        if not turns:
            return
        # Off cuDNN's attention: it plans on the host for every new prompt length
        # (H200: ~90 ms more to a turn's first audio for a text of a length not seen).
        with without_cudnn_attention():
            self._prefill(turns)

    def _prefill(self, turns: list[Turn]) -> None:
        model, device = self.model, self.device
        slots = [t.slot for t in turns]
        for slot in slots:
            self.release(slot)
        counts = [len(t.prefill.tokens) for t in turns]
        longest = max(counts)
        width = model.base_lm.cfg.hidden_size
        embeds = torch.zeros(len(turns), longest, width, dtype=self.dtype, device=device)
        audio_embeds = torch.zeros_like(embeds)
        audio = torch.zeros(len(turns), longest, 1, dtype=self.dtype, device=device)
        last = torch.zeros(len(turns), self.patch, self.feat_dim, dtype=self.dtype, device=device)
        for i, turn in enumerate(turns):
            p, n = turn.prefill, counts[i]
            tokens = upload(p.tokens, device)
            text_mask = upload(p.text_mask, device, self.dtype)[:, None]
            audio_mask = upload(p.audio_mask, device, self.dtype)[:, None]
            feats = upload(p.feats, device, self.dtype)
            x = text_mask * model.base_lm.embed_tokens(tokens)
            at = np.flatnonzero(p.audio_mask)
            if len(at):
                where = upload(at, device)
                encoded = model.enc_to_lm_proj(model.feat_encoder(feats[where][None]))[0]
                audio_embeds[i, where] = encoded
                x[where] += encoded
            embeds[i, :n] = x
            audio[i, :n] = audio_mask
            last[i] = feats[-1]
        self._reserve(slots, np.asarray(counts))
        zeros = [0] * len(turns)
        out = model.base_lm.prefill(embeds, self.caches[0], slots, zeros, counts)
        out = torch.where(audio > 0, model.fsq_layer(out), out)
        fused = model.fusion_concat_proj(torch.cat((out, audio * audio_embeds), dim=-1))
        residual = model.residual_lm.prefill(fused, self.caches[1], slots, zeros, counts)
        rows = upload(range(len(turns)), device)
        ends = upload([c - 1 for c in counts], device)
        ids = upload(slots, device)
        self.tables["lm"][ids] = out[rows, ends]
        self.tables["residual"][ids] = residual[rows, ends]
        self.tables["prefix"][ids] = last
        self.tables.store(slots, {"cfg": [t.cfg for t in turns]})
        fresh = [t for t in turns if t.fresh]
        if fresh:  # a context's draws go on across its turns
            new = [t.slot for t in fresh]
            self.tables.store(new, {"key": [t.key for t in fresh]})
            self.tables.reset(new, "draws")
        self.position[slots] = counts

    @torch.no_grad()
    def advance(self, slots: np.ndarray) -> torch.Tensor:
        """Each slot's next patch and stop flag [len(slots), frame_width] (device)."""
        positions = self.position[slots]
        self._reserve(slots.tolist(), positions + 1)
        rows = np.stack((slots, positions), axis=1)
        self.position[slots] += 1
        with without_cudnn_attention():
            return self.stepper(rows, max_length=int(positions.max()) + 1)

    def _step(self, rows: torch.Tensor, max_length: int | None = None) -> torch.Tensor:
        """(slot, position) rows [B, 2] -> each row's ``[stop, patch]``. What the graphs
        capture: device inputs only, the slot tables updated in place."""
        model, t = self.model, self.tables
        slots, positions = rows[:, 0], rows[:, 1]
        b = rows.shape[0]
        lm, residual = t["lm"][slots], t["residual"][slots]
        mu = torch.cat((model.lm_to_dit_proj(lm), model.res_to_dit_proj(residual)), dim=-1)
        draws = t["draws"]
        noise = gaussian(t["key"][slots], draws[slots], self._pair_hash)
        draws[slots] += 1
        noise = noise.view(b, self.feat_dim, self.patch).to(self.dtype)
        prefix = t["prefix"][slots].transpose(1, 2)
        estimator = model.feat_decoder.estimator
        patch = solve(estimator, mu, prefix, noise, self.steps, t["cfg"][slots]).transpose(1, 2)
        logits = model.stop_logits(lm)
        stop = logits[:, 1] > logits[:, 0]  # the reference's argmax: a tie does not stop
        embed = model.enc_to_lm_proj(model.feat_encoder(patch[:, None]))[:, 0]
        lm = model.base_lm.step(embed, self.caches[0], slots, positions, max_length)
        lm = model.fsq_layer(lm)
        fused = model.fusion_concat_proj(torch.cat((lm, embed), dim=-1))
        residual = model.residual_lm.step(fused, self.caches[1], slots, positions, max_length)
        t["lm"][slots] = lm
        t["residual"][slots] = residual
        t["prefix"][slots] = patch
        return torch.cat((stop.float()[:, None], patch.reshape(b, -1).float()), dim=1)

    def _reserve(self, slots: list[int], ends: np.ndarray) -> None:
        wanted = list(zip(slots, np.asarray(ends).tolist(), strict=True))
        for cache in self.caches:
            if cache.reserve(wanted):  # callers stay within the capacity the pools cover
                raise RuntimeError(f"VoxCPM2 KV blocks unavailable for slots {slots}")
