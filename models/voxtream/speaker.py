"""VoXtream's speaker encoder: IDRnD's ReDimNet "M" (``ft_mix``, trained on
VoxBlink2 + VoxCeleb2 + CN-Celeb), 16 kHz audio -> a unit-length 192-wide embedding.

The reference fetches it with ``torch.hub.load("IDRnD/ReDimNet", "ReDimNet",
model_name="M", train_type="ft_mix", dataset="vb2+vox2+cnc")``, which downloads
``M-vb2+vox2+cnc-ft_mix.pt`` from the repository's releases: a ``torch.save`` dict
``{"model_config": ReDimNetWrap's keyword arguments, "state_dict": its tensors}``.
This module reads that file with ``torch.load(weights_only=True)`` (the dict holds
only tensors, numbers, strings, lists and tuples, which the weights-only unpickler
takes; anything else is refused, never executed), builds the network the config
describes (:mod:`models.blocks.redimnet`) and loads the tensors strictly: a
missing, unexpected or misshapen key is a :class:`CheckpointError` naming it.

As the reference prepares it: the whole network is cast to the model's dtype, then
``spec`` (the mel front end) and ``bn`` (the pooled vector's batch norm) are cast
back to float32 (their buffers thus rounded through the dtype on the way, as there);
on CUDA the embedding is computed under autocast in that dtype. The embedding is
divided by its L2 norm in the dtype it came out in (``/= norm(keepdim=True)``).
"""

from __future__ import annotations

import pickle
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from models.blocks.redimnet import ReDimNet, ReDimNetConfig
from models.checkpoint import CheckpointError, load_weights

SPEAKER_FILE = "M-vb2+vox2+cnc-ft_mix.pt"
"""The file name the reference's hub entry downloads."""
SAMPLE_RATE = 16_000
EMBED_DIM = 192
"""VoXtream's ``spk_embedding_dim``: the encoder's ``embed_dim`` must equal it."""


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def read_redimnet_file(path: Path | str) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """``(model_config, state_dict)`` of a ReDimNet ``.pt`` file; CheckpointError
    naming the file for one that is missing, unreadable, holds objects other than
    plain values and tensors, or lacks either entry."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(
            f"speaker encoder file missing (ReDimNet's {SPEAKER_FILE}, "
            "from github.com/IDRnD/ReDimNet/releases)",
            path,
        )
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        found = re.search(r"GLOBAL (\S+)", str(exc))
        if found is None:
            raise CheckpointError(
                "not a readable torch file (the weights-only unpickler refused it)", path
            ) from exc
        raise CheckpointError(
            "not a ReDimNet file: it holds objects other than tensors and plain values "
            f"({found.group(1)}), which are not loaded",
            path,
        ) from exc
    except Exception as exc:  # noqa: BLE001 (a damaged file fails inside the unpickler anyhow)
        raise CheckpointError(f"not a readable torch file ({_first_line(exc)})", path) from exc
    if not isinstance(data, Mapping) or "state_dict" not in data or "model_config" not in data:
        found = sorted(map(str, data)) if isinstance(data, Mapping) else type(data).__name__
        raise CheckpointError(
            "not a ReDimNet file: expected a dict with 'model_config' and 'state_dict', "
            f"found {found}",
            path,
        )
    config, state = data["model_config"], data["state_dict"]
    if not isinstance(config, Mapping):
        raise CheckpointError(f"'model_config' is a {type(config).__name__}, not a dict", path)
    if not isinstance(state, Mapping) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise CheckpointError("'state_dict' is not a dict of named tensors", path)
    return dict(config), dict(state)


def normalize_embedding(embedding: torch.Tensor) -> torch.Tensor:
    """``embedding`` divided by the L2 norm of the whole tensor, in its own dtype (the
    reference's ``spk_embedding /= spk_embedding.norm(keepdim=True)``)."""
    return embedding / embedding.norm(keepdim=True)


class SpeakerEncoder:
    """A loaded ReDimNet on a device, in a dtype; ``embed`` one clip at a time."""

    def __init__(self, net: ReDimNet, device: torch.device, dtype: torch.dtype) -> None:
        self.net = net
        self.device = device
        self.dtype = dtype

    @property
    def config(self) -> ReDimNetConfig:
        return self.net.cfg

    @property
    def min_samples(self) -> int:
        """The shortest clip ``embed`` takes (the front end's STFT needs it)."""
        return self.net.min_samples

    @torch.inference_mode()
    def embed(self, wav_16k: np.ndarray | torch.Tensor) -> np.ndarray:
        """One mono 16 kHz clip [samples] (float, unit full scale) -> its normalised
        embedding, float32 [embed_dim]. ValueError for a clip shorter than
        ``min_samples`` or with non-finite samples."""
        wav = torch.as_tensor(np.asarray(wav_16k, dtype=np.float32)).reshape(1, -1)
        if wav.shape[1] < self.min_samples:
            raise ValueError(
                f"clip too short for the speaker encoder ({wav.shape[1]} samples at "
                f"16 kHz; at least {self.min_samples})"
            )
        if not torch.isfinite(wav).all():
            raise ValueError("the clip has non-finite samples")
        # The reference hands the encoder the clip already in the model's dtype.
        x = wav.to(device=self.device, dtype=self.dtype)
        autocast = self.device.type == "cuda" and self.dtype != torch.float32
        with torch.autocast(self.device.type, dtype=self.dtype, enabled=autocast):
            embedding = self.net(x)
        return normalize_embedding(embedding)[0].float().cpu().numpy()


def build_speaker_encoder(
    config: Mapping[str, Any],
    state: Mapping[str, torch.Tensor],
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    file: Path | str | None = None,
    embed_dim: int | None = EMBED_DIM,
) -> SpeakerEncoder:
    """The encoder a ``model_config`` and ``state_dict`` describe (see the module doc);
    its ``embed_dim`` must be ``embed_dim`` (the model's ``spk_embedding_dim``) unless None."""
    try:
        cfg = ReDimNetConfig.from_model_config(config)
        net = ReDimNet(cfg)
    except ValueError as exc:
        raise CheckpointError(str(exc), file) from exc
    if embed_dim is not None and cfg.embed_dim != embed_dim:
        raise CheckpointError(
            f"model_config 'embed_dim' is {cfg.embed_dim}; the model takes {embed_dim}-wide "
            "speaker embeddings",
            file,
        )
    load_weights(net, state, "ReDimNet speaker encoder", file=file)
    device = torch.device(device)
    net = net.to(device=device, dtype=dtype)
    net.spec.float()
    net.bn.float()
    return SpeakerEncoder(net.eval(), device, dtype)


def load_speaker_encoder(
    path: Path | str,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    embed_dim: int | None = EMBED_DIM,
) -> SpeakerEncoder:
    """The speaker encoder of a ReDimNet ``.pt`` file (``SPEAKER_FILE``) on ``device`` in
    ``dtype`` (float32 on CPU, bfloat16 on CUDA in the reference)."""
    config, state = read_redimnet_file(path)
    return build_speaker_encoder(config, state, device, dtype, file=path, embed_dim=embed_dim)
