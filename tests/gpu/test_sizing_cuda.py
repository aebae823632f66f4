"""Start-up sizing on a real GPU: ``serve --model DIR --device cuda --dtype bfloat16`` with no
other flag makes the slots and batches the plan says, fits in memory, and serves what
the 8-slot configs refused (16 concurrent sessions: 24 of 32 requests were refused).

Runs only where a GPU is present (the lent H200); CI has none. Prints the plan and the
memory measured after start-up, for docs/gpu.md.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
import torch

from models.sizing import GIB
from tests.models.qwen3_tts.ckpt import BuildOptions, Sizes, build_checkpoint
from tests.serving import run_server
from voiceserver.config import ServerConfig, config_for_checkpoint, with_checkpoint
from voiceserver.sizing import size_model

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

REQUESTS, CONCURRENCY = 32, 16


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sizing_ckpt")
    options = BuildOptions(
        variant="custom_voice", size_name="1b7", sizes=Sizes.real("1b7"), dtype=torch.bfloat16
    )
    return build_checkpoint(root / "Qwen3-TTS-12Hz-1.7B-CustomVoice", replace(options, seed=1))


async def test_a_newcomer_is_served_at_sixteen_sessions(
    checkpoint: Path, caplog: pytest.LogCaptureFixture
) -> None:
    options = {"device": "cuda", "dtype": "bfloat16", "max_frames": 100}
    config = with_checkpoint(config_for_checkpoint(checkpoint, options), checkpoint)
    planned = size_model(config)
    print("\n".join(planned.lines))
    assert planned.config.model["max_contexts"] >= 256
    with (
        caplog.at_level(logging.INFO, logger="voiceserver.runtime"),
        run_server(config, ServerConfig(), log_level="info") as server,
    ):
        runtime = server.runtime
        slots = runtime.model.runner.max_slots
        free, total = torch.cuda.mem_get_info()
        reserved = torch.cuda.max_memory_reserved()
        print(
            f"slots {slots}, AR batch {runtime.engine.config.max_ar_batch}, vocoder batch "
            f"{runtime.engine.config.max_vocoder_batch}; after start-up {free / GIB:.1f} GiB "
            f"free of {total / GIB:.1f}, {reserved / GIB:.1f} GiB reserved"
        )
        assert slots == planned.config.model["max_contexts"] >= 256
        assert runtime.engine.config.max_ar_batch == slots
        voice = runtime.model.capabilities.voices[0].name
        gate = asyncio.Semaphore(CONCURRENCY)

        async def one(http: httpx.AsyncClient, i: int) -> int:
            body = {"input": f"Request {i}: hello there.", "voice": voice, "response_format": "pcm"}
            async with gate:
                response = await http.post(f"{server.http}/v1/audio/speech", json=body)
            return response.status_code

        async with httpx.AsyncClient(timeout=300) as http:
            codes = await asyncio.gather(*(one(http, i) for i in range(REQUESTS)))
        peak = torch.cuda.max_memory_reserved()
        print(f"{codes.count(200)} of {REQUESTS} served; peak reserved {peak / GIB:.1f} GiB")
        assert codes.count(200) == REQUESTS, codes
    assert any("sized for cuda" in r.message for r in caplog.records)
