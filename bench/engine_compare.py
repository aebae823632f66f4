"""Side by side: several ``bench.engine_bench`` reports as one table and one plot.

Each report is named on the command line as LABEL=PATH; reports of the same
label (several runs of one tree) are drawn in one colour, so run-to-run noise
shows next to the difference between trees:

    python -m bench.engine_compare before=a.json before=b.json after=c.json \\
        --out bench/baselines/compare.png

The table gives, per report and concurrency, time to first audio p50/p95,
per-stream RTF p50 and aggregate x-real-time. Reports of ``bench.loadgen``
(measured at a WebSocket client) and ``bench.reference_qwen`` read the same
way. With ``--baseline LABEL`` every other report's rows also give their ratios
to that report at the same concurrency: how many times lower its time to first
audio p50, and how many times higher its x-real-time.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def read(specs: list[str]) -> list[tuple[str, dict[str, Any]]]:
    reports = []
    for spec in specs:
        label, sep, path = spec.partition("=")
        if not sep or not label or not path:
            raise SystemExit(f"report {spec!r}: expected LABEL=PATH")
        reports.append((label, normalized(json.loads(Path(path).read_text()))))
    return reports


def normalized(report: dict[str, Any]) -> dict[str, Any]:
    """A loadgen report's levels in the engine_bench shape (others as they are)."""
    levels = []
    for level in report["levels"]:
        if "rtf_p50" in level:
            levels.append(level)
            continue
        ttfa = level["ttfa_ms"]
        levels.append(
            {
                "concurrency": level["concurrency"],
                "ttfa_ms": {"50": ttfa.get("p50"), "95": ttfa.get("p95"), "99": ttfa.get("p99")},
                "rtf_p50": level["rtf"].get("p50"),
                "x_real_time": level["x_real_time"],
                "underruns": level.get("underruns_total"),
            }
        )
    return {**report, "levels": levels}


def table(reports: list[tuple[str, dict[str, Any]]], baseline: str | None = None) -> str:
    base = {
        level["concurrency"]: level
        for label, report in reports
        if label == baseline
        for level in report["levels"]
    }
    lines = [
        "| report | concurrency | TTFA p50 ms | TTFA p95 ms | RTF p50 | x real time |"
        + (f" TTFA vs {baseline} | x real time vs {baseline} |" if baseline else ""),
        "|---|---|---|---|---|---|" + ("---|---|" if baseline else ""),
    ]
    for label, report in reports:
        for level in report["levels"]:
            ttfa = level["ttfa_ms"]
            row = (
                f"| {label} | {level['concurrency']} | {_ms(ttfa, 50)} | {_ms(ttfa, 95)} "
                f"| {_num(level['rtf_p50'], 2)} | {_num(level['x_real_time'], 1)} |"
            )
            if baseline:
                ref = base.get(level["concurrency"]) if label != baseline else None
                if ref is None:
                    row += " | |"
                else:
                    lower = _ratio(_ttfa(ref["ttfa_ms"], 50), _ttfa(ttfa, 50))
                    higher = _ratio(level["x_real_time"], ref["x_real_time"])
                    row += f" {lower} lower | {higher} higher |"
            lines.append(row)
    return "\n".join(lines)


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if not a or not b else f"{a / b:,.1f}x"


def _ttfa(ttfa: dict[Any, float], q: int) -> float | None:
    # JSON keys are strings; a report still in memory has ints.
    return ttfa.get(str(q), ttfa.get(q))


def _ms(ttfa: dict[Any, float], q: int) -> str:
    return _num(_ttfa(ttfa, q), 0)


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def write_plot(reports: list[tuple[str, dict[str, Any]]], path: Path) -> None:
    """TTFA p50, RTF p50 and x-real-time against concurrency, a line per report."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(dict.fromkeys(label for label, _ in reports))
    colours = {label: f"C{i}" for i, label in enumerate(labels)}
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    seen: set[str] = set()
    for label, report in reports:
        levels = report["levels"]
        c = [lv["concurrency"] for lv in levels]
        style = {"color": colours[label], "marker": "o", "alpha": 0.8}
        name = None if label in seen else label
        seen.add(label)
        axes[0].plot(c, [_ttfa(lv["ttfa_ms"], 50) for lv in levels], label=name, **style)
        axes[1].plot(c, [lv["rtf_p50"] for lv in levels], label=name, **style)
        axes[2].plot(c, [lv["x_real_time"] for lv in levels], label=name, **style)
    titles = ("time to first audio p50 (ms)", "per-stream RTF p50", "aggregate x real time")
    for ax, title in zip(axes, titles, strict=True):
        ax.set(xlabel="concurrent contexts", title=title)
        ax.set_xscale("log", base=2)
        if ax is not axes[1]:
            ax.set_yscale("log")
        ax.grid(True, alpha=0.3, which="both")
        ax.legend()
    axes[1].axhline(1.0, color="grey", lw=0.8, ls="--")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("reports", nargs="+", help="LABEL=PATH of an engine_bench report")
    parser.add_argument("--out", type=Path, default=None, help="plot (PNG)")
    parser.add_argument(
        "--baseline", default=None, help="LABEL whose figures the others are divided by"
    )
    args = parser.parse_args(argv)
    reports = read(args.reports)
    if args.baseline is not None and args.baseline not in {label for label, _ in reports}:
        raise SystemExit(f"--baseline {args.baseline}: no report has that label")
    text = table(reports, args.baseline)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        write_plot(reports, args.out)
        print(f"plot: {args.out}")
    return text


if __name__ == "__main__":
    main()
