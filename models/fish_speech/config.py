"""Fish Speech S2 Pro's ``config.json`` (``model_type: fish_qwen3_omni``) as typed objects.

The file keeps Fish Speech's own field names (``dim``, ``n_head``, ``n_local_heads``
...) under ``text_config`` (the slow transformer) and ``audio_decoder_config`` (the
fast one); the semantic tokens' ids sit at the top. As the reference reads it, the
fast transformer takes the slow one's rotary base and norm epsilon, and a speech
position's input is scaled by ``1/sqrt(num_codebooks + 1)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models.blocks.llama import TransformerConfig
from models.checkpoint import CheckpointError, read_json

MODEL_TYPE = "fish_qwen3_omni"


@dataclass(frozen=True)
class FishConfig:
    slow: TransformerConfig
    fast: TransformerConfig
    vocab_size: int
    """Text, control and semantic tokens of the slow transformer."""
    codebook_size: int
    """Entries of a codebook as the transformers see them (the semantic one's size;
    the fast head predicts this many ids)."""
    num_codebooks: int
    """Codes per frame: the semantic code, then the residual ones."""
    semantic_begin: int
    """Token id of ``<|semantic:0|>``; the semantic tokens are contiguous."""
    semantic_end: int
    tie_word_embeddings: bool
    max_seq_len: int

    @property
    def semantic_count(self) -> int:
        return self.semantic_end - self.semantic_begin + 1


def _int(section: dict[str, Any], key: str, where: Path, default: int | None = None) -> int:
    value = section.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise CheckpointError(f"{key} must be a positive integer, got {value!r}", where)
    return value


def _stack(section: dict[str, Any], where: Path, rope: float, eps: float) -> TransformerConfig:
    for flag in ("attention_qkv_bias", "attention_o_bias"):
        if section.get(flag):
            raise CheckpointError(f"{flag}: attention biases are not supported", where)
    heads = _int(section, "n_head", where)
    kv_heads = section.get("n_local_heads", -1)
    kv_heads = heads if kv_heads in (-1, None) else _int(section, "n_local_heads", where)
    dim = _int(section, "dim", where)
    head_dim = section.get("head_dim") or dim // heads
    if heads % kv_heads:
        raise CheckpointError(
            f"n_head {heads} is not a multiple of n_local_heads {kv_heads}", where
        )
    return TransformerConfig(
        hidden_size=dim,
        intermediate_size=_int(section, "intermediate_size", where),
        num_layers=_int(section, "n_layer", where),
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=int(head_dim),
        rms_norm_eps=eps,
        rope_theta=rope,
        qk_norm=bool(section.get("attention_qk_norm", False)),
    )


def load_config(directory: Path) -> FishConfig:
    path = Path(directory) / "config.json"
    data = read_json(path)
    if data.get("model_type") != MODEL_TYPE:
        raise CheckpointError(
            f"model_type must be {MODEL_TYPE!r} (Fish Speech S2 Pro), got {data.get('model_type')!r}",
            path,
        )
    text, audio = data.get("text_config"), data.get("audio_decoder_config")
    if not isinstance(text, dict) or not isinstance(audio, dict):
        raise CheckpointError("needs text_config and audio_decoder_config objects", path)
    rope = float(text.get("rope_base", 10000.0))
    eps = float(text.get("norm_eps", 1e-5))
    cfg = FishConfig(
        slow=_stack(text, path, rope, eps),
        fast=_stack(audio, path, rope, eps),
        vocab_size=_int(text, "vocab_size", path),
        codebook_size=_int(audio, "vocab_size", path),
        num_codebooks=_int(audio, "num_codebooks", path),
        semantic_begin=_int(data, "semantic_start_token_id", path),
        semantic_end=_int(data, "semantic_end_token_id", path),
        tie_word_embeddings=bool(text.get("tie_word_embeddings", True)),
        max_seq_len=_int(text, "max_seq_len", path, 2048),
    )
    if not cfg.semantic_begin <= cfg.semantic_end < cfg.vocab_size:
        raise CheckpointError(
            "semantic_start_token_id..semantic_end_token_id must lie inside the vocabulary "
            f"({cfg.vocab_size}), got {cfg.semantic_begin}..{cfg.semantic_end}",
            path,
        )
    if cfg.semantic_count > cfg.codebook_size:
        raise CheckpointError(
            f"{cfg.semantic_count} semantic tokens but codebooks of {cfg.codebook_size}", path
        )
    if cfg.num_codebooks < 2:
        raise CheckpointError("num_codebooks must be at least 2", path)
    return cfg
