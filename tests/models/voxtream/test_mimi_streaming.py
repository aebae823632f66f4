"""Mimi's streamed decoding against whole-sequence decoding, the VoXtream vocoder
through the engine's own vocoder loop, and the strict loader's errors.

A tiny random Mimi in Kyutai's on-disk layout (tests/models/voxtream/ckpt_mimi.py;
the real ratios, so 1920 samples a frame, and the real 250-step attention context)
is loaded by ``load_mimi``. Streams decoded in batches (each at its own position,
chunks of different lengths in one call) must give what decoding each whole
sequence at once gives, within float32 rounding, past the attention context.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from models.base import DecodeItem
from models.blocks.mimi import MIMI_FILE, Mimi, config_from_shapes, load_mimi
from models.blocks.mimi_stream import MimiStreams
from models.blocks.mimi_vocoder import MimiVocoder
from models.checkpoint import CheckpointError
from tests.models.voxtream.ckpt_mimi import TINY, build_mimi, mimi_tensors
from voiceserver.engine.frames import FrameRing
from voiceserver.engine.vocoder_loop import VocoderLoop, VocoderLoopConfig

HOP = 1920
STREAM_TOLERANCE = 1e-5
"""Streamed against whole decoding: float32 rounding (3.6e-7 measured at these sizes,
audio std about 0.18)."""


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_mimi(tmp_path_factory.mktemp("mimi"), TINY, seed=0)


@pytest.fixture(scope="module")
def mimi(ckpt: Path) -> Mimi:
    torch.set_num_threads(2)
    return load_mimi(ckpt, 16, encoder=False)


def random_frames(rng: np.random.Generator, frames: int) -> np.ndarray:
    """int64 [frames, 16] as frames reach the vocoder (codebook 0 first)."""
    return rng.integers(0, 2048, (frames, 16))


def whole(mimi: Mimi, frames: np.ndarray) -> np.ndarray:
    return mimi.decode(torch.from_numpy(frames.T.copy())[None])[0, 0].numpy()


def test_batched_streams_at_their_own_positions_equal_whole_decoding(mimi: Mimi) -> None:
    """Three streams share every call, each with its own chunk schedule (1 frame, then
    doubling, or odd sizes), so one call holds chunks of different lengths at
    different positions; 130 frames take every stream past the transformer's 250-step
    (125-frame) context."""
    rng = np.random.default_rng(1)
    n = 130
    seqs = [random_frames(rng, n) for _ in range(3)]
    schedules = [
        [1, 2, 4, 8, 16, 32, 64, 3],
        [3, 5, 7, 11, 13, 17, 19, 23, 29, 3],
        [1] * 10 + [24] * 5,
    ]
    assert all(sum(s) == n for s in schedules)
    pool = MimiStreams(mimi, 5)
    rows = [4, 0, 2]  # any rows of the pool
    done = [0, 0, 0]
    audio: list[list[np.ndarray]] = [[], [], []]
    calls = 0
    while any(d < n for d in done):
        active = [s for s in range(3) if done[s] < n]
        sizes = {s: schedules[s][len(audio[s])] for s in active}
        chunks = [seqs[s][done[s] : done[s] + sizes[s]] for s in active]
        out, samples = pool.decode(chunks, [rows[s] for s in active])
        assert out.shape == (len(active), max(sizes.values()) * HOP)
        for b, s in enumerate(active):
            assert samples[b] == sizes[s] * HOP
            audio[s].append(out[b, : samples[b]].numpy())
            done[s] += sizes[s]
        calls += 1
    assert calls == 15
    for s in range(3):
        got, want = np.concatenate(audio[s]), whole(mimi, seqs[s])
        assert got.shape == want.shape == (n * HOP,)
        assert np.abs(got - want).max() < STREAM_TOLERANCE
        assert 0.05 < float(want.std()) < 0.5  # audio, not silence or noise blow-up


def test_padding_rows_on_the_scratch_row_change_no_stream(mimi: Mimi) -> None:
    """What a CUDA graph replay adds to a batch (rows decoding a frame of code 0 into
    the scratch row, several at once) leaves the real rows' audio and state as they
    are without it."""
    rng = np.random.default_rng(8)
    seqs = [random_frames(rng, 12) for _ in range(2)]
    plain, padded = MimiStreams(mimi, 2), MimiStreams(mimi, 2)
    for start, n in ((0, 4), (4, 8)):
        chunks = [seq[start : start + n] for seq in seqs]
        want, _ = plain.decode(chunks, [0, 1])
        packed = padded.pack(chunks, np.array([0, 1]), 8)
        batch = np.concatenate([packed, padded.padding(3, 8)])
        with torch.no_grad():
            got = padded.run_packed(torch.from_numpy(batch))
        padded.advance(np.array([0, 1]), np.array([n, n]))
        assert got.shape == (5, 8 * HOP)
        assert np.abs(got[:2, : n * HOP].numpy() - want[:, : n * HOP].numpy()).max() < 1e-6


def moshi_window(mimi: Mimi, frames: np.ndarray, chunk: int | None = None) -> np.ndarray:
    """``frames`` streamed with ``window="moshi"``, ``chunk`` frames a call (all at once
    when None). One frame a call is what VoXtream's generator gets from moshi
    (tests/models/voxtream/test_mimi_parity.py)."""
    pool = MimiStreams(mimi, 1, window="moshi")
    step = chunk or len(frames)
    calls = [
        pool.decode([frames[i : i + step]], [0])[0][0].numpy() for i in range(0, len(frames), step)
    ]
    return np.concatenate(calls)


def test_the_moshi_window_leaves_whole_decoding_past_the_context_only(mimi: Mimi) -> None:
    """``window="moshi"`` equals whole decoding until a stream passes 250 steps, then
    drops each frame's first step's oldest key: close, not equal; and it does so
    whatever the chunking (one frame a call, all at once, or a batch of two rows on
    different schedules)."""
    rng = np.random.default_rng(2)
    seqs = [random_frames(rng, 130) for _ in range(2)]
    at_once = [moshi_window(mimi, seq) for seq in seqs]
    got = moshi_window(mimi, seqs[0], chunk=1)
    assert np.abs(got - at_once[0]).max() < STREAM_TOLERANCE
    want = whole(mimi, seqs[0])
    assert np.abs(got[: 125 * HOP] - want[: 125 * HOP]).max() < STREAM_TOLERANCE
    assert np.abs(got[125 * HOP :] - want[125 * HOP :]).max() > 1e-4
    pool = MimiStreams(mimi, 2, window="moshi")
    done = [0, 0]
    pieces: list[list[np.ndarray]] = [[], []]
    for sizes in ((1, 5), (2, 60), (64, 2), (63, 63)):
        chunks = [seq[d : d + n] for seq, d, n in zip(seqs, done, sizes, strict=True)]
        out, samples = pool.decode(chunks, [0, 1])
        for s in range(2):
            pieces[s].append(out[s, : samples[s]].numpy())
            done[s] += sizes[s]
    assert done == [130, 130]
    for s in range(2):
        assert np.abs(np.concatenate(pieces[s]) - at_once[s]).max() < STREAM_TOLERANCE


def run_loop(vocoder: MimiVocoder, units: list[np.ndarray], paces: list[int]) -> list[np.ndarray]:
    """Every stream's audio from the engine's vocoder loop (first chunk 1 frame, doubling
    to 32): stream ``s`` gets ``paces[s]`` frames per step, its unit closed at its end;
    all streams decode in shared calls."""
    streams = len(units)
    ring = FrameRing(streams, 512, 16, np.int64)
    loop = VocoderLoop(vocoder, ring, streams, VocoderLoopConfig(1, 32, 8, 1e9))
    sent = [0] * streams
    audio: list[list[np.ndarray]] = [[] for _ in range(streams)]
    for s in range(streams):
        loop.open(s, None)
    calls = 0
    while not all(loop.drained(np.arange(streams))) or any(
        sent[s] < len(units[s]) for s in range(streams)
    ):
        for s in range(streams):
            if sent[s] == len(units[s]):
                continue
            take = units[s][sent[s] : sent[s] + paces[s]]
            sent[s] += len(take)
            closes = sent[s] == len(units[s])
            ring.append(np.array([s]), np.array([len(take)]), take, np.array([closes]))
        starved = np.array([sent[s] == len(units[s]) for s in range(streams)])
        decoded = loop.step(float(calls), starved)
        calls += 1
        for s, pcm in zip(decoded.streams.tolist(), decoded.audio, strict=True):
            audio[s].append(pcm)
        assert calls < 500
    for s in range(streams):
        loop.drop(s)
    return [np.concatenate(a) for a in audio]


@pytest.mark.parametrize("window", ["moshi", "exact"])
def test_the_vocoder_through_the_engine_loop(mimi: Mimi, window: str) -> None:
    """Streams paced differently share the loop's calls; each stream's audio is what
    VoXtream's generator gets from moshi (the default window; the same in one call as
    one frame a call) or whole decoding."""
    rng = np.random.default_rng(3)
    units = [random_frames(rng, n) for n in (130, 50, 20)]
    vocoder = MimiVocoder(mimi, max_streams=3, window=window)
    assert (vocoder.left_context, vocoder.right_context) == (0, 0)
    assert (vocoder.sample_rate, vocoder.samples_per_frame) == (24000, HOP)

    def expected(unit: np.ndarray) -> np.ndarray:
        audio = moshi_window(mimi, unit) if window == "moshi" else whole(mimi, unit)
        return np.clip(audio, -1, 1)

    streamed = run_loop(vocoder, units, paces=[3, 5, 2])
    for got, unit in zip(streamed, units, strict=True):
        want = expected(unit)
        assert got.dtype == np.float32 and got.shape == want.shape
        assert np.abs(got - want).max() < STREAM_TOLERANCE
    # Every stream was closed: the pool is whole again, and rows reopened are fresh.
    again = run_loop(vocoder, units[1:], paces=[4, 4])
    for got, unit in zip(again, units[1:], strict=True):
        assert np.abs(got - expected(unit)).max() < STREAM_TOLERANCE


def test_one_vocoder_call_takes_chunks_of_any_sizes(mimi: Mimi) -> None:
    """A call whose chunks fall in different length groups (1, 3, 17, 40 frames, then
    2, 8, 33, 1): each stream's audio still continues exactly."""
    rng = np.random.default_rng(7)
    plan = [[1, 2], [3, 8], [17, 33], [40, 1]]
    seqs = [random_frames(rng, sum(p)) for p in plan]
    vocoder = MimiVocoder(mimi, max_streams=4)
    streams = [vocoder.new_stream() for _ in plan]
    audio: list[list[np.ndarray]] = [[] for _ in plan]
    for call in range(2):
        items = [
            DecodeItem(stream, seq[sum(p[:call]) : sum(p[: call + 1])])
            for stream, seq, p in zip(streams, seqs, plan, strict=True)
        ]
        for s, pcm in enumerate(vocoder.decode(items)):
            assert pcm.shape == (plan[s][call] * HOP,)
            audio[s].append(pcm)
    for got, seq in zip(audio, seqs, strict=True):
        want = np.clip(whole(mimi, seq), -1, 1)
        assert np.abs(np.concatenate(got) - want).max() < STREAM_TOLERANCE


def test_a_full_pool_and_bad_items_are_refused_clearly(mimi: Mimi) -> None:
    vocoder = MimiVocoder(mimi, max_streams=2)
    a, b = vocoder.new_stream(), vocoder.new_stream()
    with pytest.raises(RuntimeError, match="all 2 Mimi vocoder streams are open"):
        vocoder.new_stream()
    vocoder.close_stream(a)
    vocoder.close_stream(a)  # closing twice gives nothing back twice
    c = vocoder.new_stream()
    with pytest.raises(RuntimeError):
        vocoder.new_stream()
    frames = random_frames(np.random.default_rng(4), 3)
    with pytest.raises(ValueError, match="open stream"):
        vocoder.decode([DecodeItem(a, frames)])
    bad = frames.copy()
    bad[1, 5] = 2048
    with pytest.raises(ValueError, match=re.escape("codes must be in [0, 2048)")):
        vocoder.decode([DecodeItem(c, bad)])
    with pytest.raises(ValueError, match=re.escape("must be [frames, 16]")):
        vocoder.decode([DecodeItem(b, frames[:, :8])])
    out = vocoder.decode([DecodeItem(b, frames), DecodeItem(c, frames[:0])])
    assert out[0].shape == (3 * HOP,) and out[1].shape == (0,)


def test_the_file_gives_its_config(ckpt: Path) -> None:
    from safetensors import safe_open

    with safe_open(str(ckpt), framework="pt") as handle:
        shapes = {k: tuple(handle.get_slice(k).get_shape()) for k in handle.keys()}  # noqa: SIM118
    assert config_from_shapes(shapes) == TINY
    assert TINY.samples_per_frame == HOP and TINY.frame_rate == 12.5


def test_a_missing_unexpected_or_misshapen_tensor_is_named(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="Mimi codec file missing"):
        load_mimi(tmp_path / MIMI_FILE, 16)
    state = mimi_tensors(TINY, seed=1)
    gone = "decoder.model.6.block.1.conv.conv.bias"
    del state[gone]
    state["decoder.extra.weight"] = torch.zeros(1)
    state["quantizer.rvq_rest.output_proj.weight"] = torch.zeros(32, 8, 1)
    path = tmp_path / MIMI_FILE
    save_file(state, str(path))
    with pytest.raises(CheckpointError) as caught:
        load_mimi(path, 16)
    message = str(caught.value)
    assert message.startswith(str(path))
    assert f"'{gone}'" in message and "missing" in message
    assert "'decoder.extra.weight'" in message and "unexpected" in message
    assert "'quantizer.rvq_rest.output_proj.weight' is (32, 8, 1) in the file" in message
    # A tensor the sizes are read from.
    del state["decoder.model.0.conv.conv.weight"]
    save_file(state, str(path))
    with pytest.raises(CheckpointError, match=re.escape("'decoder.model.0.conv.conv.weight'")):
        load_mimi(path, 16)


def test_sizes_that_do_not_fit_the_published_design_are_said() -> None:
    shapes = {k: tuple(v.shape) for k, v in mimi_tensors(TINY).items()}
    layer = "decoder_transformer.transformer.layers.0"
    with pytest.raises(CheckpointError, match="the transformers are 36 wide, the latents 32"):
        config_from_shapes({**shapes, f"{layer}.norm1.weight": (36,)})
    wider = {
        **shapes,
        f"{layer}.norm1.weight": (36,),
        "decoder.model.0.conv.conv.weight": (64, 36, 7),
    }
    with pytest.raises(CheckpointError, match="width 36 does not split into 8 heads"):
        config_from_shapes(wider)
    with pytest.raises(CheckpointError, match=re.escape("num_codebooks must be from 1 to 32")):
        load_mimi(mimi_tensors(TINY), 33)


def test_moshis_newer_attention_names_load_the_same(ckpt: Path, mimi: Mimi) -> None:
    """moshi saves ``in_projs.0.weight`` / ``out_projs.0.weight`` now; the published
    file has ``in_proj_weight`` / ``out_proj.weight``: both load."""
    state = mimi_tensors(TINY, seed=0)
    renamed = {
        k.replace("self_attn.in_proj_weight", "self_attn.in_projs.0.weight").replace(
            "self_attn.out_proj.weight", "self_attn.out_projs.0.weight"
        ): v
        for k, v in state.items()
    }
    assert renamed.keys() != state.keys()
    other = load_mimi(renamed, 16, encoder=False)
    codes = torch.from_numpy(random_frames(np.random.default_rng(5), 6).T.copy())[None]
    assert torch.equal(other.decode(codes), mimi.decode(codes))


def test_encode_pads_to_whole_frames(ckpt: Path) -> None:
    encoder = load_mimi(ckpt, 16, decoder=False)
    audio = torch.from_numpy(np.random.default_rng(6).standard_normal((1, 5 * HOP + 7)))
    codes = encoder.encode(0.1 * audio.float())
    assert codes.dtype == torch.int64 and codes.shape == (1, 16, 6)
    with pytest.raises(ValueError, match="without its decoder"):
        encoder.decode(codes)
