"""The soak report's numbers (TTFA per minute, memory slope), its terminal summary and plot."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.measure import RequestResult
from bench.stats import summarize

SECONDS_PER_MINUTE = 60.0


def ttfa_summary(values: Sequence[float]) -> dict[str, float | int | None]:
    """``summarize`` plus the count of values."""
    return {"count": len(values), **summarize(values)}


def slope_per_minute(
    t_s: Sequence[float], values: Sequence[float | None], since_s: float, until_s: float
) -> float | None:
    """Least-squares slope (units per minute) of the samples with ``since_s <= t <= until_s``;
    None with fewer than two samples or no time span."""
    points = [
        (t, v)
        for t, v in zip(t_s, values, strict=True)
        if v is not None and since_s <= t <= until_s
    ]
    if len(points) < 2:
        return None
    t = np.array([p[0] for p in points], dtype=float) / SECONDS_PER_MINUTE
    v = np.array([p[1] for p in points], dtype=float)
    if float(t.max() - t.min()) <= 0:
        return None
    slope, _ = np.polyfit(t, v, 1)
    return float(slope)


def fit_line(
    t_s: Sequence[float],
    values: Sequence[float | None],
    since_s: float,
    until_s: float,
    slope: float | None,
) -> list[list[float]] | None:
    """The ends ``[[t, v], [t, v]]`` of the fitted line over ``since_s..until_s``: it runs
    through the mean of the fitted samples with ``slope`` (per minute)."""
    points = [
        (t, v)
        for t, v in zip(t_s, values, strict=True)
        if v is not None and since_s <= t <= until_s
    ]
    if slope is None or not points:
        return None
    t_mean = sum(p[0] for p in points) / len(points)
    v_mean = sum(p[1] for p in points) / len(points)
    return [[t, v_mean + slope * (t - t_mean) / SECONDS_PER_MINUTE] for t in (since_s, until_s)]


def per_minute(results: Sequence[RequestResult], start: float) -> list[dict[str, Any]]:
    """Requests bucketed by the minute (since ``start``, monotonic s) their flush was sent."""
    buckets: dict[int, list[RequestResult]] = {}
    for r in results:
        buckets.setdefault(max(0, int((r.flush_at - start) // SECONDS_PER_MINUTE)), []).append(r)
    rows = []
    for minute in sorted(buckets):
        group = buckets[minute]
        ttfa = [r.ttfa_ms for r in group if r.ok and r.ttfa_ms is not None]
        stats = ttfa_summary(ttfa)
        rows.append(
            {
                "minute": minute,
                "requests": len(group),
                "errors": sum(1 for r in group if not r.ok),
                "ttfa_ms": {k: stats[k] for k in ("count", "p50", "p95", "p99", "max")},
            }
        )
    return rows


def _fmt(value: float | None, spec: str = ".0f") -> str:
    return "-" if value is None else format(value, spec)


def _codes(counts: dict[str, int], what: str = "") -> str:
    if not counts:
        return ""
    listed = ", ".join(f"{code}: {n}" for code, n in sorted(counts.items()))
    return f" ({what + ' ' if what else ''}{listed})"


def format_summary(report: dict[str, Any]) -> str:
    """A few lines for the terminal, ending in PASS or FAIL with the reasons."""
    cfg, s, phases = report["config"], report["summary"], report["phases"]
    server, idle, active = s["server"], s["idle"], s["active"]
    rss, fds, ttfa, connect = s["rss_mb"], s["fds"], active["ttfa_ms"], idle["connect_ms"]
    health, lag = s["health_ms"], s["bench_loop_lag_ms"]
    state = "alive" if not server["died"] else f"DIED (exit {server['exit_code']})"
    lines = [
        f"soak {report['name']}: {cfg['idle']} idle + {cfg['active']} active sessions, "
        f"{phases['steady_s']:.0f} s steady after {phases['connect_s']:.1f} s connecting",
        f"server   {state} | RSS {_fmt(rss['start'])} -> {_fmt(rss['end'])} MB "
        f"(max {_fmt(rss['max'])}, before idle {_fmt(rss['before_idle'])}, "
        f"{_fmt(rss['per_idle_socket_kb'], '.1f')} KB per idle socket), "
        f"slope {_fmt(rss['slope_mb_per_min'], '+.2f')} MB/min over the second half | "
        f"fds {_fmt(fds['start'], 'd')} -> {_fmt(fds['end'], 'd')} "
        f"(max {_fmt(fds['max'], 'd')}) | CPU p50 {_fmt(s['server_cpu_pct']['p50'])}%",
        f"idle     {idle['connected']}/{idle['requested']} connected "
        f"(connect p50 {_fmt(connect['p50'])} ms, p99 {_fmt(connect['p99'])} ms), "
        f"{idle['dropped']} dropped{_codes(idle['close_codes'])}, "
        f"{idle['connected_at_end']} still connected at the end",
        f"active   {active['requests']} requests, {active['errors']} failed"
        f"{_codes(active['error_codes'])}{_codes(active['close_codes'], 'closes')} | "
        f"TTFA p50 {_fmt(ttfa['p50'])} p95 {_fmt(ttfa['p95'])} p99 {_fmt(ttfa['p99'])} "
        f"max {_fmt(ttfa['max'])} ms | {active['x_real_time']:.2f}x real time",
        f"health   p50 {_fmt(health['p50'], '.1f')} p99 {_fmt(health['p99'], '.1f')} "
        f"max {_fmt(health['max'], '.1f')} ms, {s['health_failures']} failed | "
        f"bench loop lag p99 {_fmt(lag['p99'], '.1f')} ms",
    ]
    log = report.get("server_log")
    if log and log.get("errors"):
        lines.append(f"log      {log['errors']} error lines in {log['path']}")
    if s["warmup_errors"]:
        lines.append(f"warmup   failed: {s['warmup_errors'][0]}")
    lines.append("PASS" if s["passed"] else "FAIL: " + "; ".join(s["failures"]))
    return "\n".join(lines)


def _nan(values: Sequence[float | None]) -> list[float]:
    return [math.nan if v is None else float(v) for v in values]


def write_soak_plot(report: dict[str, Any], path: Path) -> None:
    """Server RSS (and open files), TTFA per request, connected idle sockets, over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series, phases, summary = report["series"], report["phases"], report["summary"]
    t = series["t_s"]
    fig, (mem, lat, sock) = plt.subplots(3, 1, figsize=(11, 9.5), sharex=True)

    mem.plot(t, _nan(series["rss_mb"]), "-", color="C0", label="RSS")
    mem.plot(t, _nan(series["anon_mb"]), "-", color="C0", alpha=0.4, label="anonymous")
    slope = summary["rss_mb"]["slope_mb_per_min"]
    fit = summary["rss_mb"]["fit"]
    if fit is not None:
        (t0, v0), (t1, v1) = fit
        mem.plot([t0, t1], [v0, v1], "--", color="C3", label=f"fit {slope:+.2f} MB/min")
    mem.set(ylabel="server memory (MB)", title="server RSS")
    files = mem.twinx()
    files.plot(t, _nan(series["fds"]), ":", color="C2", label="open fds")
    files.set_ylabel("open file descriptors")
    handles = mem.get_legend_handles_labels()
    more = files.get_legend_handles_labels()
    mem.legend(handles[0] + more[0], handles[1] + more[1], loc="lower right", fontsize=8)

    requests = report["per_request"]
    ok = [r for r in requests if r["error"] is None and r["ttfa_ms"] is not None]
    failed = [r for r in requests if not (r["error"] is None and r["ttfa_ms"] is not None)]
    lat.plot(
        [r["flush_at"] for r in ok],
        [r["ttfa_ms"] for r in ok],
        ".",
        ms=3,
        alpha=0.5,
        label="request",
    )
    minutes = summary["ttfa_per_minute"]
    steady_start = phases["steady_started_s"]
    for key, style in (("p50", "-"), ("p99", "--")):
        xs, ys = [], []
        for row in minutes:
            value = row["ttfa_ms"][key]
            start = steady_start + row["minute"] * SECONDS_PER_MINUTE
            xs += [start, min(start + SECONDS_PER_MINUTE, phases["steady_ended_s"])]
            ys += [math.nan if value is None else value] * 2
        lat.plot(xs, ys, style, color="C1", label=f"{key} per minute")
    if failed:
        top = max((r["ttfa_ms"] for r in ok), default=1.0)
        lat.plot(
            [r["flush_at"] for r in failed], [top] * len(failed), "x", color="C3", label="failed"
        )
    lat.set(ylabel="time to first audio (ms)", title="TTFA")
    lat.set_ylim(bottom=0)
    lat.legend(loc="upper right", fontsize=8)

    sock.plot(t, series["idle_connected"], "-", color="C0", label="idle sockets connected")
    sock.plot(
        t, _nan(series["server_sessions"]), ":", color="C4", label="server sessions (/health)"
    )
    sock.set(xlabel="seconds since start", ylabel="sessions", title="connections")
    sock.set_ylim(bottom=0)
    sock.legend(loc="lower right", fontsize=8)

    for ax in (mem, lat, sock):
        ax.axvspan(phases["connect_started_s"], steady_start, color="0.9", zorder=0)
        ax.grid(True, alpha=0.3)
    model = report["config"].get("model") or {}
    cfg = report["config"]
    fig.suptitle(
        f"{report['name']}: {model.get('id', '?')}, {cfg['idle']} idle + {cfg['active']} "
        f"active sessions (grey: connecting)"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
