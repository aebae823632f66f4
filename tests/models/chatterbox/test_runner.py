"""Chatterbox's T3 behind the runner contract, driven as the engine drives it.

Each unit of text is one utterance: its frames are the reference's tokens for
that text with the context's voice, then the three silence tokens; contexts
admitted at different steps share every step."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from models.base import Capabilities, ModelInputError, SynthParams, VoiceInfo
from models.chatterbox.checkpoint import load_t3
from models.chatterbox.runner import REQUEST_FIELDS, TAIL, ChatterboxRunner, Voice
from models.chatterbox.text import load_text_tokenizer, normalize
from tests.models.chatterbox.ckpt import T3Sizes, build_t3, build_tokenizer
from tests.models.chatterbox.reference import run_reference
from tests.models.drive import run_schedule

SIZES = T3Sizes()
TEXTS = [["hello there, friend", "how are you today?"], ["a second voice speaks"]]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cbx") / "ckpt"
    size = build_tokenizer(root)
    return build_t3(root, T3Sizes(text_vocab=size), seed=4)


def voices() -> dict[str, Voice]:
    rng = np.random.default_rng(2)
    return {
        name: Voice(
            rng.normal(size=256).astype(np.float32), rng.integers(0, 6561, n).astype(np.int64)
        )
        for name, n in (("default", 20), ("other", 33))
    }


def make_runner(checkpoint: Path) -> ChatterboxRunner:
    caps = Capabilities(
        family="chatterbox",
        sample_rate=24000,
        samples_per_frame=960,
        voices=(VoiceInfo("default"), VoiceInfo("other")),
        request_fields=REQUEST_FIELDS,
    )
    model = load_t3(checkpoint, torch.device("cpu"), torch.float32)
    return ChatterboxRunner(
        model, load_text_tokenizer(checkpoint), voices(), caps, slots=4, capacity=512
    )


def drive(runner: ChatterboxRunner, extra: dict) -> tuple[dict[int, list[np.ndarray]], dict]:
    """Context 0 (two units) admitted at step 0, context 1 (one unit) at step 2; each
    context's frames per unit, and whether each ended at its limit."""
    units = {s: [u for t in texts for u in runner.encode_text(t)] for s, texts in enumerate(TEXTS)}
    joins = {
        0: (0, SynthParams(voice="default", extra=extra), units[0]),
        2: (1, SynthParams(voice="other", extra=extra), units[1]),
    }
    return run_schedule(runner, joins)


def test_units_equal_the_reference_utterances(checkpoint: Path, tmp_path: Path) -> None:
    runner = make_runner(checkpoint)
    out, ended = drive(runner, {"temperature": 0.0, "max_new_tokens": 20})
    assert ended == {0: True, 1: True}  # random weights never stop: capped
    tokenizer, vs = load_text_tokenizer(checkpoint), voices()
    tasks = []
    for slot, texts in enumerate(TEXTS):
        voice = vs["default" if slot == 0 else "other"]
        for i, text in enumerate(texts):
            tasks.append(
                {
                    "kind": "t3",
                    "id": f"c{slot}u{i}",
                    "speaker": voice.speaker.tolist(),
                    "prompt": voice.prompt.tolist(),
                    "text": tokenizer.encode(normalize(text)),
                    "temperature": 0.8,
                    "top_k": 1,
                    "top_p": 0.95,
                    "repetition_penalty": 1.2,
                    "max_gen_len": 19,  # 1 + 19 = our cap of 20 tokens
                }
            )
    sizes = T3Sizes(text_vocab=len(tokenizer)).for_reference()
    ref = run_reference(checkpoint, {"t3_sizes": sizes, "tasks": tasks}, tmp_path)
    for slot, texts in enumerate(TEXTS):
        assert len(out[slot]) == len(texts)
        for i, frames in enumerate(out[slot]):
            tokens = ref[f"c{slot}u{i}.tokens"]
            expected = np.concatenate([tokens[tokens < 6561], TAIL])
            np.testing.assert_array_equal(frames, expected, err_msg=f"context {slot} unit {i}")


def test_bad_requests_name_the_field(checkpoint: Path) -> None:
    runner = make_runner(checkpoint)
    with pytest.raises(ModelInputError, match="voice") as err:
        runner.validate(SynthParams(voice="nobody"))
    assert err.value.param == "voice"
    with pytest.raises(ModelInputError) as err:
        runner.validate(SynthParams(voice="default", extra={"temperature": 5}))
    assert err.value.param == "temperature"
    assert runner.encode_text("   ") == []
