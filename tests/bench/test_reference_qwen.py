"""bench.reference_qwen runs the reference qwen-tts (in .venv-ref) at fixed length."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.models.qwen3_tts.ckpt import BuildOptions, build_checkpoint
from tests.models.qwen3_tts.reference import REF_PYTHON, REPO, require_reference

FRAMES = 8


def test_reference_bench_levels_at_fixed_length(tmp_path: Path) -> None:
    require_reference()
    # eos_scale makes the random talker pick EOS early: only the forced length is honoured.
    ckpt = build_checkpoint(
        tmp_path / "cv",
        BuildOptions(variant="custom_voice", size_name="1b7", seed=1, eos_scale=10.0),
    )
    out = tmp_path / "ref.json"
    proc = subprocess.run(
        [
            str(REF_PYTHON),
            "-m",
            "bench.reference_qwen",
            "--model",
            str(ckpt),
            "--device",
            "cpu",
            "--dtype",
            "float32",
            "--concurrency",
            "1",
            "2",
            "--frames",
            str(FRAMES),
            "--repeats",
            "1",
            "--warmup",
            "0",
            "--threads",
            "2",
            "--out",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(out.read_text())
    assert report["name"] == "qwen-tts reference"
    assert "bench.reference_qwen" in report["command"]
    assert report["machine"]["qwen-tts"] == "0.1.1"
    levels = report["levels"]
    assert [level["concurrency"] for level in levels] == [1, 2]
    for level in levels:
        assert level["audio_s_per_request"] == pytest.approx(FRAMES * 0.08)
        assert level["samples_per_stream"] == [FRAMES * 1920]
        assert level["length_ok"] is True
        assert level["x_real_time"] > 0
        assert set(level["ttfa_ms"]) == {"50", "95", "99"}
        assert all(v > 0 for v in level["ttfa_ms"].values())
        assert level["rtf_p50"] > 0
