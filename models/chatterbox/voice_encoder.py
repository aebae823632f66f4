"""Chatterbox's voice encoder: a 16 kHz clip -> T3's 256-wide unit-norm speaker embedding.

The clip's leading and trailing silence is trimmed (frames 20 dB or more below
its loudest, by RMS over 2,048-sample frames every 512), then a 40-bin power
mel spectrogram (n_fft 400, hop 160, Hann window, reflect-padded centred
frames, Slaney mel filters from 0 to 8 kHz) is cut into windows of 160 frames
(1.6 s) every 77 frames (the reference's "rate" of 1.3 partials per second:
``round(16000 / 1.3 / 160)``). A last, partly filled window is kept when at
least 80% of it would hold real frames, and the mel is zero-padded or cut to
exactly the windows' span. A 3-layer LSTM (40 -> 256) runs over each window;
its last layer's final hidden state is projected (256 -> 256), put through a
ReLU and unit-normalised; the windows' embeddings are averaged and the mean
unit-normalised again.

Parameter names and shapes are those of the checkpoint's ``ve.safetensors``
(``lstm.*`` as ``torch.nn.LSTM`` names them, ``proj.*``, and the two scalar
``similarity_*`` parameters, kept for the training loss and never used here).
The spectrogram runs on the host in numpy, as the reference computes it; the
network runs on the encoder's device.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import nn
from torch.nn import functional as F

from models.chatterbox.checkpoint import CheckpointError, load_weights
from models.mel import mel_filterbank

VE_FILE = "ve.safetensors"


@dataclass(frozen=True)
class VoiceEncoderConfig:
    sample_rate: int = 16000
    mels: int = 40
    n_fft: int = 400
    hop: int = 160
    fmin: float = 0.0
    fmax: float = 8000.0
    hidden: int = 256
    layers: int = 3
    embed_dim: int = 256
    window_frames: int = 160
    partials_per_second: float = 1.3
    min_coverage: float = 0.8
    trim_top_db: float = 20.0
    trim_frame: int = 2048
    trim_hop: int = 512

    @property
    def window_step(self) -> int:
        """Frames between two windows' starts (77 at the defaults)."""
        return int(np.round(self.sample_rate / self.partials_per_second / self.window_frames))


CONFIG = VoiceEncoderConfig()


class VoiceEncoder(nn.Module):
    def __init__(self, cfg: VoiceEncoderConfig = CONFIG) -> None:
        super().__init__()
        self.cfg = cfg
        self.lstm = nn.LSTM(cfg.mels, cfg.hidden, num_layers=cfg.layers, batch_first=True)
        self.proj = nn.Linear(cfg.hidden, cfg.embed_dim)
        self.similarity_weight = nn.Parameter(torch.tensor([10.0]))
        self.similarity_bias = nn.Parameter(torch.tensor([-5.0]))

    def forward(self, windows: torch.Tensor) -> torch.Tensor:
        """Mel windows [N, frames, mels] -> unit-norm embeddings [N, embed_dim]."""
        _, (hidden, _) = self.lstm(windows)
        raw = F.relu(self.proj(hidden[-1]))
        return raw / torch.linalg.norm(raw, dim=1, keepdim=True)


def speaker_embedding(encoder: VoiceEncoder, wav: np.ndarray) -> np.ndarray:
    """A 16 kHz mono clip (float32 samples in [-1, 1]) -> its [embed_dim] float32
    unit-norm speaker embedding, T3's conditioning."""
    cfg = encoder.cfg
    wav = np.asarray(wav, dtype=np.float32).reshape(-1)
    if wav.size == 0:
        raise ValueError("the voice encoder needs a non-empty clip")
    mel = melspectrogram(trim_silence(wav, cfg), cfg)  # [T, mels]
    windows = mel_windows(mel, cfg)  # [N, frames, mels]
    param = next(encoder.parameters())
    with torch.inference_mode():
        x = torch.from_numpy(windows).to(device=param.device, dtype=param.dtype)
        partial = encoder(x).float()
        mean = partial.mean(dim=0)
        embedding = mean / torch.linalg.norm(mean)
    return embedding.cpu().numpy().astype(np.float32)


def trim_silence(wav: np.ndarray, cfg: VoiceEncoderConfig = CONFIG) -> np.ndarray:
    """``wav`` without its leading and trailing frames ``trim_top_db`` or more below
    its loudest frame. Frames are ``trim_frame`` samples every ``trim_hop``, centred
    (zero-padded by half a frame each side); a kept span runs from its first
    frame's start to one hop past its last frame's start, at most the clip's end."""
    half = cfg.trim_frame // 2
    padded = np.pad(wav.astype(np.float32, copy=False), (half, half))
    count = 1 + (padded.size - cfg.trim_frame) // cfg.trim_hop
    frames = np.lib.stride_tricks.as_strided(
        padded,
        shape=(count, cfg.trim_frame),
        strides=(padded.strides[0] * cfg.trim_hop, padded.strides[0]),
        writeable=False,
    )
    power = np.mean(np.square(frames, dtype=np.float32), axis=1, dtype=np.float32)
    rms = np.sqrt(power).astype(np.float64)
    floor = 1e-10  # power floor: -100 dB
    level = 10.0 * np.log10(np.maximum(floor, np.square(rms)))
    level -= 10.0 * np.log10(max(floor, float(rms.max()) ** 2))
    loud = np.flatnonzero(level > -cfg.trim_top_db)
    if loud.size == 0:
        return wav[:0]
    start = int(loud[0]) * cfg.trim_hop
    end = min(wav.size, (int(loud[-1]) + 1) * cfg.trim_hop)
    return wav[start:end]


@lru_cache(maxsize=4)
def mel_filters(cfg: VoiceEncoderConfig = CONFIG) -> np.ndarray:
    """Slaney mel filters [mels, 1 + n_fft // 2] float32 (librosa's defaults)."""
    return mel_filterbank(cfg.sample_rate, cfg.n_fft, cfg.mels, cfg.fmin, cfg.fmax)


def melspectrogram(wav: np.ndarray, cfg: VoiceEncoderConfig = CONFIG) -> np.ndarray:
    """Power mel spectrogram [1 + len // hop, mels] float32 of a float32 clip:
    centred frames (reflect-padded by n_fft / 2), a periodic Hann window, the FFT
    in float64, magnitudes kept in float32 (as a complex64 spectrum holds them)."""
    half = cfg.n_fft // 2
    padded = np.pad(wav.astype(np.float32, copy=False), (half, half), mode="reflect")
    count = 1 + (padded.size - cfg.n_fft) // cfg.hop
    frames = np.lib.stride_tricks.as_strided(
        padded,
        shape=(count, cfg.n_fft),
        strides=(padded.strides[0] * cfg.hop, padded.strides[0]),
        writeable=False,
    )
    n = np.arange(cfg.n_fft, dtype=np.float64)
    window = 0.5 - 0.5 * np.cos(2.0 * np.pi * n / cfg.n_fft)
    spectrum = np.fft.rfft(frames.astype(np.float64) * window, axis=1).astype(np.complex64)
    power = np.square(np.abs(spectrum))  # float32
    return np.ascontiguousarray((mel_filters(cfg) @ power.T).T, dtype=np.float32)


def window_count(frames: int, cfg: VoiceEncoderConfig = CONFIG) -> tuple[int, int]:
    """How many windows a mel of ``frames`` frames gives, and the span they cover
    (the mel is zero-padded or cut to it): whole windows that fit, plus one more
    when the frames left would fill ``min_coverage`` of it (always at least one)."""
    size, step = cfg.window_frames, cfg.window_step
    count, left = divmod(max(frames - size + step, 0), step)
    if count == 0 or (left + size - step) / size >= cfg.min_coverage:
        count += 1
    return count, size + step * (count - 1)


def mel_windows(mel: np.ndarray, cfg: VoiceEncoderConfig = CONFIG) -> np.ndarray:
    """A mel [T, mels] as its overlapping windows [N, window_frames, mels]."""
    if mel.shape[0] == 0:
        raise ValueError("the voice encoder needs at least one mel frame")
    count, span = window_count(mel.shape[0], cfg)
    fitted = np.zeros((span, cfg.mels), dtype=np.float32)
    keep = min(span, mel.shape[0])
    fitted[:keep] = mel[:keep]
    starts = np.arange(count) * cfg.window_step
    return np.stack([fitted[s : s + cfg.window_frames] for s in starts])


def load_voice_encoder(path: Path, device: torch.device, dtype: torch.dtype) -> VoiceEncoder:
    """The voice encoder of ``ve.safetensors`` (``path`` is the file or the
    checkpoint directory holding it); every tensor must be present, with its shape."""
    path = Path(path)
    if path.is_dir():
        path = path / VE_FILE
    if not path.is_file():
        raise CheckpointError(f"{path.parent}: missing {path.name} (the voice encoder weights)")
    try:
        state = load_file(str(path))
    except (SafetensorError, OSError) as err:
        raise CheckpointError(f"{path}: not a readable safetensors file ({err})") from err
    model = VoiceEncoder()
    try:
        load_weights(model, state, "voice encoder")
    except ValueError as err:
        raise CheckpointError(f"{path}: {err}") from err
    return model.to(device=device, dtype=dtype).eval()
