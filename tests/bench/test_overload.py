"""The overload benchmark: a few sessions past a 2-slot tiny server, and its helpers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.measure import Arrival, count_underruns
from bench.overload import delayed_start, long_text, main, underrun_times
from bench.texts import SENTENCES
from tests.serving import RunningServer, run_server
from voiceserver.config import Limits, ServerConfig, load_model_config

SMALL = ["--slots", "2", "--sessions", "4", "--words", "40", "--tokens-per-s", "40"]
SMALL += ["--interval-s", "0.1", "--quiet"]
SESSION_KEYS = {
    "index",
    "outcome",
    "refused_by",
    "refusal_ms",
    "error",
    "close_code",
    "alive_at_end",
    "connect_ms",
    "context_sent_s",
    "answered_s",
    "create_ms",
    "ttfa_ms",
    "ttfa_after_flush_ms",
    "underruns",
    "stall_ms",
    "underruns_no_prebuffer",
    "underrun_at_s_no_prebuffer",
    "audio_s",
    "text_started_s",
    "first_audio_s",
    "last_audio_s",
    "playout_end_s",
}


def test_spawned_tiny_refuses_exactly_the_sessions_beyond_its_slots(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "overload.json"
    assert main(["--spawn", "tiny", *SMALL, "--out", str(out)]) == 0

    report = json.loads(out.read_text())
    config, summary, sessions = report["config"], report["summary"], report["per_session"]
    assert config["model"]["id"] == "tiny" and config["slots"] == 2
    assert config["connect"] == "upfront" and config["sample_rate"] == 16000
    assert summary["passed"] and summary["failures"] == []
    assert summary["capacity"] == 2 and summary["sessions"] == 4
    assert summary["admitted_indices"] == [0, 1] and summary["refused_indices"] == [2, 3]
    assert summary["refused_by"] == {"overloaded": 2} and summary["failed"] == 0
    assert summary["admitted_as_expected"] is True
    assert summary["refused_sessions_alive"] == summary["overloaded_sessions"] == 2
    assert summary["admitted_running_at_refusal"] == {"min": 2, "max": 2}
    assert summary["max_admitted_running"] == 2
    assert summary["peak_active_slots"] == 2 and summary["close_codes"] == {}

    assert [s["index"] for s in sessions] == [0, 1, 2, 3]
    assert all(set(s) >= SESSION_KEYS for s in sessions)
    for s in sessions[:2]:
        assert s["outcome"] == "admitted" and s["refused_by"] is None and s["error"] is None
        assert s["underruns"] == 0 and s["ttfa_ms"] is not None and s["ttfa_ms"] > 0
        assert s["create_ms"] > 0 and s["audio_s"] > 1.0
        assert s["text_started_s"] < s["first_audio_s"] <= s["last_audio_s"]
        assert s["last_audio_s"] < s["playout_end_s"]
    for s in sessions[2:]:
        assert s["outcome"] == "refused" and s["refused_by"] == "overloaded"
        assert 0 < s["refusal_ms"] < 1000 and s["alive_at_end"] is True
        assert s["context_sent_s"] <= s["answered_s"] and s["close_code"] is None
        assert s["ttfa_ms"] is None and s["underruns"] is None
    # The refusals came while both admitted streams were still receiving audio.
    assert max(s["answered_s"] for s in sessions[2:]) < min(s["last_audio_s"] for s in sessions[:2])
    assert summary["refusal_ms"]["max"] == max(s["refusal_ms"] for s in sessions[2:])
    assert summary["ttfa_ms"]["p50"] is not None and summary["underruns_total"] == 0

    health = report["health"]
    assert len(health["t_s"]) == len(health["active_slots"]) > 0
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    printed = capsys.readouterr().out
    assert "PASS" in printed and "overloaded 2" in printed and str(out) in printed


@pytest.fixture(scope="module")
def two_slot_server() -> Iterator[RunningServer]:
    # The load generator is one client standing for many users: no per-client limits.
    limits = Limits(max_client_share=1, max_messages_per_s=0)
    with run_server(
        load_model_config("tiny", {"max_contexts": 2}), ServerConfig(limits=limits)
    ) as server:
        yield server


def test_sockets_opened_while_full_are_closed_with_1013(
    two_slot_server: RunningServer, tmp_path: Path
) -> None:
    out = tmp_path / "ramp.json"
    argv = ["--url", two_slot_server.ws, *SMALL, "--connect", "ramp", "--warmup", "0"]
    assert main([*argv, "--no-plot", "--out", str(out)]) == 0

    summary = json.loads(out.read_text())["summary"]
    assert summary["admitted_indices"] == [0, 1] and summary["refused_indices"] == [2, 3]
    assert summary["refused_by"] == {"close_1013": 2} and summary["close_codes"] == {"1013": 2}
    assert summary["refusal_ms"]["max"] < 1000
    assert not out.with_suffix(".png").exists()


def test_a_slow_refusal_fails_the_run(two_slot_server: RunningServer, tmp_path: Path) -> None:
    out = tmp_path / "strict.json"
    argv = ["--url", two_slot_server.ws, *SMALL, "--warmup", "0", "--max-refusal-ms", "0"]
    assert main([*argv, "--no-plot", "--out", str(out)]) == 1
    summary = json.loads(out.read_text())["summary"]
    assert not summary["passed"] and summary["refusals_over_limit"] == 2
    assert "2 refusals took over 0 ms" in summary["failures"][0]


def test_slots_go_through_their_own_option() -> None:
    with pytest.raises(SystemExit, match="--slots"):
        main(["--server-option", "max_contexts=4"])


def test_prebuffer_and_underrun_times() -> None:
    # 40 ms, then a chunk 60 ms later: late by 20 ms unless the player waits for it.
    arrivals = [Arrival(10.0, 0.04), Arrival(10.06, 0.1), Arrival(10.1, 0.1)]
    assert count_underruns(arrivals).count == 1
    assert underrun_times(arrivals) == [pytest.approx(0.06)]
    assert count_underruns(delayed_start(arrivals, 30.0)).count == 0
    assert count_underruns(delayed_start(arrivals, 10.0)).stall_ms == pytest.approx(10.0)
    assert delayed_start([], 100.0) == []


def test_long_texts_are_whole_sentences_past_the_word_count() -> None:
    first, second = long_text(0, 300), long_text(1, 300)
    assert len(first.split()) >= 300 and first != second
    assert first.startswith(SENTENCES[0]) and second.startswith(SENTENCES[1])
    assert first.endswith(".")
