"""Typed views of a Qwen3-TTS checkpoint's config.json and speech_tokenizer/config.json.

Only the keys the model needs are read; a missing required key raises
``CheckpointError`` naming the file and the dotted key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from models.blocks.llama import TransformerConfig
from models.checkpoint import CheckpointError


class _Reader:
    def __init__(self, data: Mapping[str, Any], where: str) -> None:
        self.data = data
        self.where = where

    def req(self, key: str) -> Any:
        if key not in self.data or self.data[key] is None:
            raise CheckpointError(f"{self.where}: missing key {key!r}")
        return self.data[key]

    def get(self, key: str, default: Any) -> Any:
        value = self.data.get(key)
        return default if value is None else value

    def sub(self, key: str) -> _Reader:
        value = self.req(key)
        if not isinstance(value, Mapping):
            raise CheckpointError(f"{self.where}: {key!r} must be an object")
        return _Reader(value, f"{self.where}.{key}")


def _transformer(r: _Reader) -> TransformerConfig:
    hidden = int(r.req("hidden_size"))
    heads = int(r.req("num_attention_heads"))
    return TransformerConfig(
        hidden_size=hidden,
        intermediate_size=int(r.req("intermediate_size")),
        num_layers=int(r.req("num_hidden_layers")),
        num_heads=heads,
        num_kv_heads=int(r.get("num_key_value_heads", heads)),
        head_dim=int(r.get("head_dim", hidden // heads)),
        rms_norm_eps=float(r.get("rms_norm_eps", 1e-6)),
        rope_theta=float(r.get("rope_theta", 10000.0)),
    )


@dataclass(frozen=True)
class TalkerConfig:
    stack: TransformerConfig
    predictor: TransformerConfig
    vocab_size: int
    """Codec vocabulary of the talker (codebook + 1024 control ids)."""
    predictor_vocab_size: int
    """Entries of each residual codebook."""
    num_code_groups: int
    text_vocab_size: int
    text_hidden_size: int
    codec_pad_id: int
    codec_bos_id: int
    codec_eos_id: int
    codec_think_id: int
    codec_nothink_id: int
    codec_think_bos_id: int
    codec_think_eos_id: int
    speaker_ids: dict[str, int]
    speaker_dialects: dict[str, str | None]
    language_ids: dict[str, int]


@dataclass(frozen=True)
class SpeakerEncoderConfig:
    mel_dim: int
    enc_dim: int
    enc_channels: tuple[int, ...]
    enc_kernel_sizes: tuple[int, ...]
    enc_dilations: tuple[int, ...]
    enc_attention_channels: int
    enc_res2net_scale: int
    enc_se_channels: int
    sample_rate: int


@dataclass(frozen=True)
class Qwen3TTSConfig:
    talker: TalkerConfig
    speaker_encoder: SpeakerEncoderConfig | None
    model_type: str
    """``custom_voice``, ``voice_design`` or ``base``."""
    model_size: str
    """``0b6`` or ``1b7`` as the checkpoint declares it."""
    tokenizer_type: str
    im_start_id: int
    im_end_id: int
    tts_pad_id: int
    tts_bos_id: int
    tts_eos_id: int
    transformers_version: str

    @property
    def supports_instructions(self) -> bool:
        # The reference drops instructions on the 0.6B CustomVoice model.
        if self.model_type == "voice_design":
            return True
        return self.model_type == "custom_voice" and self.model_size not in "0b6"


MODEL_TYPES = ("custom_voice", "voice_design", "base")


def parse_config(data: Mapping[str, Any], where: str = "config.json") -> Qwen3TTSConfig:
    r = _Reader(data, where)
    model_type = str(r.req("tts_model_type"))
    if model_type not in MODEL_TYPES:
        raise CheckpointError(
            f"{where}: tts_model_type {model_type!r} is not one of {', '.join(MODEL_TYPES)}"
        )
    t = r.sub("talker_config")
    p = t.sub("code_predictor_config")
    dialects = t.get("spk_is_dialect", {})
    talker = TalkerConfig(
        stack=_transformer(t),
        predictor=_transformer(p),
        vocab_size=int(t.req("vocab_size")),
        predictor_vocab_size=int(p.req("vocab_size")),
        num_code_groups=int(t.req("num_code_groups")),
        text_vocab_size=int(t.req("text_vocab_size")),
        text_hidden_size=int(t.req("text_hidden_size")),
        codec_pad_id=int(t.req("codec_pad_id")),
        codec_bos_id=int(t.req("codec_bos_id")),
        codec_eos_id=int(t.req("codec_eos_token_id")),
        codec_think_id=int(t.req("codec_think_id")),
        codec_nothink_id=int(t.req("codec_nothink_id")),
        codec_think_bos_id=int(t.req("codec_think_bos_id")),
        codec_think_eos_id=int(t.req("codec_think_eos_id")),
        speaker_ids={str(k).lower(): int(v) for k, v in t.get("spk_id", {}).items()},
        speaker_dialects={str(k).lower(): (str(v) if v else None) for k, v in dialects.items()},
        language_ids={str(k).lower(): int(v) for k, v in t.req("codec_language_id").items()},
    )
    if talker.vocab_size != talker.predictor_vocab_size + 1024:
        raise CheckpointError(
            f"{where}: talker_config.vocab_size must be code_predictor_config.vocab_size + 1024"
        )
    speaker = None
    if model_type == "base":
        s = r.sub("speaker_encoder_config")
        speaker = SpeakerEncoderConfig(
            mel_dim=int(s.get("mel_dim", 128)),
            enc_dim=int(s.req("enc_dim")),
            enc_channels=tuple(int(x) for x in s.get("enc_channels", [512, 512, 512, 512, 1536])),
            enc_kernel_sizes=tuple(int(x) for x in s.get("enc_kernel_sizes", [5, 3, 3, 3, 1])),
            enc_dilations=tuple(int(x) for x in s.get("enc_dilations", [1, 2, 3, 4, 1])),
            enc_attention_channels=int(s.get("enc_attention_channels", 128)),
            enc_res2net_scale=int(s.get("enc_res2net_scale", 8)),
            enc_se_channels=int(s.get("enc_se_channels", 128)),
            sample_rate=int(s.get("sample_rate", 24000)),
        )
    return Qwen3TTSConfig(
        talker=talker,
        speaker_encoder=speaker,
        model_type=model_type,
        model_size=str(r.get("tts_model_size", "")),
        tokenizer_type=str(r.get("tokenizer_type", "qwen3_tts_tokenizer_12hz")),
        im_start_id=int(r.get("im_start_token_id", 151644)),
        im_end_id=int(r.get("im_end_token_id", 151645)),
        tts_pad_id=int(r.get("tts_pad_token_id", 151671)),
        tts_bos_id=int(r.get("tts_bos_token_id", 151672)),
        tts_eos_id=int(r.get("tts_eos_token_id", 151673)),
        transformers_version=str(r.get("transformers_version", "")),
    )


@dataclass(frozen=True)
class DecoderConfig:
    """Code2Wav (the 12 Hz tokenizer's decoder)."""

    codebook_size: int
    codebook_dim: int
    num_quantizers: int
    hidden_size: int
    latent_dim: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    sliding_window: int
    rope_theta: float
    rms_norm_eps: float
    upsample_rates: tuple[int, ...]
    upsampling_ratios: tuple[int, ...]
    decoder_dim: int

    @property
    def total_upsample(self) -> int:
        total = 1
        for factor in (*self.upsample_rates, *self.upsampling_ratios):
            total *= factor
        return total


@dataclass(frozen=True)
class MimiEncoderConfig:
    """The 12 Hz tokenizer's encoder (a Mimi encoder without its decoder)."""

    sampling_rate: int
    hidden_size: int
    num_filters: int
    num_residual_layers: int
    upsampling_ratios: tuple[int, ...]
    kernel_size: int
    last_kernel_size: int
    residual_kernel_size: int
    dilation_growth_rate: int
    compress: int
    use_conv_shortcut: bool
    pad_mode: str
    codebook_size: int
    codebook_dim: int
    num_quantizers: int
    num_semantic_quantizers: int
    vq_hidden_dim: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    norm_eps: float
    rope_theta: float
    frame_rate: float

    @property
    def encodec_frame_rate(self) -> int:
        hop = 1
        for ratio in self.upsampling_ratios:
            hop *= ratio
        return -(-self.sampling_rate // hop)


@dataclass(frozen=True)
class SpeechTokenizerConfig:
    decoder: DecoderConfig
    encoder: MimiEncoderConfig
    encoder_valid_num_quantizers: int
    input_sample_rate: int
    output_sample_rate: int
    decode_upsample_rate: int
    encode_downsample_rate: int


def parse_speech_tokenizer_config(
    data: Mapping[str, Any], where: str = "speech_tokenizer/config.json"
) -> SpeechTokenizerConfig:
    r = _Reader(data, where)
    model_type = r.get("model_type", "qwen3_tts_tokenizer_12hz")
    if model_type != "qwen3_tts_tokenizer_12hz":
        raise CheckpointError(
            f"{where}: model_type {model_type!r} is not supported (only qwen3_tts_tokenizer_12hz)"
        )
    d = r.sub("decoder_config")
    heads = int(d.get("num_attention_heads", 16))
    hidden = int(d.get("hidden_size", 1024))
    decoder = DecoderConfig(
        codebook_size=int(d.get("codebook_size", 2048)),
        codebook_dim=int(d.req("codebook_dim")),
        num_quantizers=int(d.get("num_quantizers", 16)),
        hidden_size=hidden,
        latent_dim=int(d.get("latent_dim", 1024)),
        num_layers=int(d.get("num_hidden_layers", 8)),
        num_heads=heads,
        num_kv_heads=int(d.get("num_key_value_heads", heads)),
        head_dim=int(d.get("head_dim", hidden // heads)),
        intermediate_size=int(d.get("intermediate_size", 3072)),
        sliding_window=int(d.get("sliding_window", 72)),
        rope_theta=float(d.get("rope_theta", 10000.0)),
        rms_norm_eps=float(d.get("rms_norm_eps", 1e-5)),
        upsample_rates=tuple(int(x) for x in d.get("upsample_rates", [8, 5, 4, 3])),
        upsampling_ratios=tuple(int(x) for x in d.get("upsampling_ratios", [2, 2])),
        decoder_dim=int(d.get("decoder_dim", 1536)),
    )
    e = r.sub("encoder_config")
    e_hidden = int(e.get("hidden_size", 512))
    e_heads = int(e.get("num_attention_heads", 8))
    ratios = tuple(int(x) for x in e.get("upsampling_ratios", [8, 6, 5, 4]))
    encoder = MimiEncoderConfig(
        sampling_rate=int(e.get("sampling_rate", 24000)),
        hidden_size=e_hidden,
        num_filters=int(e.get("num_filters", 64)),
        num_residual_layers=int(e.get("num_residual_layers", 1)),
        upsampling_ratios=ratios,
        kernel_size=int(e.get("kernel_size", 7)),
        last_kernel_size=int(e.get("last_kernel_size", 3)),
        residual_kernel_size=int(e.get("residual_kernel_size", 3)),
        dilation_growth_rate=int(e.get("dilation_growth_rate", 2)),
        compress=int(e.get("compress", 2)),
        use_conv_shortcut=bool(e.get("use_conv_shortcut", False)),
        pad_mode=str(e.get("pad_mode", "constant")),
        codebook_size=int(e.get("codebook_size", 2048)),
        codebook_dim=int(e.get("codebook_dim", 256)),
        num_quantizers=int(e.get("num_quantizers", 32)),
        num_semantic_quantizers=int(e.get("num_semantic_quantizers", 1)),
        vq_hidden_dim=int(e.get("vector_quantization_hidden_dimension", 256)),
        num_layers=int(e.get("num_hidden_layers", 8)),
        num_heads=e_heads,
        num_kv_heads=int(e.get("num_key_value_heads", e_heads)),
        head_dim=int(e.get("head_dim", e_hidden // e_heads)),
        intermediate_size=int(e.get("intermediate_size", 2048)),
        norm_eps=float(e.get("norm_eps", 1e-5)),
        rope_theta=float(e.get("rope_theta", 10000.0)),
        frame_rate=float(e.get("frame_rate", 12.5)),
    )
    return SpeechTokenizerConfig(
        decoder=decoder,
        encoder=encoder,
        encoder_valid_num_quantizers=int(r.get("encoder_valid_num_quantizers", 16)),
        input_sample_rate=int(r.get("input_sample_rate", 24000)),
        output_sample_rate=int(r.get("output_sample_rate", 24000)),
        decode_upsample_rate=int(r.get("decode_upsample_rate", 1920)),
        encode_downsample_rate=int(r.get("encode_downsample_rate", 1920)),
    )
