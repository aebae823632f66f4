"""Qwen3-TTS on CUDA gives the same greedy codes and audio as on the CPU.

Runs only where a GPU is present (the lent H200); CI has none.
"""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import pytest
import torch

from bench.step_profile import count_waits
from models.base import Admit, DecodeItem, Feed, SynthParams
from models.blocks.llama import RMSNorm, apply_rope, rope_cos_sin, rope_inv_freq
from models.kernels.norms import norm_rope, rms_norm
from models.kernels.paged_decode import gathered_decode_attention, paged_decode_attention
from models.paged_kv import PagedKVCache
from models.qwen3_tts.loader import load
from tests.models.drive import plan
from tests.models.qwen3_tts.ckpt import BuildOptions, build_checkpoint
from tests.models.qwen3_tts.driver import Job, decode_chunked, run_jobs

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

TEXTS = ["Hello there, how are you today?", "A second, longer sentence goes here for the batch."]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("gpu_ckpt")
    return build_checkpoint(
        root / "cv", BuildOptions(variant="custom_voice", size_name="1b7", seed=7)
    )


def jobs(voice: str) -> list[Job]:
    extra = {"temperature": 0.0, "max_new_tokens": 40}
    return [
        Job(SynthParams(voice=voice, language="english", extra=extra), t, open_at=i)
        for i, t in enumerate(TEXTS)
    ]


def test_cuda_fp32_equals_cpu(checkpoint: Path, no_tf32: None) -> None:
    """Batched greedy generation and chunked decoding on CUDA (fp32) give the CPU's
    codes exactly and its audio within 1e-3."""
    cpu = load({"device": "cpu", "dtype": "float32"}, checkpoint)
    gpu = load({"device": "cuda", "dtype": "float32"}, checkpoint)
    voice = cpu.capabilities.default_voice
    ours_cpu, ours_gpu = run_jobs(cpu, jobs(voice)), run_jobs(gpu, jobs(voice))
    wav_cpu = decode_chunked(cpu, [r.codes for r in ours_cpu], [[1, 3, 8]] * len(TEXTS))
    wav_gpu = decode_chunked(gpu, [r.codes for r in ours_gpu], [[1, 3, 8]] * len(TEXTS))
    for a, b, wa, wb in zip(ours_cpu, ours_gpu, wav_cpu, wav_gpu, strict=True):
        np.testing.assert_array_equal(a.codes, b.codes)
        assert wa.shape == wb.shape and len(wa) > 0
        assert np.abs(wa - wb).max() < 1e-3


def test_cuda_bf16_generates_batched(checkpoint: Path) -> None:
    """bf16 rounds differently, so its free-running greedy codes are not compared with
    fp32 (random weights have near-tied logits); it must run batched to a valid end."""
    gpu = load({"device": "cuda", "dtype": "bfloat16"}, checkpoint)
    results = run_jobs(gpu, jobs(gpu.capabilities.default_voice))
    wavs = decode_chunked(gpu, [r.codes for r in results], [[1, 3, 8]] * len(TEXTS))
    for result, wav in zip(results, wavs, strict=True):
        assert 0 < len(result.codes) <= 40 and result.hit_limit == (len(result.codes) == 40)
        assert result.codes.min() >= 0 and result.codes.max() < 2048
        assert len(wav) == len(result.codes) * 1920 and np.isfinite(wav).all()


def test_kv_blocks_are_sized_from_free_memory(checkpoint: Path) -> None:
    """On a GPU the KV blocks are what ``kv_memory_fraction`` of the free memory holds
    (not a full-length slot per context), and a fraction that cannot hold one full
    context is refused with what to change."""
    gc.collect()  # earlier tests' models: their memory is free before this one loads
    torch.cuda.empty_cache()
    free_before, _ = torch.cuda.mem_get_info()
    options = {"device": "cuda", "dtype": "bfloat16", "kv_capacity": 2048, "cuda_graphs": False}
    model = load({**options, "max_contexts": 100_000, "kv_memory_fraction": 0.05}, checkpoint)
    stack = model.runner.cfg.talker.stack  # type: ignore[attr-defined]
    per_block = PagedKVCache.bytes_per_block(
        stack.num_layers, 32, stack.num_kv_heads, stack.head_dim, torch.bfloat16
    )
    cache = model.runner.cache  # type: ignore[attr-defined]
    blocks = cache.free_blocks
    assert model.runner.max_slots == 100_000
    assert 64 <= blocks < 100_000 * 64 and blocks * per_block <= 0.05 * free_before
    assert len(cache.k[0]) == blocks + 1
    del model, cache
    with pytest.raises(ValueError, match="kv_capacity"):
        load({**options, "kv_capacity": 10_000_000, "kv_memory_fraction": 0.01}, checkpoint)


def test_paged_decode_kernel_equals_gathered_attention() -> None:
    """The Triton kernel reads each row's blocks in place; gathering the blocks and
    running masked attention is the oracle (fp32 and bf16, lengths from 1 to many
    blocks, grouped query heads, blocks in any order)."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 2e-2)):
        blocks, block, kv_heads, dim, heads = 200, 32, 8, 128, 16
        k = torch.randn(blocks, block, kv_heads, dim, device="cuda", generator=gen).to(dtype)
        v = torch.randn(blocks, block, kv_heads, dim, device="cuda", generator=gen).to(dtype)
        lengths = torch.tensor([1, 31, 32, 33, 300, 640, 17], device="cuda")
        b = len(lengths)
        order = torch.randperm(blocks - 1, device="cuda", generator=gen)[: b * 20] + 1
        tables = order.view(b, 20).to(torch.int32)
        q = torch.randn(b, heads, 1, dim, device="cuda", generator=gen).to(dtype)
        ours = paged_decode_attention(q, k, v, tables, lengths)
        oracle = gathered_decode_attention(
            q.float(), k.float(), v.float(), tables, lengths, int(lengths.max())
        )
        error = (ours.float() - oracle).norm() / oracle.norm()
        assert ours.shape == q.shape and error < tol, (dtype, float(error))


def test_fused_norm_kernels_equal_the_eager_operators() -> None:
    """RMSNorm and norm + rotary embedding in one kernel each against PyTorch's own
    operators in fp32 (the oracle), on random data of the model's shapes."""
    gen = torch.Generator(device="cuda").manual_seed(1)
    for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 1e-2)):
        x = torch.randn(3, 5, 2048, device="cuda", generator=gen).to(dtype)
        norm = RMSNorm(2048, 1e-6).to("cuda")
        norm.weight.data = torch.randn(2048, device="cuda", generator=gen)
        ours = rms_norm(x, norm.weight.to(dtype), norm.eps)
        norm.fused = False
        oracle = norm(x.float())
        assert (ours.float() - oracle).norm() / oracle.norm() < tol

        heads = torch.randn(3, 5, 16, 128, device="cuda", generator=gen).to(dtype)
        weight = torch.randn(128, device="cuda", generator=gen)
        positions = torch.randint(0, 2000, (3, 5), device="cuda", generator=gen)
        cos, sin = rope_cos_sin(rope_inv_freq(128, 1e6), positions, torch.float32)
        ours = norm_rope(heads, weight.to(dtype), 1e-6, cos.to(dtype), sin.to(dtype))
        plain = RMSNorm(128, 1e-6).to("cuda")
        plain.weight.data, plain.fused = weight, False
        oracle = apply_rope(plain(heads.float()).transpose(1, 2), cos, sin).transpose(1, 2)
        assert ours.shape == heads.shape
        assert (ours.float() - oracle).norm() / oracle.norm() < tol


@pytest.mark.parametrize(("temperature", "prefill_rows"), [(0.0, 0), (0.9, 0), (0.0, 64), (0.9, 8)])
def test_graph_replay_equals_eager(
    checkpoint: Path, no_tf32: None, temperature: float, prefill_rows: int
) -> None:
    """The captured frame step gives the eager step's codes exactly (fp32, TF32 off):
    greedy, and sampled with a seed (the per-row draws do not depend on the batch),
    for contexts of different lengths batched and joining at different steps; with
    ``graph_prefill_rows`` the prompts run as graphed one-position rows too (at 8,
    a step's larger prompts run eagerly: both paths in one run)."""
    extra = {"temperature": temperature, "max_new_tokens": 40, "seed": 11}
    options = {
        "device": "cuda",
        "dtype": "float32",
        "max_contexts": 6,
        "graph_prefill_rows": prefill_rows,
    }
    eager = load({**options, "cuda_graphs": False, "graph_prefill_rows": 0}, checkpoint)
    graphed = load(options, checkpoint)
    assert graphed.runner.frames.graphs is not None and eager.runner.frames.graphs is None  # type: ignore[attr-defined]
    voice = eager.capabilities.default_voice
    todo = [
        Job(SynthParams(voice=voice, language="english", extra=extra), t, i, pieces=1 + i % 3)
        for i, t in enumerate(TEXTS + ["Short.", "A third one, of middling length."])
    ]
    ours_eager, ours_graph = run_jobs(eager, todo), run_jobs(graphed, todo)
    for a, b in zip(ours_eager, ours_graph, strict=True):
        assert len(a.codes) > 2
        np.testing.assert_array_equal(a.codes, b.codes)
    wav_a = decode_chunked(eager, [r.codes for r in ours_eager], [[1, 3, 8]] * len(todo))
    wav_b = decode_chunked(graphed, [r.codes for r in ours_graph], [[1, 3, 8]] * len(todo))
    for wa, wb in zip(wav_a, wav_b, strict=True):
        assert wa.shape == wb.shape and np.abs(wa - wb).max() < 1e-3


def test_bench_ignore_eos_runs_to_the_frame_cap(checkpoint: Path) -> None:
    """The bench-only option: no context ends before its cap."""
    gpu = load({"device": "cuda", "dtype": "bfloat16", "bench_ignore_eos": True}, checkpoint)
    extra = {"temperature": 0.9, "max_new_tokens": 30}
    voice = gpu.capabilities.default_voice
    todo = [Job(SynthParams(voice=voice, language="english", extra=extra), t) for t in TEXTS]
    for result in run_jobs(gpu, todo):
        assert len(result.codes) == 30 and result.hit_limit


def test_a_decode_step_and_a_vocoder_call_each_wait_for_the_device_once(
    checkpoint: Path,
) -> None:
    """The eager step is bound by kernel launches: any host wait in the middle of it
    (a pageable host-to-device copy is one) lets the device idle. Only the step's one
    copy of its results to the host may wait."""
    gpu = load({"device": "cuda", "dtype": "bfloat16", "max_contexts": 8}, checkpoint)
    runner = gpu.runner
    params = SynthParams(
        voice=gpu.capabilities.default_voice, language="english", extra={"temperature": 0.9}
    )
    units = runner.encode_text(TEXTS[1])
    slots = list(range(4))
    admit = tuple(Admit(s, runner.prepare(params)) for s in slots)
    feed = tuple(Feed(s, tuple(units), False) for s in slots)
    runner.execute(plan(slots, admit, feed))
    for _ in range(3):  # past the prompt: plain decode steps with text still streaming
        runner.execute(plan(slots))
    _, waits = count_waits(lambda: runner.execute(plan(slots)))
    assert waits == 1
    voc = gpu.vocoder
    streams = [voc.new_stream(None) for _ in slots]
    codes = np.random.default_rng(0).integers(0, 2048, (4, 16)).astype(np.int64)
    voc.decode([DecodeItem(s, codes[:1]) for s in streams])
    _, waits = count_waits(lambda: voc.decode([DecodeItem(s, codes) for s in streams]))
    assert waits == 1


def test_vocoder_graphs_equal_eager_for_mixed_chunk_lengths(
    checkpoint: Path, no_tf32: None
) -> None:
    """Calls that mix chunk lengths (a newcomer's 1-frame chunk beside 16-frame ones,
    one longer than any graph) and more streams than one replay holds: each chunk is
    decoded by the graph of its own length, and the audio equals the eager decoder's."""
    options = {"device": "cuda", "dtype": "float32", "max_contexts": 80}
    graphed = load(options, checkpoint).vocoder
    eager = load(options | {"cuda_graphs": False}, checkpoint).vocoder
    rng = np.random.default_rng(1)
    streams = 70
    ours = [graphed.new_stream(None) for _ in range(streams)]
    theirs = [eager.new_stream(None) for _ in range(streams)]
    for call in range(3):
        lengths = rng.choice([1, 2, 3, 5, 16], streams)
        lengths[0] = 20 if call == 1 else 1
        if call == 2:  # 70 chunks of 16 frames: two replays of the 64-row graph
            lengths[:] = 16
        codes = [rng.integers(0, 2048, (n, 16)).astype(np.int64) for n in lengths]
        got = graphed.decode([DecodeItem(s, c) for s, c in zip(ours, codes, strict=True)])
        want = eager.decode([DecodeItem(s, c) for s, c in zip(theirs, codes, strict=True)])
        for n, a, b in zip(lengths, got, want, strict=True):
            assert a.shape == b.shape == (n * 1920,)
            np.testing.assert_allclose(a, b, atol=1e-4, rtol=0)
