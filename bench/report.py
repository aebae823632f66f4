"""The benchmark report: JSON document, terminal table, PNG plot."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any


def machine_info() -> dict[str, Any]:
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {
        "cpu_count": os.cpu_count(),
        "cpus_usable": usable,
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        # Other work on the machine skews every number; worth knowing when comparing runs.
        "load_average_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }


def gpu_memory_mib() -> tuple[int, int] | None:
    """GPU memory (used, total) in MiB from ``nvidia-smi``, summed over the GPUs that
    ``CUDA_VISIBLE_DEVICES`` selects (all of them when it is unset or not plain indices);
    None without ``nvidia-smi`` or when it fails. One short subprocess, ~0.1 s."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    query = ["--query-gpu=index,memory.used,memory.total", "--format=csv,noheader,nounits"]
    try:
        done = subprocess.run(
            [exe, *query], capture_output=True, text=True, timeout=10.0, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    gpus: dict[str, tuple[int, int]] = {}
    for line in done.stdout.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) == 3 and fields[1].isdigit() and fields[2].isdigit():
            gpus[fields[0]] = (int(fields[1]), int(fields[2]))
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")]
    if all(v.isdigit() for v in visible) and any(v in gpus for v in visible):
        gpus = {index: memory for index, memory in gpus.items() if index in visible}
    if not gpus:
        return None
    return sum(used for used, _ in gpus.values()), sum(total for _, total in gpus.values())


def write_json(report: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")


def _fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def format_table(report: dict[str, Any]) -> str:
    """One row per concurrency level (a GPU memory column when any level has it)."""
    gpu = any(level.get("gpu_memory_used_mib") is not None for level in report["levels"])
    header = (
        f"{'conc':>4} {'reqs':>4} {'err':>3} | {'TTFA ms p50':>11} {'p95':>6} {'p99':>6} "
        f"{'mean':>6} | {'RTF p50':>7} {'p95':>5} | {'underruns':>9} {'stall ms p95':>12} | "
        f"{'xRT':>5} {'audio s/req':>11}" + (f" | {'GPU MiB':>8}" if gpu else "")
    )
    rows = [header, "-" * len(header)]
    for level in report["levels"]:
        ttfa, rtf, stall = level["ttfa_ms"], level["rtf"], level["stall_ms"]
        underruns = f"{level['underruns_total']} ({level['requests_with_underruns']} req)"
        rows.append(
            f"{level['concurrency']:>4} {level['requests']:>4} {level['errors']:>3} | "
            f"{_fmt(ttfa['p50']):>11} {_fmt(ttfa['p95']):>6} {_fmt(ttfa['p99']):>6} "
            f"{_fmt(ttfa['mean']):>6} | {_fmt(rtf['p50'], 3):>7} {_fmt(rtf['p95'], 2):>5} | "
            f"{underruns:>9} {_fmt(stall['p95']):>12} | "
            f"{level['x_real_time']:>5.2f} {_fmt(level['audio_s']['mean'], 2):>11}"
            + (f" | {_fmt(level.get('gpu_memory_used_mib')):>8}" if gpu else "")
        )
    return "\n".join(rows)


def write_plot(report: dict[str, Any], path: Path) -> None:
    """TTFA percentiles and x-real-time against concurrency, side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = report["levels"]
    conc = [level["concurrency"] for level in levels]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for key, style in (("p50", "o-"), ("p95", "s--"), ("p99", "^:")):
        values = [level["ttfa_ms"][key] for level in levels]
        left.plot(conc, [float("nan") if v is None else v for v in values], style, label=key)
    left.set(xlabel="concurrent sessions", ylabel="time to first audio (ms)", title="TTFA")
    right.plot(conc, [level["x_real_time"] for level in levels], "o-")
    right.set(
        xlabel="concurrent sessions",
        ylabel="audio seconds per wall second",
        title="aggregate x-real-time",
    )
    for ax in (left, right):
        if len(set(conc)) > 1 and min(conc) > 0:
            ax.set_xscale("log", base=2)
        ax.set_xticks(conc, [str(c) for c in conc])
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)
    left.legend()
    model = report["config"].get("model") or {}
    fig.suptitle(f"{report['name']}: {model.get('id', '?')} on {report['machine']['platform']}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def server_log_summary(path: Path | None) -> dict[str, Any] | None:
    """Line, error and warning counts and the last lines of a spawned server's log."""
    if path is None:
        return None
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return {"path": str(path), "lines": None}
    return {
        "path": str(path),
        "lines": len(lines),
        "errors": sum(1 for line in lines if " ERROR " in line or "Traceback" in line),
        "warnings": sum(1 for line in lines if " WARNING " in line),
        "tail": lines[-20:],
    }
