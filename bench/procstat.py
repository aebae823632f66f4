"""A process's memory, open files and CPU time, read from Linux's /proc."""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass
from pathlib import Path

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True, slots=True)
class ProcSample:
    rss_mb: float
    """Resident set size (VmRSS)."""
    anon_mb: float
    """Resident anonymous memory (RssAnon): the heap, where a leak shows."""
    fds: int
    threads: int
    cpu_s: float
    """User + system CPU time since the process started."""


def read_proc(pid: int) -> ProcSample | None:
    """None when the process is gone, a zombie, or /proc is not there."""
    base = Path(f"/proc/{pid}")
    try:
        status = _fields((base / "status").read_text())
        stat = (base / "stat").read_text()
        fds = len(os.listdir(base / "fd"))
    except (OSError, ValueError):
        return None
    if status.get("State", "").startswith(("Z", "X")):
        return None
    # Field 2 (comm) may hold spaces and parentheses; the rest follows its last ')'.
    rest = stat[stat.rindex(")") + 2 :].split()
    utime, stime = int(rest[11]), int(rest[12])
    return ProcSample(
        rss_mb=_kb(status.get("VmRSS")) / 1024.0,
        anon_mb=_kb(status.get("RssAnon")) / 1024.0,
        fds=fds,
        threads=int(status.get("Threads", "0")),
        cpu_s=(utime + stime) / _CLOCK_TICKS,
    )


def _fields(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key] = value.strip()
    return out


def _kb(value: str | None) -> float:
    return float(value.split()[0]) if value else 0.0


def open_files_limit(pid: int) -> int | None:
    """The soft RLIMIT_NOFILE of another process (None: unknown or unlimited)."""
    try:
        for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
            if line.startswith("Max open files"):
                soft = line.split()[3]
                return int(soft) if soft.isdigit() else None
    except OSError:
        pass
    return None


def raise_open_files_limit() -> int:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit (children inherit it);
    returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:
        # Linux refuses an infinite soft limit for files; fs.nr_open is the real ceiling.
        try:
            target = int(Path("/proc/sys/fs/nr_open").read_text())
        except (OSError, ValueError):
            target = max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            pass
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
