"""Cancelling a context drops its reference-audio preparation, against a server process.

The attack (issue: hardening round two, hole 6): 60 ``context.create`` + ``context.cancel``
pairs, each create carrying a 59 s FLAC as ``ref_audio`` (small on the wire, 2.7 MB of
samples once decoded). Every preparation (decode, speaker encoder, reference codes)
still ran after its cancel, first come first served on two worker threads: a
bystander's first audio went from 150 ms to 39 s, and the server grew by ~700 MB.
Now a cancel drops a preparation that has not started, clients take turns on the
workers, and one client runs on at most one of the two at a time.

The bystander speaks in a stored voice (its preparation is cheap); it and the attacker
hold different API keys, so they are two clients.
"""

from __future__ import annotations

import base64
import io
import time
from collections.abc import Iterator

import av
import httpx
import numpy as np
import pytest

from bench.spawn import SpawnedServer, spawn_server
from tests.e2e.proc import cpu_s, rss_mb
from tests.e2e.test_voices import REF_TEXT, REF_WAV
from tests.models.qwen3_tts.ckpt import BuildOptions, build_checkpoint
from tests.wsclient import Client

KEY, ATTACKER_KEY = "bystander-key", "attacker-key"
PAIRS = 60
REFERENCE_S = 59


def long_flac(seconds: float, rate: int = 24000) -> bytes:
    """A tone (compresses well: a small message) that decodes to ``seconds`` of audio."""
    t = np.arange(int(seconds * rate)) / rate
    samples = (0.3 * np.sin(2 * np.pi * 220 * t) * 32767).astype(np.int16)
    out = io.BytesIO()
    with av.open(out, "w", format="flac") as container:
        stream = container.add_stream("flac", rate=rate, layout="mono")
        frame = av.AudioFrame.from_ndarray(samples[None, :], format="s16", layout="mono")
        frame.sample_rate = rate
        for packet in stream.encode(frame):
            container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return out.getvalue()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpawnedServer]:
    root = tmp_path_factory.mktemp("prepare_cancel")
    ckpt = build_checkpoint(root / "base", BuildOptions(variant="base", size_name="0b6", seed=7))
    args = (
        "--api-key",
        KEY,
        "--api-key",
        ATTACKER_KEY,
        "--limit",
        "max_message_bytes=4194304",
        "--voices-dir",
        str(root / "voices"),
    )
    with spawn_server(None, model=ckpt, options=("max_frames=24",), args=args) as running:
        yield running


async def first_audio_s(server: SpawnedServer, voice: str) -> float:
    client = await Client.connect(server.url, additional_headers={"authorization": f"Bearer {KEY}"})
    started = time.monotonic()
    await client.send(type="context.create", context_id="b", voice=voice, temperature=0)
    await client.send(type="text.append", context_id="b", text="Hello there.")
    await client.send(type="context.end", context_id="b")
    await client.until_audio("b", timeout=180)
    took = time.monotonic() - started
    await client.until("context.done", "b", timeout=180)
    await client.close()
    return took


async def test_cancelled_preparations_do_not_delay_others(server: SpawnedServer) -> None:
    assert server.pid is not None
    stored = httpx.post(
        f"{server.http}/v1/audio/voices",
        data={"name": "bystander", "ref_text": REF_TEXT},
        files={"audio_sample": ("ref.wav", REF_WAV, "audio/wav")},
        headers={"authorization": f"Bearer {KEY}"},
        timeout=120,
    )
    assert stored.status_code == 200, stored.text
    quiet = min([await first_audio_s(server, "bystander") for _ in range(3)])
    base, cpu = rss_mb(server.pid), cpu_s(server.pid)

    reference = base64.b64encode(long_flac(REFERENCE_S)).decode()
    attacker = await Client.connect(
        server.url, additional_headers={"authorization": f"Bearer {ATTACKER_KEY}"}
    )
    for i in range(PAIRS):
        await attacker.send(
            type="context.create", context_id=f"a{i}", ref_audio=reference, ref_text=REF_TEXT
        )
        await attacker.send(type="context.cancel", context_id=f"a{i}")
    await attacker.until("context.cancelled", f"a{PAIRS - 1}", timeout=120)
    loaded = await first_audio_s(server, "bystander")
    peak, spent = rss_mb(server.pid), cpu_s(server.pid) - cpu
    await attacker.close()
    print(
        f"first audio quiet {quiet:.3f} s, after the attack {loaded:.3f} s;"
        f" RSS {base:.0f} -> {peak:.0f} MB; {spent:.1f} CPU s"
    )
    # Before: all 60 preparations of 59 s ran (about a CPU second each), first come
    # first served, so the bystander waited for them. Now a cancel drops the ones that
    # have not started: the attack costs a preparation or two, which is also all the
    # memory it adds (one 59 s clone is a ~250 MB working set, reused afterwards).
    assert loaded < max(3.0, 10 * quiet), (quiet, loaded)
    assert spent < 15, spent
