"""The ``elevenlabs`` Python SDK, unchanged but for its ``base_url``, against the real
server on loopback with the Piper voice: ``text_to_speech.convert`` / ``stream`` /
``convert_with_timestamps`` / ``stream_with_timestamps`` in every output format
(decoded by FFmpeg through PyAV), ``text_to_dialogue``, the voice listings, and errors as
the SDK raises them.

The SDK's ``convert_realtime`` always dials ``wss://`` (TLS), so it needs a TLS proxy in
front of this server; the socket it speaks is tested raw in
``tests/e2e/test_compat_elevenlabs.py``."""

from __future__ import annotations

import base64
import io
import wave
from collections.abc import Iterator

import av
import httpx
import numpy as np
import pytest
from elevenlabs import DialogueInput, ElevenLabs, VoiceSettings
from elevenlabs.core.api_error import ApiError
from elevenlabs.errors import UnprocessableEntityError

from tests.clients.elevenlabs_piper import KEY, VOICE, piper_server
from tests.serving import RunningServer

TEXT = "Hello there, how are you today?"


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with piper_server() as running:
        yield running


@pytest.fixture(scope="module")
def client(server: RunningServer) -> ElevenLabs:
    return ElevenLabs(api_key=KEY, base_url=server.http)


@pytest.fixture(scope="module")
def reference(client: ElevenLabs) -> np.ndarray:
    """The text as 24 kHz PCM: what every other format is compared with."""
    data = b"".join(client.text_to_speech.convert(VOICE, text=TEXT, output_format="pcm_24000"))
    return np.frombuffer(data, "<i2")


def decode(data: bytes, fmt: str | None = None, rate: int | None = None) -> tuple[int, int]:
    """Samples and rate of ``data`` as FFmpeg decodes it."""
    options = {"sample_rate": str(rate), "ac": "1"} if rate else {}
    with av.open(io.BytesIO(data), format=fmt, options=options) as container:
        samples = sum(frame.samples for frame in container.decode(audio=0))
        return samples, container.streams.audio[0].rate


def test_convert_defaults_to_mp3(client: ElevenLabs, reference: np.ndarray) -> None:
    data = b"".join(
        client.text_to_speech.convert(VOICE, text=TEXT, model_id="eleven_multilingual_v2")
    )
    samples, rate = decode(data)
    assert rate == 44100
    seconds = len(reference) / 24000
    assert seconds > 1.5 and seconds - 0.01 <= samples / rate <= seconds + 0.15


@pytest.mark.parametrize(
    ("output_format", "fmt", "rate"),
    [
        ("pcm_16000", "s16le", 16000),
        ("pcm_32000", "s16le", 32000),
        ("ulaw_8000", "mulaw", 8000),
        ("alaw_8000", "alaw", 8000),
        ("mp3_22050_32", None, 22050),
        ("opus_48000_32", None, 48000),
        ("wav_22050", None, 22050),
    ],
)
def test_stream_in_every_format(
    client: ElevenLabs, reference: np.ndarray, output_format: str, fmt: str | None, rate: int
) -> None:
    data = b"".join(client.text_to_speech.stream(VOICE, text=TEXT, output_format=output_format))
    samples, decoded_rate = decode(data, fmt, rate if fmt else None)
    assert decoded_rate == rate
    seconds = len(reference) / 24000
    assert seconds - 0.01 <= samples / rate <= seconds + 0.15


def test_language_and_speed(client: ElevenLabs, reference: np.ndarray) -> None:
    # A language the model does not speak is ignored, as ElevenLabs ignores one its
    # model does not support; speed applies.
    data = b"".join(
        client.text_to_speech.convert(
            VOICE,
            text=TEXT,
            output_format="pcm_24000",
            language_code="de",
            voice_settings=VoiceSettings(stability=0.5, similarity_boost=0.75, speed=0.8),
        )
    )
    assert 1.15 < len(data) / 2 / len(reference) < 1.35


def test_convert_wav_is_one_file_with_its_length(client: ElevenLabs, reference: np.ndarray) -> None:
    data = b"".join(client.text_to_speech.convert(VOICE, text=TEXT, output_format="wav_24000"))
    with wave.open(io.BytesIO(data)) as wav:
        assert (wav.getframerate(), wav.getnchannels(), wav.getsampwidth()) == (24000, 1, 2)
        assert wav.getnframes() == len(reference)


def test_convert_with_timestamps(client: ElevenLabs) -> None:
    answer = client.text_to_speech.convert_with_timestamps(
        VOICE, text=TEXT, output_format="pcm_24000"
    )
    seconds = len(base64.b64decode(answer.audio_base_64)) / 2 / 24000
    alignment = answer.alignment
    assert alignment is not None and answer.normalized_alignment == alignment
    assert "".join(alignment.characters) == TEXT
    starts = alignment.character_start_times_seconds
    ends = alignment.character_end_times_seconds
    assert starts == sorted(starts) and all(s <= e for s, e in zip(starts, ends, strict=True))
    assert starts[0] < 0.3 and abs(ends[-1] - seconds) < 0.002


def test_stream_with_timestamps(client: ElevenLabs) -> None:
    text = "Hello there. How are you today? I am fine."
    chunks = list(
        client.text_to_speech.stream_with_timestamps(VOICE, text=text, output_format="pcm_16000")
    )
    assert len(chunks) > 2
    audio = b"".join(base64.b64decode(c.audio_base_64) for c in chunks)
    seconds = len(audio) / 2 / 16000
    aligned = [c.alignment for c in chunks if c.alignment is not None]
    assert "".join(ch for a in aligned for ch in a.characters) == text
    # Times count from the start of the response, never decreasing.
    starts = [s for a in aligned for s in a.character_start_times_seconds]
    ends = [e for a in aligned for e in a.character_end_times_seconds]
    assert starts == sorted(starts) and ends == sorted(ends)
    assert ends[-1] <= seconds + 0.002 and ends[-1] > seconds - 0.5


def test_text_to_dialogue(client: ElevenLabs, reference: np.ndarray) -> None:
    inputs = [DialogueInput(text=TEXT, voice_id=VOICE), DialogueInput(text=TEXT, voice_id="JOE")]
    data = b"".join(client.text_to_dialogue.convert(inputs=inputs, output_format="pcm_24000"))
    # The inputs are spoken one after another, each as on its own.
    assert abs(len(data) / 2 - 2 * len(reference)) < 0.01 * len(reference)
    with pytest.raises(ApiError) as unknown:
        b"".join(
            client.text_to_dialogue.stream(inputs=[DialogueInput(text=TEXT, voice_id="nobody")])
        )
    assert unknown.value.status_code == 404


def test_voices(client: ElevenLabs) -> None:
    listed = client.voices.get_all()
    assert [(v.voice_id, v.name, v.category) for v in listed.voices] == [(VOICE, VOICE, "premade")]
    page = client.voices.search(page_size=5, search="jo")
    assert [v.voice_id for v in page.voices] == [VOICE]
    assert page.total_count == 1 and page.has_more is False and page.next_page_token is None
    assert client.voices.search(search="nobody").voices == []
    assert client.voices.get(VOICE).labels == {"language": "en"}
    with pytest.raises(ApiError) as missing:
        client.voices.get("nobody")
    assert missing.value.status_code == 404
    assert missing.value.body["detail"]["status"] == "voice_not_found"


def test_errors_as_the_sdk_raises_them(client: ElevenLabs, server: RunningServer) -> None:
    with pytest.raises(ApiError) as unknown:
        b"".join(client.text_to_speech.convert("nobody", text=TEXT))
    assert unknown.value.status_code == 404
    assert unknown.value.body["detail"]["status"] == "voice_not_found"
    assert VOICE in unknown.value.body["detail"]["message"]
    with pytest.raises(UnprocessableEntityError) as bad_format:
        b"".join(client.text_to_speech.convert(VOICE, text=TEXT, output_format="mp3_8000_1"))
    assert "output_format" in bad_format.value.body["detail"]["message"]
    with pytest.raises(ApiError) as bad_model:
        b"".join(client.text_to_speech.convert(VOICE, text=TEXT, model_id="tts-1-hd"))
    assert bad_model.value.body["detail"]["status"] == "model_not_found"
    wrong_key = ElevenLabs(api_key="wrong", base_url=server.http)
    with pytest.raises(ApiError) as refused:
        wrong_key.voices.get_all()
    assert refused.value.status_code == 401
    # What the SDK cannot send: an unknown field is named.
    answer = httpx.post(
        f"{server.http}/v1/text-to-speech/{VOICE}",
        headers={"xi-api-key": KEY},
        json={"text": TEXT, "speaker": "x"},
    )
    assert answer.status_code == 422 and "`speaker`" in answer.json()["detail"]["message"]
