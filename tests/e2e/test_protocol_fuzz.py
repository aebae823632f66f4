"""The protocol fuzzer (the bench/fuzzing/ package) over real sockets against the tiny model.

One derandomized run per module: a few thousand hypothesis-generated hostile messages
on /v1/audio/speech/ws and /v1/audio/speech/stream, from several sessions at once,
while a well-behaved bystander session speaks. Each test checks one oracle; a failure
lists every distinct finding with the smallest message sequence that reproduced it
on a fresh session.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from bench.fuzzing import (
    BYSTANDER_KINDS,
    CLOSE_KINDS,
    FLOOD_KINDS,
    INPUT_KINDS,
    ORDERING_KINDS,
    SERVER_KINDS,
    SPIN_KINDS,
    FuzzConfig,
    FuzzReport,
    discover,
    run_fuzz,
)
from tests.e2e.conftest import TEST_LIMITS
from tests.serving import RunningServer

CONFIG = FuzzConfig(
    examples=8,
    native_sessions=3,
    compat_sessions=1,
    steps=30,
    compat_steps=15,
    seed=None,
    replay_budget=60,
    # The server runs in this process; the client side idles while this is read.
    cpu_seconds=time.process_time,
)
GENERATORS = (
    "ws.session.update.",
    "ws.context.create.",
    "ws.text.append.",
    "ws.context.flush.",
    "ws.context.end.",
    "ws.context.cancel.",
    "ws.keepalive.",
    "seq.burst",
    "seq.too-many-contexts",
    "seq.append-after-end",
    "seq.unknown-ids",
    "seq.recreate",
    "seq.update-extremes",
    "seq.close-then-more",
    "seq.long-event-id",
    "garbage.",
    "binary.",
    "deep.",
    "oversize.",
    "stream.session.config.",
    "stream.input.text",
    "stream.garbage.",
    "stream.first-message.",
    "front.host.",
    "front.pipeline",
    "front.header.",
)


@pytest.fixture(scope="module")
def fuzz_report(tiny_server: RunningServer) -> Iterator[FuzzReport]:
    facts = asyncio.run(discover(tiny_server.http))
    assert facts.max_message_bytes == TEST_LIMITS.max_message_bytes
    yield run_fuzz(facts, CONFIG)


def _clean(report: FuzzReport, *kinds: str) -> None:
    found = report.of_kind(*kinds)
    if found:
        pytest.fail("\n" + report.describe(found), pytrace=False)


def test_fuzzer_ran_every_generator(fuzz_report: FuzzReport) -> None:
    assert fuzz_report.messages >= 2000, fuzz_report.summary()["messages_by_endpoint"]
    assert fuzz_report.sent["stream"] > 0
    missing = [g for g in GENERATORS if not any(f.startswith(g) for f in fuzz_report.families)]
    assert not missing, f"generators never drawn: {missing}"


def test_server_survives(fuzz_report: FuzzReport) -> None:
    _clean(fuzz_report, *SERVER_KINDS)
    assert fuzz_report.server_alive


def test_no_socket_closes_without_cause(fuzz_report: FuzzReport) -> None:
    """1011 (a crash on input) never fits; other closes only where a message explains them."""
    _clean(fuzz_report, *CLOSE_KINDS)


def test_invalid_input_gets_a_fitting_error(fuzz_report: FuzzReport) -> None:
    _clean(fuzz_report, *INPUT_KINDS)


def test_bystander_audio_is_byte_identical(fuzz_report: FuzzReport) -> None:
    assert fuzz_report.bystander["rounds"] >= CONFIG.examples
    _clean(fuzz_report, *BYSTANDER_KINDS)


def test_protocol_order_holds(fuzz_report: FuzzReport) -> None:
    _clean(fuzz_report, *ORDERING_KINDS)


def test_floods_are_limited_and_nobody_else_notices(fuzz_report: FuzzReport) -> None:
    """A flooder (its own address) floods during every barrage: it is limited, never
    closed with 1011, and the bystander (checked above) stays byte-identical."""
    floods = fuzz_report.floods
    assert len(floods) == fuzz_report.examples
    assert {f["kind"] for f in floods} == {"text", "create_cancel", "bad_json", "vllm"}
    assert sum(f["limited"] for f in floods) > 0, floods
    _clean(fuzz_report, *FLOOD_KINDS)


def test_tiny_idle_timeout_does_not_spin(fuzz_report: FuzzReport) -> None:
    assert fuzz_report.busy_loop.get("checked"), fuzz_report.busy_loop
    _clean(fuzz_report, *SPIN_KINDS)
