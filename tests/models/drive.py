"""Drive a ModelRunner by hand, as the engine does: plans of arrays, step by step."""

from __future__ import annotations

import numpy as np

from models.base import (
    Admit,
    DecodeItem,
    Feed,
    LoadedModel,
    ModelRunner,
    StepPlan,
    StepResult,
    SynthParams,
)

NONE = np.zeros(0, np.int64)


def plan(
    step: list[int] | None = None,
    admit: tuple[Admit, ...] = (),
    feed: tuple[Feed, ...] = (),
    free: list[int] | None = None,
) -> StepPlan:
    return StepPlan(
        free=np.asarray(free or [], np.int64),
        admit=admit,
        feed=feed,
        step=np.asarray(step or [], np.int64),
    )


def units_of(model: LoadedModel, params: SynthParams, units: list[np.ndarray]) -> list[np.ndarray]:
    """One context through slot 0 to its end: every unit's frames (units end where
    the runner marks ``unit_end``)."""
    runner = model.runner
    prepared = runner.prepare(params)
    result = runner.execute(plan([0], (Admit(0, prepared),), (Feed(0, tuple(units), close=True),)))
    out: list[np.ndarray] = []
    current: list[np.ndarray] = []
    for _ in range(100_000):
        if result.counts[0]:
            current.append(result.frames)
        if result.unit_end[0] and current:
            out.append(np.concatenate(current))
            current = []
        if result.finished[0]:
            break
        result = runner.execute(plan([0]))
    else:
        raise AssertionError("the context did not finish")
    runner.execute(plan(free=[0]))
    return out


def chunk_items(
    model: LoadedModel, stream: object, frames: np.ndarray, sizes: list[int]
) -> list[DecodeItem]:
    """A unit's frames as decode items of the given chunk sizes (the last size repeats),
    each with the left/right context the vocoder wants, clipped to the unit."""
    voc = model.vocoder
    items, start, turn = [], 0, 0
    while start < len(frames):
        size = sizes[min(turn, len(sizes) - 1)]
        end = min(len(frames), start + size)
        lo, hi = max(0, start - voc.left_context), min(len(frames), end + voc.right_context)
        items.append(DecodeItem(stream, frames[lo:hi], start - lo, hi - end))
        start, turn = end, turn + 1
    return items


def step_result_rows(result: StepResult) -> list[np.ndarray]:
    """Each row's frames of a step."""
    offsets = np.concatenate(([0], np.cumsum(result.counts)))
    return [result.frames[a:b] for a, b in zip(offsets[:-1], offsets[1:], strict=True)]


def run_schedule(
    runner: ModelRunner, joins: dict[int, tuple[int, SynthParams, list[np.ndarray]]]
) -> tuple[dict[int, list[np.ndarray]], dict[int, bool]]:
    """Contexts admitted at the steps ``joins`` names (step -> (slot, params, all
    their units; input closed)), every live one stepped together until all finish:
    each slot's frames per unit (cut where the runner marks ``unit_end``; frames
    flattened to 1-D) and whether it ended at a limit."""
    units: dict[int, list[np.ndarray]] = {}
    current: dict[int, list[np.ndarray]] = {}
    hit_limit: dict[int, bool] = {}
    live: list[int] = []
    for step in range(100_000):
        admit: tuple[Admit, ...] = ()
        feed: tuple[Feed, ...] = ()
        if step in joins:
            slot, params, todo = joins[step]
            admit = (Admit(slot, runner.prepare(params)),)
            feed = (Feed(slot, tuple(todo), close=True),)
            live.append(slot)
            units[slot], current[slot] = [], []
        if not live and step > max(joins):
            return units, hit_limit
        result = runner.execute(plan(list(live), admit, feed))
        offset = 0
        for row, slot in enumerate(list(live)):
            n = int(result.counts[row])
            current[slot].append(result.frames[offset : offset + n].reshape(-1))
            offset += n
            if result.unit_end[row]:
                units[slot].append(np.concatenate(current[slot]))
                current[slot] = []
            if result.finished[row]:
                hit_limit[slot] = bool(result.hit_limit[row])
                live.remove(slot)
    raise AssertionError("the contexts did not finish")
