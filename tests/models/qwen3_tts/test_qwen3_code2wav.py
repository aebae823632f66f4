"""Code2Wav streaming: chunked, batched decoding equals whole-utterance decoding."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from models.base import DecodeItem, LoadedModel
from models.qwen3_tts.loader import load
from models.qwen3_tts.vocoder import Qwen3Vocoder, VocoderStream
from tests.models.qwen3_tts.driver import decode_chunked


def test_chunked_batched_decode_equals_whole_decode(ckpt_dirs: dict[str, Path]) -> None:
    model = load({"max_contexts": 1, "kv_capacity": 64}, ckpt_dirs["voice_design"])
    rng = np.random.default_rng(0)
    codes = [rng.integers(0, 2048, (n, 16)).astype(np.int64) for n in (100, 9, 37)]
    whole = [decode_chunked(model, [c], [[len(c)]])[0] for c in codes]
    # First chunk one frame, then mixed sizes; three contexts of different lengths per call.
    chunked = decode_chunked(model, codes, [[1, 5, 2, 40, 3], [1, 1, 7], [1, 16, 4]])
    for w, c in zip(whole, chunked, strict=True):
        assert w.shape == c.shape
        assert np.abs(w - c).max() < 1e-5
        assert np.abs(w).max() > 0.01
    # Decoding is causal: a prefix decodes to a prefix of the audio.
    prefix = decode_chunked(model, [codes[0][:20]], [[20]])[0]
    assert np.abs(prefix - whole[0][: 20 * 1920]).max() < 1e-5


def test_decoder_state_is_per_stream(ckpt_dirs: dict[str, Path]) -> None:
    model = load({"max_contexts": 1, "kv_capacity": 64}, ckpt_dirs["voice_design"])
    rng = np.random.default_rng(1)
    a, b = (rng.integers(0, 2048, (12, 16)).astype(np.int64) for _ in range(2))
    together = decode_chunked(model, [a, b], [[1, 4], [2, 3]])
    alone = decode_chunked(model, [a], [[1, 4]])[0]
    assert np.abs(together[0] - alone).max() < 1e-5
    assert not np.allclose(together[0], together[1])
    assert model.vocoder.decode([]) == []


def _decode_alone(
    voc: Qwen3Vocoder, stream: VocoderStream, codes: np.ndarray, sizes: list[int]
) -> np.ndarray:
    """``codes`` decoded by ``stream`` alone, in chunks of ``sizes`` (cycled)."""
    pieces, pos, turn = [], 0, 0
    while pos < len(codes):
        size = sizes[turn % len(sizes)]
        pieces.append(voc.decode([DecodeItem(stream, codes[pos : pos + size])])[0])
        pos, turn = pos + size, turn + 1
    return np.concatenate(pieces)


def _fresh_vocoder(model: LoadedModel) -> Qwen3Vocoder:
    voc = model.vocoder
    assert isinstance(voc, Qwen3Vocoder)
    return Qwen3Vocoder(voc.decoder, voc.sample_rate, voc.samples_per_frame)


def _interleaved(
    voc: Qwen3Vocoder, codes: list[np.ndarray], close: bool, seed: int
) -> tuple[list[np.ndarray], list[list[int]], list[int]]:
    """Streams opened over time, up to three at once, continued in random subsets with
    random chunk sizes, and closed when done (``close``). Returns each stream's audio,
    chunk sizes and row. The schedule depends on ``seed`` only."""
    rng = np.random.default_rng(seed)
    streams: dict[int, VocoderStream] = {}
    pos, sizes, rows = [0] * len(codes), [[] for _ in codes], [-1] * len(codes)
    audio: list[list[np.ndarray]] = [[] for _ in codes]
    opened = 0
    while opened < len(codes) or streams:
        if opened < len(codes) and len(streams) < 3 and rng.random() < 0.6:
            streams[opened] = voc.new_stream()
            rows[opened] = streams[opened].row
            opened += 1
        live = [i for i in streams if rng.random() < 0.7]
        items = []
        for i in live:
            size = int(rng.integers(1, 12))
            items.append(DecodeItem(streams[i], codes[i][pos[i] : pos[i] + size]))
            sizes[i].append(min(size, len(codes[i]) - pos[i]))
            pos[i] += size
        for i, wav in zip(live, voc.decode(items), strict=True):
            audio[i].append(wav)
        for i in [i for i in streams if pos[i] >= len(codes[i])]:
            stream = streams.pop(i)
            if close:
                voc.close_stream(stream)
    return [np.concatenate(a) for a in audio], sizes, rows


def test_interleaved_streams_on_reused_rows_decode_as_alone(ckpt_dirs: dict[str, Path]) -> None:
    model = load({"max_contexts": 1, "kv_capacity": 64}, ckpt_dirs["voice_design"])
    rng = np.random.default_rng(2)
    # Some streams run past the attention window (72 frames).
    codes = [rng.integers(0, 2048, (n, 16)).astype(np.int64) for n in (90, 7, 30, 12, 81, 3, 25)]
    pooled, sizes, rows = _interleaved(_fresh_vocoder(model), codes, close=True, seed=3)
    assert len(set(rows)) < len(rows), "closed streams' rows must be reused"
    # The same calls with every stream on a row of its own: row reuse changes no bit.
    own_rows, same_sizes, unique = _interleaved(_fresh_vocoder(model), codes, close=False, seed=3)
    assert same_sizes == sizes and len(set(unique)) == len(unique)
    for a, b in zip(pooled, own_rows, strict=True):
        assert np.array_equal(a, b)
    # Alone, with the same chunks: batch composition only moves float rounding.
    for c, s, wav in zip(codes, sizes, pooled, strict=True):
        voc = _fresh_vocoder(model)
        alone = _decode_alone(voc, voc.new_stream(), c, s)
        assert wav.shape == alone.shape == (len(c) * 1920,)
        assert np.abs(wav - alone).max() < 1e-5


def test_closed_row_is_reused_by_a_fresh_stream(ckpt_dirs: dict[str, Path]) -> None:
    model = load({"max_contexts": 1, "kv_capacity": 64}, ckpt_dirs["voice_design"])
    rng = np.random.default_rng(4)
    old, new, other = (rng.integers(0, 2048, (n, 16)).astype(np.int64) for n in (80, 20, 9))
    sizes = [1, 6, 3]
    fresh_voc = _fresh_vocoder(model)
    expected = _decode_alone(fresh_voc, fresh_voc.new_stream(), new, sizes)

    voc = _fresh_vocoder(model)
    first = voc.new_stream()
    _decode_alone(voc, first, old, [5, 80])
    row = first.row
    voc.close_stream(first)
    voc.close_stream(first)  # closing twice frees the row once
    with pytest.raises(ValueError):
        voc.decode([DecodeItem(first, new[:1])])
    reused = voc.new_stream()
    assert reused.row == row
    assert np.array_equal(_decode_alone(voc, reused, new, sizes), expected)

    # Its row cleared by a call of another stream before the new one opens on it.
    keeper = voc.new_stream()
    voc.close_stream(reused)
    _decode_alone(voc, keeper, other, [9])
    again = voc.new_stream()
    assert again.row == row and keeper.row != row
    assert np.array_equal(_decode_alone(voc, again, new, sizes), expected)


def test_primed_stream_is_adopted_and_continues_exactly(ckpt_dirs: dict[str, Path]) -> None:
    model = load({"max_contexts": 1, "kv_capacity": 64}, ckpt_dirs["voice_design"])
    rng = np.random.default_rng(5)
    ref, codes, other = (rng.integers(0, 2048, (n, 16)).astype(np.int64) for n in (50, 40, 12))
    sizes = [1, 4, 9]
    # What adopting meant before pooling: the stream that decoded the reference goes on.
    plain = _fresh_vocoder(model)
    stream = plain.new_stream()
    _decode_alone(plain, stream, ref, [len(ref)])
    expected = _decode_alone(plain, stream, codes, sizes)

    voc = _fresh_vocoder(model)
    primed = voc.primed(ref)
    assert primed.state.rows == 1  # its own state, outside the pool
    # Adopted onto a row a closed stream left dirty.
    previous = voc.new_stream()
    _decode_alone(voc, previous, other, [12])
    row = previous.row
    voc.close_stream(previous)
    adopted = voc.new_stream(primed)
    assert adopted.row == row
    assert np.array_equal(_decode_alone(voc, adopted, codes, sizes), expected)
    # Decoding the adopted stream left the primed state as it was.
    assert np.array_equal(_decode_alone(voc, voc.new_stream(primed), codes, sizes), expected)
    voc.close_stream(primed)  # not pooled: nothing to free
    whole = decode_chunked(model, [np.concatenate((ref, codes))], [[len(ref) + len(codes)]])[0]
    assert np.abs(expected - whole[len(ref) * 1920 :]).max() < 1e-5


def test_out_of_range_codes_are_refused_before_touching_state(
    ckpt_dirs: dict[str, Path],
) -> None:
    """A code outside the codebook is an error of that call (on a GPU it would be a
    device-side assert that ends every stream); the stream decodes on unharmed."""
    model = load({"max_contexts": 1, "kv_capacity": 64}, ckpt_dirs["voice_design"])
    rng = np.random.default_rng(6)
    codes = rng.integers(0, 2048, (6, 16)).astype(np.int64)
    fresh = _fresh_vocoder(model)
    expected = _decode_alone(fresh, fresh.new_stream(), codes, [2, 4])
    voc = _fresh_vocoder(model)
    stream = voc.new_stream()
    first = voc.decode([DecodeItem(stream, codes[:2])])[0]
    for bad in (2048, -1):
        broken = codes[2:].copy()
        broken[1, 3] = bad
        with pytest.raises(ValueError, match=r"\[0, 2048\)"):
            voc.decode([DecodeItem(stream, broken)])
    rest = voc.decode([DecodeItem(stream, codes[2:])])[0]
    assert np.array_equal(np.concatenate((first, rest)), expected)
