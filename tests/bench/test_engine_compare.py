"""bench.engine_bench sizes the engine to its levels; bench.engine_compare tabulates and plots reports."""

from __future__ import annotations

import json
from pathlib import Path

from bench import engine_bench, engine_compare


def test_engine_bench_runs_every_context_of_a_level_at_once(tmp_path: Path) -> None:
    # tiny.yaml steps 16 contexts at a time; a level of 20 must not queue behind that.
    out = tmp_path / "tiny.json"
    report = engine_bench.main(
        ["--config", "tiny", "--concurrency", "1", "20", "--warmup", "0", "--out", str(out)]
    )
    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    assert report["options"]["max_contexts"] == 20
    assert report["engine"]["max_ar_batch"] >= 20 and report["engine"]["admission_load"] == 0
    for level in report["levels"]:
        assert level["failed"] == 0 and level["audio_s_per_request"] > 0
        assert level["ttfa_ms"][50] > 0


def test_compare_tabulates_each_report_and_plots(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    for path in (a, b):
        engine_bench.main(
            ["--config", "tiny", "--concurrency", "1", "2", "--warmup", "0", "--out", str(path)]
        )
    png = tmp_path / "compare.png"
    text = engine_compare.main([f"old={a}", f"new={b}", "--out", str(png)])
    rows = [
        line for line in text.splitlines() if line.startswith("| old") or line.startswith("| new")
    ]
    assert [row.split("|")[1:3] for row in rows] == [
        [" old ", " 1 "],
        [" old ", " 2 "],
        [" new ", " 1 "],
        [" new ", " 2 "],
    ]
    saved = json.loads(a.read_text())["levels"][0]
    assert f"{saved['x_real_time']:,.1f}" in rows[0]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compare_refuses_a_report_without_a_label(tmp_path: Path) -> None:
    try:
        engine_compare.main([str(tmp_path / "a.json")])
    except SystemExit as exc:
        assert "LABEL=PATH" in str(exc)
    else:
        raise AssertionError("a report without LABEL= must be refused")


def _engine_level(concurrency: int, ttfa: float, xrt: float) -> dict[str, object]:
    return {
        "concurrency": concurrency,
        "ttfa_ms": {"50": ttfa, "95": ttfa, "99": ttfa},
        "rtf_p50": 1.0,
        "x_real_time": xrt,
    }


def test_compare_divides_by_a_baseline_and_reads_loadgen_reports(tmp_path: Path) -> None:
    """Ratios to the baseline at the same concurrency (TTFA lower, throughput higher);
    a loadgen report (WebSocket client) reads like an engine_bench one."""
    ref, ours = tmp_path / "ref.json", tmp_path / "ws.json"
    ref.write_text(json.dumps({"levels": [_engine_level(1, 9000.0, 0.5)]}))
    stats = {"p50": 45.0, "p95": 60.0, "p99": 61.0}
    ours.write_text(
        json.dumps(
            {
                "levels": [
                    {
                        "concurrency": c,
                        "ttfa_ms": stats,
                        "rtf": {"p50": 0.2},
                        "x_real_time": xrt,
                        "underruns_total": 0,
                    }
                    for c, xrt in ((1, 5.0), (64, 200.0))
                ]
            }
        )
    )
    text = engine_compare.main([f"ref={ref}", f"ws={ours}", "--baseline", "ref"])
    rows = {line.split("|")[2].strip(): line for line in text.splitlines() if "| ws " in line}
    assert "| 45 | 60 | 0.20 | 5.0 |" in rows["1"]
    assert "200.0x lower" in rows["1"] and "10.0x higher" in rows["1"]
    assert "lower" not in rows["64"]  # no baseline at that concurrency
    try:
        engine_compare.main([f"ref={ref}", "--baseline", "nobody"])
    except SystemExit as exc:
        assert "nobody" in str(exc)
    else:
        raise AssertionError("an unknown baseline label must be refused")
