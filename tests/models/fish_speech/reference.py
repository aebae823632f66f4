"""Run a fish-speech==0.1.0 reference script (tools/ref/fish_speech, in .venv-ref-fish)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.models.reference_env import outputs, run_script

REPO = Path(__file__).resolve().parents[3]
REF_PYTHON = REPO / ".venv-ref-fish" / "bin" / "python"
TOOLS = REPO / "tools" / "ref" / "fish_speech"


def run_reference(script: str, checkpoint: Path, job: dict[str, Any], out: Path) -> dict[str, Any]:
    """``TOOLS/script CHECKPOINT JOB OUT``; each result's files by ``<id>.<name>``."""
    setup = "tools/ref/fish_speech/make_venv.sh"
    return outputs(run_script(REF_PYTHON, TOOLS / script, checkpoint, job, out, setup), out)
