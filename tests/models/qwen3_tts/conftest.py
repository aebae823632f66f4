"""Tiny random checkpoints of the three variants, built once per test session."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.models.qwen3_tts.ckpt import BuildOptions, build_checkpoint

# Few threads keep the numbers of a batch independent of the machine's core count.
torch.set_num_threads(2)


@pytest.fixture(scope="session")
def ckpt_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("qwen3_ckpts")
    return {
        # 1.7B-style CustomVoice so instructions are accepted; one sharded checkpoint.
        "custom_voice": build_checkpoint(
            root / "cv", BuildOptions(variant="custom_voice", size_name="1b7", seed=1)
        ),
        "voice_design": build_checkpoint(
            root / "vd", BuildOptions(variant="voice_design", size_name="1b7", seed=2)
        ),
        "base": build_checkpoint(
            root / "base", BuildOptions(variant="base", size_name="0b6", seed=3, shards=2)
        ),
    }
