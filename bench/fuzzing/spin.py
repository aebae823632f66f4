"""The busy-loop check (check 5): with a context open, ``session.update
{idle_timeout_s: 1e-9}`` must not make the server spin. Measured as the server's CPU
share over a window, against the same idle session without the update."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import websockets

from bench.fuzzing.config import FuzzConfig
from bench.fuzzing.facts import ServerFacts
from bench.fuzzing.render import show
from bench.fuzzing.report import Finding
from bench.fuzzing.sockets import connect
from bench.procstat import read_proc

SPIN_SETTLE_S = 1.5
SPIN_MARGIN = 0.3
"""CPU share (of one core) above an idle session's that counts as a busy loop."""
HOLD = {"type": "context.create", "context_id": "hold", "event_id": "hold"}
TINY_IDLE_TIMEOUT = {"type": "session.update", "idle_timeout_s": 1e-9, "event_id": "spin"}


def process_cpu_seconds(pid: int) -> Callable[[], float]:
    """User + system CPU seconds of a process, read from /proc (Linux)."""

    def read() -> float:
        sample = read_proc(pid)
        if sample is None:
            raise OSError(f"process {pid} is gone")
        return sample.cpu_s

    return read


async def _hold(
    facts: ServerFacts, config: FuzzConfig, update: dict[str, Any] | None
) -> tuple[float, bool]:
    """CPU share of the server while one session holds an idle context for a while."""
    cpu = config.cpu_seconds
    assert cpu is not None
    ws = await connect(facts.ws_url)
    accepted = True
    try:
        await ws.recv()
        await ws.send(json.dumps(HOLD))
        if update is not None:
            await ws.send(json.dumps(update))
            while True:
                msg = json.loads(await asyncio.wait_for(ws.recv(), 10))
                if msg.get("event_id") == update["event_id"]:
                    accepted = msg.get("type") == "session.updated"
                    break
        # A watcher may sleep out the old timeout (up to a second) before it
        # looks at the new one.
        await asyncio.sleep(SPIN_SETTLE_S)
        cpu0, t0 = cpu(), time.monotonic()
        await asyncio.sleep(config.spin_window_s)
        share = (cpu() - cpu0) / (time.monotonic() - t0)
    finally:
        await ws.close()
    return share, accepted


async def spin_check(
    facts: ServerFacts, config: FuzzConfig
) -> tuple[dict[str, Any], Finding | None]:
    """What the report says under ``busy_loop``, and the finding if the server spun."""
    if config.cpu_seconds is None:
        return {"checked": False, "why": "no way to read the server's CPU time"}, None
    try:
        baseline, _ = await _hold(facts, config, None)
        share, accepted = await _hold(facts, config, TINY_IDLE_TIMEOUT)
    except (OSError, TimeoutError, websockets.WebSocketException, ValueError) as exc:
        return {"checked": False, "why": repr(exc)}, None
    spinning = accepted and share > baseline + SPIN_MARGIN
    result = {
        "checked": True,
        "idle_timeout_accepted": accepted,
        "cpu_share_baseline": round(baseline, 3),
        "cpu_share_with_tiny_idle_timeout": round(share, 3),
        "spinning": spinning,
    }
    if not spinning:
        return result, None
    frames = [show(json.dumps(HOLD)), show(json.dumps(TINY_IDLE_TIMEOUT))]
    detail = (
        f"with a context open, the server used {share:.0%} of a core for "
        f"{config.spin_window_s:g} s of an idle session (baseline {baseline:.0%})"
    )
    finding = Finding(
        "server", "busy_loop", "session.update.idle_timeout_s=1e-9", detail, "busy_loop", frames
    )
    finding.repro = frames
    return result, finding
