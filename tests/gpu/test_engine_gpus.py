"""``serve --gpus``: an engine process pinned to each listed GPU, serving through one
port. Runs only where a GPU is present (the lent H200); CI has none."""

from __future__ import annotations

import json
from collections.abc import Iterator
from urllib.request import Request, urlopen

import pytest
import torch

from tests.models.qwen3_tts.ckpt import BuildOptions, build_checkpoint
from tests.serving import RunningServer, run_server
from voiceserver.config import (
    EnginesConfig,
    ServerConfig,
    config_for_checkpoint,
    with_checkpoint,
)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.fixture(scope="module")
def pinned(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    checkpoint = build_checkpoint(
        tmp_path_factory.mktemp("gpus") / "cv", BuildOptions(variant="custom_voice", seed=2)
    )
    options = {"device": "cuda", "dtype": "bfloat16", "max_frames": 40}
    config = with_checkpoint(config_for_checkpoint(checkpoint, options), checkpoint)
    gpus = tuple(range(torch.cuda.device_count()))
    with run_server(config, ServerConfig(engines=EnginesConfig.on_gpus(gpus))) as server:
        yield server


def speak(server: RunningServer, body: dict) -> bytes:
    request = Request(
        f"{server.http}/v1/audio/speech",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    with urlopen(request, timeout=120) as response:  # an error status raises
        return response.read()


def test_each_gpu_has_its_engine_process_and_speech_comes_back(pinned: RunningServer) -> None:
    health = json.loads(urlopen(f"{pinned.http}/health", timeout=30).read())
    engines = health["engines"]
    assert len(engines) == torch.cuda.device_count()
    assert [e["device"] for e in engines] == [
        f"cuda (GPU {i})" for i in range(torch.cuda.device_count())
    ]
    assert all(e["up"] and e["kv_blocks_total"] > 0 for e in engines), engines
    body = {
        "input": "Hello from a pinned engine.",
        "voice": "vivian",
        "response_format": "pcm",
        "seed": 7,
    }
    first, again = (speak(pinned, body) for _ in range(2))
    assert len(first) > 0 and first == again
