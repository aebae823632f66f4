"""One benchmark request: stream a text word by word into a new context, measure audio."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from dataclasses import dataclass

from voiceclient import VoiceClient, VoiceContext, VoiceServerError
from voiceclient.server_info import ModelInfo, list_models

from bench.measure import Arrival, RequestResult, count_underruns
from bench.texts import FIRST_CLAUSE_WORDS, text_for, word_pieces
from protocol.messages import PCM_SAMPLE_RATES, OutputFormat

BYTES_PER_SAMPLE = 2  # the bench always asks for pcm_s16le
FALLBACK_SAMPLE_RATE = 24000


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """How every request of a run is sent."""

    sample_rate: int
    voice: str | None = None
    tokens_per_s: float = 0.0
    """Word pieces per second; 0 sends them as fast as the socket takes them."""
    first_clause_words: int = FIRST_CLAUSE_WORDS
    timeout_s: float = 120.0

    @property
    def output_format(self) -> OutputFormat:
        return OutputFormat(encoding="pcm_s16le", sample_rate=self.sample_rate)


def spec_for_server(url: str, args: argparse.Namespace) -> tuple[ModelInfo | None, RequestSpec]:
    """The server's first model (None when ``/v1/models`` cannot be read) and how every
    request of a run is sent: at the model's own rate unless ``--sample-rate`` says."""
    try:
        models = list_models(url, args.api_key)
    except (OSError, ValueError, KeyError) as exc:
        print(f"note: could not read {url} /v1/models ({exc})", file=sys.stderr)
        models = []
    model = models[0] if models else None
    rate = args.sample_rate
    if rate is None:
        native = model.sample_rate if model is not None else None
        rate = native if native in PCM_SAMPLE_RATES else FALLBACK_SAMPLE_RATE
    spec = RequestSpec(
        sample_rate=rate,
        voice=args.voice,
        tokens_per_s=args.tokens_per_s,
        timeout_s=args.timeout,
    )
    return model, spec


async def run_request(
    vc: VoiceClient,
    text: str,
    spec: RequestSpec,
    index: int = 0,
    concurrency: int = 1,
    arrivals: list[Arrival] | None = None,
) -> RequestResult:
    """Stream ``text`` like an LLM: word pieces, ``text.append(flush=True)`` on the last
    word of the first clause, the rest, ``context.end``. Errors are recorded, not raised.
    ``arrivals``, when given, gets every audio chunk as it arrives."""
    pieces = word_pieces(text)
    flush_piece = min(spec.first_clause_words, len(pieces)) - 1
    started = flush_at = time.monotonic()
    if arrivals is None:
        arrivals = []
    error: str | None = None
    ctx: VoiceContext | None = None
    try:
        async with asyncio.timeout(spec.timeout_s):
            ctx = await vc.create_context(voice=spec.voice, output_format=spec.output_format)
            collector = asyncio.create_task(_collect(ctx, spec.sample_rate, arrivals))
            try:
                started = time.monotonic()
                for i, piece in enumerate(pieces):
                    if spec.tokens_per_s > 0:
                        await _sleep_until(started + i / spec.tokens_per_s)
                    if i == flush_piece:
                        flush_at = time.monotonic()
                    await ctx.append(piece, flush=i == flush_piece)
                await ctx.end()
                await collector
            finally:
                collector.cancel()
    except VoiceServerError as err:
        error = f"{err.code}: {err.message}"
    except TimeoutError:
        error = f"timeout: no context.done within {spec.timeout_s:g} s"
        if ctx is not None:
            await _cancel_quietly(ctx)
    under = count_underruns(arrivals)
    return RequestResult(
        index=index,
        concurrency=concurrency,
        words=len(pieces),
        chars=len(text),
        started_at=started,
        flush_at=flush_at,
        first_audio_at=arrivals[0].at if arrivals else None,
        last_audio_at=arrivals[-1].at if arrivals else None,
        audio_s=sum(a.duration_s for a in arrivals),
        chunks=len(arrivals),
        underruns=under.count,
        stall_ms=under.stall_ms,
        error=error,
    )


async def _collect(ctx: VoiceContext, sample_rate: int, arrivals: list[Arrival]) -> None:
    async for chunk in ctx.audio():
        if chunk.payload:
            seconds = len(chunk.payload) / BYTES_PER_SAMPLE / sample_rate
            arrivals.append(Arrival(chunk.received_at, seconds))


async def _cancel_quietly(ctx: VoiceContext) -> None:
    with contextlib.suppress(VoiceServerError, TimeoutError):
        async with asyncio.timeout(5):
            await ctx.cancel()


async def _sleep_until(deadline: float) -> None:
    delay = deadline - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)


def failed_request(index: int, concurrency: int, error: str) -> RequestResult:
    """The result of request ``index`` that failed before any audio."""
    now = time.monotonic()
    text = text_for(index)
    return RequestResult(
        index=index,
        concurrency=concurrency,
        words=len(text.split()),
        chars=len(text),
        started_at=now,
        flush_at=now,
        first_audio_at=None,
        last_audio_at=None,
        audio_s=0.0,
        chunks=0,
        underruns=0,
        stall_ms=0.0,
        error=error,
    )
