from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.models.qwen3_tts.ckpt import BuildOptions, build_checkpoint
from tests.serving import RunningServer, run_server
from voiceserver.config import Limits, ServerConfig, load_model_config

TEST_LIMITS = Limits(max_contexts=4, max_text_chars=2000, max_message_bytes=64 * 1024)


@pytest.fixture(scope="module")
def tiny_server() -> Iterator[RunningServer]:
    with run_server(load_model_config("tiny"), ServerConfig(limits=TEST_LIMITS)) as server:
        yield server


@pytest.fixture(scope="session")
def base_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Qwen3-TTS 0.6B Base checkpoint (voice cloning), built once per run."""
    root = tmp_path_factory.mktemp("base_ckpt")
    return build_checkpoint(root / "base", BuildOptions(variant="base", size_name="0b6"))
