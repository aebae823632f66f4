"""The S3 speech tokenizer (v2, 25 Hz): 16 kHz audio -> speech tokens of 6,561 codes.

Chatterbox takes T3's prompt tokens (the first 15 s of the reference audio, at most
375 tokens) and S3Gen's prompt tokens (its first 10 s) from it. Per clip: a
128-bin log-mel at 100 frames a second (Whisper's recipe: a 400-point periodic Hann
STFT, hop 160, the last frame dropped, log10 floored 8 below the clip's peak, then
``(x + 4) / 4``), optionally cut to ``4 * max_len`` frames; clips are zero-padded
into a batch. An encoder (two stride-2 convolutions to 25 Hz, 6 blocks of
attention with rotary positions plus a 31-tap depthwise "FSMN" memory over the
values, and a GELU MLP; no final norm) gives 1,280 values a token; FSQ projects them
to 8, and each ``round(0.999 * tanh(v))`` in {-1, 0, 1} is a base-3 digit (digit i
weighs 3^i). Clips over 30 s (3,000 frames) are cut into 30 s windows every 26 s,
each window padded to 30 s, and their tokens merged dropping 2 s of each overlap
side. Positions past a clip's length hold whatever the padded frames give (zeros
when a clip in the batch is long), as the reference returns them.

Parameter names mirror ``tokenizer.*`` of ``s3gen_meanflow.safetensors``, the mel
filterbank and window included (the checkpoint stores them; they equal librosa's
Slaney mel filters and torch's Hann window, computed here when absent).

The reference (``chatterbox`` 0.1.7's ``S3Tokenizer``) computes in float32 whatever
its weights' dtype (its layers cast weights to the mel's dtype); this module computes
in its weights' dtype, so float32 is the one that gives the reference's tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from models.chatterbox.checkpoint import load_weights
from models.mel import mel_filterbank

SAMPLE_RATE = 16_000
N_FFT = 400
HOP = 160
MELS = 128
WIDTH = 1280
HEADS = 20
LAYERS = 6
FSMN_KERNEL = 31
FSQ_DIMS = 8
CODES = 3**FSQ_DIMS
"""6,561 speech tokens."""
TOKEN_RATE = 25
FRAMES_PER_TOKEN = 4
ROTARY_POSITIONS = 2048
"""The rotary table's length: positions (tokens) one window may hold."""
WINDOW_FRAMES = 3000
"""Mel frames (30 s) one encoder call takes; longer clips are windowed."""
STRIDE_FRAMES = 2600
"""Windows start every 26 s (4 s overlap)."""
OVERLAP_HALF_TOKENS = 50
"""Tokens dropped at each side of an overlap (2 s)."""
FSQ_SCALE = 0.9990000128746033
"""0.999 as float32: the factor the checkpoint's authors apply after tanh, before rounding."""
PREFIX = "tokenizer."


# -- front end ---------------------------------------------------------------------


def mel_filters(
    sample_rate: int = SAMPLE_RATE, n_fft: int = N_FFT, n_mels: int = MELS
) -> torch.Tensor:
    """Slaney mel filters from 0 Hz to Nyquist, [n_mels, n_fft // 2 + 1] float32
    (librosa's ``filters.mel`` defaults)."""
    return torch.from_numpy(mel_filterbank(sample_rate, n_fft, n_mels, 0.0, sample_rate / 2))


def rotary_table(head_dim: int = WIDTH // HEADS, positions: int = ROTARY_POSITIONS) -> torch.Tensor:
    """[positions, head_dim, 2] float32: cos and sin of each position's angles, the
    ``head_dim // 2`` frequencies (base 10,000) repeated for the two halves that
    rotate together. Taken through ``torch.polar`` over the whole table, as the
    checkpoint's authors compute it, so the values match theirs bit for bit."""
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, head_dim, 2)[: head_dim // 2].float() / head_dim))
    angles = torch.outer(torch.arange(positions), inv_freq).float()
    unit = torch.polar(torch.ones_like(angles), angles)
    return torch.view_as_real(torch.cat((unit, unit), dim=-1)).contiguous()


# -- encoder -----------------------------------------------------------------------


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, T, H, D]; cos, sin [1, T, 1, D]: rotate-half rotary positions."""
    half = x.shape[-1] // 2
    turned = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + turned * sin


class FSMNAttention(nn.Module):
    """Self-attention (query/value with bias, key without) plus a depthwise
    convolution over the values (31 taps, centred) added to its output."""

    def __init__(self, width: int, heads: int, kernel: int = FSMN_KERNEL) -> None:
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(width, width)
        self.key = nn.Linear(width, width, bias=False)
        self.value = nn.Linear(width, width)
        self.out = nn.Linear(width, width)
        self.fsmn_block = nn.Conv1d(width, width, kernel, groups=width, bias=False)
        self.pad_left = (kernel - 1) // 2
        self.pad_right = kernel - 1 - self.pad_left

    def forward(
        self,
        x: torch.Tensor,
        bias: torch.Tensor,
        keep: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
    ) -> torch.Tensor:
        """x [B, T, C]; bias [B, 1, 1, T] (0 or -1e10 per key); keep [B, T, 1] (real
        frames); cos, sin [1, T, 1, D]."""
        b, t, c = x.shape
        q = self.query(x).view(b, t, self.heads, -1)
        k = self.key(x).view(b, t, self.heads, -1)
        v = self.value(x).view(b, t, self.heads, -1)
        scale = (c // self.heads) ** -0.25
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)

        values = v.reshape(b, t, c) * keep
        memory = self.fsmn_block(F.pad(values.transpose(1, 2), (self.pad_left, self.pad_right)))
        memory = (memory.transpose(1, 2) + values) * keep

        q = q.permute(0, 2, 1, 3) * scale
        k = k.permute(0, 2, 3, 1) * scale
        scores = (q @ k + bias).float()
        weights = torch.softmax(scores, dim=-1).to(q.dtype)
        attended = (weights @ v.permute(0, 2, 1, 3)).permute(0, 2, 1, 3).flatten(2)
        return self.out(attended) + memory


class _LayerNorm(nn.LayerNorm):
    """Layer norm taken in float32 whatever the input's dtype."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.layer_norm(
            x.float(), self.normalized_shape, self.weight.float(), self.bias.float(), self.eps
        )
        return out.to(x.dtype)


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.attn = FSMNAttention(width, heads)
        self.attn_ln = _LayerNorm(width, eps=1e-5)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )
        self.mlp_ln = _LayerNorm(width, eps=1e-5)

    def forward(
        self,
        x: torch.Tensor,
        bias: torch.Tensor,
        keep: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
    ) -> torch.Tensor:
        x = x + self.attn(self.attn_ln(x), bias, keep, cos, sin)
        return x + self.mlp(self.mlp_ln(x))


def _frames_mask(lengths: torch.Tensor, total: int) -> torch.Tensor:
    """[B, total] bool: True on each row's first ``lengths[b]`` frames."""
    return torch.arange(total, device=lengths.device).unsqueeze(0) < lengths.unsqueeze(1)


def _halve(n: torch.Tensor | int) -> torch.Tensor | int:
    """Frames after a kernel-3, stride-2, padding-1 convolution."""
    return (n - 1) // 2 + 1


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(MELS, WIDTH, 3, stride=2, padding=1)
        self.conv2 = nn.Conv1d(WIDTH, WIDTH, 3, stride=2, padding=1)
        self.blocks = nn.ModuleList(Block(WIDTH, HEADS) for _ in range(LAYERS))
        self._rotary = rotary_table()

    def forward(
        self, mel: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """mel [B, 128, T] -> hidden [B, ceil(T / 4), 1280] and each row's token count.
        Padded frames are zeroed before each convolution, hidden keys past a row's
        length get a -1e10 attention bias, and the FSMN memory is zeroed there."""
        total = mel.shape[-1]
        x = F.gelu(self.conv1(mel * _frames_mask(lengths, total).unsqueeze(1)))
        lengths, total = _halve(lengths), _halve(total)
        x = F.gelu(self.conv2(x * _frames_mask(lengths, total).unsqueeze(1)))
        lengths, total = _halve(lengths), _halve(total)
        mask = _frames_mask(lengths, total)
        keep = mask.unsqueeze(-1)
        bias = ((1.0 - mask.to(x.dtype)) * -1.0e10)[:, None, None, :]
        rotary = self._rotary[:total].to(x.device, x.dtype)
        cos, sin = rotary[None, :, None, :, 0], rotary[None, :, None, :, 1]
        x = x.transpose(1, 2)
        for block in self.blocks:
            x = block(x, bias, keep, cos, sin)
        return x, lengths


class FSQCodebook(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.project_down = nn.Linear(WIDTH, FSQ_DIMS)


class FSQ(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self._codebook = FSQCodebook()


def fsq_codes(projected: torch.Tensor) -> torch.Tensor:
    """[..., 8] projections -> [...] int64 codes: digit i = round(0.999 tanh(v_i)) + 1
    (rounding half to even), weighing 3^i."""
    digits = (torch.tanh(projected.float()) * FSQ_SCALE).round() + 1
    powers = 3 ** torch.arange(FSQ_DIMS, device=projected.device)
    return (digits.long() * powers).sum(-1)


# -- the tokenizer -----------------------------------------------------------------


class S3Tokenizer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = Encoder()
        self.quantizer = FSQ()
        self.register_buffer("_mel_filters", mel_filters())
        self.register_buffer("window", torch.hann_window(N_FFT))

    @property
    def device(self) -> torch.device:
        return self._mel_filters.device

    @property
    def dtype(self) -> torch.dtype:
        return self.encoder.conv1.weight.dtype

    def log_mel(self, wav: torch.Tensor) -> torch.Tensor:
        """[N] float32 samples -> [128, N // 160] log mel (float32), normalised to
        the clip's own peak. Needs N > 200 (the STFT's reflect padding). Taken on a
        batch of one, as the reference does (the same kernels, so the same bits)."""
        spec = torch.stft(
            wav.float().reshape(1, -1),
            N_FFT,
            HOP,
            window=self.window.float(),
            center=True,
            pad_mode="reflect",
            return_complex=True,
        )
        power = spec[..., :-1].abs() ** 2
        mel = self._mel_filters.float() @ power
        log = torch.clamp(mel, min=1e-10).log10()
        log = torch.maximum(log, log.max() - 8.0)
        return ((log + 4.0) / 4.0)[0]

    @torch.inference_mode()
    def mels(
        self, wavs: Sequence[np.ndarray | torch.Tensor], max_len: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Each clip's log mel (cut to ``4 * max_len`` frames when given), zero-padded
        into [B, 128, T] float32, with the frame counts [B] (int32)."""
        rows = []
        for wav in wavs:
            if isinstance(wav, np.ndarray):
                wav = torch.from_numpy(np.ascontiguousarray(wav, dtype=np.float32))
            mel = self.log_mel(wav.reshape(-1).to(self.device, torch.float32))
            if max_len is not None:
                mel = mel[:, : max_len * FRAMES_PER_TOKEN]
            rows.append(mel)
        if not rows:
            raise ValueError("no audio given")
        lengths = torch.tensor([mel.shape[1] for mel in rows], dtype=torch.int32)
        batch = mel.new_zeros(len(rows), MELS, int(lengths.max()))
        for i, mel in enumerate(rows):
            batch[i, :, : mel.shape[1]] = mel
        return batch, lengths.to(self.device)

    @torch.inference_mode()
    def project(
        self, mel: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """mel [B, 128, T] (at most 3,000 frames) -> FSQ's projections [B, T', 8]
        (float32, before tanh and rounding) and token counts [B]."""
        hidden, counts = self.encoder(mel.to(self.dtype), lengths)
        return self.quantizer._codebook.project_down(hidden).float(), counts

    @torch.inference_mode()
    def quantize(
        self, mel: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """mel [B, 128, T], frame counts [B] -> tokens [B, T'] and counts [B] (int64)."""
        if int(lengths.max()) <= WINDOW_FRAMES:
            projected, counts = self.project(mel, lengths)
            return fsq_codes(projected), counts.long()
        return self._quantize_windowed(mel, lengths)

    def _quantize_windowed(
        self, mel: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Some clip is over 30 s: every clip is cut into windows of at most 3,000
        frames starting every 2,600 (one window for a short clip), each zero-padded to
        3,000 and all encoded as one batch; a long clip's windows are merged keeping
        all but the last 50 tokens of the first, all but 50 each side of the middle
        ones and all but the first 50 of the last. Positions past a clip's tokens are 0."""
        windows, counts, owner = [], [], []
        for row, length in enumerate(lengths.tolist()):
            starts = [0] if length <= WINDOW_FRAMES else range(0, length, STRIDE_FRAMES)
            for start in starts:
                end = min(start + WINDOW_FRAMES, length)
                windows.append(F.pad(mel[row, :, start:end], (0, WINDOW_FRAMES - (end - start))))
                counts.append(end - start)
                owner.append(row)
        window_lengths = torch.tensor(counts, dtype=torch.int32, device=mel.device)
        projected, token_counts = self.project(torch.stack(windows), window_lengths)
        codes = fsq_codes(projected)
        pieces: list[list[torch.Tensor]] = [[] for _ in range(len(lengths))]
        for i, row in enumerate(owner):
            pieces[row].append(codes[i, : int(token_counts[i])])
        merged = []
        for row, parts in enumerate(pieces):
            if int(lengths[row]) <= WINDOW_FRAMES:
                merged.append(parts[0])
                continue
            kept = []
            for j, part in enumerate(parts):
                start = 0 if j == 0 else OVERLAP_HALF_TOKENS
                end = part.shape[0] if j == len(parts) - 1 else part.shape[0] - OVERLAP_HALF_TOKENS
                kept.append(part[start : max(start, end)])
            merged.append(torch.cat(kept))
        out_lengths = torch.tensor([len(m) for m in merged], dtype=torch.long, device=mel.device)
        out = torch.zeros(len(merged), int(out_lengths.max()), dtype=torch.long, device=mel.device)
        for row, tokens in enumerate(merged):
            out[row, : tokens.shape[0]] = tokens
        return out, out_lengths

    @torch.inference_mode()
    def forward(
        self, wavs: Sequence[np.ndarray | torch.Tensor], max_len: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """16 kHz float32 clips -> tokens [B, T'] (int64, 25 a second, rows past
        their length as the reference leaves them) and each clip's count [B] (int64),
        on the module's device. ``max_len`` keeps each clip's first ``4 * max_len``
        mel frames (its log mel is still normalised to the whole clip's peak)."""
        mel, lengths = self.mels(wavs, max_len)
        return self.quantize(mel, lengths)


def load_s3_tokenizer(
    state: dict[str, torch.Tensor],
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> S3Tokenizer:
    """The tokenizer from an S3Gen checkpoint's tensors (its ``tokenizer.*`` keys;
    the others are ignored). The mel filters and window are taken from the checkpoint
    when it has them (it does), else computed; any other missing or extra
    ``tokenizer.*`` key is a ``ValueError`` naming the first few. Weights go to
    ``dtype`` (float32 gives the reference's tokens), the front end stays float32."""
    sub = {k[len(PREFIX) :]: v for k, v in state.items() if k.startswith(PREFIX)}
    model = S3Tokenizer()
    load_weights(model, sub, "tokenizer", PREFIX, optional=("_mel_filters", "window"))
    model.encoder.to(dtype)
    model.quantizer.to(dtype)
    return model.eval().to(device)
