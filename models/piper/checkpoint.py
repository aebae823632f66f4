"""Checking a Piper voice without serving it: its graph splits at the decoder input
(``models.piper.split``) and its config names a sample rate."""

from __future__ import annotations

import json
from pathlib import Path

from models.checkpoint import CheckpointError, WeightReport
from models.piper.recognize import voice_file


def check_weights(path: Path) -> list[WeightReport]:
    import onnx

    from models.piper.split import split_voice

    model = voice_file(path)
    if model is None:
        raise CheckpointError("no .onnx voice with its .onnx.json beside it", path)
    problems: list[str] = []
    try:
        config = json.loads(Path(f"{model}.json").read_text(encoding="utf-8"))
        if not int(config["audio"]["sample_rate"]) > 0:
            problems.append(f"{model.name}.json: audio.sample_rate must be above 0")
    except (OSError, ValueError, KeyError, TypeError) as err:
        problems.append(f"{model.name}.json: no audio.sample_rate ({err})")
    try:
        split_voice(model)
        weights = len(onnx.load(str(model), load_external_data=False).graph.initializer)
    except Exception as err:  # noqa: BLE001 (any graph the splitter cannot cut is this error)
        problems.append(f"the graph does not split at the decoder input ({err})")
        weights = 0
    return [WeightReport("Piper voice", model.name, weights, problems=tuple(problems))]
