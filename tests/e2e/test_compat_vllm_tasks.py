"""The vllm-omni socket checks ``task_type`` against the loaded variant and reads a
``ref_audio`` path inside the allowed folder, through the same mapper as HTTP."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_compat_http_tasks import reference_wav
from tests.e2e.test_compat_vllm import VllmClient
from tests.models.qwen3_tts.ckpt import BuildOptions, build_checkpoint
from tests.serving import RunningServer, run_server
from voiceserver.config import MediaConfig, ServerConfig, config_for_checkpoint, with_checkpoint

SHORT = {"max_new_tokens": 3, "seed": 1}


def serve(checkpoint: Path, server: ServerConfig | None = None) -> Iterator[RunningServer]:
    config = with_checkpoint(config_for_checkpoint(checkpoint, {"max_frames": 40}), checkpoint)
    with run_server(config, server or ServerConfig()) as running:
        yield running


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("compat_vllm_tasks")


@pytest.fixture(scope="module")
def custom_voice(root: Path) -> Iterator[RunningServer]:
    yield from serve(build_checkpoint(root / "cv", BuildOptions(variant="custom_voice")))


@pytest.fixture(scope="module")
def media(root: Path) -> Path:
    folder = root / "media"
    folder.mkdir()
    (folder / "ref.wav").write_bytes(reference_wav())
    (root / "outside.wav").write_bytes(reference_wav())
    os.symlink(root / "outside.wav", folder / "escape.wav")
    return folder


@pytest.fixture(scope="module")
def base(root: Path, media: Path) -> Iterator[RunningServer]:
    ckpt = build_checkpoint(root / "base", BuildOptions(variant="base", size_name="0b6"))
    yield from serve(ckpt, ServerConfig(media=MediaConfig(allowed_local_media_path=media)))


async def config_error(client: VllmClient, **config: object) -> dict:
    await client.send(type="session.config", **config)
    reply = await client.next_message()
    assert reply["type"] == "error", reply
    return reply


async def test_task_type_the_variant_cannot_do_is_refused_and_the_socket_goes_on(
    custom_voice: RunningServer,
) -> None:
    client = await VllmClient.connect(custom_voice)
    try:
        # A bad first config closes the socket (as vllm-omni does); later ones do not.
        await client.send(type="session.config", response_format="pcm", **SHORT)
        for task in ("Base", "VoiceDesign"):
            err = await config_error(
                client, task_type=task, instructions="calm", ref_audio="AAAA", **SHORT
            )
            assert "task_type" in err["message"] and "CustomVoice" in err["message"]
        err = await config_error(client, task_type="CustomVoice", ref_text="words", **SHORT)
        assert "only valid for Base task" in err["message"]
        await client.send(
            type="session.config", task_type="CustomVoice", response_format="pcm", **SHORT
        )
        said = await client.speak(["Hello there."])
        assert said.errors == [] and said.sentences and said.sentences[0].data
    finally:
        await client.close()


async def test_ref_audio_path_is_read_inside_the_allowed_folder_only(
    base: RunningServer, media: Path
) -> None:
    client = await VllmClient.connect(base)
    try:
        await client.send(
            type="session.config",
            task_type="Base",
            ref_audio=str(media / "ref.wav"),
            x_vector_only_mode=True,
            **SHORT,
        )
        for refused in (str(media / "escape.wav"), str(media.parent / "outside.wav")):
            err = await config_error(
                client, task_type="Base", ref_audio=refused, x_vector_only_mode=True, **SHORT
            )
            assert "ref_audio" in err["message"], err
        for named in (str(media / "ref.wav"), (media / "ref.wav").as_uri()):
            await client.send(
                type="session.config",
                task_type="Base",
                ref_audio=named,
                x_vector_only_mode=True,
                response_format="pcm",
                **SHORT,
            )
            said = await client.speak(["Hello there."])
            assert said.errors == [] and said.sentences and said.sentences[0].data
    finally:
        await client.close()
