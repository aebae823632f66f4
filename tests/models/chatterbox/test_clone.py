"""Chatterbox voice cloning: the conditionals from reference audio equal the
reference's ``prepare_conditionals`` on the same file, stored voices round-trip,
and bad reference audio is an error naming ``ref_audio``."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from scipy.io import wavfile

from models.base import ClonedVoice, ModelInputError, SynthParams
from models.chatterbox.loader import load
from models.chatterbox.runner import CLONE_VOICE, ChatterboxRunner, Voice
from tests.models.chatterbox.ckpt import T3Sizes
from tests.models.chatterbox.ckpt_campplus import speechlike
from tests.models.chatterbox.ckpt_full import build_checkpoint
from tests.models.chatterbox.reference import run_reference


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_checkpoint(tmp_path_factory.mktemp("cbx_clone") / "ckpt", seed=2)


@pytest.fixture(scope="module")
def runner(checkpoint: Path) -> ChatterboxRunner:
    runner = load({}, checkpoint).runner
    assert isinstance(runner, ChatterboxRunner)
    return runner


def wav_bytes(seconds: float, rate: int, seed: int) -> bytes:
    """A float32 WAV file of speech-like audio."""
    buffer = io.BytesIO()
    wavfile.write(buffer, rate, speechlike(seconds, seed, rate).astype(np.float32))
    return buffer.getvalue()


def clone(runner: ChatterboxRunner, audio: bytes) -> Voice:
    prepared = runner.prepare(SynthParams(voice=CLONE_VOICE, extra={"ref_audio": audio}))
    assert isinstance(prepared.voice, Voice)  # type: ignore[attr-defined]
    return prepared.voice  # type: ignore[attr-defined]


# 16 s at 24 kHz: T3's prompt is cut at 15 s (375 tokens) and S3Gen's at 10 s; 7 s at
# 44.1 kHz: both prompts whole, the clip resampled to 24 kHz when it is loaded.
CLIPS = {"long24k": (16.0, 24_000, 1), "short44k": (7.0, 44_100, 2)}


def test_clone_conditionals_equal_the_reference(
    checkpoint: Path, runner: ChatterboxRunner, tmp_path: Path
) -> None:
    tasks, ours = [], {}
    for name, (seconds, rate, seed) in CLIPS.items():
        audio = wav_bytes(seconds, rate, seed)
        path = tmp_path / f"{name}.wav"
        path.write_bytes(audio)
        tasks.append({"kind": "clone", "id": name, "wav": str(path)})
        ours[name] = clone(runner, audio)
    sizes = T3Sizes(text_vocab=len(runner.tokenizer)).for_reference()
    ref = run_reference(checkpoint, {"t3_sizes": sizes, "tasks": tasks}, tmp_path / "ref")
    for name, voice in ours.items():
        d = voice.decoder
        prompt = ref[f"{name}.t3_cond_prompt_speech_tokens"].reshape(-1)
        np.testing.assert_array_equal(voice.prompt, prompt, err_msg=name)
        if name == "long24k":
            assert len(prompt) == 375  # 15 s of tokens
        np.testing.assert_array_equal(
            d.prompt_tokens.numpy(), ref[f"{name}.gen_prompt_token"], err_msg=name
        )
        np.testing.assert_allclose(
            voice.speaker, ref[f"{name}.t3_speaker_emb"].reshape(-1), atol=1e-5, err_msg=name
        )
        # Log mel: near-silent bins (log ~ -11) carry the float rounding of the two
        # processes' matmuls (8e-4 seen), hence a relative bound as well.
        np.testing.assert_allclose(
            d.prompt_mel.numpy(), ref[f"{name}.gen_prompt_feat"], atol=1e-4, rtol=1e-4, err_msg=name
        )
        np.testing.assert_allclose(
            d.embedding.numpy(), ref[f"{name}.gen_embedding"], atol=1e-4, err_msg=name
        )
        frames = int(50 * min(CLIPS[name][0], 10))  # 50 mel frames a second, 10 s at most
        assert d.prompt_mel.shape == (1, frames, 80) and d.prompt_tokens.shape[1] <= frames // 2


def test_a_stored_voice_round_trips(runner: ChatterboxRunner) -> None:
    audio = wav_bytes(6.0, 16_000, 3)
    stored = runner.clone_voice(audio, {})
    name, extra = runner.voice_settings(stored)
    assert name == CLONE_VOICE
    again, direct = extra["voice_prompt"], clone(runner, audio)
    np.testing.assert_array_equal(again.speaker, direct.speaker)
    np.testing.assert_array_equal(again.prompt, direct.prompt)
    for a, b in zip(
        (again.decoder.prompt_tokens, again.decoder.prompt_mel, again.decoder.embedding),
        (direct.decoder.prompt_tokens, direct.decoder.prompt_mel, direct.decoder.embedding),
        strict=True,
    ):
        assert a.shape == b.shape and (a == b).all()
    # Speaking with it: a prepared context carries its decoder conditioning.
    prepared = runner.prepare(SynthParams(voice=name, extra=extra))
    assert prepared.conditioning is not None and prepared.voice is again  # type: ignore[attr-defined]


def test_a_stored_voice_of_another_model_is_refused(runner: ChatterboxRunner) -> None:
    stored = runner.clone_voice(wav_bytes(6.0, 24_000, 4), {})
    wrong = dict(stored.arrays, speaker=np.zeros(1024, np.float32))  # a Qwen3-sized one
    with pytest.raises(ModelInputError, match="speaker") as err:
        runner.voice_settings(ClonedVoice(wrong))
    assert err.value.param == "voice"
    tokens = dict(stored.arrays, prompt=np.asarray([7000], np.int64))
    with pytest.raises(ModelInputError, match="prompt"):
        runner.voice_settings(ClonedVoice(tokens))


@pytest.mark.parametrize(
    ("audio", "message"),
    [
        (wav_bytes(3.0, 24_000, 5), "too short"),
        (b"RIFF this is not audio at all" * 40, "ref_audio"),
        ("not base64 !!", "base64"),
        (np.zeros(24_000 * 6, np.float32).tobytes(), "ref_audio"),
    ],
    ids=["too-short", "not-audio", "not-base64", "headerless"],
)
def test_bad_reference_audio_names_the_field(
    runner: ChatterboxRunner, audio: object, message: str
) -> None:
    with pytest.raises(ModelInputError, match=message) as err:
        runner.prepare(SynthParams(voice=CLONE_VOICE, extra={"ref_audio": audio}))
    assert err.value.param == "ref_audio"


def test_silence_and_a_missing_clip_are_errors(runner: ChatterboxRunner) -> None:
    silent = {"ref_audio": [0.0] * (24_000 * 6), "ref_audio_sample_rate": 24_000}
    with pytest.raises(ModelInputError, match="silent") as err:
        runner.prepare(SynthParams(voice=CLONE_VOICE, extra=silent))
    assert err.value.param == "ref_audio"
    with pytest.raises(ModelInputError, match="needs reference audio") as err:
        runner.validate(SynthParams(voice=CLONE_VOICE))
    assert err.value.param == "ref_audio"
    # Another context goes on with the built-in voice.
    assert runner.prepare(SynthParams(voice="default")).voice is runner.voices["default"]  # type: ignore[attr-defined]
