"""Baseten's voice messages on the vllm-omni socket, as a raw client sends them (the
shapes of basetenlabs/vllm-omni's server): answered at any time, before the first
``session.config`` too, from the same store and checks as ``/v1/audio/voices``."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.test_compat_http_tasks import reference_wav
from tests.e2e.test_compat_vllm import VllmClient
from tests.serving import RunningServer, run_server
from voiceserver.config import ServerConfig, config_for_checkpoint, with_checkpoint


@pytest.fixture(scope="module")
def base_server(base_checkpoint: Path) -> Iterator[RunningServer]:
    config = with_checkpoint(
        config_for_checkpoint(base_checkpoint, {"max_frames": 40}), base_checkpoint
    )
    with run_server(config, ServerConfig()) as server:
        yield server


AUDIO = base64.b64encode(reference_wav()).decode()


async def test_voice_messages_before_and_after_the_config(base_server: RunningServer) -> None:
    client = await VllmClient.connect(base_server)
    try:
        # Before any session.config: answered, and the socket stays open.
        listed = await ask(client, type="voice.list")
        assert listed["type"] == "voice.list.result" and listed["uploaded_voices"] == []
        refused = await ask(client, type="voice.add", name="v1", consent=5, audio_data=AUDIO)
        assert refused["type"] == "voice.add.result" and refused["success"] is False
        assert "consent" in refused["error"]
        refused = await ask(client, type="voice.add", name="v1", speaker_embedding=[0.1, 0.2])
        assert refused["success"] is False and "speaker_embedding" in refused["error"]
        refused = await ask(client, type="voice.add", name="v1", audio_data="%%%")
        assert refused["success"] is False and "audio_data" in refused["error"]
        refused = await ask(client, type="voice.add", name="v1")
        assert refused["success"] is False and "audio_data: required" in refused["error"]

        added = await ask(
            client, type="voice.add", name="v1", consent="ok", audio_data=AUDIO, audio_format="wav"
        )
        assert added["type"] == "voice.add.result" and added["success"] is True
        voice = added["voice"]
        assert (voice["name"], voice["consent"], voice["mime_type"]) == ("v1", "ok", "audio/wav")
        assert voice["x_vector_only"] is True  # no ref_text: the speaker embedding alone

        # The same store as HTTP.
        async with httpx.AsyncClient() as http:
            listing = (await http.get(f"{base_server.http}/v1/audio/voices")).json()
        assert [v["name"] for v in listing["uploaded_voices"]] == ["v1"]

        # A session speaks in it by name.
        await client.send(
            type="session.config",
            task_type="Base",
            voice="v1",
            response_format="pcm",
            max_new_tokens=3,
            seed=1,
        )
        said = await client.speak(["Hello there."])
        assert said.errors == [] and said.sentences[0].data

        removed = await ask(client, type="voice.remove", name="v1")
        assert removed == {"type": "voice.remove.result", "success": True, "name": "v1"}
        again = await ask(client, type="voice.remove", name="v1")
        assert again["success"] is False and "not an uploaded voice" in again["error"]
        listed = await ask(client, type="voice.list")
        assert listed["uploaded_voices"] == []
    finally:
        await client.close()


async def ask(client: VllmClient, **msg: object) -> dict:
    await client.send(**msg)
    return await client.next_message()
