"""bench.step_profile drives a real runner and vocoder and reports per-batch timings."""

from __future__ import annotations

import json
from pathlib import Path

from bench import step_profile


def test_step_profile_reports_every_batch(tmp_path: Path) -> None:
    out = tmp_path / "step.json"
    report = step_profile.main(
        ["--config", "tiny", "--batch", "1", "3", "--steps", "8", "--profile", "--out", str(out)]
    )
    assert json.loads(out.read_text()) == report
    assert [level["batch"] for level in report["levels"]] == [1, 3]
    for level in report["levels"]:
        # The tiny model makes one frame per context per step until its text ends.
        assert level["steps"] == 8 and level["frames_per_step"] == level["batch"]
        assert 0 < level["step_ms"]["p50"] <= level["step_ms"]["max"]
        assert level["host_waits_per_step"] is None  # counted on CUDA only
        chunks = level["vocoder"]
        assert set(chunks) == {"chunk_1", "chunk_4"}
        assert chunks["chunk_1"]["calls"] >= 2 and chunks["chunk_1"]["call_ms"]["p50"] > 0
        profile = level["profile"]
        for ops in (profile["by_host"], profile["by_device"]):
            assert ops and all(op["calls_per_step"] > 0 for op in ops)
        assert profile["device_us_per_step"] >= 0
        assert (tmp_path / f"step-trace-b{level['batch']}.json").stat().st_size > 0


def test_batch_beyond_the_model_slots_is_refused(tmp_path: Path) -> None:
    try:
        step_profile.main(
            ["--config", "tiny", "--option", "max_contexts=4", "--batch", "5", "--steps", "1"]
        )
    except ValueError as err:
        assert "--batch 5" in str(err) and "4 slots" in str(err)
    else:
        raise AssertionError("a batch larger than the model's slots must be refused")
