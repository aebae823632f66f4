"""One client's flood does not slow another's first audio, against a server process.

The attack (issue: hardening round two, hole 10): one client floods ``text.append``
(43k/s), create/cancel pairs (60k/s) or bad JSON (138k/s); a bystander's first audio
went from ~200 ms to 0.7-5.3 s, and ``rate_limited`` existed but was never sent. Now
each client has a message budget (``max_messages_per_s``, bursts of
``messages_burst``): a message past it is refused with ``rate_limited``, a second's
worth of refusals closes the socket (1008), and the client's next upgrades get 429
until it is back within budget.

The flooder is ``bench.flood`` in its own process, from 127.0.0.2 with its own key;
the bystander measures its first audio (text sent -> first audio byte) over seven
sentences, quiet and under each flood, on the embedded Piper voice.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from bench.spawn import SpawnedServer, spawn_server
from tests.wsclient import Client

KEY, FLOODER_KEY = "bystander-key", "flooder-key"
ROUNDS = 7
SENTENCE = "Hello there, how are you today? "


@pytest.fixture(scope="module")
def piper() -> Iterator[SpawnedServer]:
    args = ("--api-key", KEY, "--api-key", FLOODER_KEY)
    with spawn_server("piper-joe", args=args, start_timeout_s=300) as server:
        yield server


async def first_audio_s(server: SpawnedServer) -> float:
    """The bystander's median time to first audio over ``ROUNDS`` sentences."""
    client = await Client.connect(server.url, additional_headers={"authorization": f"Bearer {KEY}"})
    times = []
    for i in range(ROUNDS):
        started = time.monotonic()
        await client.send(type="text.append", context_id=f"b{i}", text=SENTENCE, flush=True)
        await client.until_audio(f"b{i}", timeout=60)
        times.append(time.monotonic() - started)
        await client.send(type="context.end", context_id=f"b{i}")
        await client.until("context.done", f"b{i}", timeout=60)
    await client.close()
    return statistics.median(times)


def start_flood(server: SpawnedServer, kind: str, seconds: float) -> subprocess.Popen[bytes]:
    url = server.url if kind != "vllm" else server.url.replace("/ws", "/stream")
    command = [sys.executable, "-m", "bench.flood", url, "--kind", kind]
    command += ["--seconds", str(seconds), "--key", FLOODER_KEY, "--source", "127.0.0.2"]
    command += ["--until-refused"]
    # Niced: an attacker's CPU is its own machine's, not the server's.
    return subprocess.Popen(command, stdout=subprocess.PIPE, preexec_fn=lambda: os.nice(19))


@pytest.mark.parametrize("kind", ["text", "create_cancel", "bad_json", "vllm"])
async def test_a_flood_does_not_slow_a_bystander(piper: SpawnedServer, kind: str) -> None:
    quiet = await first_audio_s(piper)
    flooder = start_flood(piper, kind, seconds=30)
    try:
        time.sleep(1.0)  # let it get going
        flooded = await first_audio_s(piper)
        # The flood goes on until it has been closed for its rate and refused on
        # reconnecting (however slowly a busy machine lets it run), 30 s at most.
        out, _ = flooder.communicate(timeout=60)
    finally:
        if flooder.poll() is None:
            flooder.terminate()
            flooder.communicate(timeout=30)
    stats = json.loads(out.splitlines()[-1]) if out.strip() else {}
    print(
        f"{kind}: first audio quiet {quiet * 1000:.0f} ms, flooded {flooded * 1000:.0f} ms; {stats}"
    )
    assert flooded <= 2 * quiet + 0.1, (quiet, flooded, stats)
    # The flooder was told: its socket closed for its rate (1008), and while it stayed
    # over its budget, its reconnects were refused at the door (429).
    assert stats["closed"].get("1008", 0) >= 1, stats
    assert stats["refused"].get("429", 0) >= 1, stats
