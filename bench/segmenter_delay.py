"""What the segmenter's ``max_delay_ms`` buys and costs on LLM-shaped text streams.

Replays assistant replies as an LLM streams them (tokens with their leading space, long
words in two pieces, gaps drawn around a token rate) through the native socket's text
segmenter in simulated time, ``poll`` called at each ``deadline`` as the session does, for
each candidate delay and rate:

- ``first_ms``: from the first token to the first segment (what the delay adds to time
  to first audio when the first clause is slow to end);
- ``timer_share``: segments cut by the timer rather than at a boundary, and
  ``mid_clause_share``: those cut where no punctuation is (prosody suffers there);
- ``words_per_segment``.

A stalled stream (a sentence sent without the whitespace after it, then nothing) is
spoken after exactly the delay: that is the bound, so it is not simulated.

    python -m bench.segmenter_delay --out bench/results/segmenter-delay.json
"""

from __future__ import annotations

import argparse
import json
import random
import re
from pathlib import Path
from typing import Any

import numpy as np

from bench.texts import SENTENCES
from voiceserver.text.segmenter import Segment, SegmenterConfig, TextSegmenter

REPLIES: tuple[str, ...] = (
    "Sure! I can help with that. Your appointment is confirmed for Tuesday at ten in the "
    "morning with Doctor Patel, and you will get a reminder the day before.",
    "I checked the order history on your account and the replacement part shipped this "
    "morning from our warehouse in Ohio so it should reach you within three business days.",
    "Great question. The short answer is yes, but there are two things to keep in mind "
    "before you upgrade the firmware on the thermostat.",
    "Okay. Let me look that up for you. One moment please.",
    "The cheapest option leaves at seven fifteen and takes about four hours with one stop in "
    "Denver while the direct flight costs a little more and leaves just after noon.",
    "Hmm, I am not sure I understood that. Could you tell me the name on the reservation?",
    *(" ".join(SENTENCES[i : i + 2]) for i in range(0, len(SENTENCES), 2)),
)
DELAYS: tuple[int | None, ...] = (None, 150, 250, 400, 600, 1000, 2000)
RATES = (10, 25, 50, 100)
"""Tokens per second: a slow reasoning model to a fast small one."""


def tokens(text: str) -> list[str]:
    """LLM-like pieces: each word with its leading whitespace, words over six letters
    in two pieces (sub-words), joining back into ``text``."""
    out = []
    for word in re.findall(r"\s*\S+", text):
        if len(word.strip()) > 6:
            cut = len(word) - len(word.strip()) + 4
            out += [word[:cut], word[cut:]]
        else:
            out.append(word)
    return out


def replay(text: str, delay_ms: int | None, rate: float, rng: random.Random) -> dict[str, Any]:
    """One reply streamed at ``rate`` tokens/s (gaps from a gamma law, mean 1/rate,
    so some gaps run two or three times the mean)."""
    seg = TextSegmenter(SegmenterConfig(max_delay_ms=delay_ms))
    now, first_at = 0.0, None
    cuts: list[tuple[Segment, bool]] = []  # (segment, by the timer)
    for piece in tokens(text):
        arrive = now + rng.gammavariate(2.0, 0.5 / rate)
        while (due := seg.deadline()) is not None and due <= arrive:
            cuts += [(s, True) for s in seg.poll(due)]
        now = arrive
        cuts += [(s, False) for s in seg.push(piece, now)]
        if first_at is None and cuts:
            first_at = now
    if first_at is None:
        first_at = now  # the end of the reply (the client's flush) speaks it
    timer = [s for s, by_timer in cuts if by_timer]
    mid = [s for s in timer if s.text[-1].isalnum()]
    spoken = [s for s, _ in cuts] + seg.flush()
    return {
        "first_ms": 1000 * first_at,
        "segments": len(spoken),
        "timer": len(timer),
        "mid_clause": len(mid),
        "words": sum(len(s.text.split()) for s in spoken),
    }


def measure(repeats: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows = []
    for rate in RATES:
        for delay in DELAYS:
            runs = [replay(t, delay, rate, rng) for t in REPLIES for _ in range(repeats)]
            segments = sum(r["segments"] for r in runs)
            first = [r["first_ms"] for r in runs]
            rows.append(
                {
                    "rate_tokens_per_s": rate,
                    "max_delay_ms": delay,
                    "first_ms": {
                        "p50": float(np.percentile(first, 50)),
                        "p95": float(np.percentile(first, 95)),
                        "max": max(first),
                    },
                    "timer_share": sum(r["timer"] for r in runs) / segments,
                    "mid_clause_share": sum(r["mid_clause"] for r in runs) / segments,
                    "words_per_segment": sum(r["words"] for r in runs) / segments,
                }
            )
    return rows


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for rate in RATES:
        pts = [r for r in rows if r["rate_tokens_per_s"] == rate and r["max_delay_ms"]]
        x = [r["max_delay_ms"] for r in pts]
        a.plot(x, [r["first_ms"]["p95"] for r in pts], marker="o", label=f"{rate} tok/s")
        b.plot(x, [100 * r["mid_clause_share"] for r in pts], marker="o", label=f"{rate} tok/s")
    a.set(xlabel="max_delay_ms", ylabel="first segment p95 (ms)", xscale="log")
    b.set(xlabel="max_delay_ms", ylabel="segments cut mid-clause (%)", xscale="log")
    a.legend()
    fig.tight_layout()
    fig.savefig(path)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=20, help="replays of each reply")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    rows = measure(args.repeats, args.seed)
    for r in rows:
        print(
            f"{r['rate_tokens_per_s']:4d} tok/s  delay {str(r['max_delay_ms']):>5}  "
            f"first p50 {r['first_ms']['p50']:7.0f} p95 {r['first_ms']['p95']:7.0f} ms  "
            f"timer {100 * r['timer_share']:5.1f}%  mid-clause {100 * r['mid_clause_share']:5.1f}%"
            f"  words/seg {r['words_per_segment']:5.1f}"
        )
    report = {"replies": len(REPLIES), "repeats": args.repeats, "rows": rows}
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1))
        plot(rows, args.out.with_suffix(".png"))
    return report


if __name__ == "__main__":
    main()
