"""The load generator against the real server on loopback (tiny model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from voiceclient.server_info import get_json, http_base

from bench.loadgen import main, requests_for
from bench.texts import SENTENCES
from tests.serving import RunningServer

LEVEL_KEYS = {
    "concurrency",
    "requests",
    "errors",
    "error_codes",
    "wall_s",
    "audio_s_total",
    "x_real_time",
    "ttfa_ms",
    "rtf",
    "underruns",
    "underruns_total",
    "requests_with_underruns",
    "stall_ms",
    "audio_s",
    "per_request",
}
STAT_KEYS = {"p50", "p95", "p99", "mean", "min", "max"}


def test_one_level_writes_report_and_plot(
    tiny_server: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run.json"
    argv = ["--url", tiny_server.ws, "--concurrency", "2", "--requests-per-level", "3"]
    main([*argv, "--warmup", "0", "--quiet", "--out", str(out)])

    report = json.loads(out.read_text())
    assert report["name"] == "run"
    assert report["config"]["sample_rate"] == 16000  # the tiny model's own rate
    assert report["config"]["model"]["id"] == "tiny"
    assert report["machine"]["cpu_count"] >= 1 and report["machine"]["platform"]
    [level] = report["levels"]
    assert set(level) == LEVEL_KEYS
    assert level["concurrency"] == 2 and level["requests"] == 3 and level["errors"] == 0
    for key in ("ttfa_ms", "rtf", "underruns", "stall_ms", "audio_s"):
        assert set(level[key]) == STAT_KEYS
    assert level["ttfa_ms"]["p50"] > 0
    assert level["ttfa_ms"]["p50"] <= level["ttfa_ms"]["p95"] <= level["ttfa_ms"]["p99"]
    assert level["rtf"]["mean"] > 0
    assert level["x_real_time"] > 0
    requests = level["per_request"]
    assert [r["index"] for r in requests] == [0, 1, 2]
    for r in requests:
        # tiny: 20 ms per byte of text plus 3 tail frames
        text = SENTENCES[r["index"]]
        assert r["audio_s"] == pytest.approx((len(text.encode()) + 3) * 0.02)
        assert r["error"] is None and r["chunks"] > 0
        assert r["first_audio_at"] > r["flush_at"] >= r["started_at"]
    assert level["audio_s_total"] == pytest.approx(sum(r["audio_s"] for r in requests))

    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = capsys.readouterr().out
    assert "TTFA" in table and str(out) in table


def test_requests_per_level_default() -> None:
    assert [requests_for(c, None) for c in (1, 2, 4, 16)] == [4, 4, 8, 32]
    assert requests_for(16, 5) == 5


def test_spawned_server_is_started_and_stopped(tmp_path: Path) -> None:
    out = tmp_path / "spawned.json"
    report = main(
        ["--spawn", "tiny", "--concurrency", "1", "--requests-per-level", "1"]
        + ["--warmup", "0", "--quiet", "--no-plot", "--out", str(out)]
    )
    assert report["config"]["spawn"] == "tiny"
    assert report["levels"][0]["errors"] == 0
    assert report["levels"][0]["audio_s_total"] > 0
    assert not out.with_suffix(".png").exists()
    # The server is gone afterwards: its port no longer answers.
    with pytest.raises(OSError):
        get_json(f"{http_base(report['config']['url'])}/health", timeout=1.0)
