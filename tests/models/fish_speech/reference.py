"""Run a fish-speech==0.1.0 reference script (tools/ref/fish_speech, in .venv-ref-fish)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[3]
REF_PYTHON = REPO / ".venv-ref-fish" / "bin" / "python"
TOOLS = REPO / "tools" / "ref" / "fish_speech"


def run_reference(script: str, checkpoint: Path, job: dict[str, Any], out: Path) -> dict[str, Any]:
    """``TOOLS/script CHECKPOINT JOB OUT``; each result's files by ``<id>.<name>`` (arrays
    for .npy files, values as given). ``make test`` builds the environment (or
    tools/ref/fish_speech/make_venv.sh)."""
    if not REF_PYTHON.exists():
        pytest.fail(f"reference env missing: {REF_PYTHON} (tools/ref/fish_speech/make_venv.sh)")
    out.mkdir(parents=True, exist_ok=True)
    (out / "job.json").write_text(json.dumps(job))
    proc = subprocess.run(
        [str(REF_PYTHON), str(TOOLS / script), str(checkpoint), str(out / "job.json"), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "2"},
    )
    if proc.returncode != 0:
        raise AssertionError(f"reference run failed:\n{proc.stderr[-4000:]}")
    report = json.loads((out / "result.json").read_text())
    found: dict[str, Any] = {}
    for result in report["results"]:
        for name, value in result.items():
            if name == "id":
                continue
            is_file = isinstance(value, str) and value.endswith(".npy")
            found[f"{result['id']}.{name}"] = np.load(out / value) if is_file else value
    return found
