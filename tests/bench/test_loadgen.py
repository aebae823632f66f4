"""The load generator against the real server on loopback (tiny model)."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from voiceclient.server_info import get_json, http_base

from bench import loadgen
from bench.loadgen import main, requests_for, split_evenly
from bench.report import gpu_memory_mib
from bench.spawn import SpawnedServer
from bench.stats import summarize
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
    "client_processes",
    "client_workers",
    "gpu_memory_used_mib",
    "gpu_memory_total_mib",
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
    # One process: this one, no workers.
    assert report["config"]["processes"] == 1
    assert level["client_processes"] == 1
    assert level["client_workers"] == [{"pid": os.getpid(), "sessions": 2, "requests": 3}]

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


def test_two_client_processes_merge_into_one_level(
    tiny_server: RunningServer, tmp_path: Path
) -> None:
    out = tmp_path / "processes.json"
    main(
        ["--url", tiny_server.ws, "--processes", "2", "--concurrency", "4"]
        + ["--requests-per-level", "12", "--warmup", "0", "--quiet", "--no-plot"]
        + ["--out", str(out)]
    )
    report = json.loads(out.read_text())
    assert report["config"]["processes"] == 2
    [level] = report["levels"]
    assert set(level) == LEVEL_KEYS
    assert level["concurrency"] == 4 and level["requests"] == 12 and level["errors"] == 0

    # Two worker processes, neither of them this one, each with half of the sessions;
    # together they ran every request once (the one queue of a single process).
    workers = level["client_workers"]
    assert level["client_processes"] == 2 and len(workers) == 2
    pids = {w["pid"] for w in workers}
    assert len(pids) == 2 and os.getpid() not in pids
    assert [w["sessions"] for w in workers] == [2, 2]
    assert sum(w["requests"] for w in workers) == 12
    requests = level["per_request"]
    assert [r["index"] for r in requests] == list(range(12))
    assert all(r["concurrency"] == 4 and r["error"] is None for r in requests)

    # The statistics are over all requests of both processes.
    for key in ("ttfa_ms", "rtf", "underruns", "stall_ms", "audio_s"):
        assert set(level[key]) == STAT_KEYS
    ttfa = level["ttfa_ms"]
    assert ttfa == pytest.approx(summarize([r["ttfa_ms"] for r in requests]))
    assert 0 < ttfa["min"] <= ttfa["p50"] <= ttfa["p95"] <= ttfa["p99"] <= ttfa["max"]
    assert level["rtf"] == pytest.approx(summarize([r["rtf"] for r in requests]))
    assert level["underruns_total"] == sum(r["underruns"] for r in requests)
    for r in requests:
        text = SENTENCES[r["index"] % len(SENTENCES)]
        assert r["audio_s"] == pytest.approx((len(text.encode()) + 3) * 0.02)
        assert r["first_audio_at"] > r["flush_at"] >= r["started_at"] >= 0
    assert level["audio_s_total"] == pytest.approx(sum(r["audio_s"] for r in requests))
    # The level's wall time spans every request of both processes (one clock).
    span = max(r["last_audio_at"] for r in requests) - min(r["started_at"] for r in requests)
    assert span <= level["wall_s"] < span + 5.0
    assert level["x_real_time"] == pytest.approx(level["audio_s_total"] / level["wall_s"])
    assert level["x_real_time"] > 0
    memory = level["gpu_memory_used_mib"]
    assert memory is None or (isinstance(memory, int) and memory >= 0)


def test_split_evenly() -> None:
    assert split_evenly(4, 2) == [2, 2]
    assert split_evenly(5, 2) == [3, 2]
    assert split_evenly(1, 3) == [1, 0, 0]
    assert split_evenly(1024, 16) == [64] * 16


def test_spawn_model_passes_the_checkpoint_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    commands: list[list[str]] = []
    spawn = loadgen.spawn_server

    @contextlib.contextmanager
    def recording(*args: Any, **kwargs: Any) -> Iterator[SpawnedServer]:
        with spawn(*args, **kwargs) as server:
            assert server.process is not None
            commands.append(list(server.process.args))
            yield server

    monkeypatch.setattr(loadgen, "spawn_server", recording)
    report = main(
        ["--spawn", "tiny", "--spawn-model", str(checkpoint), "--server-option", "max_contexts=4"]
        + ["--concurrency", "1", "--requests-per-level", "1", "--warmup", "0", "--quiet"]
        + ["--no-plot", "--out", str(tmp_path / "model.json")]
    )
    [command] = commands
    assert command[command.index("--model") + 1] == str(checkpoint)
    assert command[command.index("--config") + 1] == "tiny"
    assert command[command.index("--option") + 1] == "max_contexts=4"
    assert report["config"]["spawn_model"] == str(checkpoint)
    assert report["levels"][0]["errors"] == 0


def test_spawn_model_arguments_are_checked(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="does not exist"):
        main(["--spawn-model", str(tmp_path / "missing")])
    with pytest.raises(SystemExit, match="does not go with --url"):
        main(["--spawn-model", str(tmp_path), "--url", "ws://127.0.0.1:1/x"])
    with pytest.raises(SystemExit, match="--processes"):
        main(["--spawn", "tiny", "--processes", "0"])
    with pytest.raises(SystemExit, match="only applies"):
        main(["--server-option", "device=cuda"])


def _fake_nvidia_smi(directory: Path, body: str) -> None:
    directory.mkdir()
    script = directory / "nvidia-smi"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)


def test_gpu_memory_from_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert gpu_memory_mib() is None  # no nvidia-smi

    _fake_nvidia_smi(tmp_path / "two", "printf '0, 1000, 81559\\n1, 250, 81559\\n'")
    monkeypatch.setenv("PATH", str(tmp_path / "two"))
    assert gpu_memory_mib() == (1250, 2 * 81559)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert gpu_memory_mib() == (250, 81559)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-0f1e")  # not indices: every GPU
    assert gpu_memory_mib() == (1250, 2 * 81559)

    _fake_nvidia_smi(tmp_path / "broken", "echo 'NVIDIA-SMI has failed' >&2; exit 9")
    monkeypatch.setenv("PATH", str(tmp_path / "broken"))
    assert gpu_memory_mib() is None
    _fake_nvidia_smi(tmp_path / "na", "echo '0, [N/A], [N/A]'")
    monkeypatch.setenv("PATH", str(tmp_path / "na"))
    assert gpu_memory_mib() is None


def test_poisson_arrivals_start_requests_on_their_schedule(
    tiny_server: RunningServer, tmp_path: Path
) -> None:
    """Open-loop arrivals: the rate keeps about ``concurrency`` sessions active for the
    warm-up's session length; no request starts before its arrival time, and the
    report says how late they started and how many were active."""
    out = tmp_path / "poisson.json"
    argv = ["--url", tiny_server.ws, "--concurrency", "2", "--requests-per-level", "6"]
    report = main(
        [*argv, "--arrivals", "poisson", "--warmup", "1", "--quiet", "--no-plot"]
        + ["--out", str(out)]
    )
    assert report["config"]["arrivals"] == "poisson"
    [level] = report["levels"]
    arrivals = level["arrivals"]
    assert level["errors"] == 0 and level["requests"] == 6
    assert arrivals["mode"] == "poisson" and arrivals["session_s"] > 0
    assert arrivals["rate_per_s"] == pytest.approx(2 / arrivals["session_s"])
    schedule = loadgen.poisson_schedule(arrivals["rate_per_s"], 6, 0 + 2)
    starts = sorted(level["per_request"], key=lambda r: r["index"])
    first = starts[0]["started_at"]
    for request, due in zip(starts, schedule, strict=True):
        assert request["started_at"] - first >= due - 0.005
    assert set(arrivals["late_start_ms"]) == STAT_KEYS
    assert 1 <= arrivals["active_max"] <= 6 and arrivals["active_mean"] > 0


def test_poisson_schedule_and_its_defaults() -> None:
    schedule = loadgen.poisson_schedule(4.0, 4000, seed=3)
    gaps = [b - a for a, b in zip(schedule, schedule[1:], strict=False)]
    assert schedule[0] == 0 and all(g >= 0 for g in gaps)
    assert sum(gaps) / len(gaps) == pytest.approx(0.25, rel=0.05)
    assert loadgen.poisson_schedule(4.0, 10, seed=3) == schedule[:10]
    assert [requests_for(c, None, poisson=True) for c in (1, 4, 16)] == [8, 12, 48]
    with pytest.raises(SystemExit, match="--session-s"):
        main(["--url", "ws://127.0.0.1:9/x", "--arrivals", "poisson", "--warmup", "0"])
