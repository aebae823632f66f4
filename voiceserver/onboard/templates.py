"""The files ``voiceserver onboard --scaffold NAME`` writes (``string.Template``s:
``$name``, ``$camel``, ``$title``, ``$source``, ``$checkpoint``, ``$key_map``,
``$layout``, ``$codec``, ``$reference``, ``$reference_text``)."""

INIT = '''"""The $title family (scaffolded by voiceserver onboard from $source)."""
'''

LOADER = '''"""Load a $title checkpoint as a servable model (scaffolded by voiceserver onboard).

The key map below was read off the checkpoint's headers: each weight file's key
prefixes and where they go in this family's modules (rename the right-hand sides to
your modules' attribute paths). It is strict: a tensor no prefix covers is a
CheckpointError naming it, and ``models.checkpoint.load_weights`` then checks that
every module tensor is there with its shape and none extra.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from models.base import LoadedModel, parse_options
from models.checkpoint import CheckpointError, read_header

KEY_MAP: dict[str, dict[str, str]] = $key_map
"""Weight file (relative to the checkpoint) -> {file key prefix: module key prefix}."""


@dataclass(frozen=True)
class ${camel}Options:
    checkpoint: str | None = None
    """Checkpoint directory (the ``checkpoint`` argument of ``load`` wins)."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    device: str = "cpu"
    max_contexts: int = 8
    """Contexts generating at once."""


def map_keys(keys: list[str], prefixes: Mapping[str, str], file: Path) -> dict[str, str]:
    """File key -> module key, by the longest matching prefix; every key must match."""
    order = sorted(prefixes, key=len, reverse=True)
    mapped: dict[str, str] = {}
    unplaced = []
    for key in keys:
        prefix = next((p for p in order if key.startswith(p)), None)
        if prefix is None:
            unplaced.append(key)
        else:
            mapped[key] = prefixes[prefix] + key[len(prefix) :]
    if unplaced:
        shown = ", ".join(repr(k) for k in unplaced[:5])
        raise CheckpointError(f"{len(unplaced)} tensors no KEY_MAP prefix covers: {shown}", file)
    return mapped


def key_map(root: Path) -> dict[str, dict[str, str]]:
    """Every weight file's keys, mapped (from the headers; no tensor is read)."""
    out = {}
    for name, prefixes in KEY_MAP.items():
        path = root / name
        if not path.is_file():
            raise CheckpointError("checkpoint file missing", path)
        out[name] = map_keys(sorted(read_header(path)), prefixes, path)
    return out


def load(raw_options: Mapping[str, Any], checkpoint: Path | None = None) -> LoadedModel:
    options = parse_options(${camel}Options, raw_options, "model")
    if checkpoint is None and options.checkpoint is None:
        raise CheckpointError("no checkpoint directory: set model.checkpoint or pass one")
    root = Path(checkpoint if checkpoint is not None else options.checkpoint)  # type: ignore[arg-type]
    if not root.is_dir():
        raise CheckpointError("checkpoint directory not found", root)
    key_map(root)
    raise NotImplementedError(
        "models/$name/loader.py: build the modules from config.json, read each file's "
        "tensors (models.checkpoint.load_tensors), rename them with key_map(root) and load "
        "them strictly (models.checkpoint.load_weights), then return "
        "LoadedModel(runner=${camel}Runner(...), vocoder=${camel}Vocoder(...))"
    )
'''

RUNNER = '''"""SKELETON (voiceserver onboard --scaffold): the AR stage of $title.

What onboard guessed of the checkpoint's stages:
$layout

Built on the family kit (docs/adding-a-model.md): ``SlotRunner`` applies each plan
(free, admit, feed, step) and keeps which slots hold a context and the units each
was fed; this class writes the hooks. The per-slot device state goes in
``models.kit.tables.SlotTables``, sampling in ``models.kit.sampler``, the one-step
function in ``models.kit.graphed.GraphedRows`` (CUDA graphs per batch bucket), and
the decoder is a shared block where one fits (``models.blocks.llama`` / ``gpt2``
over the paged KV cache). Each method raises NotImplementedError saying what to
write; delete ``SKELETON`` once they are written, and the tests in
tests/models/$name/ stop skipping.
"""

from __future__ import annotations

import numpy as np

from models.base import Capabilities, Prepared, StepResult, SynthParams
from models.kit.runner import SlotRunner

SKELETON = True
"""This runner is not written yet (the tests skip while this is here)."""


class ${camel}Runner(SlotRunner):
    frame_dtype = np.int64
    """numpy dtype of a frame row: int64 codec codes, float32 latents."""

    def __init__(self, capabilities: Capabilities, max_contexts: int, frame_dim: int) -> None:
        super().__init__(max_contexts)
        self.capabilities = capabilities
        self.frame_dim = frame_dim

    def validate(self, params: SynthParams) -> None:
        raise NotImplementedError(
            "validate: raise ModelInputError for a voice, language or field this model "
            "cannot serve (cheap: it runs on the event loop)"
        )

    def prepare(self, params: SynthParams) -> Prepared:
        raise NotImplementedError(
            "prepare: everything a context needs before its first step (the voice's "
            "prompt, reference audio encoded); runs in a worker thread"
        )

    def encode_text(self, text: str) -> list[np.ndarray]:
        raise NotImplementedError(
            "encode_text: the tokenizer's ids for a text segment, as units (int64 arrays)"
        )

    def on_free(self, slots: np.ndarray) -> None:
        raise NotImplementedError(
            "on_free: release what these slots hold (their KV blocks: PagedKVCache.release)"
        )

    def on_admit(self, slots: np.ndarray, prepared: list[Prepared]) -> None:
        raise NotImplementedError(
            "on_admit: write the new contexts' settings into the slot tables in one go "
            "(SlotSampler.admit, SlotTables.store) and note what their prompts hold"
        )

    def run_step(self, rows: np.ndarray) -> StepResult:
        raise NotImplementedError(
            "run_step: one batched step of these slots (a prompt's prefill for newcomers, "
            "take_unit for the next input), one device-to-host copy, then the StepResult "
            "over arrays: frames, counts, unit ends, finished, hit_limit, waiting"
        )
'''

VOCODER = '''"""SKELETON (voiceserver onboard --scaffold): the vocoder stage of $title.

$codec
"""

from __future__ import annotations

from typing import Any

import numpy as np

from models.base import DecodeItem, Vocoder

SKELETON = True


class ${camel}Vocoder(Vocoder):
    def __init__(self, sample_rate: int, samples_per_frame: int) -> None:
        self.sample_rate = sample_rate
        self.samples_per_frame = samples_per_frame

    def new_stream(self, conditioning: Any = None) -> Any:
        raise NotImplementedError(
            "new_stream: one stream's decoder state (conv histories, attention windows), "
            "primed with the context's conditioning; None if the decoder is stateless"
        )

    def decode(self, items: list[DecodeItem]) -> list[np.ndarray]:
        raise NotImplementedError(
            "decode: every item's chunk in one batched call, exact across chunk "
            "boundaries; float32 samples, chunk_frames * samples_per_frame each"
        )
'''

CONFIG = """# Scaffolded by voiceserver onboard for $source.
# Register the family before serving it: in models/registry.py,
#   FAMILIES["$name"] = Family("models.$name.loader:load")
name: $name
family: $name
checkpoint: $checkpoint
model:
  dtype: float32
  device: cpu
  max_contexts: 8
engine:
  max_ar_batch: 8
  max_vocoder_batch: 8
  first_chunk_frames: 2
  max_chunk_frames: 32
"""

TEST = '''"""models/$name against its checkpoint and the reference package $reference_text
(scaffolded by voiceserver onboard). Each test skips, saying why, until what it needs
is written or installed."""

from __future__ import annotations

from pathlib import Path

import pytest

from models.$name import loader, runner
from voiceserver.config import load_model_config

ROOT = Path(__file__).resolve().parents[3]
CONFIG = ROOT / "configs" / "$name.yaml"
REFERENCE = $reference
"""The package the model's output is compared with (None: not named yet)."""
REFERENCE_PYTHON = ROOT / ".venv-ref-$name" / "bin" / "python"
"""Its own environment, so its pins never meet the server's."""


def checkpoint() -> Path:
    config = load_model_config(CONFIG)
    if config.checkpoint is None or not config.checkpoint.is_dir():
        pytest.skip(f"{CONFIG.name}: checkpoint {config.checkpoint} is not on this machine")
    return config.checkpoint


def test_every_tensor_has_a_place() -> None:
    mapped = loader.key_map(checkpoint())
    assert mapped and all(mapped.values())


def test_the_model_loads() -> None:
    if getattr(runner, "SKELETON", False):
        pytest.skip("models/$name/runner.py is a skeleton: write its methods, then load()")
    model = loader.load({}, checkpoint())
    assert model.capabilities.sample_rate > 0


def test_parity_with_the_reference() -> None:
    if getattr(runner, "SKELETON", False):
        pytest.skip("models/$name/runner.py is a skeleton: nothing to compare yet")
    if REFERENCE is None:
        pytest.skip("no reference package named: scaffold again with --reference PACKAGE")
    if not REFERENCE_PYTHON.is_file():
        pytest.skip(
            f"reference {REFERENCE} not installed: python -m venv .venv-ref-$name && "
            f".venv-ref-$name/bin/pip install {REFERENCE}"
        )
    pytest.fail(
        f"write the comparison: run {REFERENCE} with {REFERENCE_PYTHON} on the same checkpoint "
        "and inputs (greedy), as tools/ref/run_reference.py does for qwen-tts; compare codes "
        "exactly and audio within a tolerance"
    )
'''
