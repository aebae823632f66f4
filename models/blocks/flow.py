"""S3Gen's flow: speech tokens (25 Hz) -> 80-bin mel frames (50 Hz), by mean flow.

The voice's prompt tokens go before the new ones; an encoder (a 3-token
look-ahead convolution, 6 conformer layers with relative positions, x2
upsampling, 4 more) gives each frame a mean ``mu``; a decoder network, given the
projected x-vector and the prompt's mel in the first frames, turns noise into
mel in two Euler steps of the mean-flow field (t = 0 -> 0.5 -> 1); the prompt's
frames are cut off. Attention is full-context throughout, so every frame
depends on every token of the call. Parameter names mirror ``flow.*`` of
``s3gen_meanflow.safetensors``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

WIDTH = 512
MELS = 80
SPEAKER_DIM = 192
VOCAB = 6561
LOOKAHEAD = 3
"""Tokens the encoder's first convolution reads ahead."""


# -- encoder -----------------------------------------------------------------------


def relative_positions(d_model: int, length: int) -> torch.Tensor:
    """Sinusoids of relative positions ``length - 1`` down to ``-(length - 1)``:
    [1, 2 * length - 1, d_model], computed the way the checkpoint's authors
    compute them (float32, a table of at least 5,000 positions each way)."""
    n = max(5000, length)
    position = torch.arange(0, n, dtype=torch.float32).unsqueeze(1)
    div = torch.exp(
        torch.arange(0, d_model, 2, dtype=torch.float32) * -(math.log(10000.0) / d_model)
    )
    positive = torch.zeros(n, d_model)
    negative = torch.zeros(n, d_model)
    positive[:, 0::2] = torch.sin(position * div)
    positive[:, 1::2] = torch.cos(position * div)
    negative[:, 0::2] = torch.sin(-1 * position * div)
    negative[:, 1::2] = torch.cos(-1 * position * div)
    table = torch.cat((torch.flip(positive, [0]), negative[1:])).unsqueeze(0)
    center = table.shape[1] // 2
    return table[:, center - length + 1 : center + length]


class RelPositionAttention(nn.Module):
    """Multi-head self-attention with Transformer-XL relative positions."""

    def __init__(self, heads: int, width: int) -> None:
        super().__init__()
        self.heads, self.d_k = heads, width // heads
        self.linear_q = nn.Linear(width, width)
        self.linear_k = nn.Linear(width, width)
        self.linear_v = nn.Linear(width, width)
        self.linear_out = nn.Linear(width, width)
        self.linear_pos = nn.Linear(width, width, bias=False)
        self.pos_bias_u = nn.Parameter(torch.zeros(heads, self.d_k))
        self.pos_bias_v = nn.Parameter(torch.zeros(heads, self.d_k))

    def forward(self, x: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """x [B, T, C]; mask [B, 1, T] (True = a real frame); pos [1, 2T - 1, C]."""
        b, t, _ = x.shape
        q = self.linear_q(x).view(b, t, self.heads, self.d_k)
        k = self.linear_k(x).view(b, t, self.heads, self.d_k).transpose(1, 2)
        v = self.linear_v(x).view(b, t, self.heads, self.d_k).transpose(1, 2)
        p = self.linear_pos(pos).view(pos.shape[0], -1, self.heads, self.d_k).transpose(1, 2)
        content = torch.matmul((q + self.pos_bias_u).transpose(1, 2), k.transpose(-2, -1))
        position = _shift(torch.matmul((q + self.pos_bias_v).transpose(1, 2), p.transpose(-2, -1)))
        scores = (content + position) / math.sqrt(self.d_k)
        blocked = mask.unsqueeze(1).eq(0)
        scores = scores.masked_fill(blocked, -float("inf"))
        attn = torch.softmax(scores, dim=-1).masked_fill(blocked, 0.0)
        out = torch.matmul(attn, v).transpose(1, 2).contiguous().view(b, t, -1)
        return self.linear_out(out)


def _shift(x: torch.Tensor) -> torch.Tensor:
    """Scores against relative positions [B, H, T, 2T - 1] -> against key positions
    [B, H, T, T]: row i's key j reads relative position i - j."""
    b, h, t, n = x.shape
    padded = torch.cat((x.new_zeros(b, h, t, 1), x), dim=-1).view(b, h, n + 1, t)
    return padded[:, :, 1:].reshape(b, h, t, n)[:, :, :, : n // 2 + 1]


class FeedForward(nn.Module):
    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.w_1 = nn.Linear(width, hidden)
        self.w_2 = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_2(F.silu(self.w_1(x)))


class ConformerLayer(nn.Module):
    """Pre-norm self-attention and feed-forward (no convolution module)."""

    def __init__(self, width: int = WIDTH, heads: int = 8, hidden: int = 2048) -> None:
        super().__init__()
        self.self_attn = RelPositionAttention(heads, width)
        self.feed_forward = FeedForward(width, hidden)
        self.norm_mha = nn.LayerNorm(width, eps=1e-12)
        self.norm_ff = nn.LayerNorm(width, eps=1e-12)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.norm_mha(x), mask, pos)
        return x + self.feed_forward(self.norm_ff(x))


class LinearEmbed(nn.Module):
    """Linear -> LayerNorm, scaled by sqrt(width); also gives the relative positions."""

    def __init__(self, width: int = WIDTH) -> None:
        super().__init__()
        self.out = nn.Sequential(nn.Linear(width, width), nn.LayerNorm(width, eps=1e-5))
        self.scale = math.sqrt(width)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pos = relative_positions(x.shape[-1], x.shape[1]).to(x)
        return self.out(x) * self.scale, pos


class PreLookahead(nn.Module):
    """Each token sees the 3 after it, then the 2 before (causal), plus itself."""

    def __init__(self, width: int = WIDTH) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(width, width, LOOKAHEAD + 1)
        self.conv2 = nn.Conv1d(width, width, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.pad(x.transpose(1, 2), (0, LOOKAHEAD))
        h = F.pad(F.leaky_relu(self.conv1(h)), (2, 0))
        return self.conv2(h).transpose(1, 2) + x


class Upsample(nn.Module):
    """x2 in time: repeat each frame, then a causal 5-tap convolution."""

    def __init__(self, width: int = WIDTH) -> None:
        super().__init__()
        self.conv = nn.Conv1d(width, width, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.interpolate(x.transpose(1, 2), scale_factor=2.0, mode="nearest")
        return self.conv(F.pad(h, (4, 0))).transpose(1, 2)


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = LinearEmbed()
        self.pre_lookahead_layer = PreLookahead()
        self.encoders = nn.ModuleList(ConformerLayer() for _ in range(6))
        self.up_layer = Upsample()
        self.up_embed = LinearEmbed()
        self.up_encoders = nn.ModuleList(ConformerLayer() for _ in range(4))
        self.after_norm = nn.LayerNorm(WIDTH, eps=1e-5)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Token embeddings [B, T, 512] -> frames [B, 2T, 512] and their mask [B, 1, 2T]."""
        mask = _valid(lengths, x.shape[1])
        x, pos = self.embed(x)
        # Padding reads as the zeros past a row's end that a row alone would see (the
        # look-ahead convolution is the one layer that reads ahead).
        x = self.pre_lookahead_layer(x * mask.transpose(1, 2))
        for layer in self.encoders:
            x = layer(x, mask, pos)
        x = self.up_layer(x)
        mask = _valid(lengths * 2, x.shape[1])
        x, pos = self.up_embed(x)
        for layer in self.up_encoders:
            x = layer(x, mask, pos)
        return self.after_norm(x), mask


def _valid(lengths: torch.Tensor, size: int) -> torch.Tensor:
    """[B, 1, size]: True where a position is inside its row's length."""
    return (torch.arange(size, device=lengths.device)[None] < lengths[:, None]).unsqueeze(1)


# -- decoder (the mean-flow field) ---------------------------------------------------


class CausalConv1d(nn.Conv1d):
    def __init__(self, n_in: int, n_out: int, kernel: int) -> None:
        super().__init__(n_in, n_out, kernel)
        self.left = kernel - 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(F.pad(x, (self.left, 0)))


class Transpose(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.transpose(1, 2)


class CausalBlock(nn.Module):
    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.block = nn.Sequential(
            CausalConv1d(n_in, n_out, 3), Transpose(), nn.LayerNorm(n_out), Transpose(), nn.Mish()
        )

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.block(x * mask) * mask


class ResnetBlock(nn.Module):
    def __init__(self, n_in: int, n_out: int, time_dim: int) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Mish(), nn.Linear(time_dim, n_out))
        self.block1 = CausalBlock(n_in, n_out)
        self.block2 = CausalBlock(n_out, n_out)
        self.res_conv = nn.Conv1d(n_in, n_out, 1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, time: torch.Tensor) -> torch.Tensor:
        h = self.block1(x, mask)
        h = h + self.mlp(time).unsqueeze(-1)
        h = self.block2(h, mask)
        return h + self.res_conv(x * mask)


class SelfAttention(nn.Module):
    def __init__(self, width: int, heads: int, head_dim: int) -> None:
        super().__init__()
        inner = heads * head_dim
        self.heads = heads
        self.to_q = nn.Linear(width, inner, bias=False)
        self.to_k = nn.Linear(width, inner, bias=False)
        self.to_v = nn.Linear(width, inner, bias=False)
        self.to_out = nn.ModuleList([nn.Linear(inner, width), nn.Dropout(0.0)])

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """x [B, T, C]; bias [B, heads, 1, T] (0, or -1e10 for padding)."""
        b, t, _ = x.shape
        q, k, v = (
            proj(x).view(b, t, self.heads, -1).transpose(1, 2)
            for proj in (self.to_q, self.to_k, self.to_v)
        )
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        return self.to_out[0](out.transpose(1, 2).reshape(b, t, -1))


class GeluProjection(nn.Module):
    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.proj = nn.Linear(n_in, n_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.proj(x))


class TransformerBlock(nn.Module):
    def __init__(self, width: int = 256, heads: int = 8, head_dim: int = 64) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attn1 = SelfAttention(width, heads, head_dim)
        self.norm3 = nn.LayerNorm(width)
        self.ff = nn.Module()
        self.ff.net = nn.ModuleList(
            [GeluProjection(width, 4 * width), nn.Dropout(0.0), nn.Linear(4 * width, width)]
        )

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        x = x + self.attn1(self.norm1(x), bias)
        h = self.norm3(x)
        for layer in self.ff.net:
            h = layer(h)
        return x + h


class TimeEmbedding(nn.Module):
    def __init__(self, n_in: int, dim: int) -> None:
        super().__init__()
        self.n_in = n_in
        self.linear_1 = nn.Linear(n_in, dim)
        self.linear_2 = nn.Linear(dim, dim)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        """t [1] in [0, 1] -> [1, dim]: sinusoids of 1000 t, then an MLP."""
        half = self.n_in // 2
        freq = torch.exp(
            torch.arange(half, device=t.device).float() * -(math.log(10000) / (half - 1))
        )
        angle = 1000 * t.unsqueeze(1) * freq.unsqueeze(0)
        emb = torch.cat((angle.sin(), angle.cos()), dim=-1).to(t.dtype)
        return self.linear_2(F.silu(self.linear_1(emb)))


class Estimator(nn.Module):
    """The mean-flow field: a 1-D U-Net without resampling (one level of 256
    channels, 12 middle blocks), each level a causal residual block and 4
    transformer blocks; the time embedding mixes the start and end times."""

    def __init__(self, width: int = 256, blocks: int = 4, middle: int = 12) -> None:
        super().__init__()
        n_in, time_dim = 4 * MELS, 4 * width
        self.time_mlp = TimeEmbedding(n_in, time_dim)
        self.time_embed_mixer = nn.Linear(2 * time_dim, time_dim, bias=False)

        def level(n_from: int, last: bool = True) -> nn.ModuleList:
            parts: list[nn.Module] = [
                ResnetBlock(n_from, width, time_dim),
                nn.ModuleList(TransformerBlock(width) for _ in range(blocks)),
            ]
            if last:
                parts.append(CausalConv1d(width, width, 3))
            return nn.ModuleList(parts)

        self.down_blocks = nn.ModuleList([level(n_in)])
        self.mid_blocks = nn.ModuleList(level(width, last=False) for _ in range(middle))
        self.up_blocks = nn.ModuleList([level(2 * width)])
        self.final_block = CausalBlock(width, width)
        self.final_proj = nn.Conv1d(width, MELS, 1)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor,
        mu: torch.Tensor,
        t: torch.Tensor,
        r: torch.Tensor,
        speaker: torch.Tensor,
        cond: torch.Tensor,
    ) -> torch.Tensor:
        """The average velocity from time ``t`` to ``r`` at ``x`` [B, 80, F]."""
        time = self.time_embed_mixer(torch.cat((self.time_mlp(t), self.time_mlp(r)), dim=1))
        frames = x.shape[-1]
        h = torch.cat((x, mu, speaker[:, :, None].expand(-1, -1, frames), cond), dim=1)
        heads = self.down_blocks[0][1][0].attn1.heads
        valid = mask.to(x.dtype)
        bias = ((1.0 - valid) * -1.0e10).repeat_interleave(heads, dim=0)
        bias = bias.view(x.shape[0], heads, -1, frames)

        def run(level: nn.ModuleList, h: torch.Tensor) -> torch.Tensor:
            h = level[0](h, mask, time).transpose(1, 2).contiguous()
            for block in level[1]:
                h = block(h, bias)
            return h.transpose(1, 2).contiguous()

        skip = run(self.down_blocks[0], h)
        h = self.down_blocks[0][2](skip * mask)
        for level in self.mid_blocks:
            h = run(level, h)
        h = run(self.up_blocks[0], torch.cat((h[:, :, : skip.shape[-1]], skip), dim=1))
        h = self.up_blocks[0][2](h * mask)
        h = self.final_block(h, mask)
        return self.final_proj(h * mask) * mask


class Decoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.estimator = Estimator()


# -- the flow ----------------------------------------------------------------------


class Flow(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.input_embedding = nn.Embedding(VOCAB, WIDTH)
        self.spk_embed_affine_layer = nn.Linear(SPEAKER_DIM, MELS)
        self.encoder = Encoder()
        self.encoder_proj = nn.Linear(WIDTH, MELS)
        self.decoder = Decoder()

    @torch.no_grad()
    def inference(
        self,
        tokens: torch.Tensor,
        prompt_tokens: torch.Tensor,
        prompt_mel: torch.Tensor,
        embedding: torch.Tensor,
        noise: torch.Tensor,
        steps: int = 2,
    ) -> torch.Tensor:
        """Mel [1, 80, 2N] of ``tokens`` [1, N] spoken in the voice of ``prompt_tokens``
        [1, P], ``prompt_mel`` [1, 2P, 80] and the x-vector ``embedding`` [1, 192];
        ``noise`` [1, 80, 2(P + N)] is the starting point of the whole call."""
        row = FlowRow(tokens[0], prompt_tokens[0], prompt_mel[0], embedding[0], noise[0])
        return self.inference_rows([row], steps)[0][None]

    @torch.no_grad()
    def inference_rows(self, rows: list[FlowRow], steps: int = 2) -> list[torch.Tensor]:
        """Each row's mel [80, 2(N - held_back)], all rows in one padded call. A row's
        frames depend on its own inputs only: padding is masked out of attention and
        zeroed where a convolution reads ahead, so a row equals its call alone (to
        float rounding)."""
        first = rows[0].tokens
        device, dtype = first.device, rows[0].noise.dtype
        lengths = [len(r.prompt_tokens) + len(r.tokens) for r in rows]
        kept = [n - r.held_back for n, r in zip(lengths, rows, strict=True)]
        total = max(lengths)
        ids = torch.zeros(len(rows), total, dtype=torch.long, device=device)
        noise = torch.zeros(len(rows), MELS, 2 * total, dtype=dtype, device=device)
        for b, r in enumerate(rows):
            ids[b, : lengths[b]] = torch.cat((r.prompt_tokens, r.tokens))
            noise[b, :, : 2 * kept[b]] = r.noise
        embedding = torch.stack([r.embedding for r in rows])
        speaker = self.spk_embed_affine_layer(F.normalize(embedding, dim=1))
        h, mask = self.encoder(self.input_embedding(ids), torch.tensor(lengths, device=device))
        if kept != lengths:
            # The held-back tokens' frames leave the call here, as the reference cuts
            # them off the encoder's output: past a row's end for the decoder.
            mask = _valid(torch.tensor(kept, device=device) * 2, h.shape[1])
        mu = self.encoder_proj(h).transpose(1, 2).contiguous()
        cond = torch.zeros_like(mu)
        for b, r in enumerate(rows):
            cond[b, :, : r.prompt_mel.shape[0]] = r.prompt_mel.transpose(0, 1)
        mask = mask.to(h.dtype)
        x = noise
        times = torch.linspace(0, 1, steps + 1, device=device, dtype=dtype)
        estimator = self.decoder.estimator
        for t, r in zip(times[:-1], times[1:], strict=True):
            velocity = estimator(x, mask, mu, t[None], r[None], speaker, cond)
            x = x + (r[None] - t[None]) * velocity
        out = []
        for b, row in enumerate(rows):
            start = row.prompt_mel.shape[0]
            out.append(x[b, :, start : 2 * kept[b]])
        return out


@dataclass(frozen=True)
class FlowRow:
    """One utterance of a batched flow call (tensors on the flow's device)."""

    tokens: torch.Tensor
    """int64 [N]: the utterance's speech tokens."""
    prompt_tokens: torch.Tensor
    """int64 [P]: the voice's prompt tokens."""
    prompt_mel: torch.Tensor
    """[2P, 80]: their mel."""
    embedding: torch.Tensor
    """[192]: the voice's x-vector."""
    noise: torch.Tensor
    """[80, 2(P + N - held_back)]: the starting point."""
    held_back: int = 0
    """Last tokens that only inform the others (the encoder reads them as look-ahead)
    and get no frames: the reference's ``finalize=False`` holds back ``LOOKAHEAD``."""
