"""Run the reference package (chatterbox-tts==0.1.7 in .venv-ref-chatterbox) in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[3]
REF_PYTHON = REPO / ".venv-ref-chatterbox" / "bin" / "python"
RUNNER = REPO / "tools" / "ref" / "chatterbox" / "run_reference.py"


def run_reference(
    checkpoint: Path, job: dict[str, Any], out: Path, runner: Path = RUNNER
) -> dict[str, Any]:
    """Each task's outputs by ``<id>.<name>``: arrays for files, values as given, and
    the run's own top-level values (beside ``results``) by name. ``runner``: a script
    of tools/ref/chatterbox taking CHECKPOINT JOB OUT (``make test`` builds the
    environment; or run tools/ref/chatterbox/make_venv.sh)."""
    if not REF_PYTHON.exists():
        pytest.fail(f"reference env missing: {REF_PYTHON} (tools/ref/chatterbox/make_venv.sh)")
    out.mkdir(parents=True, exist_ok=True)
    (out / "job.json").write_text(json.dumps(job))
    proc = subprocess.run(
        [str(REF_PYTHON), str(runner), str(checkpoint), str(out / "job.json"), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "REF_THREADS": "2"},
    )
    if proc.returncode != 0:
        raise AssertionError(f"reference run failed:\n{proc.stderr[-4000:]}")
    report = json.loads((out / "result.json").read_text())
    found: dict[str, Any] = {k: v for k, v in report.items() if k != "results"}
    for result in report["results"]:
        for name, value in result.items():
            if name == "id":
                continue
            is_file = isinstance(value, str) and value.endswith(".npy")
            found[f"{result['id']}.{name}"] = np.load(out / value) if is_file else value
    return found
