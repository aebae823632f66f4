"""Start-up sizing: ``auto`` settings from the memory free after the weights (given figures
here, so the CUDA arithmetic runs on a CPU), explicit settings kept, the CPU unchanged.

Real-size checkpoints are headers only (tests/models/real_size.py): the published
shapes, no tensor data."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest

from models.chatterbox.sizing import memory_profile as chatterbox_profile
from models.qwen3_tts.sizing import memory_profile as qwen3_profile
from models.sizing import CUDA_CONTEXT_BYTES, GIB, Explicit, SizingError, plan
from tests.models.qwen3_tts.ckpt import BuildOptions, build_checkpoint
from tests.models.real_size import chatterbox, qwen3
from tests.serving import run_server
from voiceserver.config import (
    ServerConfig,
    config_for_checkpoint,
    load_model_config,
    with_checkpoint,
    with_engine_overrides,
)
from voiceserver.sizing import size_model

GPU = {"device": "cuda", "dtype": "bfloat16"}
H200, CARD_24 = 139, 24


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("real_size")
    return {
        "1b7": qwen3(root / "1b7", "1b7", "custom_voice"),
        "0b6": qwen3(root / "0b6", "0b6", "base"),
        "chatterbox": chatterbox(root / "cbx"),
    }


def gpu_config(checkpoint: Path, **options: object):  # type: ignore[no-untyped-def]
    config = config_for_checkpoint(checkpoint, {**GPU, **options})
    return with_checkpoint(config, checkpoint)


def before_weights(gib: float) -> int:
    """What a card of ``gib`` has free once the CUDA context exists."""
    return int(gib * GIB) - CUDA_CONTEXT_BYTES


def test_the_profile_reads_the_published_sizes(real: dict[str, Path]) -> None:
    big = qwen3_profile(real["1b7"], GPU)
    # 28 layers x 8 KV heads x 128 x keys and values x 2 bytes.
    assert big.kv_bytes_per_position == 28 * 8 * 128 * 2 * 2 == 112 * 1024
    assert 3.5 * GIB < big.weights_bytes < 4.5 * GIB  # ~4 GB of bf16
    small = qwen3_profile(real["0b6"], GPU)
    assert small.weights_bytes < big.weights_bytes / 1.8
    assert qwen3_profile(real["1b7"], {"dtype": "float32"}).weights_bytes == 2 * big.weights_bytes
    cbx = chatterbox_profile(real["chatterbox"], GPU)
    assert cbx.kv_bytes_per_position == 24 * 1024 * 2 * 2 and not cbx.paged


@pytest.mark.parametrize(
    ("size", "gib", "contexts", "vocoder"),
    [
        ("1b7", H200, 512, 128),
        ("0b6", H200, 512, 128),
        ("1b7", CARD_24, 160, 16),
        ("0b6", CARD_24, 176, 16),
    ],
)
def test_a_newcomer_gets_what_the_card_holds(
    real: dict[str, Path], size: str, gib: int, contexts: int, vocoder: int
) -> None:
    sized = size_model(gpu_config(real[size]), before_weights(gib))
    model, engine = sized.config.model, sized.config.engine
    assert model["max_contexts"] == contexts
    assert (engine.max_ar_batch, engine.max_vocoder_batch) == (contexts, vocoder)
    assert sized.config.sized_engine == ()
    # The plan leaves headroom: KV pool, vocoder, streams and reserve within the free memory.
    plan_ = sized.plan
    assert plan_ is not None
    profile = qwen3_profile(real[size], GPU)
    used = (
        plan_.kv_pool_bytes
        + plan_.vocoder_bytes
        + contexts * profile.stream_bytes
        + profile.reserve_bytes
    )
    assert used < plan_.free_bytes
    assert any("max_contexts" in line for line in sized.lines)


def test_an_h200_serves_at_least_256_streams_with_no_flags(real: dict[str, Path]) -> None:
    """The measured complaint: 8 streams on an H200 (16 sessions: 24 of 32 refused)."""
    for size in ("1b7", "0b6"):
        sized = size_model(gpu_config(real[size]), before_weights(H200))
        assert sized.config.model["max_contexts"] >= 256
        assert sized.config.engine.max_ar_batch >= 256


def test_chatterbox_reserves_full_slots(real: dict[str, Path]) -> None:
    big = size_model(gpu_config(real["chatterbox"]), before_weights(H200))
    assert big.config.model["max_contexts"] == 128  # its real-time cap
    small = size_model(gpu_config(real["chatterbox"]), before_weights(CARD_24))
    assert small.config.model["max_contexts"] == 64
    assert small.plan is not None and small.plan.kv_pool_bytes == 64 * 2048 * 96 * 1024


def test_explicit_settings_win(real: dict[str, Path]) -> None:
    config = gpu_config(real["1b7"], max_contexts=64)
    config = with_engine_overrides(config, {"max_vocoder_batch": 32})
    sized = size_model(config, before_weights(H200))
    assert sized.config.model["max_contexts"] == 64
    assert sized.config.engine.max_ar_batch == 64  # still auto: follows the contexts
    assert sized.config.engine.max_vocoder_batch == 32
    both = with_engine_overrides(gpu_config(real["1b7"]), {"max_ar_batch": 100})
    assert size_model(both, before_weights(H200)).config.engine.max_ar_batch == 100


def test_a_model_that_does_not_fit_says_so(real: dict[str, Path]) -> None:
    with pytest.raises(SizingError, match="does not fit.*GiB free"):
        size_model(gpu_config(real["1b7"], dtype="float32"), before_weights(8))


def test_more_memory_never_gives_fewer_streams(real: dict[str, Path]) -> None:
    profile = qwen3_profile(real["1b7"], GPU)
    counts = [
        plan(profile, before_weights(g) - profile.weights_bytes, 16).sizes.max_contexts
        for g in (12, 16, 24, 40, 48, 80, 96, 139)
    ]
    assert counts == sorted(counts) and counts[-1] == 512
    fixed = plan(profile, before_weights(24) - profile.weights_bytes, 16, Explicit(max_contexts=9))
    assert fixed.sizes.max_contexts == 9 and fixed.sizes.max_vocoder_batch <= 9


@pytest.mark.parametrize(
    ("config", "cpu"),
    [("qwen3-tts-1.7b-customvoice", (8, 8, 8)), ("chatterbox-turbo", (8, 8, 4))],
)
def test_the_cpu_keeps_todays_defaults(config: str, cpu: tuple[int, int, int]) -> None:
    shipped = load_model_config(config)
    assert shipped.model["max_contexts"] == "auto"
    assert set(shipped.sized_engine) == {"max_ar_batch", "max_vocoder_batch"}
    sized = size_model(shipped)
    got = sized.config
    assert (got.model["max_contexts"], got.engine.max_ar_batch, got.engine.max_vocoder_batch) == cpu
    assert sized.plan is None and "CPU" in sized.lines[0]


def test_engine_auto_parses_and_overrides(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(
        "name: m\nfamily: chatterbox\nengine: {max_ar_batch: auto, max_vocoder_batch: 3}\n"
    )
    config = load_model_config(path)
    assert config.sized_engine == ("max_ar_batch",) and config.engine.max_vocoder_batch == 3
    # Unsized (a benchmark building its engine from the config): the CPU default.
    assert config.engine.max_ar_batch == 8
    assert with_engine_overrides(config, {"max_ar_batch": 5}).sized_engine == ()
    both = with_engine_overrides(config, {"max_vocoder_batch": "auto"})
    assert both.sized_engine == ("max_ar_batch", "max_vocoder_batch")
    assert (both.engine.max_ar_batch, both.engine.max_vocoder_batch) == (8, 4)
    path.write_text("name: m\nfamily: tiny\nengine: {max_ar_batch: auto}\n")
    with pytest.raises(ValueError, match="engine.max_ar_batch: auto needs a family that sizes"):
        load_model_config(path)
    path.write_text("name: m\nfamily: tiny\nengine: {max_ar_batch: lots}\n")
    with pytest.raises(ValueError, match="engine.max_ar_batch must be int"):
        load_model_config(path)


def test_a_bad_max_contexts_is_named(real: dict[str, Path]) -> None:
    with pytest.raises(ValueError, match="model.max_contexts must be a whole number or auto"):
        size_model(gpu_config(real["1b7"], max_contexts="many"), before_weights(H200))


async def test_the_server_sizes_at_start_and_logs_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A real server on the shipped config (CPU): 8 slots and batches as before sizing
    existed, and the start-up log says so."""
    checkpoint = build_checkpoint(tmp_path / "cv", BuildOptions(variant="custom_voice", seed=3))
    config = with_checkpoint(config_for_checkpoint(checkpoint), checkpoint)
    with (
        caplog.at_level(logging.INFO, logger="voiceserver.runtime"),
        run_server(config, ServerConfig()) as server,
    ):
        runtime = server.runtime
        assert runtime.model.runner.max_slots == 8
        assert runtime.engine.config.max_ar_batch == 8
        assert runtime.engine.config.max_vocoder_batch == 8
        async with httpx.AsyncClient(timeout=120) as http:
            voice = runtime.model.capabilities.voices[0].name
            body = {"input": "Hi.", "voice": voice, "response_format": "pcm"}
            response = await http.post(f"{server.http}/v1/audio/speech", json=body)
        assert response.status_code == 200 and len(response.content) > 0
    assert any(
        "sized on the CPU: max_contexts 8, max_ar_batch 8, max_vocoder_batch 8" in r.message
        for r in caplog.records
    )
