"""The 12 Hz tokenizer's encoder: waveform -> reference codes for voice cloning.

A Mimi encoder (SEANet convs, causal transformer, stride-2 downsample, split
residual VQ). Parameter names mirror ``encoder.*`` of
``speech_tokenizer/model.safetensors``.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from models.blocks.llama import rope_cos_sin, rope_inv_freq, rotate_half
from models.qwen3_tts.config import MimiEncoderConfig


class MimiConv(nn.Module):
    """Causal Conv1d padded like Mimi: the kernel's span on the left, the last partial frame on the right."""

    def __init__(
        self,
        c_in: int,
        c_out: int,
        kernel: int,
        stride: int = 1,
        dilation: int = 1,
        bias: bool = True,
        pad_mode: str = "constant",
    ) -> None:
        super().__init__()
        self.conv = nn.Conv1d(c_in, c_out, kernel, stride, dilation=dilation, bias=bias)
        self.span = (kernel - 1) * dilation + 1
        self.stride = stride
        self.pad_total = self.span - stride
        self.pad_mode = pad_mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        length = x.shape[-1]
        frames = math.ceil((length - self.span + self.pad_total) / self.stride + 1) - 1
        extra = frames * self.stride + self.span - self.pad_total - length
        x = F.pad(x, (self.pad_total, extra), mode=self.pad_mode)
        return self.conv(x)


class ResnetBlock(nn.Module):
    def __init__(self, cfg: MimiEncoderConfig, dim: int, dilation: int) -> None:
        super().__init__()
        hidden = dim // cfg.compress
        self.block = nn.ModuleList(
            [
                nn.ELU(),
                MimiConv(dim, hidden, cfg.residual_kernel_size, dilation=dilation),
                nn.ELU(),
                MimiConv(hidden, dim, 1),
            ]
        )
        self.shortcut: nn.Module = MimiConv(dim, dim, 1) if cfg.use_conv_shortcut else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        for layer in self.block:
            h = layer(h)
        return self.shortcut(x) + h


class SEANetEncoder(nn.Module):
    def __init__(self, cfg: MimiEncoderConfig) -> None:
        super().__init__()
        layers: list[nn.Module] = [MimiConv(1, cfg.num_filters, cfg.kernel_size)]
        scale = 1
        for ratio in reversed(cfg.upsampling_ratios):
            dim = scale * cfg.num_filters
            for j in range(cfg.num_residual_layers):
                layers.append(ResnetBlock(cfg, dim, cfg.dilation_growth_rate**j))
            layers += [nn.ELU(), MimiConv(dim, dim * 2, ratio * 2, stride=ratio)]
            scale *= 2
        layers += [
            nn.ELU(),
            MimiConv(scale * cfg.num_filters, cfg.hidden_size, cfg.last_kernel_size),
        ]
        self.layers = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class _Attention(nn.Module):
    def __init__(self, cfg: MimiEncoderConfig) -> None:
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, d
        self.q_proj = nn.Linear(h, cfg.num_heads * d, bias=False)
        self.k_proj = nn.Linear(h, cfg.num_kv_heads * d, bias=False)
        self.v_proj = nn.Linear(h, cfg.num_kv_heads * d, bias=False)
        self.o_proj = nn.Linear(cfg.num_heads * d, h, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, -1, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, -1, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, -1, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        groups = self.num_heads // self.num_kv_heads
        if groups > 1:
            k = k.repeat_interleave(groups, dim=1)
            v = v.repeat_interleave(groups, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class _MLP(nn.Module):
    def __init__(self, cfg: MimiEncoderConfig) -> None:
        super().__init__()
        self.fc1 = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.fc2 = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class _Scale(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.full((channels,), 0.01))


class _Layer(nn.Module):
    def __init__(self, cfg: MimiEncoderConfig) -> None:
        super().__init__()
        self.self_attn = _Attention(cfg)
        self.mlp = _MLP(cfg)
        self.input_layernorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps)
        self.post_attention_layernorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps)
        self.self_attn_layer_scale = _Scale(cfg.hidden_size)
        self.mlp_layer_scale = _Scale(cfg.hidden_size)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn_layer_scale.scale * self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp_layer_scale.scale * self.mlp(self.post_attention_layernorm(x))


class EncoderTransformer(nn.Module):
    def __init__(self, cfg: MimiEncoderConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(_Layer(cfg) for _ in range(cfg.num_layers))
        self.register_buffer(
            "inv_freq", rope_inv_freq(cfg.head_dim, cfg.rope_theta), persistent=False
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(x.shape[1], device=x.device)[None]
        cos, sin = rope_cos_sin(self.inv_freq, positions, x.dtype)
        cos, sin = cos[:, None], sin[:, None]
        for layer in self.layers:
            x = layer(x, cos, sin)
        return x


class _Codebook(nn.Module):
    def __init__(self, size: int, dim: int) -> None:
        super().__init__()
        self.register_buffer("initialized", torch.tensor([True], dtype=torch.float32))
        self.register_buffer("cluster_usage", torch.ones(size))
        self.register_buffer("embed_sum", torch.zeros(size, dim))

    def embed(self) -> torch.Tensor:
        return self.embed_sum / self.cluster_usage.clamp(min=1e-5)[:, None]


class _VQ(nn.Module):
    def __init__(self, size: int, dim: int) -> None:
        super().__init__()
        self.codebook = _Codebook(size, dim)


class _RVQ(nn.Module):
    def __init__(self, cfg: MimiEncoderConfig, n: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(_VQ(cfg.codebook_size, cfg.codebook_dim) for _ in range(n))
        if cfg.vq_hidden_dim != cfg.hidden_size:
            self.input_proj: nn.Module | None = nn.Conv1d(
                cfg.hidden_size, cfg.vq_hidden_dim, 1, bias=False
            )
            self.output_proj: nn.Module | None = nn.Conv1d(
                cfg.vq_hidden_dim, cfg.hidden_size, 1, bias=False
            )
        else:
            self.input_proj = self.output_proj = None

    def encode(self, x: torch.Tensor, n: int) -> list[torch.Tensor]:
        """x [B, hidden, T] -> n index tensors [B, T]."""
        residual = self.input_proj(x) if self.input_proj is not None else x
        out = []
        for vq in self.layers[:n]:
            table = vq.codebook.embed()
            flat = residual.permute(0, 2, 1)
            shape = flat.shape[:-1]
            flat = flat.reshape(-1, flat.shape[-1])
            ids = torch.cdist(flat[None].float(), table[None].float(), p=2)[0].argmin(-1)
            ids = ids.view(*shape)
            residual = residual - F.embedding(ids, table).permute(0, 2, 1)
            out.append(ids)
        return out


class _SplitRVQ(nn.Module):
    def __init__(self, cfg: MimiEncoderConfig) -> None:
        super().__init__()
        n_sem = cfg.num_semantic_quantizers
        self.semantic_residual_vector_quantizer = _RVQ(cfg, n_sem)
        self.acoustic_residual_vector_quantizer = _RVQ(cfg, cfg.num_quantizers - n_sem)
        self.num_semantic = n_sem

    def encode(self, x: torch.Tensor, n: int) -> torch.Tensor:
        """[B, hidden, T] -> [B, n, T]."""
        codes = self.semantic_residual_vector_quantizer.encode(x, self.num_semantic)
        if n > self.num_semantic:
            codes += self.acoustic_residual_vector_quantizer.encode(x, n - self.num_semantic)
        return torch.stack(codes, dim=1)


class MimiEncoder(nn.Module):
    def __init__(self, cfg: MimiEncoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.encoder = SEANetEncoder(cfg)
        self.encoder_transformer = EncoderTransformer(cfg)
        ratio = int(cfg.encodec_frame_rate / cfg.frame_rate)
        self.downsample = MimiConv(
            cfg.hidden_size, cfg.hidden_size, 2 * ratio, stride=2, bias=False, pad_mode="replicate"
        )
        self.quantizer = _SplitRVQ(cfg)

    @torch.no_grad()
    def encode(self, wav: torch.Tensor, num_quantizers: int) -> torch.Tensor:
        """wav [B, samples] at the encoder rate -> codes [B, num_quantizers, frames]."""
        weight = self.downsample.conv.weight
        x = self.encoder(wav[:, None].to(weight.device, weight.dtype))
        x = self.encoder_transformer(x.transpose(1, 2)).transpose(1, 2)
        x = self.downsample(x)
        return self.quantizer.encode(x, num_quantizers)
