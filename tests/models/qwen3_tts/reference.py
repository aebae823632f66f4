"""Run the reference package (qwen-tts==0.1.1 in .venv-ref) in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[3]
REF_PYTHON = REPO / ".venv-ref" / "bin" / "python"
RUNNER = REPO / "tools" / "ref" / "run_reference.py"


def require_reference() -> None:
    """Parity needs the reference: a missing .venv-ref fails the test (``make test``
    builds it; or run tools/ref/make_venv.sh)."""
    if not REF_PYTHON.exists():
        pytest.fail(f"reference env missing: {REF_PYTHON} (create it with tools/ref/make_venv.sh)")


class ReferenceRun:
    def __init__(self, out: Path, results: list[dict[str, Any]]) -> None:
        self.out = out
        self.results = {r["id"]: r for r in results}

    def array(self, name: str) -> np.ndarray:
        return np.load(self.out / f"{name}.npy")

    def has(self, name: str) -> bool:
        return (self.out / f"{name}.npy").exists()


def run_reference(checkpoint: Path, tasks: list[dict[str, Any]], out: Path) -> ReferenceRun:
    require_reference()
    out.mkdir(parents=True, exist_ok=True)
    job = out / "job.json"
    job.write_text(json.dumps({"tasks": tasks}))
    proc = subprocess.run(
        [str(REF_PYTHON), str(RUNNER), str(checkpoint), str(job), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "REF_THREADS": "2"},
    )
    if proc.returncode != 0:
        raise AssertionError(f"reference run failed:\n{proc.stderr[-4000:]}")
    results = json.loads((out / "result.json").read_text())["results"]
    return ReferenceRun(out, results)
