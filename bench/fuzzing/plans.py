"""A plan is one barrage: a script of steps for each fuzz session. This is where the
generators are weighed against each other."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hypothesis import strategies as st

from bench.fuzzing.compat import (
    compat_close,
    compat_config,
    compat_config_mid_utterance,
    compat_fresh,
    compat_garbage,
    compat_oversize,
    compat_text,
)
from bench.fuzzing.config import FuzzConfig
from bench.fuzzing.facts import ServerFacts
from bench.fuzzing.garbage import binary_step, deep, garbage, oversize
from bench.fuzzing.messages import Step
from bench.fuzzing.native import single
from bench.fuzzing.sequences import (
    after_end,
    burst,
    cancel_played,
    close_then_more,
    ghosts,
    hostile_text,
    implicit,
    long_event_id,
    recreate,
    too_long,
    too_many,
    update_extremes,
)

StepBuilder = Callable[[ServerFacts], st.SearchStrategy[Step]]

NATIVE_STEPS: tuple[tuple[StepBuilder, int], ...] = (
    (single, 14),
    (burst, 3),
    (too_many, 1),
    (after_end, 2),
    (ghosts, 1),
    (recreate, 2),
    (implicit, 1),
    (too_long, 1),
    (update_extremes, 2),
    (close_then_more, 1),
    (cancel_played, 1),
    (hostile_text, 2),
    (long_event_id, 1),
    (garbage, 2),
    (binary_step, 1),
    (deep, 1),
    (oversize, 1),
)
COMPAT_STEPS: tuple[tuple[StepBuilder, int], ...] = (
    (compat_config, 8),
    (compat_text, 4),
    (compat_config_mid_utterance, 1),
    (compat_garbage, 2),
    (functools.partial(deep, compat=True), 1),
    (compat_oversize, 1),
    (compat_close, 1),
    (compat_fresh, 1),
)


@dataclass(frozen=True)
class Plan:
    native: tuple[tuple[Step, ...], ...]
    compat: tuple[tuple[Step, ...], ...]

    @property
    def messages(self) -> int:
        return sum(len(s.probes) for script in (*self.native, *self.compat) for s in script)

    def __repr__(self) -> str:
        return (
            f"Plan({len(self.native)} ws scripts, {len(self.compat)} stream scripts, "
            f"{self.messages} messages)"
        )


def _step(table: Sequence[tuple[StepBuilder, int]], facts: ServerFacts) -> st.SearchStrategy[Step]:
    builders = [build for build, weight in table for _ in range(weight)]
    return st.sampled_from(builders).flatmap(lambda build: build(facts))


def _scripts(
    table: Sequence[tuple[StepBuilder, int]], facts: ServerFacts, sessions: int, steps: int
) -> st.SearchStrategy[tuple[tuple[Step, ...], ...]]:
    script = st.lists(_step(table, facts), min_size=steps, max_size=steps).map(tuple)
    return st.tuples(*[script] * sessions)


def plans(facts: ServerFacts, config: FuzzConfig) -> st.SearchStrategy[Plan]:
    return st.builds(
        Plan,
        _scripts(NATIVE_STEPS, facts, config.native_sessions, config.steps),
        _scripts(COMPAT_STEPS, facts, config.compat_sessions, config.compat_steps),
    )
