"""/metrics parses with prometheus-client's own parser and counts every request."""

from __future__ import annotations

import asyncio

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.serving import run_server
from tests.wsclient import Client
from voiceserver.config import ServerConfig, load_model_config


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(found: dict, name: str, **labels: str) -> float:
    key = (name, tuple(sorted(labels.items())))
    return found.get(key, 0.0)


async def test_metrics_count_every_request() -> None:
    with run_server(load_model_config("tiny"), ServerConfig()) as server:
        client = await Client.connect(server.ws)
        for i in range(3):
            await client.send(type="text.append", context_id=f"r{i}", text="metrics please")
            await client.send(type="context.end", context_id=f"r{i}")
        for i in range(3):
            await client.until("context.done", f"r{i}")
        await client.send(type="text.append", context_id="gone", text="x " * 300)
        await client.until_audio("gone")
        await client.send(type="context.cancel", context_id="gone")
        await client.until("context.cancelled", "gone")
        await client.ws.send("{broken")
        await client.until("error")
        async with httpx.AsyncClient() as http:
            for _ in range(2):
                body = {"input": "over http", "response_format": "pcm"}
                ok = await http.post(f"{server.http}/v1/audio/speech", json=body)
                assert ok.status_code == 200
            bad = await http.post(
                f"{server.http}/v1/audio/speech", json={"input": "x", "voice": "nobody"}
            )
            assert bad.status_code == 400
            during = samples((await http.get(f"{server.http}/metrics")).text)
            await client.close()
            await asyncio.sleep(0.3)
            after = samples((await http.get(f"{server.http}/metrics")).text)

    ws = {"model": "tiny", "endpoint": "ws"}
    assert value(during, "tts_sessions_open", **ws) == 1
    assert value(after, "tts_sessions_open", **ws) == 0
    # Four requests got audio: three finished, one cancelled after its first audio.
    assert value(after, "tts_time_to_first_audio_seconds_count", **ws) == 4
    assert value(after, "tts_request_duration_seconds_count", **ws) == 3
    assert value(after, "tts_realtime_factor_count", **ws) == 3
    assert value(after, "tts_contexts_cancelled_total", **ws) == 1
    assert value(after, "tts_active_requests", **ws) == 0
    assert value(after, "tts_errors_total", code="invalid_json", **ws) == 1
    assert value(after, "tts_tokens_per_second_count", **ws) == 3
    engine = {"model": "tiny", "engine": "0"}
    assert value(after, "tts_engine_batch_size_count", **engine) > 0
    assert value(after, "tts_vocoder_batch_size_count", **engine) > 0
    assert value(after, "tts_engine_step_seconds_count", **engine) > 0
    assert value(after, "tts_engine_up", **engine) == 1
    assert value(after, "tts_engine_slots", state="used", **engine) == 0
    assert value(after, "tts_engine_slots", state="free", **engine) > 0
    assert (
        "tts_queue_depth",
        (("engine", "0"), ("model", "tiny"), ("queue", "engine_inbox")),
    ) in after
    http = {"model": "tiny", "endpoint": "http"}
    assert value(after, "tts_time_to_first_audio_seconds_count", **http) == 2
    assert value(after, "tts_request_duration_seconds_count", **http) == 2
    assert value(after, "tts_errors_total", code="unknown_voice", **http) == 1
    assert value(after, "tts_active_requests", **http) == 0
