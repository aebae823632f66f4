"""``bridge``: an LLM's streamed reply, spoken as it is written.

Reads an OpenAI-compatible chat-completions stream (vLLM, OpenAI, llama.cpp's
server, ...) and pushes every text delta into one context of the voice server as it
arrives, so speech starts while the LLM is still writing. ``main(argv)`` is the
whole command::

    bridge --llm-url http://127.0.0.1:8001/v1 --model my-llm --prompt "Tell me a story" -o story.wav
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from protocol.messages import PCM_SAMPLE_RATES, OutputFormat
from voiceclient.chat_stream import ChatRequest, ChatStreamError, chat_deltas
from voiceclient.client import VoiceClient
from voiceclient.context import VoiceContext
from voiceclient.errors import VoiceServerError
from voiceclient.player import Player, PlayerError
from voiceclient.server_info import native_sample_rate
from voiceclient.wavfile import write_wav

DEFAULT_SERVER = "ws://127.0.0.1:8000/v1/audio/speech/ws"
FALLBACK_SAMPLE_RATE = 24000
CANCEL_TIMEOUT_S = 2.0

DESCRIPTION = """\
Stream an LLM's reply into the voice server and speak it while it is written.

The LLM is any OpenAI-compatible chat-completions server (vLLM, OpenAI, llama.cpp's
server, ...); --llm-url is its base URL (http://host:port/v1) or the full
.../chat/completions URL. Each text delta goes into one TTS context as soon as it
arrives. Printed: the time from the LLM's first token to the first audio, and when
the LLM stream ended. Ctrl-C cancels the context on the server.
"""


@dataclass(frozen=True, slots=True)
class BridgeResult:
    """What one bridged reply produced; times are ``time.monotonic()`` values."""

    text: str
    """The LLM's whole reply, as spoken."""
    pcm: bytes
    """s16le mono audio."""
    sample_rate: int
    requested_at: float
    first_token_at: float | None
    llm_done_at: float
    first_audio_at: float | None

    @property
    def audio_s(self) -> float:
        return len(self.pcm) / 2 / self.sample_rate


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="voiceserver bridge",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--llm-url", required=True, help="the LLM server's URL (see above)")
    parser.add_argument("--model", required=True, help="the LLM model name")
    parser.add_argument("--prompt", required=True, help='the user message ("-" reads stdin)')
    parser.add_argument("--system", default=None, help="a system message to send first")
    parser.add_argument("--llm-api-key", default=None, help="bearer key for the LLM server")
    parser.add_argument(
        "--max-tokens", type=int, default=None, help="cap on the reply's length (tokens)"
    )
    out = parser.add_mutually_exclusive_group(required=True)
    out.add_argument("-o", "--output", type=Path, help="WAV file to write")
    out.add_argument("--play", action="store_true", help="play the audio as it arrives")
    parser.add_argument(
        "--server", default=DEFAULT_SERVER, help=f"voice server WebSocket URL ({DEFAULT_SERVER})"
    )
    parser.add_argument("--voice", default=None, help="voice name (default: the model's)")
    parser.add_argument("--api-key", default=None, help="bearer key for the voice server")
    parser.add_argument(
        "--sample-rate",
        type=int,
        choices=PCM_SAMPLE_RATES,
        default=None,
        help="output rate in Hz (default: the TTS model's own rate)",
    )
    return parser


async def bridge(
    request: ChatRequest,
    server: str,
    *,
    sample_rate: int,
    voice: str | None = None,
    api_key: str | None = None,
    on_audio: Callable[[bytes], object] | None = None,
) -> BridgeResult:
    """Speak the LLM's reply; ``on_audio`` (sync or async) sees each piece of PCM as it
    arrives. Raises VoiceServerError or ChatStreamError; cancelled (Ctrl-C), it cancels
    the context on the server first."""
    fmt = OutputFormat(encoding="pcm_s16le", sample_rate=sample_rate)
    async with VoiceClient.connect(server, api_key) as vc:
        ctx = await vc.create_context(voice=voice, output_format=fmt)
        collector = asyncio.create_task(_collect(ctx, on_audio))
        requested_at = time.monotonic()
        first_token_at: float | None = None
        parts: list[str] = []
        try:
            async for delta in chat_deltas(request):
                if first_token_at is None:
                    first_token_at = time.monotonic()
                parts.append(delta)
                await ctx.append(delta)
            llm_done_at = time.monotonic()
            await ctx.end()
            pcm, first_audio_at = await collector
        finally:
            collector.cancel()
            if not ctx.finished:
                with contextlib.suppress(VoiceServerError, TimeoutError):
                    await asyncio.wait_for(asyncio.shield(ctx.cancel()), CANCEL_TIMEOUT_S)
    return BridgeResult(
        "".join(parts), pcm, sample_rate, requested_at, first_token_at, llm_done_at, first_audio_at
    )


async def _collect(
    ctx: VoiceContext, on_audio: Callable[[bytes], object] | None
) -> tuple[bytes, float | None]:
    parts: list[bytes] = []
    first_at: float | None = None
    async for chunk in ctx.audio():
        if not chunk.payload:
            continue
        if first_at is None:
            first_at = chunk.received_at
        parts.append(chunk.payload)
        if on_audio is not None:
            result = on_audio(chunk.payload)
            if asyncio.iscoroutine(result):
                await result
    return b"".join(parts), first_at


def report(result: BridgeResult) -> list[str]:
    """The timing lines the command prints."""
    if result.first_token_at is None:
        return ["the LLM sent no text"]
    first = result.first_token_at
    lines = [f"LLM first token: {(first - result.requested_at) * 1000:.0f} ms after the request"]
    if result.first_audio_at is not None:
        lines.append(f"first token to first audio: {(result.first_audio_at - first) * 1000:.0f} ms")
    lines.append(
        f"LLM stream ended: {(result.llm_done_at - first) * 1000:.0f} ms after its first token"
    )
    return lines


async def _run(args: argparse.Namespace, request: ChatRequest, rate: int) -> BridgeResult:
    player = await Player.start(rate) if args.play else None
    try:
        result = await bridge(
            request,
            args.server,
            sample_rate=rate,
            voice=args.voice,
            api_key=args.api_key,
            on_audio=player.write if player is not None else None,
        )
        if player is not None:
            await player.finish()
        return result
    finally:
        if player is not None:
            player.stop()


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
    if not prompt.strip():
        raise SystemExit("voiceserver bridge: error: --prompt is empty")
    messages = [{"role": "system", "content": args.system}] if args.system else []
    messages.append({"role": "user", "content": prompt})
    extra = {"max_tokens": args.max_tokens} if args.max_tokens else {}
    request = ChatRequest(args.llm_url, args.model, messages, args.llm_api_key, extra)
    rate = args.sample_rate or native_sample_rate(args.server, PCM_SAMPLE_RATES, args.api_key)
    if rate is None:
        rate = FALLBACK_SAMPLE_RATE
        print(f"note: could not read the TTS model's rate; using {rate} Hz", file=sys.stderr)
    try:
        result = asyncio.run(_run(args, request, rate))
    except KeyboardInterrupt:
        print("voiceserver bridge: interrupted; the context was cancelled", file=sys.stderr)
        raise SystemExit(130) from None
    except VoiceServerError as err:
        print(
            f"voiceserver bridge: error: voice server: {err.code}: {err.message}", file=sys.stderr
        )
        raise SystemExit(1) from None
    except (ChatStreamError, PlayerError) as err:
        print(f"voiceserver bridge: error: {err}", file=sys.stderr)
        raise SystemExit(1) from None
    for line in report(result):
        print(line, flush=True)
    if args.output is not None:
        write_wav(args.output, result.pcm, result.sample_rate)
        print(f"{args.output}: {result.audio_s:.2f} s of audio at {result.sample_rate} Hz")


if __name__ == "__main__":
    main()
