"""Our batched T3 against the reference's ``inference_turbo``: the same speech tokens.

Tiny random checkpoint, fp32, greedy (``top_k=1``, as the reference decodes it),
with the reference's repetition penalty; three utterances of different prompt
and text lengths start in one batch, and keep stepping in one batch as they end.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from models.chatterbox.checkpoint import CheckpointError, load_t3
from models.chatterbox.sampling import T3Sampling
from models.chatterbox.t3_slots import T3Slots, Utterance
from tests.models.chatterbox.ckpt import T3Sizes, build_t3
from tests.models.chatterbox.reference import run_reference

SIZES = T3Sizes()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_t3(tmp_path_factory.mktemp("cbx") / "ckpt", SIZES, seed=3)


def utterances() -> list[dict]:
    rng = np.random.default_rng(5)
    out = []
    # Different caps: the middle slot ends first, so later steps run slots 0 and 2.
    for i, (prompt, text, cap) in enumerate([(12, 9, 24), (30, 4, 9), (7, 15, 17)]):
        out.append(
            {
                "id": f"u{i}",
                "speaker": rng.normal(size=SIZES.speaker_dim).astype(np.float32).tolist(),
                "prompt": rng.integers(0, 6561, prompt).tolist(),
                "text": rng.integers(0, SIZES.text_vocab, text).tolist(),
                "max_gen_len": cap,
            }
        )
    return out


def run(runner: T3Slots, items: list[Utterance], caps: list[int], stop: int) -> list[np.ndarray]:
    """Each utterance to its stop token or its cap, stepping the live ones together."""
    tokens = {u.slot: [t] for u, t in zip(items, runner.start(items).tolist(), strict=True)}
    cap = {u.slot: 1 + c for u, c in zip(items, caps, strict=True)}
    live = list(tokens)  # the reference never checks its first token for the stop id
    while live:
        nxt = runner.advance(live, np.asarray([tokens[s][-1] for s in live]))
        for slot, t in zip(live, nxt.tolist(), strict=True):
            tokens[slot].append(t)
        live = [s for s in live if tokens[s][-1] != stop and len(tokens[s]) < cap[s]]
    out = []
    for u in items:
        seq = tokens[u.slot]
        out.append(np.asarray(seq[:-1] if seq[-1] == stop else seq, np.int64))
    return out


def ours(
    checkpoint: Path, jobs: list[dict], sampling: T3Sampling, later: list[dict] | None = None
) -> dict[str, np.ndarray]:
    """``jobs`` in slots 0.., then ``later`` (the same voices, new texts) in the same
    slots, reusing the voice's keys/values."""
    model = load_t3(checkpoint, torch.device("cpu"), torch.float32)
    runner = T3Slots(model, slots=4, capacity=SIZES.positions)
    stop = model.cfg.stop_speech
    items = []
    for slot, job in enumerate(jobs):
        prefix = model.prefix(
            torch.tensor(job["speaker"]), torch.tensor(job["prompt"], dtype=torch.long)
        )
        items.append(Utterance(slot, prefix, np.asarray(job["text"]), sampling, key=slot))
    made = run(runner, items, [j["max_gen_len"] for j in jobs], stop)
    out = {job["id"]: tokens for job, tokens in zip(jobs, made, strict=True)}
    if later:
        again = [
            Utterance(s, None, np.asarray(j["text"]), sampling, key=s) for s, j in enumerate(later)
        ]
        made = run(runner, again, [j["max_gen_len"] for j in later], stop)
        out |= {job["id"]: tokens for job, tokens in zip(later, made, strict=True)}
    return out


def tasks_of(jobs: list[dict], sampling: T3Sampling) -> list[dict]:
    return [
        {
            "kind": "t3",
            **job,
            "temperature": sampling.temperature,
            "top_k": sampling.top_k,
            "top_p": sampling.top_p,
            "repetition_penalty": sampling.repetition_penalty,
        }
        for job in jobs
    ]


def test_batched_greedy_tokens_equal_the_reference(checkpoint: Path, tmp_path: Path) -> None:
    """Then each slot speaks a second text with the same voice, reusing the voice's
    keys/values: its tokens equal the reference's fresh utterance of that text."""
    sampling = T3Sampling(temperature=0.8, top_k=1, top_p=0.95, repetition_penalty=1.2)
    jobs = utterances()
    rng = np.random.default_rng(9)
    later = [
        {**job, "id": f"{job['id']}b", "text": rng.integers(0, SIZES.text_vocab, 6 + i).tolist()}
        for i, job in enumerate(jobs)
    ]
    job = {"t3_sizes": SIZES.for_reference(), "tasks": tasks_of(jobs + later, sampling)}
    ref = run_reference(checkpoint, job, tmp_path)
    mine = ours(checkpoint, jobs, sampling, later)
    for j in jobs + later:
        expected = ref[f"{j['id']}.tokens"]
        assert len(expected) > 1 and len(set(expected.tolist())) > 1  # not a degenerate run
        np.testing.assert_array_equal(mine[j["id"]], expected, err_msg=j["id"])


def test_a_missing_weights_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="t3_turbo_v1.safetensors"):
        load_t3(tmp_path, torch.device("cpu"), torch.float32)
