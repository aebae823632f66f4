"""``voiceserver say``: speak a text through a running server into a WAV file."""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from protocol.messages import PCM_SAMPLE_RATES, OutputFormat
from voiceclient.client import VoiceClient
from voiceclient.context import VoiceContext
from voiceclient.errors import VoiceServerError
from voiceclient.server_info import native_sample_rate
from voiceclient.wavfile import write_wav

DEFAULT_URL = "ws://127.0.0.1:8000/v1/audio/speech/ws"
FALLBACK_SAMPLE_RATE = 24000

DESCRIPTION = """\
Synthesize TEXT through a running voice server and write a 16-bit mono WAV.

The text is streamed word by word, the way an LLM produces it (--no-stream-input
sends it in one piece). The sample rate defaults to the model's own rate, read from
the server's GET /v1/models, so nothing is resampled; if that cannot be read,
24000 Hz.

Printed at the end: audio seconds, wall time (from the first text sent to
context.done) and the real-time factor RTF = wall time / audio seconds.
With --stream, also the time to first audio: from the moment the first piece of
text was sent to the moment the first audio frame arrived.
"""


@dataclass(frozen=True, slots=True)
class SayResult:
    pcm: bytes
    sample_rate: int
    wall_s: float
    first_audio_s: float | None
    chunks: int

    @property
    def audio_s(self) -> float:
        return len(self.pcm) / 2 / self.sample_rate


def text_pieces(text: str, stream_input: bool) -> list[str]:
    """Word-sized pieces that join back into ``text`` exactly (or the whole text)."""
    if not stream_input:
        return [text]
    return re.findall(r"\S+\s*|\s+", text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="voiceserver say",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("text", help='the text to speak ("-" reads standard input)')
    parser.add_argument("-o", "--output", type=Path, required=True, help="WAV file to write")
    parser.add_argument("--url", default=DEFAULT_URL, help=f"WebSocket URL (default {DEFAULT_URL})")
    parser.add_argument("--voice", default=None, help="voice name (default: the model's)")
    parser.add_argument(
        "--sample-rate",
        type=int,
        choices=PCM_SAMPLE_RATES,
        default=None,
        help="output rate in Hz (default: the model's own rate)",
    )
    parser.add_argument("--api-key", default=None, help="bearer key, if the server needs one")
    parser.add_argument(
        "--stream", action="store_true", help="also print the time to first audio (see above)"
    )
    parser.add_argument(
        "--no-stream-input",
        dest="stream_input",
        action="store_false",
        help="send the whole text in one message instead of word by word",
    )
    parser.add_argument(
        "--words-per-s",
        type=float,
        default=0.0,
        help="pace the words like a token stream (default 0: as fast as possible)",
    )
    return parser


async def speak(
    url: str,
    text: str,
    *,
    sample_rate: int,
    voice: str | None = None,
    api_key: str | None = None,
    stream_input: bool = True,
    words_per_s: float = 0.0,
    on_first_audio: Callable[[float], None] | None = None,
) -> SayResult:
    """Synthesize ``text`` as s16le at ``sample_rate``; raises VoiceServerError."""
    fmt = OutputFormat(encoding="pcm_s16le", sample_rate=sample_rate)
    async with VoiceClient.connect(url, api_key) as vc:
        ctx = await vc.create_context(voice=voice, output_format=fmt)
        started = time.monotonic()
        collector = asyncio.create_task(_collect(ctx, started, on_first_audio))
        try:
            await _send_text(ctx, text_pieces(text, stream_input), words_per_s)
            await ctx.end()
            pcm, first_at, chunks = await collector
        finally:
            collector.cancel()
        await ctx.done()
        wall = time.monotonic() - started
    first_audio = first_at - started if first_at is not None else None
    return SayResult(pcm, sample_rate, wall, first_audio, chunks)


async def _send_text(ctx: VoiceContext, pieces: list[str], words_per_s: float) -> None:
    for i, piece in enumerate(pieces):
        if i and words_per_s > 0:
            await asyncio.sleep(1.0 / words_per_s)
        await ctx.append(piece)


async def _collect(
    ctx: VoiceContext, started: float, on_first_audio: Callable[[float], None] | None
) -> tuple[bytes, float | None, int]:
    parts: list[bytes] = []
    first_at: float | None = None
    async for chunk in ctx.audio():
        if first_at is None and chunk.payload:
            first_at = chunk.received_at
            if on_first_audio is not None:
                on_first_audio(first_at - started)
        parts.append(chunk.payload)
    return b"".join(parts), first_at, len(parts)


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    text = sys.stdin.read() if args.text == "-" else args.text
    if not text.strip():
        raise SystemExit("voiceserver say: error: the text is empty")
    rate = args.sample_rate
    if rate is None:
        rate = native_sample_rate(args.url, PCM_SAMPLE_RATES, args.api_key)
        if rate is None:
            rate = FALLBACK_SAMPLE_RATE
            print(
                f"note: could not read the model's rate from /v1/models; using {rate} Hz",
                file=sys.stderr,
            )

    def first_audio(seconds: float) -> None:
        if args.stream:
            print(f"time to first audio: {seconds * 1000:.0f} ms", flush=True)

    try:
        result = asyncio.run(
            speak(
                args.url,
                text,
                sample_rate=rate,
                voice=args.voice,
                api_key=args.api_key,
                stream_input=args.stream_input,
                words_per_s=args.words_per_s,
                on_first_audio=first_audio,
            )
        )
    except VoiceServerError as err:
        print(f"voiceserver say: error: {err.code}: {err.message}", file=sys.stderr)
        raise SystemExit(1) from None
    write_wav(args.output, result.pcm, result.sample_rate)
    rtf = result.wall_s / result.audio_s if result.audio_s else float("inf")
    print(
        f"{args.output}: {result.audio_s:.2f} s of audio at {result.sample_rate} Hz "
        f"in {result.wall_s:.2f} s (RTF {rtf:.3f}, {result.chunks} chunks)"
    )


if __name__ == "__main__":
    main()
