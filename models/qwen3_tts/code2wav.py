"""Code2Wav, the 12.5 Hz decoder, as a stateful streaming decoder.

Everything in it is causal, so a stream that keeps each causal conv's last
inputs, each transposed conv's last input frame and the last ``window - 1``
keys/values of every attention layer decodes chunk by chunk exactly as the
whole utterance at once. Contexts with chunks of different lengths share one
call: chunks are right-padded, and padding never reaches a valid output.

Parameter names mirror ``decoder.*`` of ``speech_tokenizer/model.safetensors``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn import functional as F

from models.qwen3_tts.config import DecoderConfig
from models.qwen3_tts.layers import MLP, RMSNorm, rope_cos_sin, rope_inv_freq, rotate_half

# -- streaming primitives ------------------------------------------------------


def _tail(full: torch.Tensor, lengths: torch.Tensor, keep: int) -> torch.Tensor:
    """Per row b, the ``keep`` time steps of ``full`` [B, C, T] ending at ``lengths[b]``."""
    idx = lengths[:, None] + torch.arange(-keep, 0, device=full.device)[None]
    idx = idx[:, None, :].expand(full.shape[0], full.shape[1], keep)
    return full.gather(2, idx)


class CausalConv(nn.Module):
    """Conv1d, zero history on the left (``*.conv`` in the checkpoint)."""

    def __init__(
        self, c_in: int, c_out: int, kernel: int, dilation: int = 1, groups: int = 1
    ) -> None:
        super().__init__()
        self.conv = nn.Conv1d(c_in, c_out, kernel, dilation=dilation, groups=groups)
        self.history = (kernel - 1) * dilation

    def step(
        self, x: torch.Tensor, lengths: torch.Tensor, state: dict[int, torch.Tensor]
    ) -> torch.Tensor:
        key = id(self)
        hist = state.get(key)
        if hist is None:
            hist = x.new_zeros(x.shape[0], x.shape[1], self.history)
        full = torch.cat((hist, x), dim=2)
        if self.history:
            state[key] = _tail(full, lengths + self.history, self.history)
        return self.conv(full)


class CausalTransConv(nn.Module):
    """ConvTranspose1d(k, s) with the right ``k - s`` samples trimmed; k is s or 2s."""

    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int) -> None:
        super().__init__()
        if kernel not in (stride, 2 * stride):
            raise ValueError("only kernel == stride or 2 * stride is supported")
        self.conv = nn.ConvTranspose1d(c_in, c_out, kernel, stride=stride)
        self.stride = stride
        self.overlap = kernel > stride

    def step(
        self, x: torch.Tensor, lengths: torch.Tensor, state: dict[int, torch.Tensor]
    ) -> torch.Tensor:
        s, t = self.stride, x.shape[2]
        if not self.overlap:
            return self.conv(x)
        key = id(self)
        prev = state.get(key)
        if prev is None:
            # A zero frame adds nothing but the bias, which the output gets once anyway.
            prev = x.new_zeros(x.shape[0], x.shape[1], 1)
        full = torch.cat((prev, x), dim=2)
        state[key] = _tail(full, lengths + 1, 1)
        return self.conv(full)[..., s : s + t * s]


class SnakeBeta(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(channels))
        self.beta = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        alpha = torch.exp(self.alpha)[None, :, None]
        beta = torch.exp(self.beta)[None, :, None]
        return x + (1.0 / (beta + 1e-9)) * torch.sin(x * alpha).pow(2)


# -- quantizer -------------------------------------------------------------------


class Codebook(nn.Module):
    def __init__(self, size: int, dim: int) -> None:
        super().__init__()
        self.cluster_usage = nn.Parameter(torch.ones(size))
        self.embedding_sum = nn.Parameter(torch.zeros(size, dim))

    def table(self) -> torch.Tensor:
        return self.embedding_sum / self.cluster_usage.clamp(min=1e-5)[:, None]


class _VQ(nn.Module):
    def __init__(self, size: int, dim: int) -> None:
        super().__init__()
        self._codebook = Codebook(size, dim)


class _VQList(nn.Module):
    def __init__(self, n: int, size: int, dim: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(_VQ(size, dim) for _ in range(n))


class RVQ(nn.Module):
    def __init__(self, n: int, size: int, dim: int, io_dim: int) -> None:
        super().__init__()
        self.vq = _VQList(n, size, dim)
        self.input_proj = nn.Conv1d(io_dim, dim, 1, bias=False)
        self.output_proj = nn.Conv1d(dim, io_dim, 1, bias=False)

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, n, T] -> [B, io_dim, T]."""
        total = None
        for i, layer in enumerate(self.vq.layers):
            part = F.embedding(codes[:, i], layer._codebook.table()).transpose(1, 2)
            total = part if total is None else total + part
        assert total is not None
        return self.output_proj(total)


class SplitRVQ(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        dim = cfg.codebook_dim // 2
        self.rvq_first = RVQ(1, cfg.codebook_size, dim, cfg.codebook_dim)
        self.rvq_rest = RVQ(cfg.num_quantizers - 1, cfg.codebook_size, dim, cfg.codebook_dim)

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        return self.rvq_first.decode(codes[:, :1]) + self.rvq_rest.decode(codes[:, 1:])


# -- transformer -----------------------------------------------------------------


class LayerScale(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.full((channels,), 0.01))


class DecoderAttention(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, d
        self.q_proj = nn.Linear(h, cfg.num_heads * d, bias=False)
        self.k_proj = nn.Linear(h, cfg.num_kv_heads * d, bias=False)
        self.v_proj = nn.Linear(h, cfg.num_kv_heads * d, bias=False)
        self.o_proj = nn.Linear(cfg.num_heads * d, h, bias=False)


class TransformerLayer(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.self_attn = DecoderAttention(cfg)
        self.mlp = MLP(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn_layer_scale = LayerScale(cfg.hidden_size)
        self.mlp_layer_scale = LayerScale(cfg.hidden_size)


class PreTransformer(nn.Module):
    """Sliding-window causal transformer; the stream keeps ``window - 1`` keys per layer."""

    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.layers = nn.ModuleList(TransformerLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.input_proj = nn.Linear(cfg.latent_dim, cfg.hidden_size)
        self.output_proj = nn.Linear(cfg.hidden_size, cfg.latent_dim)
        self.register_buffer(
            "inv_freq", rope_inv_freq(cfg.head_dim, cfg.rope_theta), persistent=False
        )

    def step(
        self, x: torch.Tensor, lengths: torch.Tensor, streams: list[DecoderStream]
    ) -> torch.Tensor:
        """x [B, T, latent] (right-padded), each row continuing its stream."""
        cfg = self.cfg
        keep = cfg.sliding_window - 1
        b, t, _ = x.shape
        dev = x.device
        starts = torch.tensor([s.position for s in streams], device=dev)
        cached = torch.tensor([s.cached for s in streams], device=dev)
        positions = starts[:, None] + torch.arange(t, device=dev)[None]
        cos, sin = rope_cos_sin(self.inv_freq, positions, x.dtype)
        cos, sin = cos[:, None], sin[:, None]
        # Keys: `keep` cache slots (right-aligned, older ones invalid) then the t new ones.
        j = torch.arange(t, device=dev)[:, None]
        s_cache = torch.arange(keep, device=dev)[None, :]
        s_new = torch.arange(t, device=dev)[None, :]
        cache_ok = (s_cache >= keep - cached[:, None, None]) & (s_cache >= j)[None]
        new_ok = ((s_new <= j) & (j - s_new < cfg.sliding_window))[None].expand(b, t, t)
        mask = torch.cat((cache_ok.expand(b, t, keep), new_ok), dim=2)[:, None]

        h = self.input_proj(x)
        for i, layer in enumerate(self.layers):
            attn = layer.self_attn
            hn = layer.input_layernorm(h)
            q = attn.q_proj(hn).view(b, t, -1, attn.head_dim).transpose(1, 2)
            k = attn.k_proj(hn).view(b, t, -1, attn.head_dim).transpose(1, 2)
            v = attn.v_proj(hn).view(b, t, -1, attn.head_dim).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            k_old = torch.stack([s.keys(i, keep, k) for s in streams])
            v_old = torch.stack([s.values(i, keep, v) for s in streams])
            k_all = torch.cat((k_old, k), dim=2)
            v_all = torch.cat((v_old, v), dim=2)
            for row, stream in enumerate(streams):
                n = int(lengths[row])
                stream.kv[i] = (
                    k_all[row, :, n : keep + n].clone(),
                    v_all[row, :, n : keep + n].clone(),
                )
            groups = attn.num_heads // attn.num_kv_heads
            if groups > 1:
                k_all = k_all.repeat_interleave(groups, dim=1)
                v_all = v_all.repeat_interleave(groups, dim=1)
            scores = torch.matmul(q, k_all.transpose(2, 3)) * attn.head_dim**-0.5
            scores = scores.masked_fill(~mask, float("-inf"))
            probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
            out = torch.matmul(probs, v_all).transpose(1, 2).reshape(b, t, -1)
            h = h + layer.self_attn_layer_scale.scale * attn.o_proj(out)
            mlp_out = layer.mlp(layer.post_attention_layernorm(h))
            h = h + layer.mlp_layer_scale.scale * mlp_out
        for row, stream in enumerate(streams):
            n = int(lengths[row])
            stream.position += n
            stream.cached = min(keep, stream.cached + n)
        return self.output_proj(self.norm(h))


# -- conv stack ------------------------------------------------------------------


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dwconv = CausalConv(dim, dim, 7, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(1e-6 * torch.ones(dim))

    def step(
        self, x: torch.Tensor, lengths: torch.Tensor, state: dict[int, torch.Tensor]
    ) -> torch.Tensor:
        h = self.dwconv.step(x, lengths, state).permute(0, 2, 1)
        h = self.pwconv2(F.gelu(self.pwconv1(self.norm(h))))
        return x + (self.gamma * h).permute(0, 2, 1)


class ResidualUnit(nn.Module):
    def __init__(self, dim: int, dilation: int) -> None:
        super().__init__()
        self.act1 = SnakeBeta(dim)
        self.conv1 = CausalConv(dim, dim, 7, dilation=dilation)
        self.act2 = SnakeBeta(dim)
        self.conv2 = CausalConv(dim, dim, 1)

    def step(
        self, x: torch.Tensor, lengths: torch.Tensor, state: dict[int, torch.Tensor]
    ) -> torch.Tensor:
        h = self.conv1.step(self.act1(x), lengths, state)
        return x + self.conv2.step(self.act2(h), lengths, state)


class DecoderBlock(nn.Module):
    def __init__(self, in_dim: int, out_dim: int, rate: int) -> None:
        super().__init__()
        self.block = nn.ModuleList(
            [SnakeBeta(in_dim), CausalTransConv(in_dim, out_dim, 2 * rate, rate)]
            + [ResidualUnit(out_dim, d) for d in (1, 3, 9)]
        )
        self.rate = rate

    def step(
        self, x: torch.Tensor, lengths: torch.Tensor, state: dict[int, torch.Tensor]
    ) -> torch.Tensor:
        x = self.block[0](x)
        x = self.block[1].step(x, lengths, state)
        lengths = lengths * self.rate
        for unit in self.block[2:]:
            x = unit.step(x, lengths, state)
        return x


@dataclass
class DecoderStream:
    """One context's decoder state."""

    position: int = 0
    cached: int = 0
    kv: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    convs: dict[int, torch.Tensor] = field(default_factory=dict)

    def keys(self, layer: int, keep: int, like: torch.Tensor) -> torch.Tensor:
        if layer in self.kv:
            return self.kv[layer][0]
        return like.new_zeros(like.shape[1], keep, like.shape[3])

    def values(self, layer: int, keep: int, like: torch.Tensor) -> torch.Tensor:
        if layer in self.kv:
            return self.kv[layer][1]
        return like.new_zeros(like.shape[1], keep, like.shape[3])


class Code2Wav(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.pre_transformer = PreTransformer(cfg)
        self.quantizer = SplitRVQ(cfg)
        self.pre_conv = CausalConv(cfg.codebook_dim, cfg.latent_dim, 3)
        self.upsample = nn.ModuleList(
            nn.ModuleList(
                [
                    CausalTransConv(cfg.latent_dim, cfg.latent_dim, f, f),
                    ConvNeXtBlock(cfg.latent_dim),
                ]
            )
            for f in cfg.upsampling_ratios
        )
        blocks: list[nn.Module] = [CausalConv(cfg.latent_dim, cfg.decoder_dim, 7)]
        for i, rate in enumerate(cfg.upsample_rates):
            blocks.append(
                DecoderBlock(cfg.decoder_dim // 2**i, cfg.decoder_dim // 2 ** (i + 1), rate)
            )
        out_dim = cfg.decoder_dim // 2 ** len(cfg.upsample_rates)
        blocks += [SnakeBeta(out_dim), CausalConv(out_dim, 1, 7)]
        self.decoder = nn.ModuleList(blocks)

    def new_stream(self) -> DecoderStream:
        return DecoderStream()

    @torch.no_grad()
    def decode(
        self, chunks: list[torch.Tensor], streams: list[DecoderStream]
    ) -> list[torch.Tensor]:
        """Continue each stream by its chunk of codes [T_i, groups]; returns waveforms [T_i * hop]."""
        weight = self.pre_conv.conv.weight
        lengths = torch.tensor([c.shape[0] for c in chunks], device=weight.device)
        if int(lengths.min()) < 1:
            raise ValueError("every chunk needs at least one frame")
        t = int(lengths.max())
        codes = torch.stack([F.pad(c.T, (0, t - c.shape[0])) for c in chunks]).long()
        state = _BatchState(streams)

        x = self.quantizer.decode(codes.to(weight.device)).to(weight.dtype)
        x = state.run(self.pre_conv, x, lengths)
        x = self.pre_transformer.step(x.transpose(1, 2), lengths, streams).transpose(1, 2)
        for up, block in self.upsample:
            x = up.step(x, lengths, state.convs)
            lengths = lengths * up.stride
            x = state.run(block, x, lengths)
        x = state.run(self.decoder[0], x, lengths)
        for block in self.decoder[1:-2]:
            x = state.run(block, x, lengths)
            lengths = lengths * block.rate
        x = self.decoder[-2](x)
        x = state.run(self.decoder[-1], x, lengths).clamp(-1, 1)
        state.save()
        return [x[row, 0, : int(n)] for row, n in enumerate(lengths)]


class _BatchState:
    """Stacks the conv histories of a batch of streams, and splits them back."""

    def __init__(self, streams: list[DecoderStream]) -> None:
        self.streams = streams
        keys = set(streams[0].convs)
        if any(set(s.convs) != keys for s in streams):
            # Some streams are fresh: their missing histories start at zero.
            keys = set().union(*(s.convs for s in streams))
        self.convs: dict[int, torch.Tensor] = {}
        for key in keys:
            parts = [s.convs.get(key) for s in streams]
            like = next(p for p in parts if p is not None)
            self.convs[key] = torch.stack(
                [p if p is not None else torch.zeros_like(like) for p in parts]
            )

    def run(self, module: nn.Module, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return module.step(x, lengths, self.convs)  # type: ignore[operator]

    def save(self) -> None:
        for key, value in self.convs.items():
            for row, stream in enumerate(self.streams):
                stream.convs[key] = value[row]
