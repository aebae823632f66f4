"""The soak benchmark: a few seconds against the tiny model, and its numbers on known inputs."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from bench.measure import RequestResult
from bench.procstat import read_proc
from bench.soak import SERIES_KEYS, main
from bench.soak_report import per_minute, slope_per_minute
from protocol.errors import CloseCode
from tests.serving import RunningServer, run_server
from voiceserver.config import Limits, ServerConfig, load_model_config

STAT_KEYS = {"p50", "p95", "p99", "mean", "min", "max"}


def test_short_soak_against_spawned_tiny_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "soak.json"
    argv = ["--spawn", "tiny", "--idle", "20", "--active", "1", "--duration-s", "5"]
    assert main([*argv, "--keepalive-s", "2", "--quiet", "--out", str(out)]) == 0

    report = json.loads(out.read_text())
    config, summary, series = report["config"], report["summary"], report["series"]
    assert config["idle"] == 20 and config["active"] == 1 and config["model"]["id"] == "tiny"
    assert summary["passed"] and summary["failures"] == []

    assert set(series) == set(SERIES_KEYS)
    samples = len(series["t_s"])
    assert samples >= 5 and all(len(values) == samples for values in series.values())
    assert series["t_s"] == sorted(series["t_s"])
    assert all(v is not None and v > 0 for v in series["rss_mb"])
    assert all(v is not None and v > 0 for v in series["fds"])
    assert series["idle_connected"][-1] == 20 and max(series["idle_dropped"]) == 0
    assert series["requests"][-1] > 0 and series["errors"][-1] == 0
    assert 21 in series["server_sessions"]  # 20 idle + 1 active, as the server counts them

    server = summary["server"]
    assert server["pid"] and not server["died"]
    idle = summary["idle"]
    assert idle["connected"] == idle["connected_at_end"] == 20
    assert idle["dropped"] == 0 and idle["close_codes"] == {}
    assert idle["keepalives_sent"] > 0
    active = summary["active"]
    assert active["requests"] > 0 and active["errors"] == 0 and active["ok"] == active["requests"]
    ttfa = active["ttfa_ms"]
    assert set(ttfa) == STAT_KEYS | {"count"} and ttfa["count"] == active["requests"]
    assert 0 < ttfa["min"] <= ttfa["p50"] <= ttfa["p95"] <= ttfa["p99"] <= ttfa["max"]
    [minute] = summary["ttfa_per_minute"]
    assert minute["minute"] == 0 and minute["requests"] == active["requests"]
    assert minute["ttfa_ms"]["p50"] == pytest.approx(ttfa["p50"])

    rss, fds = summary["rss_mb"], summary["fds"]
    assert 0 < rss["before_idle"] <= rss["max"] and 0 < rss["start"] <= rss["max"]
    assert 0 < rss["end"] <= rss["max"]
    assert rss["slope_mb_per_min"] is not None
    # Every idle socket holds a descriptor in the server.
    assert fds["start"] >= fds["before_idle"] + 20
    assert summary["health_failures"] == 0 and summary["health_ms"]["p50"] > 0

    phases = report["phases"]
    assert phases["connect_started_s"] <= phases["steady_started_s"] < phases["steady_ended_s"]
    assert phases["steady_s"] >= 5
    assert len(report["per_request"]) == active["requests"] and report["drops"] == []
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    printed = capsys.readouterr().out
    assert "PASS" in printed and str(out) in printed


@pytest.fixture(scope="module")
def impatient_server() -> Iterator[RunningServer]:
    limits = replace(Limits(), idle_timeout_s=1.0)
    with run_server(load_model_config("tiny"), ServerConfig(limits=limits)) as server:
        yield server


def test_dropped_idle_sockets_fail_the_run(impatient_server: RunningServer, tmp_path: Path) -> None:
    out = tmp_path / "dropped.json"
    argv = ["--url", impatient_server.ws, "--idle", "5", "--active", "1", "--duration-s", "3"]
    argv += ["--warmup", "0", "--quiet", "--no-plot", "--out", str(out)]
    assert main(argv) == 1

    report = json.loads(out.read_text())
    summary = report["summary"]
    assert not summary["passed"]
    assert summary["failures"] == ["5 idle sessions dropped"]
    assert summary["idle"]["dropped"] == 5 and summary["idle"]["connected_at_end"] == 0
    assert summary["idle"]["close_codes"] == {str(int(CloseCode.IDLE_TIMEOUT)): 5}
    assert {d["close_code"] for d in report["drops"]} == {int(CloseCode.IDLE_TIMEOUT)}
    assert report["series"]["idle_connected"][-1] == 0
    # A streaming session is never idle: it keeps going.
    assert summary["active"]["errors"] == 0 and summary["active"]["requests"] > 0
    # Without a pid there is nothing to read from /proc.
    assert summary["rss_mb"]["start"] is None and summary["server"]["pid"] is None


def test_too_many_sockets_for_the_file_limit(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="RLIMIT_NOFILE"):
        main(["--url", "ws://127.0.0.1:9/v1/audio/speech/ws", "--idle", str(10**9)])


def test_rss_slope_is_fitted_over_the_window() -> None:
    t = [float(s) for s in range(0, 121)]
    # Flat for a minute, then growing 3 MB per minute.
    rss = [100.0 if s < 60 else 100.0 + (s - 60) * 0.05 for s in t]
    assert slope_per_minute(t, rss, 60.0, 120.0) == pytest.approx(3.0)
    assert slope_per_minute(t, rss, 0.0, 59.0) == pytest.approx(0.0)
    with_gaps = [None if s % 2 else v for s, v in zip(t, rss, strict=True)]
    assert slope_per_minute(t, with_gaps, 60.0, 120.0) == pytest.approx(3.0)
    assert slope_per_minute(t, rss, 200.0, 300.0) is None


def _result(flush_at: float, ttfa_ms: float | None, error: str | None = None) -> RequestResult:
    first = None if ttfa_ms is None else flush_at + ttfa_ms / 1000.0
    return RequestResult(0, 1, 20, 100, flush_at, flush_at, first, first, 1.0, 1, 0, 0.0, error)


def test_ttfa_per_minute_buckets_by_flush_time() -> None:
    start = 1000.0
    results = [
        _result(start + 5, 100.0),
        _result(start + 59.9, 300.0),
        _result(start + 61, 200.0),
        _result(start + 70, None, "timeout: no context.done"),
        _result(start + 185, 50.0),
    ]
    rows = per_minute(results, start)
    assert [r["minute"] for r in rows] == [0, 1, 3]
    assert [r["requests"] for r in rows] == [2, 2, 1]
    assert [r["errors"] for r in rows] == [0, 1, 0]
    assert rows[0]["ttfa_ms"]["count"] == 2
    assert rows[0]["ttfa_ms"]["p50"] == pytest.approx(200.0)
    assert rows[0]["ttfa_ms"]["max"] == pytest.approx(300.0)
    assert rows[1]["ttfa_ms"]["count"] == 1 and rows[1]["ttfa_ms"]["p99"] == pytest.approx(200.0)


def test_read_proc_of_this_process() -> None:
    sample = read_proc(os.getpid())
    assert sample is not None
    assert sample.rss_mb > 1 and 0 < sample.anon_mb <= sample.rss_mb
    assert sample.fds >= 3 and sample.threads >= 1 and sample.cpu_s > 0
    assert read_proc(2**22 + 12345) is None
