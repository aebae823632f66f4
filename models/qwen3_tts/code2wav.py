"""Code2Wav, the 12.5 Hz decoder, as a stateful streaming decoder.

Everything in it is causal, so a stream that keeps each causal conv's last
inputs, each transposed conv's last input frame and the last ``window - 1``
keys/values of every attention layer decodes chunk by chunk exactly as the
whole utterance at once. Contexts with chunks of different lengths share one
call: chunks are right-padded, and padding never reaches a valid output.

The streams' state lives in a :class:`DecoderState`, one row per stream: a call
gathers its rows of every buffer once and scatters them back once.

Parameter names mirror ``decoder.*`` of ``speech_tokenizer/model.safetensors``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from models.blocks.llama import MLP, RMSNorm, rope_cos_sin, rope_inv_freq, rotate_half
from models.qwen3_tts.config import DecoderConfig
from models.upload import upload

# -- streaming state -------------------------------------------------------------

StateSpec = tuple[tuple[int, ...], torch.dtype]
"""One stream's slice of a state buffer: its shape and dtype."""


class DecoderState:
    """The decoder state of ``rows`` streams, one row each: per stateful layer a
    buffer [rows, ...] on the device (conv histories, attention key/value windows),
    and per row its position and number of cached keys on the host, where chunk
    lengths are known. An all-zero row is a fresh stream."""

    def __init__(self, specs: dict[int, StateSpec], rows: int, device: torch.device) -> None:
        self.device = device
        self.buffers = {
            key: torch.zeros(rows, *shape, dtype=dtype, device=device)
            for key, (shape, dtype) in specs.items()
        }
        self.position = np.zeros(rows, np.int64)
        self.cached = np.zeros(rows, np.int64)

    @property
    def rows(self) -> int:
        return len(self.position)

    def grow(self, rows: int) -> None:
        """Room for ``rows`` streams; the added rows are fresh."""
        extra = rows - self.rows
        for key, buf in self.buffers.items():
            self.buffers[key] = torch.cat((buf, buf.new_zeros(extra, *buf.shape[1:])))
        self.position = np.concatenate((self.position, np.zeros(extra, np.int64)))
        self.cached = np.concatenate((self.cached, np.zeros(extra, np.int64)))

    def reset(self, rows: np.ndarray) -> None:
        """Make ``rows`` fresh streams."""
        index = upload(rows, self.device)
        for buf in self.buffers.values():
            buf.index_fill_(0, index, 0)
        self.position[rows] = 0
        self.cached[rows] = 0

    def copy_row(self, row: int, source: DecoderState, source_row: int) -> None:
        """Row ``row`` continues as ``source``'s row ``source_row`` would."""
        for key, buf in self.buffers.items():
            buf[row].copy_(source.buffers[key][source_row])
        self.position[row] = source.position[source_row]
        self.cached[row] = source.cached[source_row]


class _Rows:
    """The rows one decode call continues; each layer reads and writes its own buffer once."""

    def __init__(self, state: DecoderState, index: torch.Tensor) -> None:
        self.state = state
        self.index = index

    def read(self, key: int) -> torch.Tensor:
        return self.state.buffers[key].index_select(0, self.index)

    def write(self, key: int, value: torch.Tensor) -> None:
        self.state.buffers[key].index_copy_(0, self.index, value)


# -- streaming primitives ------------------------------------------------------


def _tail(full: torch.Tensor, ends: torch.Tensor, keep: int) -> torch.Tensor:
    """Per row b, the ``keep`` steps of ``full`` [B, C, T, ...] along dim 2 ending at ``ends[b]``."""
    idx = ends[:, None] + torch.arange(-keep, 0, device=full.device)[None]
    idx = idx.view(len(idx), 1, keep, *([1] * (full.dim() - 3)))
    return full.gather(2, idx.expand(*full.shape[:2], keep, *full.shape[3:]))


class CausalConv(nn.Module):
    """Conv1d, zero history on the left (``*.conv`` in the checkpoint)."""

    def __init__(
        self, c_in: int, c_out: int, kernel: int, dilation: int = 1, groups: int = 1
    ) -> None:
        super().__init__()
        self.conv = nn.Conv1d(c_in, c_out, kernel, dilation=dilation, groups=groups)
        self.history = (kernel - 1) * dilation

    def state_specs(self) -> dict[int, StateSpec]:
        if not self.history:
            return {}
        return {id(self): ((self.conv.in_channels, self.history), self.conv.weight.dtype)}

    def step(self, x: torch.Tensor, lengths: torch.Tensor, state: _Rows) -> torch.Tensor:
        if not self.history:
            return self.conv(x)
        full = torch.cat((state.read(id(self)), x), dim=2)
        state.write(id(self), _tail(full, lengths + self.history, self.history))
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

    def state_specs(self) -> dict[int, StateSpec]:
        if not self.overlap:
            return {}
        return {id(self): ((self.conv.in_channels, 1), self.conv.weight.dtype)}

    def step(self, x: torch.Tensor, lengths: torch.Tensor, state: _Rows) -> torch.Tensor:
        s, t = self.stride, x.shape[2]
        if not self.overlap:
            return self.conv(x)
        # A fresh stream's zero frame adds nothing but the bias, which the output
        # gets once anyway.
        full = torch.cat((state.read(id(self)), x), dim=2)
        state.write(id(self), _tail(full, lengths + 1, 1))
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

    def state_specs(self) -> dict[int, StateSpec]:
        cfg = self.cfg
        shape = (cfg.num_kv_heads, cfg.sliding_window - 1, cfg.head_dim)
        specs: dict[int, StateSpec] = {}
        for layer in self.layers:
            for proj in (layer.self_attn.k_proj, layer.self_attn.v_proj):
                specs[id(proj)] = (shape, proj.weight.dtype)
        return specs

    def step(
        self,
        x: torch.Tensor,
        lengths: torch.Tensor,
        starts: torch.Tensor,
        cached: torch.Tensor,
        state: _Rows,
    ) -> torch.Tensor:
        """x [B, T, latent] (right-padded to ``lengths``), each row continuing its stream
        from position ``starts[b]`` with ``cached[b]`` keys kept (all on the device)."""
        cfg = self.cfg
        keep = cfg.sliding_window - 1
        b, t, _ = x.shape
        dev = x.device
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
        for layer in self.layers:
            attn = layer.self_attn
            hn = layer.input_layernorm(h)
            q = attn.q_proj(hn).view(b, t, -1, attn.head_dim).transpose(1, 2)
            k = attn.k_proj(hn).view(b, t, -1, attn.head_dim).transpose(1, 2)
            v = attn.v_proj(hn).view(b, t, -1, attn.head_dim).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            k_all = torch.cat((state.read(id(attn.k_proj)), k), dim=2)
            v_all = torch.cat((state.read(id(attn.v_proj)), v), dim=2)
            state.write(id(attn.k_proj), _tail(k_all, lengths + keep, keep))
            state.write(id(attn.v_proj), _tail(v_all, lengths + keep, keep))
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

    def step(self, x: torch.Tensor, lengths: torch.Tensor, state: _Rows) -> torch.Tensor:
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

    def step(self, x: torch.Tensor, lengths: torch.Tensor, state: _Rows) -> torch.Tensor:
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

    def step(self, x: torch.Tensor, lengths: torch.Tensor, state: _Rows) -> torch.Tensor:
        x = self.block[0](x)
        x = self.block[1].step(x, lengths, state)
        lengths = lengths * self.rate
        for unit in self.block[2:]:
            x = unit.step(x, lengths, state)
        return x


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

    def state_specs(self) -> dict[int, StateSpec]:
        specs: dict[int, StateSpec] = {}
        for module in self.modules():
            if isinstance(module, CausalConv | CausalTransConv | PreTransformer):
                specs.update(module.state_specs())
        return specs

    def new_state(self, rows: int) -> DecoderState:
        """State for ``rows`` streams, all fresh."""
        return DecoderState(self.state_specs(), rows, self.pre_conv.conv.weight.device)

    @property
    def hop(self) -> int:
        """Output samples per frame."""
        return int(np.prod(self.cfg.upsampling_ratios) * np.prod(self.cfg.upsample_rates))

    def pack(
        self, chunks: list[np.ndarray], state: DecoderState, rows: np.ndarray, frames: int
    ) -> np.ndarray:
        """One call's host inputs as one int64 array [B, groups * frames + 4]: each row's
        codes right-padded to ``frames``, then its length, stream position, cached keys
        and state row. Codes out of range are refused here: on the device they would
        trip an assert that ends every stream on the GPU, not just this call's."""
        groups = self.cfg.num_quantizers
        packed = np.zeros((len(chunks), groups * frames + 4), np.int64)
        codes = packed[:, : groups * frames].reshape(len(chunks), groups, frames)
        for row, chunk in enumerate(chunks):
            if len(chunk) < 1:
                raise ValueError("every chunk needs at least one frame")
            codes[row, :, : len(chunk)] = chunk.T
        if codes.min() < 0 or codes.max() >= self.cfg.codebook_size:
            raise ValueError(f"codes must be in [0, {self.cfg.codebook_size})")
        rows = np.asarray(rows, np.int64)
        packed[:, -4] = [len(c) for c in chunks]
        packed[:, -3] = state.position[rows]
        packed[:, -2] = state.cached[rows]
        packed[:, -1] = rows
        return packed

    def advance(self, state: DecoderState, rows: np.ndarray, counts: np.ndarray) -> None:
        """The host side of a call: the streams moved on by ``counts`` frames."""
        keep = self.cfg.sliding_window - 1
        state.position[rows] += counts
        state.cached[rows] = np.minimum(keep, state.cached[rows] + counts)

    def run_packed(self, packed: torch.Tensor, state: DecoderState) -> torch.Tensor:
        """The device side of a call, from :meth:`pack`'s array: waveforms
        [B, frames * hop]. Reads no host value (a CUDA graph can capture it)."""
        groups = self.cfg.num_quantizers
        b = packed.shape[0]
        frames = (packed.shape[1] - 4) // groups
        codes = packed[:, : groups * frames].reshape(b, groups, frames)
        lengths, starts, cached, index = packed[:, -4:].unbind(1)
        batch = _Rows(state, index)
        weight = self.pre_conv.conv.weight
        x = self.quantizer.decode(codes).to(weight.dtype)
        x = self.pre_conv.step(x, lengths, batch)
        x = self.pre_transformer.step(x.transpose(1, 2), lengths, starts, cached, batch)
        x = x.transpose(1, 2)
        for up, block in self.upsample:
            x = up.step(x, lengths, batch)
            lengths = lengths * up.stride
            x = block.step(x, lengths, batch)
        x = self.decoder[0].step(x, lengths, batch)
        for block in self.decoder[1:-2]:
            x = block.step(x, lengths, batch)
            lengths = lengths * block.rate
        x = self.decoder[-2](x)
        return self.decoder[-1].step(x, lengths, batch).clamp(-1, 1)[:, 0]

    @torch.no_grad()
    def decode(
        self, chunks: list[np.ndarray], state: DecoderState, rows: np.ndarray
    ) -> tuple[torch.Tensor, np.ndarray]:
        """Continue stream ``rows[i]`` of ``state`` by ``chunks[i]``, codes [T_i, groups].
        Returns the waveforms [B, max T_i * hop] on the device, and per row how many
        of its samples are valid (T_i * hop)."""
        counts = np.array([len(c) for c in chunks], np.int64)
        packed = self.pack(chunks, state, rows, int(counts.max()))
        wav = self.run_packed(upload(packed, self.pre_conv.conv.weight.device), state)
        self.advance(state, np.asarray(rows, np.int64), counts)
        return wav, counts * self.hop
