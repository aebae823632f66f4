"""How soon streamed words are heard: first word -> first audio, and each word -> its audio.

For models that read text while they speak (VoXtream2): N concurrent sessions each stream
a sentence one word at a time at ``--words-per-s`` (an LLM's pace), with word timestamps
on. Measured at the client, per request:

- ``first_audio_ms``: from sending the first word to the first audio chunk;
- ``word_ms``: for every word, from sending it to the arrival of the audio chunk that
  holds the word's first sample (its ``timestamps`` entry's ``start_ms``, counted in the
  audio received so far): the delay a listener hears between the text and its speech;
- ``rtf`` (wall time from the first word to the last audio over the audio's length),
  underruns of a player that starts at the first chunk, and the level's x real time.

Percentiles per level, as JSON (and a PNG plot unless ``--no-plot``):

    python -m bench.word_latency --spawn-model DIR --server-option device=cuda \\
        --server-option dtype=bfloat16 --concurrency 1 16 64 256 --out OUT.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from voiceclient import VoiceClient, VoiceServerError
from voiceclient.context import TimedWords

from bench.measure import Arrival, count_underruns
from bench.spawn import spawn_server
from bench.stats import summarize
from bench.texts import text_for


@dataclass
class WordRun:
    """One request's measurements (times in monotonic seconds)."""

    words: int
    sent: list[float] = field(default_factory=list)
    arrivals: list[Arrival] = field(default_factory=list)
    heard: dict[int, float] = field(default_factory=dict)
    """Word index -> when the chunk holding its first sample arrived."""
    error: str | None = None

    @property
    def first_audio_ms(self) -> float | None:
        if not self.arrivals or not self.sent:
            return None
        return 1000 * (self.arrivals[0].at - self.sent[0])

    def word_ms(self) -> list[float]:
        return [1000 * (at - self.sent[i]) for i, at in self.heard.items() if i < len(self.sent)]

    @property
    def audio_s(self) -> float:
        return sum(a.duration_s for a in self.arrivals)


def _word_of_char(text: str) -> list[int]:
    """Character -> index of the word (whitespace run) it is in; -1 for whitespace."""
    owner = [-1] * len(text)
    for index, match in enumerate(re.finditer(r"\S+", text)):
        for ch in range(match.start(), match.end()):
            owner[ch] = index
    return owner


async def run_one(url: str, text: str, words_per_s: float, rate: int) -> WordRun:
    words = text.split()
    run = WordRun(len(words))
    owner = _word_of_char(text)
    pending: dict[int, int] = {}  # word -> its first sample
    received = 0  # samples so far
    try:
        async with VoiceClient.connect(
            url,
            timestamps="word",
            output_format={"encoding": "pcm_s16le", "sample_rate": rate},
        ) as vc:
            ctx = await vc.create_context()

            async def collect() -> None:
                nonlocal received
                async for item in ctx.events():
                    if isinstance(item, TimedWords):
                        for w in item:
                            if 0 <= w.char_start < len(owner) and owner[w.char_start] >= 0:
                                pending.setdefault(owner[w.char_start], w.start_ms * rate // 1000)
                    elif hasattr(item, "payload") and item.payload:
                        samples = len(item.payload) // 2
                        run.arrivals.append(Arrival(item.received_at, samples / rate))
                        received += samples
                    for word, first in list(pending.items()):
                        if received > first:
                            run.heard[word] = (
                                run.arrivals[-1].at if run.arrivals else time.monotonic()
                            )
                            del pending[word]

            collector = asyncio.create_task(collect())
            start = time.monotonic()
            for i, word in enumerate(words):
                delay = start + i / words_per_s - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                run.sent.append(time.monotonic())
                await ctx.append(word + (" " if i + 1 < len(words) else ""))
            await ctx.end()
            await asyncio.wait_for(collector, 300)
    except (VoiceServerError, TimeoutError, OSError) as exc:
        run.error = f"{type(exc).__name__}: {exc}"
    return run


async def run_level(url: str, concurrency: int, requests: int, args: argparse.Namespace) -> dict:
    queue = list(range(requests))
    runs: list[WordRun] = []

    async def worker() -> None:
        while queue:
            index = queue.pop(0)
            text = text_for(index)
            runs.append(await run_one(url, text, args.words_per_s, args.sample_rate))

    began = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.monotonic() - began
    ok = [r for r in runs if r.error is None and r.arrivals]
    rtfs = [(r.arrivals[-1].at - r.sent[0]) / r.audio_s for r in ok if r.audio_s > 0 and r.sent]
    under = [count_underruns(r.arrivals).count for r in ok]
    words = [ms for r in ok for ms in r.word_ms()]
    return {
        "concurrency": concurrency,
        "requests": len(runs),
        "errors": [r.error for r in runs if r.error],
        "first_audio_ms": summarize([r.first_audio_ms for r in ok if r.first_audio_ms]),
        "word_ms": summarize(words),
        "words_heard": len(words),
        "words_sent": sum(r.words for r in ok),
        "rtf": summarize(rtfs),
        "underrun_requests": sum(1 for u in under if u),
        "underruns": sum(under),
        "x_real_time": sum(r.audio_s for r in ok) / wall if wall else 0.0,
        "wall_s": wall,
    }


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = report["levels"]
    xs = [lv["concurrency"] for lv in levels]
    fig, ax = plt.subplots(figsize=(7, 4))
    for key, label in (
        ("first_audio_ms", "first word -> first audio"),
        ("word_ms", "word -> its audio"),
    ):
        for pct, style in (("p50", "-o"), ("p95", "--o")):
            ax.plot(xs, [lv[key][pct] for lv in levels], style, label=f"{label} {pct}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrent streams")
    ax.set_ylabel("ms")
    ax.set_title(report["name"])
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="ws://127.0.0.1:8000/v1/audio/speech/ws")
    parser.add_argument("--spawn-model", type=Path, help="start serve --model DIR")
    parser.add_argument("--spawn", help="start serve --config CONFIG")
    parser.add_argument("--server-option", action="append", default=[])
    parser.add_argument("--server-engine", action="append", default=[])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--requests-per-level", type=int, default=0)
    parser.add_argument("--words-per-s", type=float, default=10.0)
    parser.add_argument("--sample-rate", type=int, default=24000)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("bench/results/word-latency.json"))
    parser.add_argument("--name", default=None)
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args()
    with ExitStack() as stack:
        url = args.url
        if args.spawn_model or args.spawn:
            engine = tuple(a for kv in args.server_engine for a in ("--engine", kv))
            server = stack.enter_context(
                spawn_server(
                    args.spawn,
                    model=args.spawn_model,
                    options=tuple(args.server_option),
                    args=engine,
                    load_generator=True,
                )
            )
            url = server.url

        async def everything() -> list[dict]:
            for i in range(args.warmup):
                await run_one(url, text_for(i), args.words_per_s, args.sample_rate)
            levels = []
            for n in args.concurrency:
                requests = args.requests_per_level or max(4, 2 * n)
                level = await run_level(url, n, requests, args)
                levels.append(level)
                print(
                    f"{n:5d} streams: first audio p50 {level['first_audio_ms']['p50']:.0f} ms "
                    f"p95 {level['first_audio_ms']['p95']:.0f}; word->audio p50 "
                    f"{level['word_ms']['p50']:.0f} p95 {level['word_ms']['p95']:.0f} ms; "
                    f"rtf p50 {level['rtf']['p50']:.2f}; x{level['x_real_time']:.1f} real time; "
                    f"underruns {level['underruns']}; errors {len(level['errors'])}",
                    flush=True,
                )
                _write(args, levels)  # what a cut-short run measured is kept
            return levels

        levels = asyncio.run(everything())
    report = _write(args, levels)
    if not args.no_plot:
        plot(report, args.out.with_suffix(".png"))
    print(f"wrote {args.out}")


def _write(args: argparse.Namespace, levels: list[dict]) -> dict:
    report = {
        "name": args.name or args.out.stem,
        "words_per_s": args.words_per_s,
        "server_options": args.server_option,
        "server_engine": args.server_engine,
        "levels": levels,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
