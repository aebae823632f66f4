"""The talker behind the ModelRunner contract: waiting for text, limits, sampling,
and request errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from models.base import Admit, Feed, LoadedModel, ModelInputError, SynthParams
from models.qwen3_tts.loader import load
from tests.models.drive import plan
from tests.models.qwen3_tts.driver import Job, run_jobs

TEXT = "The quick brown fox jumps over the lazy dog."


@pytest.fixture(scope="module")
def cv(ckpt_dirs: dict[str, Path]) -> LoadedModel:
    return load({"max_contexts": 4, "kv_capacity": 256}, ckpt_dirs["custom_voice"])


@pytest.fixture(scope="module")
def base(ckpt_dirs: dict[str, Path]) -> LoadedModel:
    return load({"max_contexts": 2, "kv_capacity": 256}, ckpt_dirs["base"])


def params(voice: str = "ryan", **extra: Any) -> SynthParams:
    return SynthParams(voice=voice, language="en", extra={"temperature": 0.0, **extra})


def test_context_waits_for_text_then_continues(cv: LoadedModel) -> None:
    runner = cv.runner
    (ids,) = runner.encode_text(TEXT)
    prepared = runner.prepare(params(max_new_tokens=12))
    # No text yet: the slot waits (whether the text is whole decides the mode).
    result = runner.execute(plan([0], (Admit(0, prepared),)))
    assert result.counts[0] == 0 and not result.finished[0] and result.waiting[0]
    result = runner.execute(plan([0], feed=(Feed(0, (ids[:2],)),)))
    frames = [result.frames]
    for _ in range(10):
        if result.waiting[0]:
            break
        result = runner.execute(plan([0]))
        frames.append(result.frames)
        assert not result.finished[0]
    assert result.waiting[0]  # text ran dry before the input closed: it waits
    result = runner.execute(plan([0], feed=(Feed(0, (ids[2:],), close=True),)))
    frames.append(result.frames)
    while not result.finished[0]:
        result = runner.execute(plan([0]))
        frames.append(result.frames)
    runner.execute(plan(free=[0]))
    codes = np.concatenate(frames)
    # Text that streamed in is spoken in streaming-text mode: the same codes as a
    # whole text that asks for that mode.
    alone = run_jobs(cv, [Job(params(max_new_tokens=12, streaming_text=True), TEXT)])[0].codes
    np.testing.assert_array_equal(codes, alone)


def test_max_frames_ends_with_hit_limit(cv: LoadedModel) -> None:
    result = run_jobs(cv, [Job(params(max_new_tokens=3), TEXT)])[0]
    assert result.hit_limit and len(result.codes) == 3


def test_non_streaming_waits_for_the_whole_text(cv: LoadedModel) -> None:
    runner = cv.runner
    prepared = runner.prepare(params(streaming_text=False, max_new_tokens=5))
    units = tuple(runner.encode_text(TEXT))
    result = runner.execute(plan([0], (Admit(0, prepared),), (Feed(0, units),)))
    assert result.waiting[0] and result.counts[0] == 0  # all text first, then it speaks
    result = runner.execute(plan([0], feed=(Feed(0, close=True),)))
    assert not result.waiting[0]
    runner.execute(plan(free=[0]))


def test_closed_without_text_finishes_silently(cv: LoadedModel) -> None:
    runner = cv.runner
    prepared = runner.prepare(params())
    result = runner.execute(plan([0], (Admit(0, prepared),), (Feed(0, close=True),)))
    assert result.finished[0] and not result.hit_limit[0] and result.frames.shape == (0, 16)
    runner.execute(plan(free=[0]))


def test_seeded_sampling_is_reproducible_in_any_batch(cv: LoadedModel) -> None:
    sampled = params(temperature=0.9, top_k=50, top_p=0.9, seed=1234, max_new_tokens=10)
    other = params(voice="vivian", temperature=1.2, seed=5, max_new_tokens=16)
    alone = run_jobs(cv, [Job(sampled, TEXT)])[0].codes
    batched = run_jobs(cv, [Job(other, "Hello world."), Job(sampled, TEXT, open_at=2)])[1].codes
    np.testing.assert_array_equal(alone, batched)
    greedy = run_jobs(cv, [Job(params(max_new_tokens=10), TEXT)])[0].codes
    reseeded = run_jobs(cv, [Job(params(temperature=0.9, seed=99, max_new_tokens=10), TEXT)])
    assert not np.array_equal(alone, greedy)
    assert not np.array_equal(alone, reseeded[0].codes)


def test_batched_prompts_and_slot_gaps_give_each_context_its_own_codes(cv: LoadedModel) -> None:
    """Three contexts admitted in one step run their prompts in one padded talker call
    (the non-streaming one's prompt is longest); the middle one ends after two frames,
    leaving an idle slot inside the range the others' attention reads in place. Each
    context's codes equal its own run alone (in slot 0)."""
    first = Job(params(max_new_tokens=12), TEXT)
    short = Job(params(voice="vivian", max_new_tokens=2), "Hi.")
    whole = Job(params(streaming_text=False, max_new_tokens=12), "A longer one, read whole.")
    together = run_jobs(cv, [first, short, whole])
    assert len(together[1].codes) == 2 and len(together[2].codes) > 2
    for job, result in zip((first, short, whole), together, strict=True):
        np.testing.assert_array_equal(run_jobs(cv, [job])[0].codes, result.codes)


def test_slots_are_reused(cv: LoadedModel) -> None:
    for _ in range(cv.runner.max_slots + 2):
        run_jobs(cv, [Job(params(max_new_tokens=2), "Hi.")])


def expect(model: LoadedModel, p: SynthParams, code: str, param: str) -> None:
    """Refused while validating (cheap) or, for what needs the audio decoded, while
    preparing: either way with the field named."""
    with pytest.raises(ModelInputError) as info:
        model.runner.validate(p)
        model.runner.prepare(p)
    assert (info.value.code, info.value.param) == (code, param), str(info.value)


def test_request_errors_name_the_param(cv: LoadedModel, base: LoadedModel) -> None:
    expect(cv, params(voice="nobody"), "unknown_voice", "voice")
    expect(cv, SynthParams(voice="ryan", language="klingon"), "unsupported_language", "language")
    expect(cv, params(ref_audio=b"RIFF"), "unsupported_value", "ref_audio")
    expect(cv, params(temperature=-1), "invalid_field", "temperature")
    expect(cv, params(top_p=0), "invalid_field", "top_p")
    expect(cv, params(streaming_text="yes"), "invalid_field", "streaming_text")
    expect(cv, params(max_new_tokens=10**9), "invalid_field", "max_new_tokens")
    voice = SynthParams(voice="clone", instructions="whisper")
    expect(base, voice, "unsupported_value", "instructions")
    expect(base, params("clone"), "missing_field", "ref_audio")
    tone = np.sin(np.arange(48000) / 10).astype(np.float32)
    audio = {"ref_audio": tone, "ref_audio_sample_rate": 24000}
    expect(base, params("clone", **audio), "missing_field", "ref_text")
    short = {"ref_audio": tone[:1000], "ref_audio_sample_rate": 24000, "x_vector_only": True}
    expect(base, params("clone", **short), "invalid_field", "ref_audio")
    long = {"ref_audio": np.zeros(24000 * 61, np.float32), "ref_audio_sample_rate": 24000}
    expect(base, params("clone", ref_text="hi", **long), "invalid_field", "ref_audio")
    expect(
        base,
        params("clone", ref_audio=b"not audio at all" * 50, ref_text="hi"),
        "invalid_field",
        "ref_audio",
    )
    expect(
        base,
        params("clone", ref_audio=tone, ref_text="hi"),
        "invalid_field",
        "ref_audio_sample_rate",
    )
    expect(base, params("clone", speaker_embedding=[0.0] * 3), "invalid_field", "speaker_embedding")
    url = params("clone", ref_audio="https://example.com/me.wav", ref_text="hi")
    expect(base, url, "unsupported_value", "ref_audio")  # URL fetching is off
    base.runner.validate(params("clone", x_vector_only=True, **audio))


def test_voice_prompt_is_reusable(base: LoadedModel) -> None:
    tone = (0.3 * np.sin(np.arange(36000) / 7)).astype(np.float32)
    prompt = base.runner.create_voice_prompt(tone, 24000, "Hello world.")  # type: ignore[attr-defined]
    assert prompt.ref_codes.shape == (19, 16)  # ceil(1.5 s / 80 ms)
    direct = params(
        "clone",
        ref_audio=tone,
        ref_audio_sample_rate=24000,
        ref_text="Hello world.",
        max_new_tokens=6,
    )
    reused = params("clone", voice_prompt=prompt, max_new_tokens=6)
    a, b = run_jobs(base, [Job(direct, "Hi there.", pieces=1), Job(reused, "Hi there.")])
    np.testing.assert_array_equal(a.codes, b.codes)


def test_validate_is_cheap_and_decodes_nothing(base: LoadedModel) -> None:
    """Garbage reference audio passes the cheap checks; preparing decodes and refuses it."""
    bad = params("clone", ref_audio=b"not audio at all" * 50, ref_text="hi")
    base.runner.validate(bad)
    with pytest.raises(ModelInputError) as info:
        base.runner.prepare(bad)
    assert info.value.param == "ref_audio"
