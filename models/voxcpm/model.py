"""VoxCPM2's network, one context, as the reference runs it: the model the family's slot
runner will batch.

Names follow the checkpoint's ``model.safetensors`` (everything but ``audio_vae.*``):
``base_lm`` (MiniCPM-4 with its token embedding), ``residual_lm`` (the same block, no
rotary positions), ``feat_encoder`` (:class:`models.voxcpm.locenc.LocEnc`),
``feat_decoder.estimator`` (:class:`models.voxcpm.locdit.LocDiT`), ``fsq_layer`` and the
projections and stop head between them.

A step (:meth:`VoxCPMModel.generate`): the DiT's condition from the two language models'
last states, one patch from the flow-matching solve, the patch encoded back and fed to
the base model, its state quantized, fused with the patch's embedding and fed to the
residual model; the stop head reads the base model's state that conditioned the patch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from torch import nn

from models.blocks.llama import Stack, TransformerConfig
from models.voxcpm.config import lm_stack, stack_config
from models.voxcpm.locdit import LocDiT, solve
from models.voxcpm.locenc import LocEnc, ScalarQuantizer


class BaseLM(Stack):
    def __init__(self, cfg: TransformerConfig, vocab: int, inv_freq: torch.Tensor) -> None:
        super().__init__(cfg)
        self.embed_tokens = nn.Embedding(vocab, cfg.hidden_size)
        self.inv_freq = inv_freq


class _Decoder(nn.Module):
    def __init__(self, dit: LocDiT) -> None:
        super().__init__()
        self.estimator = dit


class VoxCPMModel(nn.Module):
    def __init__(self, data: dict) -> None:
        super().__init__()
        lm, lm_freq = lm_stack(data)
        width, feat = lm.hidden_size, data["feat_dim"]
        self.patch_size = data["patch_size"]
        self.feat_dim = feat
        self.base_lm = BaseLM(lm, data["lm_config"]["vocab_size"], lm_freq)
        self.residual_lm = Stack(lm_stack(data, data["residual_lm_num_layers"])[0])
        enc, enc_freq = stack_config(data, "encoder_config")
        self.feat_encoder = LocEnc(enc, feat, enc_freq)
        dit, dit_freq = stack_config(data, "dit_config")
        self.feat_decoder = _Decoder(LocDiT(dit, feat, dit_freq))
        self.fsq_layer = ScalarQuantizer(
            width, data["scalar_quantization_latent_dim"], data["scalar_quantization_scale"]
        )
        self.enc_to_lm_proj = nn.Linear(enc.hidden_size, width)
        self.lm_to_dit_proj = nn.Linear(width, dit.hidden_size)
        self.res_to_dit_proj = nn.Linear(width, dit.hidden_size)
        self.fusion_concat_proj = nn.Linear(2 * width, width)
        self.stop_proj = nn.Linear(width, width)
        self.stop_head = nn.Linear(width, 2, bias=False)
        self.set_rope(data)

    def set_rope(self, data: dict) -> None:
        """The four stacks' rotary frequencies (float32, on the weights' device): again
        after a build on the meta device or a cast to a lower precision."""
        device = self.stop_head.weight.device
        if device.type == "meta":
            return  # nothing to compute on: the loader sets them once the weights are in
        lm_freq = lm_stack(data)[1].to(device)
        self.base_lm.inv_freq = lm_freq
        no_rope = data.get("residual_lm_no_rope", True)
        # Zero frequencies: every rotation is the identity (no positions at all).
        self.residual_lm.inv_freq = torch.zeros_like(lm_freq) if no_rope else lm_freq
        self.feat_encoder.encoder.inv_freq = stack_config(data, "encoder_config")[1].to(device)
        self.feat_decoder.estimator.decoder.inv_freq = stack_config(data, "dit_config")[1].to(
            device
        )

    def stop_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.stop_head(nn.functional.silu(self.stop_proj(hidden)))

    @torch.no_grad()
    def generate(
        self,
        tokens: torch.Tensor,
        text_mask: torch.Tensor,
        feats: torch.Tensor,
        audio_mask: torch.Tensor,
        noise: Callable[[int], torch.Tensor],
        max_len: int,
        min_len: int = 2,
        steps: int = 10,
        cfg: float = 2.0,
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """One context's patches [P, feat_dim] and the stop logits read with each, from its
        prefill sequence (``tokens`` [S], masks [S], ``feats`` [S, P, feat_dim]);
        ``noise(i)`` gives patch ``i``'s initial noise [feat_dim, P]."""
        embeds = self.enc_to_lm_proj(self.feat_encoder(feats[None]))[0]
        x = text_mask[:, None] * self.base_lm.embed_tokens(tokens) + audio_mask[:, None] * embeds
        lm_caches: list[tuple[torch.Tensor, torch.Tensor]] = []
        res_caches: list[tuple[torch.Tensor, torch.Tensor]] = []
        out = self.base_lm.extend(x[None], lm_caches, 0)[0]
        out = self.fsq_layer(out) * audio_mask[:, None] + out * text_mask[:, None]
        fused = self.fusion_concat_proj(torch.cat((out, audio_mask[:, None] * embeds), dim=-1))
        residual = self.residual_lm.extend(fused[None], res_caches, 0)[0, -1]
        lm_hidden = out[-1]
        position = len(tokens)
        prefix = feats[-1]
        for i in range(max_len):
            mu = torch.cat((self.lm_to_dit_proj(lm_hidden), self.res_to_dit_proj(residual)))
            patch = solve(
                self.feat_decoder.estimator,
                mu[None],
                prefix.T[None],
                noise(i)[None],
                steps,
                torch.tensor([cfg], dtype=mu.dtype),
            )[0].T
            stop = self.stop_logits(lm_hidden)
            yield patch, stop
            if i > min_len and int(stop.argmax()) == 1:
                return
            embed = self.enc_to_lm_proj(self.feat_encoder(patch[None, None]))[0, 0]
            prefix = patch
            lm_hidden = self.base_lm.extend(embed[None, None], lm_caches, position)[0, 0]
            lm_hidden = self.fsq_layer(lm_hidden)
            step_in = self.fusion_concat_proj(torch.cat((lm_hidden, embed)))
            residual = self.residual_lm.extend(step_in[None, None], res_caches, position)[0, 0]
            position += 1
