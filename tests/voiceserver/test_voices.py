"""VoiceStore (disk layout, atomic writes, damaged files), resolve_voice, and the
Qwen3 Base model's clone_voice/voice_settings hooks the store relies on."""

from __future__ import annotations

import io
import json
import wave
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from models.base import ClonedVoice, LoadedModel, ModelInputError, SynthParams
from models.qwen3_tts.voice_clone import VoicePrompt
from models.registry import resolve
from tests.models.qwen3_tts.ckpt import BuildOptions, build_checkpoint
from voiceserver.config import config_for_checkpoint, load_model_config
from voiceserver.voices import (
    StoredVoice,
    StoreFull,
    VoiceExists,
    VoiceRecord,
    VoiceStore,
    model_dir_name,
    resolve_voice,
)

MODEL = "qwen3-tts-0.6b-base"
REF_TEXT = "The quick brown fox jumps over the lazy dog."


def cloned(seed: int = 0, frames: int = 5) -> ClonedVoice:
    rng = np.random.default_rng(seed)
    return ClonedVoice(
        {
            "speaker_embedding": rng.standard_normal(8).astype(np.float32),
            "ref_codes": rng.integers(0, 100, (frames, 16)).astype(np.int64),
        },
        {"ref_text": f"text {seed}"},
    )


def record(name: str, **fields: object) -> VoiceRecord:
    return VoiceRecord(name, created_at=1_700_000_000, **fields)  # type: ignore[arg-type]


def store_at(root: Path | None, model: str = MODEL, **kwargs: int) -> VoiceStore:
    return VoiceStore(model, ["clone"], root, **kwargs)


def folder(root: Path, name: str) -> Path:
    return root / MODEL / name


def same_voice(a: ClonedVoice, b: ClonedVoice) -> bool:
    return (
        a.meta == b.meta
        and a.arrays.keys() == b.arrays.keys()
        and all(
            a.arrays[k].dtype == b.arrays[k].dtype and np.array_equal(a.arrays[k], b.arrays[k])
            for k in a.arrays
        )
    )


# -- names ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "Voice_1", "my-voice.v2", "x" * 64, "A.B-C_D"])
def test_good_names(tmp_path: Path, name: str) -> None:
    assert store_at(tmp_path).check_name(name) == name


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("", "required"),
        (None, "required"),
        (7, "required"),
        ("x" * 65, "1 to 64"),
        ("../up", "not allowed"),
        ("a/b", "not allowed"),
        ("two words", "not allowed"),
        ("émile", "not allowed"),
        (".hidden", "not starting with '.'"),
        ("..", "not allowed"),
    ],
)
def test_bad_names_are_400_naming_name(tmp_path: Path, name: object, words: str) -> None:
    with pytest.raises(ModelInputError) as err:
        store_at(tmp_path).check_name(name)
    assert err.value.param == "name" and words in str(err.value)
    assert not isinstance(err.value, VoiceExists)


def test_taken_names_are_conflicts_in_any_case(tmp_path: Path) -> None:
    store = store_at(tmp_path)
    with pytest.raises(VoiceExists, match="built-in"):
        store.check_name("CLONE")
    store.add(record("Bob"), cloned())
    for name in ("Bob", "bob", "BOB"):
        with pytest.raises(VoiceExists, match="'Bob' already exists") as err:
            store.add(record(name), cloned(1))
        assert err.value.param == "name"
    assert same_voice(store_at(tmp_path).voice("bob"), cloned())  # type: ignore[arg-type]


# -- persistence ----------------------------------------------------------------------


def test_voices_survive_a_new_store_on_the_same_folder(tmp_path: Path) -> None:
    store = store_at(tmp_path)
    first = record("Narrator", consent="c-1", ref_text=REF_TEXT, mime_type="audio/wav", file_size=9)
    store.add(first, cloned(1))
    store.add(record("alto", x_vector_only=True), cloned(2))
    assert [v.record.name for v in store.list()] == ["alto", "Narrator"]

    reopened = store_at(tmp_path)
    assert reopened.names() == ["alto", "Narrator"]
    found = reopened.find("NARRATOR")
    assert found is not None and found.record == first and found.error is None
    assert same_voice(reopened.voice("narrator"), cloned(1))  # type: ignore[arg-type]
    saved = json.loads((folder(tmp_path, "Narrator") / "voice.json").read_text())
    assert saved["model"] == MODEL and saved["meta"] == {"ref_text": "text 1"}
    assert reopened.voice("nobody") is None and reopened.find("nobody") is None


def test_remove_deletes_the_folder(tmp_path: Path) -> None:
    store = store_at(tmp_path)
    store.add(record("Bob"), cloned())
    removed = store.remove("BOB")
    assert isinstance(removed, StoredVoice) and removed.record.name == "Bob"
    assert not folder(tmp_path, "Bob").exists() and store.find("bob") is None
    assert store.remove("bob") is None
    assert store_at(tmp_path).names() == []
    store.add(record("bob"), cloned(3))  # the name is free again
    assert store_at(tmp_path).names() == ["bob"]


def test_each_model_has_its_own_folder(tmp_path: Path) -> None:
    store_at(tmp_path).add(record("Bob"), cloned())
    other = store_at(tmp_path, model="qwen3-tts-1.7b-base")
    assert other.names() == [] and other.directory == tmp_path / "qwen3-tts-1.7b-base"
    assert model_dir_name("org/model name") == "org_model_name"
    assert model_dir_name("../..") == "_.."
    assert model_dir_name("") == "model"


def test_memory_only_store_writes_nothing(tmp_path: Path) -> None:
    store = store_at(None)
    assert not store.persistent
    store.add(record("Bob"), cloned())
    assert same_voice(store.voice("bob"), cloned())  # type: ignore[arg-type]
    assert store.remove("Bob") is not None and store.names() == []


def test_max_voices(tmp_path: Path) -> None:
    store = store_at(tmp_path, max_voices=1)
    store.add(record("one"), cloned())
    with pytest.raises(ModelInputError, match="at most 1") as err:
        store.add(record("two"), cloned())
    assert err.value.param == "name" and not folder(tmp_path, "two").exists()


@pytest.mark.parametrize("on_disk", [True, False])
def test_the_store_has_a_total_size(tmp_path: Path, on_disk: bool) -> None:
    root = tmp_path if on_disk else None
    store = store_at(root)
    one = store.add(record("one", ref_text="x" * 1000), cloned(frames=50)).size
    assert one > 1000 + 50 * 16 * 8 and store.size == one
    cap = 3 * one + 100  # names differ in length
    store.add(record("two", ref_text="x" * 1000), cloned(frames=50), max_bytes=cap)
    store.add(record("three", ref_text="x" * 1000), cloned(frames=50), max_bytes=cap)
    with pytest.raises(StoreFull, match="max_voice_store_bytes=.*DELETE") as err:
        store.add(record("four", ref_text="x" * 1000), cloned(frames=50), max_bytes=cap)
    assert err.value.code == "message_too_big"
    store.check_room(cap)  # a smaller voice might still fit
    with pytest.raises(StoreFull):
        store.check_room(store.size)
    assert store.names() == ["one", "three", "two"]
    assert root is None or not folder(tmp_path, "four").exists()
    assert store.remove("two") is not None and abs(store.size - 2 * one) < 10
    store.add(record("four", ref_text="x" * 1000), cloned(frames=50), max_bytes=cap)
    if root is not None:  # reopened, the voices count with their files' sizes
        again = store_at(root)
        assert abs(again.size - 3 * one) < 3 * 2048
        with pytest.raises(StoreFull):
            again.add(record("five"), cloned(frames=50), max_bytes=again.size)


def test_a_failed_write_leaves_nothing_behind(tmp_path: Path) -> None:
    store = store_at(tmp_path)
    objects = ClonedVoice({"speaker_embedding": np.array([object()], dtype=object)})
    with pytest.raises(ValueError, match="Python objects"):
        store.add(record("Bob"), objects)
    with pytest.raises(TypeError):
        store.add(record("Bob"), ClonedVoice(cloned().arrays, {"when": object()}))
    assert list((tmp_path / MODEL).iterdir()) == []
    store.add(record("Bob"), cloned())  # the name was never taken
    assert store_at(tmp_path).names() == ["Bob"]


def test_leftovers_are_cleaned_and_strays_ignored(tmp_path: Path) -> None:
    store_at(tmp_path).add(record("Bob"), cloned())
    root = tmp_path / MODEL
    for name in (".tmp-123", ".trash-456"):
        (root / name).mkdir()
        (root / name / "voice.json").write_text("{}")
    (root / "notes.txt").write_text("not a voice")
    (root / "bad name").mkdir()
    store = store_at(tmp_path)
    assert store.names() == ["Bob"]
    assert sorted(p.name for p in root.iterdir()) == ["Bob", "bad name", "notes.txt"]


# -- damaged files --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        (lambda d: (d / "arrays.npz").write_bytes(b"garbage"), "arrays.npz is not an .npz"),
        (lambda d: (d / "arrays.npz").unlink(), "arrays.npz: No such file"),
        (lambda d: (d / "voice.json").write_text("{not json"), "JSONDecodeError"),
        (lambda d: (d / "voice.json").unlink(), "voice.json: No such file"),
        (lambda d: (d / "voice.json").write_text('{"format": 99}'), "format 1"),
        (
            lambda d: (d / "voice.json").write_text(
                json.dumps({"format": 1, "record": {"name": "Eve", "created_at": 1}})
            ),
            "names 'Eve'",
        ),
    ],
)
def test_a_damaged_voice_is_an_error_naming_it(
    tmp_path: Path, damage: Callable[[Path], object], words: str
) -> None:
    store_at(tmp_path).add(record("Bob"), cloned())
    store_at(tmp_path).add(record("ok"), cloned(1))
    damage(folder(tmp_path, "Bob"))
    store = store_at(tmp_path)  # opening never fails
    assert store.names() == ["Bob", "ok"]
    broken = store.find("bob")
    assert broken is not None and broken.voice is None and words in (broken.error or "")
    with pytest.raises(ModelInputError) as err:
        store.voice("Bob")
    assert err.value.param == "voice" and err.value.code == "internal_error"
    assert "'Bob' cannot be read" in str(err.value) and words in str(err.value)
    assert same_voice(store.voice("ok"), cloned(1))  # type: ignore[arg-type]
    assert store.remove("Bob") is not None and not folder(tmp_path, "Bob").exists()


# -- resolve_voice and the model hooks --------------------------------------------------


def wav_bytes(seconds: float, rate: int = 16000) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((0.3 * np.sin(2 * np.pi * 220 * t) * 32767).astype("<i2").tobytes())
    return out.getvalue()


@pytest.fixture(scope="module")
def tiny() -> LoadedModel:
    config = load_model_config("tiny")
    return resolve(config.family)(config.model, config.checkpoint)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    ckpt = build_checkpoint(
        tmp_path_factory.mktemp("voices_unit") / "base",
        BuildOptions(variant="base", size_name="0b6", seed=11),
    )
    config = config_for_checkpoint(ckpt)
    return resolve(config.family)(config.model, ckpt)


def test_builtin_and_inline_voices_pass_through(tiny: LoadedModel, tmp_path: Path) -> None:
    store = VoiceStore("tiny", ["tiny-a", "tiny-b"], tmp_path)
    assert resolve_voice(store, tiny.runner, None, {}) == (None, {})
    assert resolve_voice(store, tiny.runner, "TINY-A", {"seed": 1}) == ("TINY-A", {"seed": 1})
    assert resolve_voice(store, tiny.runner, "label", {"ref_audio": "x"}) == (
        "label",
        {"ref_audio": "x"},
    )


def test_unknown_names_list_builtin_and_uploaded_voices(tiny: LoadedModel) -> None:
    store = VoiceStore("tiny", ["tiny-a", "tiny-b"])
    store.add(record("mine"), cloned())
    with pytest.raises(ModelInputError) as err:
        resolve_voice(store, tiny.runner, "alloy", {})
    assert (err.value.param, err.value.code) == ("voice", "unknown_voice")
    assert str(err.value) == "unknown voice 'alloy'; available: tiny-a, tiny-b, mine"
    # A model without stored-voice support refuses, naming the voice.
    with pytest.raises(ModelInputError, match="stored voice 'MINE'") as err:
        resolve_voice(store, tiny.runner, "MINE", {})
    assert err.value.param == "voice"


def test_models_that_cannot_clone_say_so(tiny: LoadedModel) -> None:
    with pytest.raises(ModelInputError, match="cannot clone voices") as err:
        tiny.runner.clone_voice(wav_bytes(2.0), {"ref_text": REF_TEXT})
    assert (err.value.param, err.value.code) == ("audio_sample", "unsupported_value")


def test_base_model_clone_round_trips_through_the_store(base: LoadedModel, tmp_path: Path) -> None:
    voice = base.runner.clone_voice(wav_bytes(2.0), {"ref_text": REF_TEXT})
    embedding, codes = voice.arrays["speaker_embedding"], voice.arrays["ref_codes"]
    assert embedding.shape == (64,) and embedding.dtype == np.float32
    assert codes.ndim == 2 and codes.shape[1] == 16 and codes.dtype == np.int64
    assert voice.meta == {"ref_text": REF_TEXT}
    # The same prompt the model builds from inline reference audio.
    direct = base.runner.create_voice_prompt(wav_bytes(2.0), None, REF_TEXT)
    assert np.array_equal(direct.speaker_embedding, embedding)
    assert np.array_equal(direct.ref_codes, codes)

    store_at(tmp_path).add(record("Narrator", ref_text=REF_TEXT), voice)
    store = store_at(tmp_path)
    name, extra = resolve_voice(
        store, base.runner, "narrator", {"temperature": 0.0, "ref_text": "x"}
    )
    assert name == "clone" and extra["temperature"] == 0.0
    prompt = extra["voice_prompt"]
    assert isinstance(prompt, VoicePrompt) and prompt.ref_text == REF_TEXT
    assert np.array_equal(prompt.speaker_embedding, embedding)
    assert np.array_equal(prompt.ref_codes, codes)
    base.runner.validate(SynthParams(voice=name, language="auto", extra=extra))

    plain = base.runner.clone_voice(wav_bytes(2.0), {"x_vector_only": True})
    assert set(plain.arrays) == {"speaker_embedding"} and plain.meta == {"ref_text": None}
    name, extra = base.runner.voice_settings(plain)
    assert name == "clone" and extra["voice_prompt"].ref_codes is None


@pytest.mark.parametrize(
    ("arrays", "meta", "words"),
    [
        ({"speaker_embedding": np.zeros(8, np.float32)}, {}, "64 finite floats"),
        ({"speaker_embedding": np.full(64, np.nan, np.float32)}, {}, "64 finite floats"),
        ({}, {}, "64 finite floats"),
        (
            {"speaker_embedding": np.zeros(64, np.float32), "ref_codes": np.zeros((3, 8), int)},
            {"ref_text": "hi"},
            "[frames, 16]",
        ),
        (
            {"speaker_embedding": np.zeros(64, np.float32), "ref_codes": np.full((3, 16), 10**6)},
            {"ref_text": "hi"},
            "[frames, 16]",
        ),
        (
            {"speaker_embedding": np.zeros(64, np.float32), "ref_codes": np.zeros((3, 16), int)},
            {},
            "no reference text",
        ),
    ],
)
def test_base_model_refuses_voices_that_do_not_fit(
    base: LoadedModel, arrays: dict[str, np.ndarray], meta: dict[str, str], words: str
) -> None:
    with pytest.raises(ModelInputError) as err:
        base.runner.voice_settings(ClonedVoice(arrays, meta))
    assert err.value.param == "voice" and words in str(err.value)


def test_base_model_clone_errors_name_the_field(base: LoadedModel) -> None:
    cases = [
        ((b"not audio", {"ref_text": REF_TEXT}), "ref_audio", "not decodable audio"),
        ((wav_bytes(0.2), {"ref_text": REF_TEXT}), "ref_audio", "too short"),
        ((wav_bytes(2.0), {"x_vector_only": False}), "ref_text", "required"),
        ((wav_bytes(2.0), {"x_vector_only": "yes"}), "x_vector_only", "true or false"),
    ]
    for args, param, words in cases:
        with pytest.raises(ModelInputError) as err:
            base.runner.clone_voice(*args)
        assert err.value.param == param and words in str(err.value)
