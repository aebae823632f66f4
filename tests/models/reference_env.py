"""Run a family's reference script in its own environment (a subprocess), for parity.

Each family's reference package lives in a virtual environment ``make test`` builds
beside ``.venv`` (its pins conflict with ours); a script of ``tools/ref`` runs there
as ``PYTHON SCRIPT CHECKPOINT JOB.json OUT`` and writes ``OUT/result.json``. A missing
environment fails the test: parity is never skipped.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest


def run_script(
    python: Path, script: Path, checkpoint: Path, job: dict[str, Any], out: Path, setup: str
) -> dict[str, Any]:
    """Run ``script`` on ``checkpoint`` with ``job``; its ``result.json``. ``setup``:
    how to create the environment (for the failure message)."""
    if not python.exists():
        pytest.fail(f"reference env missing: {python} (create it with {setup})")
    out.mkdir(parents=True, exist_ok=True)
    (out / "job.json").write_text(json.dumps(job))
    proc = subprocess.run(
        [str(python), str(script), str(checkpoint), str(out / "job.json"), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "REF_THREADS": "2", "OMP_NUM_THREADS": "2"},
    )
    if proc.returncode != 0:
        raise AssertionError(f"reference run failed:\n{proc.stderr[-4000:]}")
    return json.loads((out / "result.json").read_text())


def outputs(report: dict[str, Any], out: Path) -> dict[str, Any]:
    """Each result's values by ``<id>.<name>`` (arrays for .npy files), and the run's
    own top-level values by name."""
    found: dict[str, Any] = {k: v for k, v in report.items() if k != "results"}
    for result in report["results"]:
        for name, value in result.items():
            if name == "id":
                continue
            is_file = isinstance(value, str) and value.endswith(".npy")
            found[f"{result['id']}.{name}"] = np.load(out / value) if is_file else value
    return found
