"""Parity with the reference package qwen-tts==0.1.1 on tiny random checkpoints.

Per variant, one reference subprocess generates every case alone (fp32,
greedy), while our model runs all cases in one batch: contexts open at
different steps, and streamed text arrives in pieces. Codes must be equal
frame by frame; waveforms, decoded by us in chunks (first chunk one frame,
then mixed sizes, all contexts in shared calls), within 1e-4 of the
reference decoder's.
"""

from __future__ import annotations

import ast
import io
import wave
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from models.base import LoadedModel, SynthParams
from models.mel import mel_filterbank
from models.qwen3_tts.loader import load
from models.qwen3_tts.params import WHOLE_TEXT_STREAMING
from models.qwen3_tts.voices import ISO_LANGUAGES
from tests.models.qwen3_tts.driver import Job, JobResult, decode_chunked, run_jobs
from tests.models.qwen3_tts.reference import (
    REF_PYTHON,
    ReferenceRun,
    require_reference,
    run_reference,
)

LONG = "The quick brown fox jumps over the lazy dog. Speak slowly and clearly."
MID = "Numbers like 42 and 2026 are read one digit at a time."
SHORT = "Hello world."


def tone(seconds: float, rate: int, seed: int) -> np.ndarray:
    """A voiced-like test signal on the int16 grid (so WAV bytes carry it exactly)."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    f0 = 110 + 40 * seed
    x = sum(0.3 / k * np.sin(2 * np.pi * k * f0 * t + k) for k in range(1, 6))
    x = x * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t)) + 0.02 * rng.standard_normal(len(t))
    return (np.round(x * 32767) / 32768).astype(np.float32)


def wav_bytes(x: np.ndarray, rate: int) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.round(x * 32768).astype("<i2").tobytes())
    return buf.getvalue()


@dataclass
class Case:
    id: str
    text: str
    language: str
    streaming: bool
    max_frames: int
    voice: str = ""
    instruct: str | None = None
    open_at: int = 0
    pieces: int = 1
    gap: int = 3
    """Steps between text pieces: longer than a piece lasts makes the context wait."""
    ref_audio: np.ndarray | None = None
    ref_sr: int = 24000
    ref_text: str | None = None
    x_vector_only: bool = False
    as_wav_bytes: bool = False
    speaker_embedding: np.ndarray | None = None
    chunks: list[int] = field(default_factory=lambda: [1, 3, 7, 2, 16])
    choose: bool = True
    """The request sends ``streaming_text``; False leaves the mode to the model, and
    ``streaming`` then says the mode the reference runs (its default for a whole text)."""

    def ref_task(self, tmp: Path) -> dict[str, Any]:
        task: dict[str, Any] = {
            "kind": "generate",
            "id": self.id,
            "text": self.text,
            "language": ISO_LANGUAGES.get(self.language, self.language),
            "non_streaming_mode": not self.streaming,
            "max_new_tokens": self.max_frames + 1,  # the reference drops its last token
            "greedy": True,
        }
        if self.voice:
            task["speaker"] = self.voice
        if self.instruct:
            task["instruct"] = self.instruct
        if self.ref_audio is not None:
            np.save(tmp / f"{self.id}.in.npy", self.ref_audio)
            task.update(
                ref_audio=str(tmp / f"{self.id}.in.npy"),
                ref_sr=self.ref_sr,
                ref_text=self.ref_text,
                x_vector_only=self.x_vector_only,
            )
        if self.speaker_embedding is not None:
            np.save(tmp / f"{self.id}.spk.npy", self.speaker_embedding)
            task["speaker_embedding"] = str(tmp / f"{self.id}.spk.npy")
        return task

    def job(self, voice: str) -> Job:
        extra: dict[str, Any] = {"temperature": 0.0, "max_new_tokens": self.max_frames}
        if self.choose:
            extra["streaming_text"] = self.streaming
        if self.ref_audio is not None:
            audio: Any = self.ref_audio
            if self.as_wav_bytes:
                audio = wav_bytes(self.ref_audio, self.ref_sr)
            else:
                extra["ref_audio_sample_rate"] = self.ref_sr
            extra.update(ref_audio=audio, ref_text=self.ref_text, x_vector_only=self.x_vector_only)
        if self.speaker_embedding is not None:
            extra["speaker_embedding"] = self.speaker_embedding.tolist()
        params = SynthParams(
            voice=self.voice or voice,
            language=self.language,
            instructions=self.instruct,
            extra=extra,
        )
        return Job(params, self.text, self.open_at, self.pieces, self.gap)


CASES: dict[str, list[Case]] = {
    "custom_voice": [
        Case("cv_short", SHORT, "english", True, 30, voice="vivian"),
        Case(
            "cv_long",
            LONG,
            "auto",
            True,
            40,
            voice="ryan",
            instruct="A cheerful young woman reading the news.",
            open_at=2,
            pieces=4,
            gap=10,
        ),
        Case("cv_dialect", MID, "chinese", False, 30, voice="dylan", open_at=1, pieces=2),
        Case(
            "cv_instr",
            "Hello world, this is a small test of the speech model.",
            "fr",
            False,
            24,
            voice="vivian",
            instruct="Speak slowly.",
            open_at=5,
            chunks=[1, 2, 5, 40],
        ),
        # No mode asked: a whole text takes the reference's default (non-streaming) ...
        Case(
            "cv_whole",
            LONG,
            "english",
            False,
            40,
            voice="ryan",
            instruct="A cheerful young woman reading the news.",
            open_at=1,
            choose=False,
        ),
        # ... and text that streams in is spoken in streaming-text mode.
        Case("cv_pieces", MID, "auto", True, 30, voice="vivian", pieces=3, gap=8, choose=False),
    ],
    "voice_design": [
        Case(
            "vd_stream",
            MID,
            "en",
            True,
            36,
            instruct="A warm and friendly voice.",
            pieces=5,
            gap=6,
        ),
        Case("vd_plain", SHORT, "auto", False, 30, open_at=3),
        Case("vd_long", LONG, "german", True, 40, instruct="A deep calm voice.", open_at=1),
        Case("vd_whole", LONG, "en", False, 40, instruct="A deep calm voice.", choose=False),
        Case("vd_pieces", SHORT, "en", True, 30, open_at=2, pieces=2, gap=9, choose=False),
    ],
    "base": [
        Case(
            "b_icl_stream",
            LONG,
            "english",
            True,
            30,
            ref_audio=tone(1.0, 24000, 1),
            ref_text=SHORT,
            pieces=3,
            gap=12,
        ),
        Case(
            "b_icl_full",
            SHORT,
            "auto",
            False,
            24,
            ref_audio=tone(2.0, 24000, 2),
            ref_text="The quick brown fox.",
            open_at=2,
        ),
        Case(
            "b_xvec",
            MID,
            "spanish",
            True,
            30,
            ref_audio=tone(1.5, 16000, 3),
            ref_sr=16000,
            x_vector_only=True,
            as_wav_bytes=True,
            open_at=1,
        ),
        # A clone's reference default is streaming-text mode, whole text or not.
        Case(
            "b_whole",
            SHORT,
            "english",
            True,
            24,
            ref_audio=tone(1.0, 24000, 4),
            x_vector_only=True,
            choose=False,
        ),
        Case(
            "b_embedding",
            SHORT,
            "japanese",
            True,
            20,
            speaker_embedding=np.random.default_rng(7).standard_normal(64).astype(np.float32),
            open_at=4,
        ),
    ],
}
DECODE_FRAMES = 120  # longer than the decoder's 72-frame attention window


@dataclass
class VariantRun:
    variant: str
    model: LoadedModel
    ref: ReferenceRun
    ours: dict[str, JobResult]
    cases: list[Case]
    decode_codes: np.ndarray


@pytest.fixture(scope="module", params=list(CASES))
def run(
    request: pytest.FixtureRequest,
    ckpt_dirs: dict[str, Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> VariantRun:
    require_reference()
    variant = request.param
    cases = CASES[variant]
    tmp = tmp_path_factory.mktemp(f"ref_{variant}")
    codes = np.random.default_rng(5).integers(0, 2048, (DECODE_FRAMES, 16)).astype(np.int64)
    np.save(tmp / "decode.in.npy", codes)
    tasks = [c.ref_task(tmp) for c in cases]
    tasks.append({"kind": "decode", "id": "decode", "codes": str(tmp / "decode.in.npy")})
    if variant == "base":
        tasks.append(
            {"kind": "mel_filters", "id": "mel", "sr": 24000, "n_fft": 1024, "n_mels": 128}
            | {"fmin": 0, "fmax": 12000}
        )
    ref = run_reference(ckpt_dirs[variant], tasks, tmp / "out")
    model = load({"max_contexts": 6, "kv_capacity": 640}, ckpt_dirs[variant])
    voice = model.capabilities.default_voice
    results = run_jobs(model, [c.job(voice) for c in cases])
    return VariantRun(
        variant, model, ref, dict(zip([c.id for c in cases], results, strict=True)), cases, codes
    )


def test_codes_equal_reference_frame_by_frame(run: VariantRun) -> None:
    for case in run.cases:
        ours = run.ours[case.id].codes
        ref = run.ref.array(f"{case.id}.codes")
        assert ours.shape == ref.shape, f"{case.id}: {ours.shape} frames vs reference {ref.shape}"
        mismatch = np.nonzero((ours != ref).any(axis=1))[0]
        assert not len(mismatch), f"{case.id}: first differing frame {mismatch[:1]}"
        assert run.ours[case.id].hit_limit == (len(ours) == case.max_frames)
    assert any(len(run.ours[c.id].codes) for c in run.cases)


STREAMED_IN_PIECES = [
    v for v, cases in CASES.items() if any(c.streaming and c.pieces > 1 for c in cases)
]


@pytest.mark.parametrize("run", STREAMED_IN_PIECES, indirect=True)
def test_streamed_text_waits_instead_of_ending(run: VariantRun) -> None:
    waited = [c for c in run.cases if c.streaming and c.pieces > 1]
    # The text arrived in pieces, yet the codes equal the all-text-up-front reference.
    assert any(run.ours[c.id].starved_steps > 0 for c in waited)


def test_unchosen_mode_is_the_one_that_matches(run: VariantRun) -> None:
    """The cases that leave the mode to the model would give other codes in the other
    mode: equal codes above show the model picked the reference's mode."""
    unchosen = [c for c in run.cases if not c.choose]
    assert unchosen
    voice = run.model.capabilities.default_voice
    other = [replace(c, streaming=not c.streaming, choose=True).job(voice) for c in unchosen]
    for case, result in zip(unchosen, run_jobs(run.model, other), strict=True):
        ref = run.ref.array(f"{case.id}.codes")
        assert result.codes.shape != ref.shape or (result.codes != ref).any(), case.id


def test_whole_text_defaults_are_the_reference_defaults() -> None:
    """``WHOLE_TEXT_STREAMING`` follows the reference's ``non_streaming_mode`` default of
    each variant's generate function (read from its source, not imported: importing it
    needs optional audio packages)."""
    require_reference()
    [source] = REF_PYTHON.parents[1].glob(
        "lib/python*/site-packages/qwen_tts/inference/qwen3_tts_model.py"
    )
    functions = {
        node.name: node
        for node in ast.walk(ast.parse(source.read_text()))
        if isinstance(node, ast.FunctionDef)
    }
    names = {
        "custom_voice": "generate_custom_voice",
        "voice_design": "generate_voice_design",
        "base": "generate_voice_clone",
    }
    non_streaming = {}
    for variant, name in names.items():
        args = functions[name].args
        defaults = dict(
            zip([a.arg for a in args.args][-len(args.defaults) :], args.defaults, strict=True)
        )
        defaults |= {a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d}
        non_streaming[variant] = ast.literal_eval(defaults["non_streaming_mode"])
    assert {k: not v for k, v in non_streaming.items()} == dict(WHOLE_TEXT_STREAMING)


def test_chunked_waveform_matches_reference_decoder(run: VariantRun) -> None:
    cases = [c for c in run.cases if len(run.ours[c.id].codes)]
    wavs = decode_chunked(
        run.model,
        [run.ours[c.id].codes for c in cases],
        [c.chunks for c in cases],
        [run.ours[c.id].conditioning for c in cases],
    )
    for case, wav in zip(cases, wavs, strict=True):
        ref = run.ref.array(f"{case.id}.wav")
        assert wav.shape == ref.shape, case.id
        assert np.abs(wav - ref).max() < 1e-4, case.id
        assert np.abs(ref).max() > 0.01, "the test signal must not be silent"


def test_decoder_past_its_attention_window_matches_reference(run: VariantRun) -> None:
    codes = run.decode_codes
    chunked = decode_chunked(run.model, [codes], [[1, 4, 9, 30, 2, 50]])[0]
    whole = decode_chunked(run.model, [codes], [[len(codes)]])[0]
    ref = run.ref.array("decode.wav")
    assert np.abs(whole - ref).max() < 1e-4
    assert np.abs(chunked - whole).max() < 1e-5


@pytest.mark.parametrize("run", ["base"], indirect=True)  # clone prompts: Base only
def test_voice_clone_prompt_equals_reference(run: VariantRun) -> None:
    runner = run.model.runner
    for case in run.cases:
        if case.ref_audio is None:
            continue
        audio: Any = wav_bytes(case.ref_audio, case.ref_sr) if case.as_wav_bytes else case.ref_audio
        rate = None if case.as_wav_bytes else case.ref_sr
        prompt = runner.create_voice_prompt(audio, rate, case.ref_text, case.x_vector_only)  # type: ignore[attr-defined]
        ref_x = run.ref.array(f"{case.id}.xvector")
        assert np.abs(prompt.speaker_embedding - ref_x).max() < 1e-4 * max(1.0, np.abs(ref_x).max())
        if case.x_vector_only:
            assert prompt.ref_codes is None
        else:
            np.testing.assert_array_equal(prompt.ref_codes, run.ref.array(f"{case.id}.ref_codes"))
    filters = mel_filterbank(24000, 1024, 128, 0, 12000)
    assert np.abs(filters - run.ref.array("mel")).max() < 1e-7


def test_batch_of_different_lengths_equals_each_alone(run: VariantRun) -> None:
    case = run.cases[0]
    alone = run_jobs(run.model, [case.job(run.model.capabilities.default_voice)])[0]
    np.testing.assert_array_equal(alone.codes, run.ours[case.id].codes)


def test_bf16_loads_and_speaks(ckpt_dirs: dict[str, Path]) -> None:
    model = load(
        {"dtype": "bfloat16", "max_contexts": 1, "kv_capacity": 128}, ckpt_dirs["custom_voice"]
    )
    params = SynthParams(
        voice="ryan", language="en", extra={"temperature": 0.0, "max_new_tokens": 4}
    )
    result = run_jobs(model, [Job(params, SHORT)])[0]
    assert result.codes.shape[1] == 16 and 1 <= len(result.codes) <= 4
    wav = decode_chunked(model, [result.codes], [[1, 3]])[0]
    assert wav.dtype == np.float32 and len(wav) == 1920 * len(result.codes)
    assert next(model.vocoder.decoder.parameters()).dtype == torch.bfloat16  # type: ignore[attr-defined]


def test_engine_audio_equals_reference_waveform(run: VariantRun) -> None:
    """Every case at once through the real EngineCore thread (continuous batching,
    1-frame first chunks, clone priming): its audio equals the reference's decode
    of the reference's own codes."""
    import asyncio

    from voiceserver.engine.client import EngineClient
    from voiceserver.engine.core import EngineConfig, EngineCore
    from voiceserver.engine.messages import AudioChunk, EngineEvent
    from voiceserver.engine.prepare import FairPreparer

    engine = EngineCore(
        run.model, EngineConfig(first_chunk_frames=1, max_chunk_frames=8, admission_load=0)
    )
    engine.start()
    ids: dict[int, Case] = {}

    async def speak() -> dict[int, list[np.ndarray]]:
        events: asyncio.Queue[EngineEvent] = asyncio.Queue()
        client = EngineClient(engine, asyncio.get_running_loop(), FairPreparer(2))
        voice = run.model.capabilities.default_voice
        # Each text arrives whole here: a case streamed in pieces without choosing the
        # mode would take the whole-text mode instead of the one the reference ran.
        for case in [c for c in run.cases if c.choose or c.pieces == 1]:
            job = case.job(voice)
            handle = client.open(job.params, events.put_nowait, max_lead_s=1e9)
            ids[handle.cid] = case
            handle.append(job.text)
            handle.close_input()
        audio: dict[int, list[np.ndarray]] = {cid: [] for cid in ids}
        pending = set(ids)
        while pending:
            event = await asyncio.wait_for(events.get(), 300)
            assert isinstance(event, AudioChunk), event
            audio[event.cid].append(event.pcm)
            if event.final:
                pending.discard(event.cid)
        return audio

    try:
        audio = asyncio.run(speak())
    finally:
        engine.stop()
    assert engine.stats.active_slots == 0
    for cid, case in ids.items():
        ref = run.ref.array(f"{case.id}.wav") if len(run.ours[case.id].codes) else np.zeros(0)
        got = np.concatenate(audio[cid])
        assert got.shape == ref.shape, case.id
        assert np.abs(got - ref).max(initial=0) < 1e-4, case.id
