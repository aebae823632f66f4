"""Text that is complete is spoken without waiting for more, with no flush from the
client: a sentence end followed by whitespace at once, a sentence mark with nothing
after it after a short pause (``end_delay_ms``), and any text at all within
``max_delay_ms`` (1 s by default). On a model that cuts text into segments (Piper) and
on one that reads text as it streams (the tiny model)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.serving import RunningServer, run_server
from tests.wsclient import Client
from voiceserver.config import ServerConfig, load_model_config

TEXTS = [
    "Hello there, how are you today? ",  # a sentence end, then whitespace: at once
    "Hello there, how are you today?",  # then nothing: after end_delay_ms
    "Hello there how are you",  # no boundary at all: after max_delay_ms
]
MORE = " Fine, thanks."


@pytest.fixture(scope="module", params=["piper-joe", "tiny"])
def server(request: pytest.FixtureRequest) -> Iterator[RunningServer]:
    with run_server(load_model_config(request.param), ServerConfig()) as running:
        yield running


def spoken(client: Client) -> list[str]:
    return [w["text"] for msg in client.got.of_type("timestamps") for w in msg["words"]]


@pytest.mark.parametrize("text", TEXTS)
async def test_text_is_spoken_without_a_flush(server: RunningServer, text: str) -> None:
    client = await Client.connect(server.ws)
    await client.send(type="context.create", context_id="c", timestamps="word")
    await client.send(type="text.append", context_id="c", text=text)
    # Before this fix a segmenting model spoke nothing until the next character (or
    # ever, for text with no boundary): every word's timing must come with no more text.
    while len(spoken(client)) < len(text.split()) or not client.got.audio.get("c"):
        await client.next_any(timeout=10)
    assert spoken(client) == text.split()
    # The context is still open and takes more text.
    await client.send(type="text.append", context_id="c", text=MORE)
    await client.send(type="context.end", context_id="c")
    await client.until("context.done", "c")
    await client.close()
    assert spoken(client) == (text + MORE).split()
