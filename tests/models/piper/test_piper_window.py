"""A context's first unit expanded in two calls (its first window at once, the rest in
its next step) is the whole unit: the same latent, the same word timing."""

from __future__ import annotations

import numpy as np
import pytest

from models.base import Admit, Feed, SynthParams
from models.piper.loader import load
from tests.models.drive import plan
from tests.models.piper.steps import QUIET, step_all

LONG = "The first sentence is long enough that its window is only a part of it, by far."


@pytest.mark.parametrize("text", [LONG, "Short.", f"{LONG} And a second sentence after it."])
def test_first_window_then_the_rest_is_the_whole_unit(text: str) -> None:
    [(whole, whole_words)] = step_all(load({**QUIET, "first_window_frames": 0}), [text])
    [(parts, part_words)] = step_all(load({**QUIET, "first_window_frames": 40}), [text])
    assert parts.shape == whole.shape and len(whole) > 10
    assert np.abs(parts - whole).max() < 1e-4
    assert part_words == whole_words and len(part_words) == len(text.split())


def test_the_first_step_hands_out_the_window_and_the_next_the_rest() -> None:
    model = load({**QUIET, "first_window_frames": 40})
    runner = model.runner
    unit = runner.encode_text(LONG)
    assert len(unit) == 1
    admit = Admit(0, runner.prepare(SynthParams(voice="joe")))
    first = runner.execute(plan([0], (admit,), (Feed(0, tuple(unit), True),)))
    assert first.counts.tolist() == [40] and not first.unit_end[0] and not first.finished[0]
    total = int(first.counts[0])
    while True:  # the rest, from the next step on (at most 128 frames a step)
        step = runner.execute(plan([0]))
        assert step.counts[0] > 0
        total += int(step.counts[0])
        if step.unit_end[0]:
            break
    assert step.finished[0]
    [(whole, _)] = step_all(load({**QUIET, "first_window_frames": 0}), [LONG])
    assert total == len(whole) > 2 * 40


def test_the_window_and_the_rest_share_one_noise_draw() -> None:
    """At the voice's own noise scale: the window's frames are the whole unit's, the
    noise drawn once for both (drawn inside the graph, each call would draw anew)."""
    runner = load({"noise_w_scale": 0}).runner
    graphs = runner._graphs  # type: ignore[attr-defined]  # noqa: SLF001
    (ids,) = runner.encode_text(LONG)
    scales = runner.prepare(SynthParams(voice="joe")).scales
    assert scales is not None and scales[0] > 0
    timed = graphs.time(ids, scales, 1.0, np.random.default_rng(3))
    whole = graphs.expand(timed)
    assert len(whole) > 3 * 40
    np.testing.assert_allclose(graphs.expand(timed, 40), whole[:40], atol=1e-4)
    other = graphs.expand(graphs.time(ids, scales, 1.0, np.random.default_rng(4)))
    assert np.abs(other - whole).max() > 1e-2  # the noise is used


def test_a_negative_window_is_refused() -> None:
    with pytest.raises(ValueError, match="model.first_window_frames"):
        load({"first_window_frames": -1})
