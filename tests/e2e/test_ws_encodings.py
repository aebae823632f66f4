"""Every WebSocket encoding, decoded by independent decoders and compared with
the PCM of the same request (noise-free Piper: the same text gives the same audio)."""

from __future__ import annotations

import io
from collections.abc import Iterator

import av
import numpy as np
import opuslib
import pytest

from tests.serving import RunningServer, run_server
from tests.wsclient import Client
from voiceserver.config import ServerConfig, load_model_config

TEXT = "Testing every format. The quick brown fox jumps over the lazy dog."


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    config = load_model_config("piper-joe", {"noise_scale": 0, "noise_w_scale": 0})
    with run_server(config, ServerConfig()) as running:
        yield running


async def request(server: RunningServer, **fmt: object) -> tuple[bytes, list[bytes]]:
    client = await Client.connect(server.ws)
    await client.send(
        type="context.create", context_id="x", output_format=fmt, buffer={"mode": "manual"}
    )
    await client.send(type="text.append", context_id="x", text=TEXT)
    await client.send(type="context.end", context_id="x")
    await client.until("context.done", "x")
    await client.close()
    return bytes(client.got.audio["x"]), [f[3] for f in client.got.frames]


async def pcm(server: RunningServer, rate: int) -> np.ndarray:
    data, _ = await request(server, encoding="pcm_f32le", sample_rate=rate)
    return np.frombuffer(data, "<f4")


def best_correlation(reference: np.ndarray, test: np.ndarray, max_lag: int) -> tuple[float, int]:
    """Peak normalised correlation over lags 0..max_lag (codec delay)."""
    best, best_lag = -1.0, 0
    n = min(len(reference), len(test) - max_lag)
    for lag in range(max_lag + 1):
        a, b = reference[:n], test[lag : lag + n]
        c = float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12))
        if c > best:
            best, best_lag = c, lag
    return best, best_lag


@pytest.mark.parametrize("rate", [24000, 48000, 16000])
async def test_raw_opus_packets_decode_with_libopus_and_pyav(
    server: RunningServer, rate: int
) -> None:
    reference = await pcm(server, rate)
    _, packets = await request(
        server, encoding="opus", sample_rate=rate, container="raw", frame_ms=20
    )
    packets = [p for p in packets if p]
    frame = rate // 50
    assert len(packets) == -(-len(reference) // frame)  # exactly one packet per 20 ms frame
    decoder = opuslib.Decoder(rate, 1)
    decoded = (
        np.concatenate([np.frombuffer(decoder.decode(p, frame), "<i2") for p in packets]) / 32768.0
    )
    corr, lag = best_correlation(reference, decoded, rate // 100)
    assert corr > 0.9, corr
    # PyAV's libopus decoder agrees.
    ctx = av.CodecContext.create("libopus", "r")
    ctx.sample_rate = rate
    ctx.layout = "mono"
    via_av, av_rate = [], rate
    for p in packets:
        for f in ctx.decode(av.Packet(p)):
            via_av.append(f.to_ndarray().reshape(-1))
            av_rate = f.sample_rate
    decoded_av = np.concatenate(via_av).astype(np.float32)
    if av_rate != rate:  # FFmpeg's libopus wrapper may decode at 48 kHz whatever the stream rate
        import soxr

        decoded_av = soxr.resample(decoded_av, av_rate, rate)
    corr_av, _ = best_correlation(reference, decoded_av, rate // 100)
    assert corr_av > 0.9, corr_av


async def test_ogg_opus_plays_in_a_stock_decoder(server: RunningServer) -> None:
    reference = await pcm(server, 48000)
    data, _ = await request(server, encoding="opus", sample_rate=48000, container="ogg")
    assert data[:4] == b"OggS"
    with av.open(io.BytesIO(data)) as container:
        decoded = np.concatenate(
            [f.to_ndarray().reshape(-1) for f in container.decode(audio=0)]
        ).astype(np.float32)
    assert abs(len(decoded) - len(reference)) < 48000 * 0.03
    corr, _ = best_correlation(reference, decoded, 480)
    assert corr > 0.9, corr


@pytest.mark.parametrize(
    ("encoding", "codec"), [("pcm_mulaw", "pcm_mulaw"), ("pcm_alaw", "pcm_alaw")]
)
async def test_telephony_g711_at_8k(server: RunningServer, encoding: str, codec: str) -> None:
    reference = await pcm(server, 8000)
    data, _ = await request(server, encoding=encoding, sample_rate=8000)
    assert len(data) == len(reference)  # one byte per sample
    ctx = av.CodecContext.create(codec, "r")
    ctx.sample_rate = 8000
    ctx.layout = "mono"
    decoded = (
        np.concatenate([f.to_ndarray().reshape(-1) for f in ctx.decode(av.Packet(data))]) / 32768.0
    )
    noise = np.sum((reference - decoded) ** 2)
    assert 10 * np.log10(np.sum(reference**2) / noise) > 25


@pytest.mark.parametrize("rate", [8000, 16000, 22050, 24000, 44100, 48000])
async def test_every_pcm_rate_is_a_proper_resample(server: RunningServer, rate: int) -> None:
    native = await pcm(server, 22050)
    got = await pcm(server, rate)
    assert abs(len(got) - len(native) * rate / 22050) <= 2
    # Same spectrum below the lower Nyquist: compare band-limited energy profiles.
    import soxr

    expected = soxr.resample(native, 22050, rate, quality="HQ")
    n = min(len(expected), len(got))
    noise = np.sum((expected[:n] - got[:n]) ** 2)
    assert 10 * np.log10(np.sum(expected[:n] ** 2) / max(noise, 1e-30)) > 40


async def test_s16_equals_f32_quantized(server: RunningServer) -> None:
    f32 = await pcm(server, 24000)
    s16, _ = await request(server, encoding="pcm_s16le", sample_rate=24000)
    ints = np.frombuffer(s16, "<i2").astype(np.int32)
    assert np.abs(ints - np.rint(np.clip(f32, -1, 1) * 32767)).max() <= 1


async def test_opus_flush_delivers_all_flushed_audio(server: RunningServer) -> None:
    async def flushed_ms(**fmt: object) -> tuple[int, int]:
        client = await Client.connect(server.ws)
        await client.send(
            type="context.create", context_id="f", output_format=fmt, buffer={"mode": "manual"}
        )
        await client.send(type="text.append", context_id="f", text="Flush this part.")
        await client.send(type="context.flush", context_id="f")
        flushed = await client.until("context.flushed", "f")
        frames = len(client.got.frames)
        await client.close()
        return flushed["audio_ms"], frames

    pcm_ms, _ = await flushed_ms(encoding="pcm_s16le", sample_rate=48000)
    opus_ms, packets = await flushed_ms(encoding="opus", sample_rate=48000, frame_ms=20)
    assert opus_ms == packets * 20  # audio_ms counts what the packets play
    assert pcm_ms <= opus_ms < pcm_ms + 20  # nothing held back: at most one frame of padding
