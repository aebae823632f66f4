"""What every reference script of this folder shares: the environment set before the
reference package is imported, and the loop over a job's tasks.

A script runs as a file (so this folder is on ``sys.path``), imports this module
before anything of the reference, and hands ``run`` its task kinds:

    import jobs  # first: stand-ins and offline settings

    def run_embed(task: dict, job: jobs.Job) -> dict: ...

    if __name__ == "__main__":
        jobs.run({"embed": run_embed})

``run`` reads ``CKPT JOB.json OUT`` from the command line, calls each task's handler
in order, and writes OUT/result.json: {"results": [what each handler returned], plus
``report()``'s entries}. Models a handler needs are built once per run (cache a
builder on the checkpoint path).
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# Stand-ins for modules the reference imports but these tasks never run; real ones win.
sys.path.append(str(HERE / "stubs"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore")


@dataclass(frozen=True)
class Job:
    ckpt: Path
    """The checkpoint directory."""
    out: Path
    """Where a task writes its files."""
    spec: dict[str, Any]
    """JOB.json as read (its "tasks" and any job-wide settings)."""


def run(
    handlers: Mapping[str, Callable[[dict, Job], dict]],
    report: Callable[[], dict[str, Any]] | None = None,
) -> None:
    import torch

    ckpt, job_path, out = (Path(arg) for arg in sys.argv[1:4])
    torch.set_num_threads(int(os.environ.get("REF_THREADS", "2")))
    job = Job(ckpt, out, json.loads(job_path.read_text()))
    out.mkdir(parents=True, exist_ok=True)
    extra = report() if report is not None else {}
    results = []
    for task in job.spec["tasks"]:
        handler = handlers.get(task["kind"])
        if handler is None:
            raise SystemExit(f"unknown task kind {task['kind']!r}; known: {sorted(handlers)}")
        results.append(handler(task, job))
    (out / "result.json").write_text(json.dumps({"results": results, **extra}))
