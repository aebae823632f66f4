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
