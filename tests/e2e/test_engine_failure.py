"""A failing model step reaches the client as an error on that context only."""

from __future__ import annotations

from tests.serving import run_server
from tests.wsclient import Client
from voiceserver.config import ServerConfig, load_model_config


async def test_model_failure_is_an_error_for_that_context_and_the_session_goes_on() -> None:
    with run_server(load_model_config("tiny"), ServerConfig()) as server:
        runner = server.runtime.model.runner
        execute = runner.execute

        def faulty(plan):  # type: ignore[no-untyped-def]
            if any(a.prepared.voice_index == 1 for a in plan.admit):
                raise RuntimeError("kernel exploded")
            return execute(plan)

        runner.execute = faulty
        client = await Client.connect(server.ws)
        await client.send(type="context.create", context_id="bad", voice="tiny-b")
        await client.send(type="text.append", context_id="bad", text="boom", flush=True)
        error = await client.until("error")
        assert error["code"] == "internal_error" and error["context_id"] == "bad"
        assert error["fatal"] is False
        await client.until("context.cancelled", "bad")
        # Same socket, next context: fine.
        await client.send(type="text.append", context_id="good", text="still fine")
        await client.send(type="context.end", context_id="good")
        done = await client.until("context.done", "good")
        assert done["audio_ms"] == (len("still fine") + 3) * 20
        await client.close()
        assert server.runtime.engine.snapshot().used_slots == 0
