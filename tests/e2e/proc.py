"""The spawned server's memory and CPU time, for tests that measure what an attack costs."""

from __future__ import annotations

from bench.procstat import ProcSample, read_proc


def sample(pid: int) -> ProcSample:
    found = read_proc(pid)
    assert found is not None, "the server process is gone"
    return found


def rss_mb(pid: int) -> float:
    return sample(pid).rss_mb


def cpu_s(pid: int) -> float:
    """User + system CPU seconds since the process started."""
    return sample(pid).cpu_s
