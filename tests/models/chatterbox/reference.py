"""Run the reference package (chatterbox-tts==0.1.7 in .venv-ref-chatterbox) in a subprocess."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.models.reference_env import outputs, run_script

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
    setup = "tools/ref/chatterbox/make_venv.sh"
    return outputs(run_script(REF_PYTHON, runner, checkpoint, job, out, setup), out)
