"""VoXtream2's ``config.json`` as typed objects.

The file holds the reference's ``ModelConfig`` fields: vocabulary sizes, the number of
codebooks and phone states, the look-ahead and window sizes, and the names of its three
transformers (``phone_former``, ``temp_former``, ``dep_former``). A name picks one of the
reference's fixed Llama 3.2-style shapes (:data:`KNOWN_FORMERS`). A checkpoint whose
transformers have other shapes (our tests' tiny ones) describes them under ``formers``,
a key the reference ignores: ``{"<name>": {"num_layers", "num_heads", "num_kv_heads",
"embed_dim", "intermediate_dim"}}``.

Every transformer is torchtune's ``llama3_2``: no biases, RMSNorm eps 1e-5, rotary base
500,000 with Llama 3 scaling (factor 32, low 1, high 4, original context 8,192),
interleaved rotary pairs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models.blocks.llama import TransformerConfig
from models.checkpoint import CheckpointError, read_json

ROPE_BASE = 500_000.0
NORM_EPS = 1e-5
MAX_SEQ_LEN = 2048
"""Positions each transformer's rotary table covers (torchtune's ``max_seq_len``)."""

KNOWN_FORMERS: dict[str, tuple[int, int, int, int, int]] = {
    # name: (layers, heads, kv heads, width, MLP width)
    "phone_former": (6, 8, 2, 1024, 4096),
    "temp_former": (12, 16, 4, 1024, 4096),
    "dep_former_csm": (4, 8, 2, 1024, 8192),
}
_FORMER_KEYS = ("num_layers", "num_heads", "num_kv_heads", "embed_dim", "intermediate_dim")
_INTS = (
    "phone_vocab_size",
    "audio_vocab_size",
    "embedding_dim",
    "spk_embedding_dim",
    "num_codebooks",
    "num_phone_states",
    "max_look_ahead",
    "audio_window_size",
    "phone_window_size",
)


@dataclass(frozen=True)
class VoxConfig:
    phone: TransformerConfig
    temporal: TransformerConfig
    depth: TransformerConfig
    phone_vocab_size: int
    audio_vocab_size: int
    """Codes a codebook's embedding and head cover: Mimi's codes, then the masked code
    (the unconditional prompt's) and the pad code."""
    audio_pad_size: int
    embedding_dim: int
    spk_embedding_dim: int
    num_codebooks: int
    num_phone_states: int
    """How the phone pointer may move in a frame (``VoxSettings.phone_moves``)."""
    max_look_ahead: int
    audio_window_size: int
    """Frames the temporal transformer keeps: past it, its cache is rebuilt from the
    prompt and the most recent frames."""
    phone_window_size: int


def _former(name: str, data: dict[str, Any], where: Path) -> TransformerConfig:
    extra = data.get("formers") or {}
    if not isinstance(extra, dict):
        raise CheckpointError("formers must be an object of transformer shapes", where)
    if name in extra:
        spec = extra[name]
        if not isinstance(spec, dict) or any(
            not isinstance(spec.get(k), int) or spec[k] <= 0 for k in _FORMER_KEYS
        ):
            raise CheckpointError(
                f"formers.{name} must give positive integers {', '.join(_FORMER_KEYS)}", where
            )
        layers, heads, kv, dim, mlp = (spec[k] for k in _FORMER_KEYS)
    elif name in KNOWN_FORMERS:
        layers, heads, kv, dim, mlp = KNOWN_FORMERS[name]
    else:
        raise CheckpointError(
            f"unknown transformer {name!r}: the reference knows {', '.join(KNOWN_FORMERS)}; "
            "describe others under formers",
            where,
        )
    if dim % heads or heads % kv:
        raise CheckpointError(f"{name}: width {dim}, {heads} heads, {kv} kv heads", where)
    return TransformerConfig(
        hidden_size=dim,
        intermediate_size=mlp,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=dim // heads,
        rms_norm_eps=NORM_EPS,
        rope_theta=ROPE_BASE,
        qk_norm=False,
    )


def is_voxtream_config(data: dict[str, Any]) -> bool:
    """Whether a parsed ``config.json`` is VoXtream's (its three transformers' names)."""
    return all(isinstance(data.get(k), str) for k in ("phone_former", "temp_former", "dep_former"))


def load_config(directory: Path) -> VoxConfig:
    path = Path(directory) / "config.json"
    data = read_json(path)
    if not is_voxtream_config(data):
        raise CheckpointError(
            "not a VoXtream config: phone_former, temp_former and dep_former must name "
            "its transformers",
            path,
        )
    values: dict[str, int] = {}
    for key in (*_INTS, "audio_pad_size"):
        value = data.get(key)
        low = 0 if key == "audio_pad_size" else 1
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise CheckpointError(f"{key} must be an integer >= {low}, got {value!r}", path)
        values[key] = value
    phone = _former(data["phone_former"], data, path)
    temporal = _former(data["temp_former"], data, path)
    depth = _former(data["dep_former"], data, path)
    width = values["embedding_dim"]
    for name, stack in (("phone", phone), ("temporal", temporal), ("depth", depth)):
        if stack.hidden_size != width:
            raise CheckpointError(
                f"the {name} transformer's width {stack.hidden_size} is not embedding_dim "
                f"{width} (phone and audio embeddings are summed into every one)",
                path,
            )
    if values["audio_pad_size"]:
        raise CheckpointError("audio_pad_size other than 0 is not supported", path)
    return VoxConfig(phone=phone, temporal=temporal, depth=depth, **values)
